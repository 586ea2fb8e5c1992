//! One reader of string columns, whatever Arrow string type they arrive as (Utf8, LargeUtf8,
//! Utf8View, a dictionary of any of them, or all-NULL), read in place: no cast, no copy of the
//! values. The functions of this crate and the engine read strings through it.

use datafusion::arrow::array::{
    Array, AsArray, LargeStringArray, StringArray, StringViewArray, downcast_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};

/// A string column, read in place.
#[derive(Debug, Clone)]
pub enum StringColumn {
    Utf8(StringArray),
    Large(LargeStringArray),
    View(StringViewArray),
    /// A dictionary: each row's index into `values` (any key type), the rows' own NULLs, and
    /// the values, themselves a string column.
    Dictionary {
        keys: Vec<usize>,
        nulls: Option<NullBuffer>,
        values: Box<StringColumn>,
    },
    /// A column of type Null: `len` NULLs.
    Null(usize),
}

impl StringColumn {
    /// Read `array`, which must hold strings (or be all NULL).
    pub fn try_new(array: &dyn Array) -> Result<Self> {
        Ok(match array.data_type() {
            DataType::Utf8 => StringColumn::Utf8(downcast_array(array)),
            DataType::LargeUtf8 => StringColumn::Large(downcast_array(array)),
            DataType::Utf8View => StringColumn::View(downcast_array(array)),
            DataType::Null => StringColumn::Null(array.len()),
            DataType::Dictionary(_, value) if is_string(value) => {
                let Some(dict) = array.as_any_dictionary_opt() else {
                    return exec_err!("a dictionary column that is not a dictionary array");
                };
                StringColumn::Dictionary {
                    keys: dict.normalized_keys(),
                    nulls: array.nulls().cloned(),
                    values: Box::new(StringColumn::try_new(dict.values().as_ref())?),
                }
            }
            other => return exec_err!("expected a string column, found {other}"),
        })
    }

    /// Read `array` as strings: in place when it holds strings, else cast to Utf8 once (so a
    /// column written with another type, such as an integer id, still reads as text).
    pub fn cast_from(array: &dyn Array) -> Result<Self> {
        if is_string(array.data_type()) || array.data_type() == &DataType::Null {
            return StringColumn::try_new(array);
        }
        let cast_values = cast(array, &DataType::Utf8)?;
        Ok(StringColumn::Utf8(cast_values.as_string::<i32>().clone()))
    }

    pub fn len(&self) -> usize {
        match self {
            StringColumn::Utf8(a) => a.len(),
            StringColumn::Large(a) => a.len(),
            StringColumn::View(a) => a.len(),
            StringColumn::Dictionary { keys, .. } => keys.len(),
            StringColumn::Null(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether row `i` is NULL.
    pub fn is_null(&self, i: usize) -> bool {
        match self {
            StringColumn::Utf8(a) => a.is_null(i),
            StringColumn::Large(a) => a.is_null(i),
            StringColumn::View(a) => a.is_null(i),
            StringColumn::Dictionary {
                keys,
                nulls,
                values,
            } => nulls.as_ref().is_some_and(|n| n.is_null(i)) || values.is_null(keys[i]),
            StringColumn::Null(_) => true,
        }
    }

    /// Row `i`'s string; the empty string for a NULL row (check [`StringColumn::is_null`], or
    /// use [`StringColumn::get`]).
    pub fn value(&self, i: usize) -> &str {
        match self {
            StringColumn::Utf8(a) => a.value(i),
            StringColumn::Large(a) => a.value(i),
            StringColumn::View(a) => a.value(i),
            StringColumn::Dictionary { keys, values, .. } => values.value(keys[i]),
            StringColumn::Null(_) => "",
        }
    }

    /// Row `i`'s string, `None` when NULL.
    pub fn get(&self, i: usize) -> Option<&str> {
        (!self.is_null(i)).then(|| self.value(i))
    }

    /// Every row's string, `None` for NULLs.
    pub fn iter(&self) -> impl Iterator<Item = Option<&str>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// Whether `dt` is one of Arrow's string types (or a dictionary of one).
pub fn is_string(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, value) => is_string(value),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, DictionaryArray, Int64Array, NullArray};
    use datafusion::arrow::datatypes::{Int8Type, Int32Type};

    use super::*;

    fn rows(c: &StringColumn) -> Vec<Option<String>> {
        c.iter().map(|s| s.map(str::to_string)).collect()
    }

    fn expected() -> Vec<Option<String>> {
        vec![
            Some("a".into()),
            None,
            Some("béta".into()),
            Some("a".into()),
        ]
    }

    #[test]
    fn every_string_type_reads_the_same_rows() {
        let values = [Some("a"), None, Some("béta"), Some("a")];
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(values.to_vec())),
            Arc::new(LargeStringArray::from(values.to_vec())),
            Arc::new(StringViewArray::from(values.to_vec())),
            Arc::new(
                values
                    .iter()
                    .copied()
                    .collect::<DictionaryArray<Int32Type>>(),
            ),
            Arc::new(
                values
                    .iter()
                    .copied()
                    .collect::<DictionaryArray<Int8Type>>(),
            ),
        ];
        for a in arrays {
            let c = StringColumn::try_new(a.as_ref()).unwrap();
            assert_eq!(rows(&c), expected(), "{}", a.data_type());
            assert_eq!(c.len(), 4);
            assert!(c.is_null(1) && !c.is_null(0));
        }
    }

    #[test]
    fn a_dictionary_with_null_values_reads_them_as_null() {
        let values: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), None]));
        let keys = datafusion::arrow::array::Int32Array::from(vec![Some(0), Some(1), None]);
        let dict = DictionaryArray::<Int32Type>::try_new(keys, values).unwrap();
        let c = StringColumn::try_new(&dict).unwrap();
        assert_eq!(rows(&c), [Some("x".to_string()), None, None]);
    }

    #[test]
    fn null_columns_are_all_null_and_other_types_are_refused_or_cast() {
        let c = StringColumn::try_new(&NullArray::new(2)).unwrap();
        assert_eq!(rows(&c), [None, None]);
        let ints = Int64Array::from(vec![Some(7), None]);
        let e = StringColumn::try_new(&ints).unwrap_err().to_string();
        assert!(e.contains("expected a string column, found Int64"), "{e}");
        let c = StringColumn::cast_from(&ints).unwrap();
        assert_eq!(rows(&c), [Some("7".to_string()), None]);
    }
}

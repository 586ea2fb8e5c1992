//! Inferring the `properties` struct from JSON values, and building its Arrow columns.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, StructArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use serde_json::{Map, Value};

use crate::error::{CatalogError, Result};

/// The value kinds seen for one property key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Kinds {
    boolean: bool,
    int: bool,
    float: bool,
    string: bool,
    nested: bool,
}

/// Union of property keys and their value kinds over every event seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct PropertyInference {
    keys: BTreeMap<String, Kinds>,
}

impl PropertyInference {
    pub fn observe(&mut self, props: &Map<String, Value>) {
        for (key, value) in props {
            let kinds = match self.keys.get_mut(key.as_str()) {
                Some(k) => k,
                None => self.keys.entry(key.clone()).or_default(),
            };
            match value {
                Value::Null => {}
                Value::Bool(_) => kinds.boolean = true,
                Value::Number(n) if n.is_i64() => kinds.int = true,
                Value::Number(_) => kinds.float = true,
                Value::String(_) => kinds.string = true,
                Value::Array(_) | Value::Object(_) => kinds.nested = true,
            }
        }
    }

    /// The struct fields, sorted by key name, all nullable.
    ///
    /// All booleans → Boolean; all integers (fitting i64) → Int64; integers and other numbers
    /// → Float64; everything else (strings, mixed kinds, nested values, only-null) → Utf8.
    pub fn fields(&self) -> Fields {
        self.keys
            .iter()
            .map(|(key, k)| {
                let ty = match (k.boolean, k.int, k.float, k.string, k.nested) {
                    (true, false, false, false, false) => DataType::Boolean,
                    (false, true, false, false, false) => DataType::Int64,
                    (false, _, true, false, false) => DataType::Float64,
                    _ => DataType::Utf8,
                };
                Field::new(key, ty, true)
            })
            .collect()
    }
}

/// Text of a value in a Utf8 property: strings as themselves, other values as compact JSON.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

enum ColumnBuilder {
    Boolean(BooleanBuilder),
    Int64(Int64Builder),
    Float64(Float64Builder),
    Utf8(StringBuilder),
}

/// Builds the `properties` struct column for a batch.
pub(crate) struct PropertiesBuilder {
    fields: Fields,
    columns: Vec<ColumnBuilder>,
    validity: Vec<bool>,
}

impl PropertiesBuilder {
    pub fn new(fields: Fields) -> Self {
        let columns = fields
            .iter()
            .map(|f| match f.data_type() {
                DataType::Boolean => ColumnBuilder::Boolean(BooleanBuilder::new()),
                DataType::Int64 => ColumnBuilder::Int64(Int64Builder::new()),
                DataType::Float64 => ColumnBuilder::Float64(Float64Builder::new()),
                _ => ColumnBuilder::Utf8(StringBuilder::new()),
            })
            .collect();
        PropertiesBuilder {
            fields,
            columns,
            validity: Vec::new(),
        }
    }

    /// Appends one event's properties (None: a NULL struct).
    pub fn append(&mut self, props: Option<&Map<String, Value>>) -> Result<()> {
        self.validity.push(props.is_some());
        for (field, column) in self.fields.iter().zip(self.columns.iter_mut()) {
            let v = props
                .and_then(|m| m.get(field.name()))
                .filter(|v| !v.is_null());
            let mismatch = || {
                CatalogError::Invalid(format!(
                    "property {} changed type while ingesting (was the input modified?)",
                    field.name()
                ))
            };
            match column {
                ColumnBuilder::Boolean(b) => match v {
                    None => b.append_null(),
                    Some(v) => b.append_value(v.as_bool().ok_or_else(mismatch)?),
                },
                ColumnBuilder::Int64(b) => match v {
                    None => b.append_null(),
                    Some(v) => b.append_value(v.as_i64().ok_or_else(mismatch)?),
                },
                ColumnBuilder::Float64(b) => match v {
                    None => b.append_null(),
                    Some(v) => b.append_value(v.as_f64().ok_or_else(mismatch)?),
                },
                ColumnBuilder::Utf8(b) => match v {
                    None => b.append_null(),
                    Some(Value::String(s)) => b.append_value(s),
                    Some(v) => b.append_value(value_text(v)),
                },
            }
        }
        Ok(())
    }

    /// The struct column of everything appended since the last call.
    pub fn finish(&mut self) -> Result<ArrayRef> {
        let arrays: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    ColumnBuilder::Boolean(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int64(b) => Arc::new(b.finish()),
                    ColumnBuilder::Float64(b) => Arc::new(b.finish()),
                    ColumnBuilder::Utf8(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        let validity = std::mem::take(&mut self.validity);
        let nulls = if validity.iter().all(|v| *v) {
            None
        } else {
            Some(NullBuffer::from(validity))
        };
        Ok(Arc::new(StructArray::try_new(
            self.fields.clone(),
            arrays,
            nulls,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn infer(rows: &[Value]) -> Vec<(String, DataType)> {
        let mut inf = PropertyInference::default();
        for r in rows {
            if let Value::Object(m) = r {
                inf.observe(m);
            }
        }
        inf.fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect()
    }

    #[test]
    fn inference_rules() {
        let got = infer(&[
            json!({"b": true, "i": 1, "f": 1, "s": "x", "m": 1, "n": null, "o": {"a": 1}, "bn": true}),
            json!({"b": false, "i": 2, "f": 1.5, "s": "y", "m": "z", "n": null, "o": 3, "bn": 4}),
        ]);
        use DataType::*;
        let want = [
            ("b", Boolean),
            ("bn", Utf8),
            ("f", Float64),
            ("i", Int64),
            ("m", Utf8),
            ("n", Utf8),
            ("o", Utf8),
            ("s", Utf8),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(k, t)| (k.to_string(), t.clone()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(value_text(&json!({"a": [1, "x"]})), r#"{"a":[1,"x"]}"#);
        assert_eq!(value_text(&json!(5)), "5");
        assert_eq!(value_text(&json!("5")), "5");
    }
}

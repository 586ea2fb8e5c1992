//! Schema drift: the one table schema read over files whose schemas differ (docs/ingest.md).
//!
//! Files of one table may disagree: two ingests saw a property as a number and as text; an
//! export's column changed type over a year. The table's schema is the files' schemas merged
//! field by field (in the order first seen; a field missing from a file reads as NULL there),
//! and a field's type is the least type both sides widen to without losing anything:
//!
//! - integers of any width → `Int64`; integers and floats → `Float64`;
//! - numbers or booleans and text → text (`1` reads as `"1"`, `1.5` as `"1.5"`, `true` as
//!   `"true"`); text encodings → the widest (`Utf8View` > `LargeUtf8` > `Utf8`);
//! - timestamps of different units or zones → the finest unit, in UTC when either has a zone;
//! - a NULL-typed column → the other side's type; a dictionary → its value type;
//! - structs → the union of their fields, each widened; lists → a list of the widened item.
//!
//! Anything else (a struct against text, a list against a number, a map against a struct) is
//! an error naming the field, both types and a file of each. The scan casts each file's
//! columns to the table's types (DataFusion's schema adapter).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, TimeUnit};

/// Two files whose column types cannot be reconciled.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "column `{field}` is {left_type} in {left_file} but {right_type} in {right_file}; \
     these types cannot be read as one column"
)]
pub struct Irreconcilable {
    pub field: String,
    pub left_type: String,
    pub left_file: String,
    pub right_type: String,
    pub right_file: String,
}

/// Merges the schemas of a table's files (`(file, schema)`, file names as errors show them).
pub fn merge(files: &[(String, Arc<Schema>)]) -> Result<Schema, Irreconcilable> {
    let Some((first_file, first)) = files.first() else {
        return Ok(Schema::empty());
    };
    // Per field: the merged field and a file it was seen in with the type it has now.
    let mut fields: Vec<(FieldRef, String)> = first
        .fields()
        .iter()
        .map(|f| (Arc::clone(f), first_file.clone()))
        .collect();
    for (file, schema) in &files[1..] {
        for (field, _) in fields.iter_mut() {
            if schema.field_with_name(field.name()).is_err() && !field.is_nullable() {
                *field = Arc::new(field.as_ref().clone().with_nullable(true));
            }
        }
        for f in schema.fields() {
            match fields.iter_mut().find(|(m, _)| m.name() == f.name()) {
                None => fields.push((
                    Arc::new(f.as_ref().clone().with_nullable(true)),
                    file.clone(),
                )),
                Some((merged, seen_in)) => {
                    let widened = merge_field(merged, f, "").map_err(|path| Irreconcilable {
                        field: path.0,
                        left_type: path.1.to_string(),
                        left_file: seen_in.clone(),
                        right_type: path.2.to_string(),
                        right_file: file.clone(),
                    })?;
                    *merged = Arc::new(widened);
                }
            }
        }
    }
    let metadata = first.metadata().clone();
    Ok(Schema::new_with_metadata(
        fields.into_iter().map(|(f, _)| f).collect::<Vec<_>>(),
        metadata,
    ))
}

/// A failed merge: the field's dotted path and the two types.
type Conflict = (String, DataType, DataType);

fn merge_field(a: &Field, b: &Field, prefix: &str) -> Result<Field, Conflict> {
    let path = format!("{prefix}{}", a.name());
    let dt = widen(a.data_type(), b.data_type(), &path)?;
    Ok(Field::new(a.name(), dt, a.is_nullable() || b.is_nullable())
        .with_metadata(a.metadata().clone()))
}

/// The least type `a` and `b` both read as without loss, or the conflict.
pub fn widen(a: &DataType, b: &DataType, path: &str) -> Result<DataType, Conflict> {
    use DataType::*;
    let conflict = || (path.to_string(), a.clone(), b.clone());
    if a == b {
        return Ok(a.clone());
    }
    Ok(match (a, b) {
        (Null, t) | (t, Null) => t.clone(),
        (Dictionary(_, v), t) | (t, Dictionary(_, v)) => widen(v, t, path)?,
        (x, y) if is_int(x) && is_int(y) => Int64,
        (x, y) if is_number(x) && is_number(y) => Float64,
        (x, y) if is_text(x) && is_text(y) => widest_text(x, y),
        (x, y) if is_text(x) && is_scalar(y) => widest_text(x, x),
        (x, y) if is_scalar(x) && is_text(y) => widest_text(y, y),
        (x, y) if (is_number(x) && *y == Boolean) || (*x == Boolean && is_number(y)) => Utf8,
        (Timestamp(u1, z1), Timestamp(u2, z2)) => {
            let unit = finest(*u1, *u2);
            let zone = (z1.is_some() || z2.is_some()).then(|| Arc::from("UTC"));
            Timestamp(unit, zone)
        }
        (Struct(f1), Struct(f2)) => Struct(merge_struct(f1, f2, path)?),
        (List(i1), List(i2)) => List(Arc::new(merge_field(i1, i2, &format!("{path}."))?)),
        (LargeList(i1), LargeList(i2)) => {
            LargeList(Arc::new(merge_field(i1, i2, &format!("{path}."))?))
        }
        (List(i1), LargeList(i2)) | (LargeList(i1), List(i2)) => {
            LargeList(Arc::new(merge_field(i1, i2, &format!("{path}."))?))
        }
        _ => return Err(conflict()),
    })
}

fn merge_struct(a: &Fields, b: &Fields, path: &str) -> Result<Fields, Conflict> {
    let prefix = format!("{path}.");
    let mut out: Vec<Field> = Vec::with_capacity(a.len().max(b.len()));
    for f in a.iter() {
        match b.find(f.name()) {
            Some((_, g)) => out.push(merge_field(f, g, &prefix)?),
            None => out.push(f.as_ref().clone().with_nullable(true)),
        }
    }
    for g in b.iter() {
        if a.find(g.name()).is_none() {
            out.push(g.as_ref().clone().with_nullable(true));
        }
    }
    Ok(Fields::from(out))
}

fn is_int(t: &DataType) -> bool {
    t.is_integer()
}

fn is_number(t: &DataType) -> bool {
    t.is_integer() || t.is_floating()
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// Scalars that read as text: numbers and booleans.
fn is_scalar(t: &DataType) -> bool {
    is_number(t) || *t == DataType::Boolean
}

fn widest_text(a: &DataType, b: &DataType) -> DataType {
    use DataType::*;
    match (a, b) {
        (Utf8View, _) | (_, Utf8View) => Utf8View,
        (LargeUtf8, _) | (_, LargeUtf8) => LargeUtf8,
        _ => Utf8,
    }
}

fn finest(a: TimeUnit, b: TimeUnit) -> TimeUnit {
    let rank = |u: TimeUnit| match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    };
    if rank(a) >= rank(b) { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType::*;

    fn schema(fields: Vec<Field>) -> Arc<Schema> {
        Arc::new(Schema::new(fields))
    }

    fn props(fields: Vec<Field>) -> Field {
        Field::new("properties", Struct(Fields::from(fields)), true)
    }

    #[test]
    fn numbers_widen_to_float_then_text() {
        assert_eq!(widen(&Int32, &Int64, "x"), Ok(Int64));
        assert_eq!(widen(&Int64, &Float64, "x"), Ok(Float64));
        assert_eq!(widen(&Float64, &Utf8View, "x"), Ok(Utf8View));
        assert_eq!(widen(&Boolean, &Int64, "x"), Ok(Utf8));
        assert_eq!(widen(&Utf8, &LargeUtf8, "x"), Ok(LargeUtf8));
        assert_eq!(widen(&Null, &Float32, "x"), Ok(Float32));
        let ms = Timestamp(TimeUnit::Millisecond, None);
        let us_utc = Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        assert_eq!(widen(&ms, &us_utc, "t"), Ok(us_utc.clone()));
    }

    #[test]
    fn struct_fields_are_unioned_and_widened() {
        let a = schema(vec![props(vec![Field::new("x", Int64, true)])]);
        let b = schema(vec![props(vec![
            Field::new("x", Utf8, true),
            Field::new("y", Boolean, false),
        ])]);
        let merged = merge(&[("a.parquet".into(), a), ("b.parquet".into(), b)]).unwrap();
        let Struct(fields) = merged.field(0).data_type() else {
            panic!("{merged:?}")
        };
        let got: Vec<(String, DataType, bool)> = fields
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
            .collect();
        assert_eq!(got, [("x".into(), Utf8, true), ("y".into(), Boolean, true)]);
    }

    #[test]
    fn a_field_missing_from_a_file_becomes_nullable() {
        let a = schema(vec![
            Field::new("a", Utf8, false),
            Field::new("b", Utf8, false),
        ]);
        let b = schema(vec![Field::new("a", Utf8, false)]);
        let merged = merge(&[("1".into(), a), ("2".into(), b)]).unwrap();
        assert!(!merged.field(0).is_nullable());
        assert!(merged.field(1).is_nullable());
    }

    #[test]
    fn irreconcilable_types_name_the_field_and_both_files() {
        let a = schema(vec![props(vec![Field::new("x", Int64, true)])]);
        let b = schema(vec![Field::new("properties", Utf8, true)]);
        let e = merge(&[
            ("events/a.parquet".into(), a),
            ("events/b.parquet".into(), b),
        ])
        .unwrap_err();
        assert_eq!(e.field, "properties");
        assert_eq!(
            (e.left_file.as_str(), e.right_file.as_str()),
            ("events/a.parquet", "events/b.parquet")
        );
        let nested = schema(vec![props(vec![Field::new("x", Int64, true)])]);
        let list = schema(vec![props(vec![Field::new(
            "x",
            List(Arc::new(Field::new_list_field(Utf8, true))),
            true,
        )])]);
        let e = merge(&[("1".into(), nested), ("2".into(), list)]).unwrap_err();
        assert_eq!(e.field, "properties.x");
        assert!(
            e.to_string().contains("cannot be read as one column"),
            "{e}"
        );
    }
}

//! The typed result envelope of SignalQL v0.3: columns with name, type and unit; rows as
//! arrays in column order (structs as JSON objects, timestamps RFC 3339); execution metadata.
//! Units are applied here ([`columns`]: the dataset's `[units]` by column name, else by the
//! field or metric the column came from), and the one [`Metadata::new`] starts every
//! envelope's metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value, json};

use crate::error::{Error, Result};
use crate::execute::Capped;
pub use crate::execute::RowsAs;
use crate::limits::Limits;
use crate::lower::time::rfc3339;
use crate::lower::{Lowered, UnitSource};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub data_type: String,
    pub unit: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    /// Rows and bytes the Parquet scans read; null when the caller's policy filtered the
    /// answer (they would count rows the caller may not see: docs/policy.md), and when the
    /// scans ran on workers (docs/cluster.md).
    pub scanned_rows: Option<u64>,
    pub scanned_bytes: Option<u64>,
    pub engine: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowInfo {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub row_count: u64,
    pub truncated: bool,
    pub limit_applied: u64,
    pub as_of: String,
    pub access_filtered: bool,
    pub ordered: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub window: Option<WindowInfo>,
    pub cost_estimate: CostEstimate,
    pub compiled_sql_digest: Option<String>,
    /// The governed metrics used, with their versions and resolved expressions.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub metrics: Vec<crate::metrics::MetricInfo>,
    /// Files left out of the answer because they cannot be read (`skip_invalid_files`): when
    /// any is listed, the answer is over part of the data.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub skipped_files: Vec<signalql_catalog::SkippedFile>,
    pub signalql_version: String,
    pub engine_version: String,
    pub limits: Value,
    /// How the plan was come by: reused from the server's plan cache (`hit`), made and cached
    /// (`miss`), or made without the cache (`bypass`: the CLI, DESCRIBE, uncacheable tables;
    /// docs/runtime.md).
    #[serde(default = "bypass")]
    pub plan_cache: String,
}

fn bypass() -> String {
    "bypass".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub columns: Vec<ColumnInfo>,
    pub rows: Vec<Vec<Value>>,
    pub metadata: Metadata,
}

/// The language version the engine implements for analytics.
pub const SIGNALQL_VERSION: &str = "0.3";

impl Metadata {
    /// The metadata of an answer as of `as_of` under `limits`, before what its execution adds:
    /// no rows, nothing truncated or scanned, ordered, no window, digest or metrics.
    pub fn new(limits: &Limits, as_of: DateTime<Utc>) -> Metadata {
        Metadata {
            row_count: 0,
            truncated: false,
            limit_applied: limits.max_result_rows,
            as_of: rfc3339(as_of),
            access_filtered: false,
            ordered: true,
            window: None,
            cost_estimate: CostEstimate {
                scanned_rows: Some(0),
                scanned_bytes: Some(0),
                engine: "datafusion".into(),
            },
            compiled_sql_digest: None,
            metrics: Vec::new(),
            skipped_files: Vec::new(),
            signalql_version: SIGNALQL_VERSION.into(),
            engine_version: env!("CARGO_PKG_VERSION").into(),
            limits: limits.to_json(),
            plan_cache: bypass(),
        }
    }
}

/// The envelope of an executed analytics query, and its rows as Arrow batches named as the
/// envelope's columns (for Parquet output). `sql` is the plan's unparsed SQL, digested.
/// With [`RowsAs::ArrowOnly`] the envelope's `rows` are left empty (`metadata.row_count` is
/// still the batches' rows).
pub fn analytics(
    lowered: &Lowered,
    capped: &Capped,
    sql: Option<&str>,
    units: &BTreeMap<String, String>,
    limits: &Limits,
    rows_as: RowsAs,
) -> Result<(Envelope, Vec<RecordBatch>)> {
    let executed = &capped.executed;
    let rows = match rows_as {
        RowsAs::Json => rows(&executed.batches, capped.rows)?,
        RowsAs::ArrowOnly => Vec::new(),
    };
    let columns = columns(lowered, executed.physical.schema(), units);
    let batches = named_prefix(
        &executed.batches,
        &executed.physical.schema(),
        &columns,
        capped.rows,
    )?;
    let (scanned_rows, scanned_bytes) = executed.scanned;
    let mut metadata = Metadata::new(limits, lowered.as_of);
    metadata.row_count = capped.rows as u64;
    metadata.truncated = capped.truncated;
    metadata.limit_applied = lowered.limit_applied;
    metadata.ordered = lowered.ordered;
    metadata.window = lowered.window.map(|w| WindowInfo {
        start: rfc3339(w.start),
        end: rfc3339(w.end),
    });
    // Scans that ran on workers (docs/cluster.md) report to them, not to this process: what
    // they read is unknown here, not zero.
    let on_workers = executed.on_workers;
    metadata.cost_estimate.scanned_rows = (!on_workers).then_some(scanned_rows);
    metadata.cost_estimate.scanned_bytes = (!on_workers).then_some(scanned_bytes);
    metadata.compiled_sql_digest = sql.map(sql_digest);
    metadata.metrics = lowered.metrics.clone();
    Ok((
        Envelope {
            columns,
            rows,
            metadata,
        },
        batches,
    ))
}

/// `sha256:` and the hex SHA-256 of a plan's SQL text.
pub fn sql_digest(sql: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(sql)))
}

/// The envelope's columns: names from lowering, types from the executed schema, units from
/// the dataset's `[units]` (by column name first, then by where the column came from).
pub fn columns(
    lowered: &Lowered,
    schema: SchemaRef,
    units: &BTreeMap<String, String>,
) -> Vec<ColumnInfo> {
    lowered
        .columns
        .iter()
        .zip(schema.fields().iter())
        .map(|(c, f)| {
            let unit = units.get(&c.name).cloned().or_else(|| match &c.unit {
                UnitSource::Field(p) => units.get(p).cloned(),
                UnitSource::Squared(p) => units.get(p).map(|u| format!("{u}^2")),
                UnitSource::Count => Some("events".into()),
                UnitSource::Fixed(u) => Some(u.to_string()),
                UnitSource::Metric(m) => lowered
                    .metrics
                    .iter()
                    .find(|i| i.name == *m)
                    .and_then(|i| i.unit.clone()),
                UnitSource::None => None,
            });
            ColumnInfo {
                name: c.name.clone(),
                data_type: type_name(f.data_type()),
                unit,
            }
        })
        .collect()
}

/// The first `n` rows of `batches` (of `schema`), with the columns renamed to `columns`' names;
/// at least one batch, empty when there are no rows.
fn named_prefix(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    columns: &[ColumnInfo],
    n: usize,
) -> Result<Vec<RecordBatch>> {
    let named = |schema: &Schema| {
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .zip(columns)
            .map(|(f, c)| f.as_ref().clone().with_name(c.name.clone()))
            .collect();
        Arc::new(Schema::new(fields))
    };
    let mut out = Vec::new();
    let mut left = n;
    for b in batches {
        if left == 0 {
            break;
        }
        let take = b.num_rows().min(left);
        left -= take;
        out.push(
            RecordBatch::try_new(named(&b.schema()), b.slice(0, take).columns().to_vec())
                .map_err(|e| Error::internal(e.to_string()))?,
        );
    }
    // No rows: one empty batch, so the rows' schema is still known (an Arrow stream or a
    // Parquet file of no rows has one).
    if out.is_empty() {
        out.push(RecordBatch::new_empty(named(schema)));
    }
    Ok(out)
}

/// The envelope's name for an Arrow type.
pub fn type_name(dt: &DataType) -> String {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => "integer".into(),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => "number".into(),
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "number".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Timestamp(..) => "timestamp".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Struct(_) => "struct".into(),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => "list".into(),
        DataType::Map(..) => "map".into(),
        DataType::Null => "null".into(),
        other => other.to_string(),
    }
}

fn float(v: Option<f64>) -> Value {
    v.and_then(Number::from_f64)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn timestamp(v: Option<i64>, per_second: i64) -> Value {
    let Some(v) = v else { return Value::Null };
    let secs = v.div_euclid(per_second);
    let nanos = v.rem_euclid(per_second) * (1_000_000_000 / per_second);
    match DateTime::<Utc>::from_timestamp(secs, nanos as u32) {
        Some(t) => Value::String(crate::lower::time::rfc3339(t)),
        None => Value::Null,
    }
}

/// One value as JSON.
pub fn scalar_to_json(v: &ScalarValue) -> Result<Value> {
    use ScalarValue as S;
    Ok(match v {
        v if v.is_null() => Value::Null,
        S::Boolean(b) => json!(b),
        S::Int8(x) => json!(x),
        S::Int16(x) => json!(x),
        S::Int32(x) => json!(x),
        S::Int64(x) => json!(x),
        S::UInt8(x) => json!(x),
        S::UInt16(x) => json!(x),
        S::UInt32(x) => json!(x),
        S::UInt64(x) => json!(x),
        S::Float32(x) => float(x.map(f64::from)),
        S::Float64(x) => float(*x),
        S::Utf8(s) | S::LargeUtf8(s) | S::Utf8View(s) => json!(s),
        S::TimestampSecond(x, _) => timestamp(*x, 1),
        S::TimestampMillisecond(x, _) => timestamp(*x, 1_000),
        S::TimestampMicrosecond(x, _) => timestamp(*x, 1_000_000),
        S::TimestampNanosecond(x, _) => timestamp(*x, 1_000_000_000),
        S::Date32(Some(d)) => match DateTime::<Utc>::from_timestamp(*d as i64 * 86_400, 0) {
            Some(t) => json!(t.format("%Y-%m-%d").to_string()),
            None => Value::Null,
        },
        S::Struct(arr) => {
            let mut obj = Map::new();
            for (i, field) in arr.fields().iter().enumerate() {
                let child = ScalarValue::try_from_array(arr.column(i), 0)?;
                obj.insert(field.name().clone(), scalar_to_json(&child)?);
            }
            Value::Object(obj)
        }
        S::List(arr) => array_to_json(arr.value(0).as_ref())?,
        S::LargeList(arr) => array_to_json(arr.value(0).as_ref())?,
        S::Map(arr) => {
            let entries = arr.value(0);
            let mut obj = Map::new();
            for i in 0..entries.len() {
                let k = ScalarValue::try_from_array(entries.column(0), i)?;
                let v = ScalarValue::try_from_array(entries.column(1), i)?;
                let key = match scalar_to_json(&k)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                obj.insert(key, scalar_to_json(&v)?);
            }
            Value::Object(obj)
        }
        other => json!(other.to_string()),
    })
}

fn array_to_json(arr: &dyn Array) -> Result<Value> {
    let mut out = Vec::with_capacity(arr.len());
    for i in 0..arr.len() {
        out.push(scalar_to_json(&ScalarValue::try_from_array(arr, i)?)?);
    }
    Ok(Value::Array(out))
}

/// `envelope` of an Arrow answer ([`RowsAs::ArrowOnly`]) with its rows written from its
/// `batches`, as a [`RowsAs::Json`] answer has them.
pub fn with_rows(mut envelope: Envelope, batches: &[RecordBatch]) -> Result<Envelope> {
    envelope.rows = rows(batches, envelope.metadata.row_count as usize)?;
    Ok(envelope)
}

/// All rows of `batches` as arrays in column order, at most `max_rows` of them.
pub fn rows(batches: &[RecordBatch], max_rows: usize) -> Result<Vec<Vec<Value>>> {
    let mut out = Vec::new();
    for batch in batches {
        for r in 0..batch.num_rows() {
            if out.len() >= max_rows {
                return Ok(out);
            }
            let mut row = Vec::with_capacity(batch.num_columns());
            for c in batch.columns() {
                row.push(scalar_to_json(
                    &ScalarValue::try_from_array(c, r).map_err(Error::from)?,
                )?);
            }
            out.push(row);
        }
    }
    Ok(out)
}

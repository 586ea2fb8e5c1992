//! DESCRIBE's records: the fixed column set of its envelope, one [`Record`] per table, entity
//! type, relationship, signal or metric, and the fields read from a Parquet schema.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use serde::Serialize;
use serde_json::{Value, json};
use signalql_catalog::mapping::Read;
use signalql_catalog::{PropertiesEncoding, TableInfo};

use crate::envelope::{ColumnInfo, type_name};
use crate::lower::fields::PROPERTY_BAGS;

/// A field of a record: a column, or a key of a property-bag column (`properties.plan`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub data_type: String,
    pub unit: Option<String>,
    pub nullable: bool,
    /// The file column it is read from, when that is not the field itself (a table mapped in
    /// `signalql.toml`: `anonymous_id`, `received_at (epoch ms)`; docs/mapping.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// An edge kind of the relationships table, with its number of edges as of T.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeInfo {
    pub relation: String,
    pub source_type: String,
    pub target_type: String,
    pub edges: i64,
}

/// A signal available on a record's rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignalInfo {
    pub name: String,
    pub has_probability: bool,
}

/// One catalog record (one row of a DESCRIBE envelope).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Record {
    pub identifier: String,
    pub kind: &'static str,
    pub description: Option<String>,
    pub fields: Vec<FieldInfo>,
    pub relationships: Vec<EdgeInfo>,
    pub signals: Vec<SignalInfo>,
    pub values: Vec<String>,
    pub row_count: Option<i64>,
    pub version: Option<String>,
    pub unit: Option<String>,
    pub expression: Option<String>,
}

/// A signal lists its values when it has at most this many distinct ones.
pub const MAX_LISTED_VALUES: usize = 20;

/// The envelope columns of every DESCRIBE, in order.
pub fn columns() -> Vec<ColumnInfo> {
    let c = |name: &str, t: &str| ColumnInfo {
        name: name.into(),
        data_type: t.into(),
        unit: None,
    };
    vec![
        c("identifier", "string"),
        c("kind", "string"),
        c("description", "string"),
        c("fields", "list"),
        c("relationships", "list"),
        c("signals", "list"),
        c("values", "list"),
        c("row_count", "integer"),
        c("version", "string"),
        c("unit", "string"),
        c("expression", "string"),
    ]
}

impl Record {
    /// The record as an envelope row, in [`columns`] order.
    pub fn row(&self) -> Vec<Value> {
        vec![
            json!(self.identifier),
            json!(self.kind),
            json!(self.description),
            json!(self.fields),
            json!(self.relationships),
            json!(self.signals),
            json!(self.values),
            json!(self.row_count),
            json!(self.version),
            json!(self.unit),
            json!(self.expression),
        ]
    }
}

/// The fields of a table: its columns, with a struct property bag's keys flattened
/// (`properties.plan`); units from `signalql.toml`.
pub(super) fn schema_fields(table: &TableInfo, units: &BTreeMap<String, String>) -> Vec<FieldInfo> {
    let mut out = fields_of(&table.schema, units);
    // A column the caller's policy denies is not described (docs/policy.md).
    if let Some(r) = &table.restriction {
        out.retain(|f| {
            let top = f.name.split_once('.').map_or(f.name.as_str(), |(t, _)| t);
            !r.denied.contains(top)
        });
    }
    let Some(view) = &table.view else {
        return out;
    };
    let mapping = view.mapping();
    let wide: Vec<&str> = view
        .columns
        .iter()
        .filter(|c| matches!(c.read, Read::Wide(_)))
        .map(|c| c.name.as_str())
        .collect();
    for f in &mut out {
        f.source = match mapping.iter().find(|(n, _)| *n == f.name) {
            Some((_, from)) => Some(from.clone()),
            None => f
                .name
                .split_once('.')
                .filter(|(bag, _)| wide.contains(bag))
                .map(|(_, key)| key.to_string()),
        };
    }
    out
}

fn fields_of(schema: &SchemaRef, units: &BTreeMap<String, String>) -> Vec<FieldInfo> {
    let mut out = Vec::new();
    for f in schema.fields() {
        let bag = PROPERTY_BAGS.contains(&f.name().as_str());
        match (bag, f.data_type()) {
            (true, DataType::Struct(children)) => {
                for c in children {
                    out.push(field_info(
                        &format!("{}.{}", f.name(), c.name()),
                        c,
                        f.is_nullable() || c.is_nullable(),
                        units,
                    ));
                }
            }
            (true, dt) if PropertiesEncoding::of(dt) == Some(PropertiesEncoding::JsonText) => {
                out.push(FieldInfo {
                    name: f.name().clone(),
                    data_type: "json".into(),
                    unit: None,
                    nullable: f.is_nullable(),
                    source: None,
                });
            }
            _ => out.push(field_info(f.name(), f, f.is_nullable(), units)),
        }
    }
    out
}

pub(super) fn field_info(
    name: &str,
    f: &Field,
    nullable: bool,
    units: &BTreeMap<String, String>,
) -> FieldInfo {
    FieldInfo {
        name: name.to_string(),
        data_type: type_name(f.data_type()),
        unit: units.get(name).cloned(),
        nullable,
        source: None,
    }
}

/// The struct keys of a property bag column, if it is a struct.
pub(super) fn bag_keys(schema: &SchemaRef, bag: &str) -> Vec<Field> {
    match schema.field_with_name(bag).map(|f| f.data_type()) {
        Ok(DataType::Struct(children)) => children.iter().map(|c| c.as_ref().clone()).collect(),
        _ => Vec::new(),
    }
}

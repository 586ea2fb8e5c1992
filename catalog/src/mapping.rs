//! Reading a table someone else wrote: `[tables.T]` of `signalql.toml` (DESIGN.md §3, "Mapping
//! a dataset someone else wrote"; docs/mapping.md).
//!
//! A table's files keep their own column names and encodings. The table is read through a
//! [`TableView`]: one column per SignalQL column of the table, each read from the file column
//! that plays its role (mapped, or of the same name), time columns as UTC instants in
//! microseconds, and `properties = "*"` as a struct of the file's other columns. Columns no
//! role reads stay, under their own names. The engine evaluates the view in a projection
//! directly over the scan, so filters on mapped columns still reach the Parquet reader.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};
use serde::Deserialize;

use crate::columns::{Kind, table_columns};
use crate::error::DatasetError;

/// `[tables.T]`: where a table lives and how its columns map.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// The table's folder under the root (default: the table's name).
    pub path: Option<String>,
    /// `parquet` or `delta`.
    pub format: Option<String>,
    /// SignalQL column → the file column that plays its role (`properties = "*"`: a struct
    /// of every column no other role reads).
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    #[serde(default)]
    pub time: TimeConfig,
    /// Hive partition key → its type.
    #[serde(default)]
    pub partitions: BTreeMap<String, String>,
}

/// `[tables.T.time]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimeConfig {
    /// The unit of integer epoch time columns: `s`, `ms`, `us` or `ns`.
    pub epoch_unit: Option<String>,
    /// The date or time partition key a DURING window prunes.
    pub partition: Option<String>,
}

/// The wide-export form of a property bag: every column no other role reads.
pub const WIDE: &str = "*";

/// How a table's files are read as the SignalQL table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableView {
    pub columns: Vec<ViewColumn>,
}

/// One column of the table as SignalQL sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewColumn {
    /// Its SignalQL name.
    pub name: String,
    pub read: Read,
    /// Its type as read.
    pub data_type: DataType,
}

/// Where a view column comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    /// A file column, as it is.
    Column(String),
    /// A file column holding a time, read as a UTC instant in microseconds.
    Time {
        column: String,
        encoding: TimeEncoding,
    },
    /// The struct of these file columns (`properties = "*"`).
    Wide(Vec<String>),
    /// NULL: a column the files lack that has a default (the object tables of DESIGN.md §3).
    Null,
    /// The first of these reads that is not NULL: `objects.recorded_at` where some files lack
    /// it (another tool's files beside signalql's ingest's), whose rows read `created_at`, as
    /// in a table none of whose files has it.
    Coalesce(Vec<Read>),
}

/// How a time column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeEncoding {
    /// A timestamp of another unit or without a zone (read as UTC), or a date.
    Cast,
    /// An integer count of `unit` since 1970-01-01T00:00:00Z.
    Epoch(TimeUnit),
    /// RFC 3339 text (an offset is honoured; none means UTC).
    Text,
}

impl TableView {
    /// The schema the view reads as.
    pub fn schema(&self) -> Schema {
        Schema::new(
            self.columns
                .iter()
                .map(|c| Field::new(&c.name, c.data_type.clone(), true))
                .collect::<Vec<_>>(),
        )
    }

    /// `(SignalQL name, file column)` for each column read from a column of another name or
    /// encoding, for DESCRIBE.
    pub fn mapping(&self) -> Vec<(String, String)> {
        self.columns
            .iter()
            .filter_map(|c| {
                if matches!(&c.read, Read::Column(f) if *f == c.name) {
                    return None;
                }
                Some((c.name.clone(), c.read.text()))
            })
            .collect()
    }
}

impl Read {
    /// Where the column is read from, for DESCRIBE.
    fn text(&self) -> String {
        match self {
            Read::Column(f) => f.clone(),
            Read::Time { column, encoding } => format!("{column} ({})", encoding.text()),
            Read::Wide(cols) => format!("* ({} columns)", cols.len()),
            Read::Null => "absent (NULL)".into(),
            Read::Coalesce(reads) => reads
                .iter()
                .map(Read::text)
                .collect::<Vec<_>>()
                .join(", else "),
        }
    }
}

impl TimeEncoding {
    fn text(self) -> String {
        match self {
            TimeEncoding::Cast => "read as UTC".into(),
            TimeEncoding::Epoch(u) => format!("epoch {}", unit_name(u)),
            TimeEncoding::Text => "RFC 3339 text".into(),
        }
    }
}

fn unit_name(u: TimeUnit) -> &'static str {
    match u {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

/// The type every time column is read as.
pub fn utc_micros() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The view of `table` over files of schema `files`, or `None` when the files are read as
/// they are (no mapping, every column already in its SignalQL name and encoding). Errors name
/// the table, the column and what is wrong.
pub fn view(
    table: &str,
    files: &Schema,
    config: Option<&TableConfig>,
    config_path: &str,
) -> Result<Option<TableView>, DatasetError> {
    let empty = TableConfig::default();
    let config = config.unwrap_or(&empty);
    let bad_config = |message: String| DatasetError::Config {
        path: config_path.to_string(),
        message: format!("[tables.{table}]: {message}"),
    };
    let Some((required, optional)) = table_columns(table) else {
        if let Some(role) = config.columns.keys().next() {
            return Err(bad_config(format!(
                "`{role}`: only the tables of DESIGN.md §3 map columns"
            )));
        }
        return Ok(None);
    };
    let roles: Vec<(&str, Kind)> = required.iter().chain(optional).copied().collect();
    for (role, source) in &config.columns {
        let Some((_, kind)) = roles.iter().find(|(r, _)| r == role) else {
            let names: Vec<&str> = roles.iter().map(|(r, _)| *r).collect();
            return Err(bad_config(format!(
                "`{role}` is not a column of the {table} table (its columns: {})",
                names.join(", ")
            )));
        };
        if source == WIDE {
            if *kind != Kind::Bag {
                return Err(bad_config(format!(
                    "`{role} = \"*\"`: only a property bag (properties, traits, attributes) \
                     reads every other column"
                )));
            }
        } else if files.field_with_name(source).is_err() {
            return Err(bad_config(format!(
                "`{role} = {source:?}`: the files have no column `{source}` (their columns: {})",
                column_list(files)
            )));
        }
    }
    let epoch_unit = match config.time.epoch_unit.as_deref() {
        None => None,
        Some("s") => Some(TimeUnit::Second),
        Some("ms") => Some(TimeUnit::Millisecond),
        Some("us") => Some(TimeUnit::Microsecond),
        Some("ns") => Some(TimeUnit::Nanosecond),
        Some(other) => {
            return Err(bad_config(format!(
                "`time.epoch_unit = {other:?}`: expected \"s\", \"ms\", \"us\" or \"ns\""
            )));
        }
    };
    // The file columns roles read.
    let source_of = |role: &str| -> Option<String> {
        match config.columns.get(role) {
            Some(s) => Some(s.clone()),
            None => files.field_with_name(role).ok().map(|_| role.to_string()),
        }
    };
    let consumed: Vec<String> = roles
        .iter()
        .filter_map(|(r, _)| source_of(r))
        .filter(|s| s != WIDE)
        .collect();
    // A missing required column is reported before any type (as check_schema does).
    for (role, kind) in required {
        if source_of(role)
            .or_else(|| default_source(table, role, &source_of))
            .is_none()
            && null_default(table, role).is_none()
        {
            return Err(DatasetError::Unreadable {
                table: table.into(),
                message: format!(
                    "the {table} table has no `{role}` column (expected {})",
                    kind.expected()
                ),
            });
        }
    }
    // How the file column `source` (of type `dt`) is read as `role`.
    let read_of = |role: &str,
                   kind: Kind,
                   source: &str,
                   dt: &DataType|
     -> Result<(Read, DataType), DatasetError> {
        if kind != Kind::Timestamp {
            return Ok((Read::Column(source.to_string()), dt.clone()));
        }
        match time_encoding(dt, epoch_unit) {
            Ok(None) => Ok((Read::Column(source.to_string()), dt.clone())),
            Ok(Some(encoding)) => Ok((
                Read::Time {
                    column: source.to_string(),
                    encoding,
                },
                utc_micros(),
            )),
            Err(why) => Err(DatasetError::BadColumn {
                table: table.into(),
                column: mapped_name(role, source),
                found: dt.to_string(),
                expected: why,
            }),
        }
    };
    let mut columns = Vec::new();
    for (role, kind) in &roles {
        let Some(source) = source_of(role).or_else(|| default_source(table, role, &source_of))
        else {
            if let Some(dt) = null_default(table, role) {
                columns.push(ViewColumn {
                    name: role.to_string(),
                    read: Read::Null,
                    data_type: dt,
                });
            }
            continue;
        };
        if source == WIDE {
            let others: Vec<&Field> = files
                .fields()
                .iter()
                .map(|f| f.as_ref())
                .filter(|f| !consumed.contains(f.name()))
                .collect();
            if others.is_empty() {
                columns.push(ViewColumn {
                    name: role.to_string(),
                    read: Read::Null,
                    data_type: DataType::Null,
                });
                continue;
            }
            columns.push(ViewColumn {
                name: role.to_string(),
                read: Read::Wide(others.iter().map(|f| f.name().clone()).collect()),
                data_type: DataType::Struct(Fields::from(
                    others
                        .iter()
                        .map(|f| (*f).clone().with_nullable(true))
                        .collect::<Vec<_>>(),
                )),
            });
            continue;
        }
        let field = files
            .field_with_name(&source)
            .map_err(|_| bad_config(format!("no column `{source}`")))?;
        let (mut read, mut data_type) = read_of(role, *kind, &source, field.data_type())?;
        // Files some of which lack the column (another tool's beside signalql's ingest's):
        // the merged column is nullable and NULL in those, whose rows read its fallback.
        if source == *role
            && field.is_nullable()
            && let Some(from) = fallback_column(table, role).and_then(&source_of)
            && let Ok(from_field) = files.field_with_name(&from)
        {
            let (or_else, _) = read_of(role, *kind, &from, from_field.data_type())?;
            read = Read::Coalesce(vec![read, or_else]);
            data_type = utc_micros();
        }
        columns.push(ViewColumn {
            name: role.to_string(),
            read,
            data_type,
        });
    }
    // The file's other columns, under their own names, unless a SignalQL column has the name.
    for f in files.fields() {
        if consumed.contains(f.name()) || columns.iter().any(|c| c.name == *f.name()) {
            continue;
        }
        columns.push(ViewColumn {
            name: f.name().clone(),
            read: Read::Column(f.name().clone()),
            data_type: f.data_type().clone(),
        });
    }
    let identity = columns.len() == files.fields().len()
        && columns
            .iter()
            .all(|c| c.read == Read::Column(c.name.clone()));
    Ok((!identity).then_some(TableView { columns }))
}

/// The column a role the files lack is read from (objects without `recorded_at`: each row is
/// its own record, recorded when the object was created). The ingest's reader of the object
/// tables reads them by the same rule (crate::objects).
pub fn fallback_column(table: &str, role: &str) -> Option<&'static str> {
    match (table, role) {
        ("objects", "recorded_at") => Some("created_at"),
        _ => None,
    }
}

/// A role the files lack read from another column ([`fallback_column`]).
fn default_source(
    table: &str,
    role: &str,
    source_of: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    fallback_column(table, role).and_then(source_of)
}

/// The type of a column the files may lack, read as NULL (the object tables' optional
/// columns and `tombstoned_at`, which signalql's own ingest always writes).
pub fn null_default(table: &str, role: &str) -> Option<DataType> {
    let text_list = || DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
    Some(match (table, role) {
        ("objects", "tombstoned_at") => utc_micros(),
        ("objects", "project" | "source_path") => DataType::Utf8,
        ("representations", "content_ref") => DataType::Utf8,
        ("representations", "tokens") => DataType::Int64,
        ("representations", "roles") => text_list(),
        _ => return None,
    })
}

/// How a time column of type `dt` is read, `None` if it already is a UTC microsecond
/// timestamp; the error is what was expected.
fn time_encoding(dt: &DataType, epoch: Option<TimeUnit>) -> Result<Option<TimeEncoding>, String> {
    match dt {
        DataType::Timestamp(TimeUnit::Microsecond, Some(z)) if z.as_ref() == "UTC" => Ok(None),
        DataType::Null => Ok(None),
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            Ok(Some(TimeEncoding::Cast))
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(Some(TimeEncoding::Text)),
        t if t.is_integer() => match epoch {
            Some(unit) => Ok(Some(TimeEncoding::Epoch(unit))),
            None => Err("a timestamp (an integer epoch needs `epoch_unit` in \
                         [tables.T.time] of signalql.toml)"
                .into()),
        },
        _ => Err("a timestamp, a date, an integer epoch or RFC 3339 text".into()),
    }
}

/// `role` and, when it is read from another column, that column (`timestamp (received_at)`).
fn mapped_name(role: &str, source: &str) -> String {
    if role == source {
        role.to_string()
    } else {
        format!("{role} (file column {source})")
    }
}

fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(cols: &[(&str, DataType)]) -> Schema {
        Schema::new(
            cols.iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        )
    }

    fn config(text: &str) -> TableConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn signalql_files_need_no_view() {
        let s = schema(&[
            ("event_name", DataType::Utf8),
            ("timestamp", utc_micros()),
            ("user_id", DataType::Utf8),
            ("extra", DataType::Int64),
        ]);
        assert_eq!(view("events", &s, None, "signalql.toml").unwrap(), None);
    }

    #[test]
    fn a_wide_export_maps_roles_and_gathers_the_rest() {
        let s = schema(&[
            ("event", DataType::Utf8),
            ("received_at", DataType::Int64),
            ("anonymous_id", DataType::Utf8),
            ("plan", DataType::Utf8),
            ("amount", DataType::Float64),
            ("timestamp", DataType::Utf8),
        ]);
        let c = config(
            r#"
            [columns]
            event_name = "event"
            timestamp = "received_at"
            user_id = "anonymous_id"
            properties = "*"
            [time]
            epoch_unit = "ms"
            "#,
        );
        let v = view("events", &s, Some(&c), "signalql.toml")
            .unwrap()
            .unwrap();
        let names: Vec<&str> = v.columns.iter().map(|c| c.name.as_str()).collect();
        // The file's own `timestamp` (text) is not the event time: it is a property.
        assert_eq!(
            names,
            [
                "event_name",
                "timestamp",
                "user_id",
                "properties",
                "plan",
                "amount"
            ]
        );
        assert_eq!(
            v.columns[1].read,
            Read::Time {
                column: "received_at".into(),
                encoding: TimeEncoding::Epoch(TimeUnit::Millisecond)
            }
        );
        assert_eq!(
            v.columns[3].read,
            Read::Wide(vec!["plan".into(), "amount".into(), "timestamp".into()])
        );
        assert!(
            v.mapping()
                .contains(&("user_id".to_string(), "anonymous_id".to_string()))
        );
    }

    #[test]
    fn bad_mappings_name_table_and_column() {
        let s = schema(&[("event", DataType::Utf8), ("ts", DataType::Int64)]);
        let err = |text: &str| {
            view("events", &s, Some(&config(text)), "signalql.toml")
                .unwrap_err()
                .to_string()
        };
        assert!(err("[columns]\nevent_name = \"nope\"").contains("no column `nope`"));
        assert!(err("[columns]\nevnt = \"event\"").contains("not a column of the events table"));
        assert!(err("[columns]\nuser_id = \"*\"").contains("only a property bag"));
        let e = err("[columns]\nevent_name = \"event\"\ntimestamp = \"ts\"");
        assert!(
            e.contains("epoch_unit") && e.contains("timestamp (file column ts)"),
            "{e}"
        );
        assert!(err("[time]\nepoch_unit = \"days\"").contains("epoch_unit"));
    }

    #[test]
    fn foreign_object_tables_get_their_defaults() {
        let s = schema(&[
            ("object_id", DataType::Utf8),
            ("project", DataType::Utf8),
            ("kind", DataType::Utf8),
            ("title", DataType::Utf8),
            (
                "created_at",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
            ),
        ]);
        let v = view("objects", &s, None, "signalql.toml").unwrap().unwrap();
        let get = |n: &str| v.columns.iter().find(|c| c.name == n).unwrap().clone();
        assert_eq!(get("tombstoned_at").read, Read::Null);
        assert_eq!(get("source_path").read, Read::Null);
        assert_eq!(
            get("recorded_at").read,
            Read::Time {
                column: "created_at".into(),
                encoding: TimeEncoding::Cast
            }
        );
        assert_eq!(get("created_at").data_type, utc_micros());
    }
}

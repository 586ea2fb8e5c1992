//! The columns of the ten tables of DESIGN.md §3: which each table needs, of what type, and
//! the check a table's schema passes before the engine reads it.

use datafusion::arrow::datatypes::{DataType, SchemaRef};

use crate::error::DatasetError;

/// How the `properties` (or `traits`, `attributes`) column encodes its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertiesEncoding {
    Struct,
    Map,
    JsonText,
}

impl PropertiesEncoding {
    /// The encoding of a column of type `dt`, or None if it is none of the three.
    pub fn of(dt: &DataType) -> Option<Self> {
        match dt {
            DataType::Struct(_) => Some(Self::Struct),
            DataType::Map(_, _) => Some(Self::Map),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(Self::JsonText),
            _ => None,
        }
    }
}

/// The columns of one of the ten tables of DESIGN.md §3: the required ones and the optional
/// ones, each with what it must be; `None` for any other name.
pub fn table_columns(table: &str) -> Option<Columns> {
    use Kind::*;
    Some(match table {
        "events" => (
            &[("event_name", Text), ("timestamp", Timestamp)],
            &[("user_id", Text), ("session_id", Text), ("properties", Bag)],
        ),
        "users" => (&[("user_id", Text)], &[("traits", Bag)]),
        "signals" => (
            &[
                ("entity_id", Text),
                ("name", Text),
                ("value", Text),
                ("computed_at", Timestamp),
            ],
            &[("probability", Number)],
        ),
        "entities" => (
            &[
                ("entity_type", Text),
                ("entity_id", Text),
                ("updated_at", Timestamp),
            ],
            &[("attributes", Bag)],
        ),
        "relationships" => (
            &[
                ("src_type", Text),
                ("src_id", Text),
                ("relation", Text),
                ("dst_type", Text),
                ("dst_id", Text),
                ("created_at", Timestamp),
            ],
            &[],
        ),
        "objects" => (
            &[
                ("object_id", Text),
                ("kind", Text),
                ("title", Text),
                ("created_at", Timestamp),
                ("tombstoned_at", Timestamp),
                ("recorded_at", Timestamp),
            ],
            &[("project", Text), ("source_path", Text)],
        ),
        "revisions" => (
            &[
                ("object_id", Text),
                ("revision", Integer),
                ("created_at", Timestamp),
                ("origin", Text),
                ("trust", Text),
                ("validation", Text),
                ("roles", TextList),
                ("state", Text),
            ],
            &[],
        ),
        "representations" => (
            &[
                ("object_id", Text),
                ("revision", Integer),
                ("name", Text),
                ("media_type", Text),
                ("content", Text),
                ("content_hash", Text),
            ],
            &[
                ("content_ref", Text),
                ("tokens", Integer),
                ("roles", TextList),
            ],
        ),
        "derivations" => (
            &[
                ("object_id", Text),
                ("revision", Integer),
                ("relation", Text),
                ("source_object_id", Text),
                ("source_revision", Integer),
            ],
            &[],
        ),
        "links" => (
            &[
                ("object_id", Text),
                ("revision", Integer),
                ("entity_type", Text),
                ("entity_id", Text),
                ("relation", Text),
            ],
            &[],
        ),
        _ => return None,
    })
}

/// A table's (required, optional) columns and their kinds.
pub type Columns = (
    &'static [(&'static str, Kind)],
    &'static [(&'static str, Kind)],
);

/// Check the columns the language relies on in `table` (any of the ten tables of DESIGN.md
/// §3; other names are not checked): each required column present, and every column the
/// engine reads, required or optional, of a type it can read. A missing column is
/// [`DatasetError::Unreadable`] (`io_error`), a wrong type [`DatasetError::BadColumn`]
/// (`type_error`), both naming the table, the column and the type expected.
pub fn check_schema(table: &str, schema: &SchemaRef) -> Result<(), DatasetError> {
    let Some((required, optional)) = table_columns(table) else {
        return Ok(());
    };
    for (name, kind) in required {
        if schema.field_with_name(name).is_err() {
            return Err(DatasetError::Unreadable {
                table: table.into(),
                message: format!(
                    "the {table} table has no `{name}` column (expected {})",
                    kind.expected()
                ),
            });
        }
    }
    for (name, kind) in required.iter().chain(optional) {
        if let Ok(f) = schema.field_with_name(name)
            && !kind.accepts(f.data_type())
        {
            return Err(DatasetError::BadColumn {
                table: table.into(),
                column: name.to_string(),
                found: f.data_type().to_string(),
                expected: kind.expected().into(),
            });
        }
    }
    Ok(())
}

/// What a column of a table must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Timestamp,
    Integer,
    Number,
    /// A list of text (`roles`).
    TextList,
    /// A property bag: struct, map or JSON text.
    Bag,
}

impl Kind {
    fn accepts(self, dt: &DataType) -> bool {
        let text = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            ) || matches!(t, DataType::Dictionary(_, v) if v.is_string())
        };
        match self {
            Kind::Text => text(dt),
            Kind::Timestamp => matches!(dt, DataType::Timestamp(_, _) | DataType::Null),
            Kind::Integer => dt.is_integer() || *dt == DataType::Null,
            Kind::Number => dt.is_numeric() || *dt == DataType::Null,
            Kind::TextList => match dt {
                DataType::List(f) | DataType::LargeList(f) | DataType::ListView(f) => {
                    text(f.data_type())
                }
                DataType::Null => true,
                _ => false,
            },
            Kind::Bag => PropertiesEncoding::of(dt).is_some() || *dt == DataType::Null,
        }
    }

    pub fn expected(self) -> &'static str {
        match self {
            Kind::Text => "utf8",
            Kind::Timestamp => "timestamp",
            Kind::Integer => "an integer",
            Kind::Number => "a number",
            Kind::TextList => "list<utf8>",
            Kind::Bag => "struct, map<utf8, utf8> or JSON utf8",
        }
    }
}

//! The object tables of the context half (DESIGN.md §3): `objects`, `revisions`,
//! `representations`, `derivations`, `links`, each a folder of Parquet files under the dataset
//! root, written append-only by [`ingest`] (see docs/objects.md).
//!
//! `objects` rows are records of an object's state: the row with the latest `recorded_at` at or
//! before T says whether the object is live (`tombstoned_at` NULL) and gives its title; a file
//! deleted and later restored gets a tombstone row and then a live row. Revisions, their
//! representations and links are keyed by `(object_id, revision)`.

pub mod generator;
pub mod index;
pub mod ingest;
pub mod resident;
pub mod text;

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch, new_null_array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::file::reader::ChunkReader;

use crate::commit::Snapshot;
use crate::error::{CatalogError, Result};
use crate::storage::Root;

pub const OBJECTS: &str = "objects";
pub const REVISIONS: &str = "revisions";
pub const REPRESENTATIONS: &str = "representations";
pub const DERIVATIONS: &str = "derivations";
pub const LINKS: &str = "links";

/// Trust levels, lowest first (signalql-v0.5-context.md).
pub const TRUST_LEVELS: [&str; 5] = [
    "untrusted",
    "unknown",
    "inferred",
    "verified",
    "authoritative",
];
/// Origins.
pub const ORIGINS: [&str; 6] = ["human", "model", "external", "system", "import", "unknown"];
/// Validation levels.
pub const VALIDATIONS: [&str; 3] = ["none", "automated", "human"];
/// Roles.
pub const ROLES: [&str; 7] = [
    "data",
    "instruction",
    "prompt",
    "policy",
    "executable",
    "secret",
    "untrusted_external",
];
/// Dependency states.
pub const STATES: [&str; 3] = ["current", "stale", "invalid"];

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

fn roles_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

/// `objects`: one row per change of an object's record.
pub fn objects_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("object_id", DataType::Utf8, false),
        Field::new("project", DataType::Utf8, true),
        Field::new("kind", DataType::Utf8, false),
        Field::new("title", DataType::Utf8, false),
        Field::new("created_at", ts(), false),
        Field::new("tombstoned_at", ts(), true),
        Field::new("recorded_at", ts(), false),
        Field::new("source_path", DataType::Utf8, true),
    ]))
}

/// `revisions`: one row per revision of an object.
pub fn revisions_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("object_id", DataType::Utf8, false),
        Field::new("revision", DataType::Int64, false),
        Field::new("created_at", ts(), false),
        Field::new("origin", DataType::Utf8, false),
        Field::new("trust", DataType::Utf8, false),
        Field::new("validation", DataType::Utf8, false),
        Field::new("roles", roles_type(), false),
        Field::new("state", DataType::Utf8, false),
    ]))
}

/// `representations`: the forms of a revision's content (`text`, `summary`, …).
pub fn representations_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("object_id", DataType::Utf8, false),
        Field::new("revision", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("media_type", DataType::Utf8, false),
        Field::new("content", DataType::LargeUtf8, true),
        Field::new("content_ref", DataType::Utf8, true),
        Field::new("content_hash", DataType::Utf8, false),
        Field::new("tokens", DataType::Int64, true),
        Field::new("roles", roles_type(), false),
    ]))
}

/// `derivations`: which object revisions a revision was derived from.
pub fn derivations_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("object_id", DataType::Utf8, false),
        Field::new("revision", DataType::Int64, false),
        Field::new("relation", DataType::Utf8, false),
        Field::new("source_object_id", DataType::Utf8, false),
        Field::new("source_revision", DataType::Int64, false),
    ]))
}

/// `links`: object↔entity edges (object↔object edges have `entity_type` = `object`).
pub fn links_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("object_id", DataType::Utf8, false),
        Field::new("revision", DataType::Int64, false),
        Field::new("entity_type", DataType::Utf8, false),
        Field::new("entity_id", DataType::Utf8, false),
        Field::new("relation", DataType::Utf8, false),
    ]))
}

/// Reads `columns` of every visible file of `root/table` (none when the table does not
/// exist), calling `f` with each batch: its columns in the order asked, by name, each in the
/// type signalql's own writers give it ([`canonical_type`]). Files other tools wrote are read
/// as the table's readers read them (crate::mapping): a column a file lacks is read from its
/// fallback column (`objects.recorded_at` from `created_at`), else as NULL where the table
/// gives it a default; a column named `?name` with neither is left out.
pub(crate) fn scan(
    root: &Root,
    snapshot: &Snapshot,
    table: &str,
    columns: &[&str],
    mut f: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<()> {
    for listed in root.parquet_files(table)?.unwrap_or_default() {
        if snapshot.visible(&listed.location) {
            scan_file(root, table, &listed.location, columns, &mut f)?;
        }
    }
    Ok(())
}

/// [`scan`] of the one file of `table` at `location`.
pub(crate) fn scan_file(
    root: &Root,
    table: &str,
    location: &str,
    columns: &[&str],
    f: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<()> {
    match root.local() {
        Some(_) => {
            let file = File::open(location).map_err(|e| CatalogError::io(location, e))?;
            read_batches(file, table, location, columns, f)
        }
        None => read_batches(root.read_location(location)?, table, location, columns, f),
    }
}

/// Where a column asked of a file is read from.
enum Source<'a> {
    /// A file column (the column itself, or the one a column the file lacks is read from),
    /// read as this type ([`read_type`]: the file's own, or the one it is cast to).
    File(&'a str, DataType),
    /// NULL of this type: a column the file lacks that the table gives a default.
    Null(DataType),
}

fn read_batches<'a, R: ChunkReader + 'static>(
    reader: R,
    table: &str,
    location: &str,
    columns: &[&'a str],
    mut f: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<()> {
    let in_file = |e: &dyn std::fmt::Display| CatalogError::Invalid(format!("{location}: {e}"));
    let builder = ParquetRecordBatchReaderBuilder::try_new(reader).map_err(|e| in_file(&e))?;
    let fields = builder.schema().fields().clone();
    let position = |name: &str| fields.iter().position(|fd| fd.name() == name);
    let mut roots = Vec::new();
    let mut wanted: Vec<(&str, Source<'a>)> = Vec::new();
    for c in columns {
        let (name, optional) = match c.strip_prefix('?') {
            Some(name) => (name, true),
            None => (*c, false),
        };
        let fallback = crate::mapping::fallback_column(table, name)
            .and_then(|from| Some((position(from)?, from)));
        let file_column = |i: usize, from: &'a str| -> Result<Source<'a>> {
            let dt =
                read_type(table, name, from, fields[i].data_type()).map_err(|e| in_file(&e))?;
            Ok(Source::File(from, dt))
        };
        let source = match (position(name), fallback) {
            (Some(i), _) => {
                roots.push(i);
                file_column(i, name)?
            }
            (None, Some((i, from))) => {
                roots.push(i);
                file_column(i, from)?
            }
            (None, None) => match crate::mapping::null_default(table, name) {
                Some(dt) => Source::Null(canonical_type(table, name).unwrap_or(dt)),
                None if optional => continue,
                None => return Err(in_file(&format!("no column `{name}`"))),
            },
        };
        wanted.push((name, source));
    }
    roots.sort_unstable();
    roots.dedup();
    // The batches' schema: each column asked, in the type it is read as.
    let schema = Arc::new(Schema::new(
        wanted
            .iter()
            .map(|(name, Source::File(_, dt) | Source::Null(dt))| {
                Field::new(*name, dt.clone(), true)
            })
            .collect::<Vec<_>>(),
    ));
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| in_file(&e))?;
    for batch in reader {
        let batch = batch.map_err(|e| in_file(&e))?;
        // The projection keeps file order; put the columns in the order asked, in their types.
        let cols = wanted
            .iter()
            .map(|(_, source)| match source {
                Source::File(from, dt) => {
                    let a = batch
                        .column_by_name(from)
                        .ok_or_else(|| in_file(&format!("no column `{from}`")))?;
                    if a.data_type() == dt {
                        Ok(Arc::clone(a))
                    } else {
                        cast(a, dt).map_err(|e| in_file(&format!("column `{from}`: {e}")))
                    }
                }
                Source::Null(dt) => Ok(new_null_array(dt, batch.num_rows())),
            })
            .collect::<Result<Vec<_>>>()?;
        f(&RecordBatch::try_new(Arc::clone(&schema), cols)?)?;
    }
    Ok(())
}

/// The type signalql reads column `name` of `table` as: the type its own writers give it.
fn canonical_type(table: &str, name: &str) -> Option<DataType> {
    let schema = match table {
        OBJECTS => objects_schema(),
        REVISIONS => revisions_schema(),
        REPRESENTATIONS => representations_schema(),
        DERIVATIONS => derivations_schema(),
        LINKS => links_schema(),
        // The text index's tables are signalql's own, read as written.
        _ => return None,
    };
    schema
        .field_with_name(name)
        .ok()
        .map(|f| f.data_type().clone())
}

/// The type file column `from` (of type `dt`) is read as, as column `name` of `table`:
/// [`canonical_type`], or `dt` itself for a column without one. Other tools write Utf8View, LargeUtf8, dictionaries, Int32, timestamps of other units
/// and zones: each is cast as the table's view casts it (crate::mapping, `TimeEncoding::Cast`).
/// Any other type (an epoch or a text time, which only signalql.toml says how to read) is the
/// error, decided once per file before any row is read, and before anything is written that
/// would leave the table unreadable.
fn read_type(
    table: &str,
    name: &str,
    from: &str,
    dt: &DataType,
) -> std::result::Result<DataType, String> {
    let Some(to) = canonical_type(table, name) else {
        return Ok(dt.clone());
    };
    if !read_as(dt, &to) {
        return Err(format!(
            "column `{from}` is {dt}, where signalql reads `{name}` as {to}"
        ));
    }
    Ok(to)
}

/// Whether a column of type `from` is read as `to` by a cast ([`read_type`]).
fn read_as(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        _ if from == to => true,
        (Null, _) => true,
        (Dictionary(_, values), _) => read_as(values, to),
        (_, Utf8 | LargeUtf8 | Utf8View) => signalql_udfs::strings::is_string(from),
        (_, Int64 | Int32) => from.is_integer(),
        (Timestamp(..) | Date32 | Date64, Timestamp(..)) => true,
        (List(f) | LargeList(f) | ListView(f), List(t)) => read_as(f.data_type(), t.data_type()),
        _ => false,
    }
}

/// An object's latest record.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRecord {
    pub recorded_at: i64,
    pub created_at: i64,
    pub live: bool,
    pub kind: String,
    pub title: String,
    pub project: Option<String>,
    pub source_path: Option<String>,
}

/// What ingest needs to know about an object already in the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnownObject {
    /// The latest record (by `recorded_at`).
    pub record: Option<ObjectRecord>,
    /// The latest revision number, and the content hash of its `text` representation.
    pub latest: Option<(i64, Option<String>)>,
}

/// The current state of every object in the store, by object id (for ingest).
pub fn known_objects(root: &Root, snapshot: &Snapshot) -> Result<HashMap<String, KnownObject>> {
    let mut known: HashMap<String, KnownObject> = HashMap::new();
    scan(
        root,
        snapshot,
        OBJECTS,
        &[
            "object_id",
            "recorded_at",
            "tombstoned_at",
            "title",
            "created_at",
            "project",
            "source_path",
            "kind",
        ],
        |b| {
            let ids = b.column(0).as_string::<i32>();
            let rec = b.column(1).as_primitive::<TimestampMicrosecondType>();
            let tomb = b.column(2);
            let titles = b.column(3).as_string::<i32>();
            let created = b.column(4).as_primitive::<TimestampMicrosecondType>();
            let projects = b.column(5).as_string::<i32>();
            let sources = b.column(6).as_string::<i32>();
            let kinds = b.column(7).as_string::<i32>();
            let opt = |a: &datafusion::arrow::array::StringArray, i: usize| {
                (!a.is_null(i)).then(|| a.value(i).to_string())
            };
            for i in 0..b.num_rows() {
                let entry = known.entry(ids.value(i).to_string()).or_default();
                let r = rec.value(i);
                if entry.record.as_ref().is_none_or(|old| r >= old.recorded_at) {
                    entry.record = Some(ObjectRecord {
                        recorded_at: r,
                        created_at: created.value(i),
                        live: tomb.is_null(i),
                        kind: kinds.value(i).to_string(),
                        title: titles.value(i).to_string(),
                        project: opt(projects, i),
                        source_path: opt(sources, i),
                    });
                }
            }
            Ok(())
        },
    )?;
    scan(root, snapshot, REVISIONS, &["object_id", "revision"], |b| {
        let ids = b.column(0).as_string::<i32>();
        let revs = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let entry = known.entry(ids.value(i).to_string()).or_default();
            let r = revs.value(i);
            if entry.latest.as_ref().is_none_or(|(l, _)| r > *l) {
                entry.latest = Some((r, None));
            }
        }
        Ok(())
    })?;
    scan(
        root,
        snapshot,
        REPRESENTATIONS,
        &["object_id", "revision", "name", "content_hash"],
        |b| {
            let ids = b.column(0).as_string::<i32>();
            let revs = b.column(1).as_primitive::<Int64Type>();
            let names = b.column(2).as_string::<i32>();
            let hashes = b.column(3).as_string::<i32>();
            for i in 0..b.num_rows() {
                if names.value(i) != "text" {
                    continue;
                }
                if let Some(entry) = known.get_mut(ids.value(i))
                    && let Some((latest, hash)) = entry.latest.as_mut()
                    && *latest == revs.value(i)
                {
                    *hash = Some(hashes.value(i).to_string());
                }
            }
            Ok(())
        },
    )?;
    Ok(known)
}

//! Ingest of JSONL/CSV event files into one new Parquet file of the `events` table.
//!
//! # Input
//!
//! - JSON lines (`.jsonl`, `.json`, `.ndjson`): one JSON object per line, blank lines skipped.
//!   Keys: `event_name` (required, non-empty string), `user_id` and `session_id` (string,
//!   number → its text, or null/absent), `timestamp` (required: an RFC 3339 string, converted
//!   to UTC and truncated to the microsecond; a date-time without offset is taken as UTC; or an
//!   integer number of epoch **milliseconds**), `properties` (an object, or null/absent). Any
//!   other top-level key is an error (put it in `properties`).
//! - CSV (`.csv`, RFC 4180 quoting, header row required): columns `event_name`, `timestamp`
//!   (required), `user_id`, `session_id`, `properties` (JSON object text) and/or
//!   `properties.<key>` columns. Empty cells are NULL. A timestamp of only digits is epoch
//!   milliseconds. A `properties.<key>` cell that is a JSON number, `true`, `false` or `null`
//!   is that value, anything else is text.
//!
//! # Output
//!
//! `properties` becomes a struct whose fields are the union of keys over all inputs of this
//! ingest, sorted by name, typed Boolean / Int64 / Float64 / Utf8 (see
//! [`PropertyInference`](props::PropertyInference)). Every file is validated (pass 1) before
//! anything is written (pass 2, streaming into a hidden temporary file); a bad line aborts the
//! ingest with [`CatalogError::BadInput`] and leaves `ROOT/events` as it was. The result is
//! one new file `ROOT/events/ingest-<id>.parquet`, visible once the ingest's commit record is
//! made ([`crate::commit`]); existing files are never touched. Files written by different ingests may have different `properties` structs: the
//! reader must union struct fields across files (a key missing from a file reads as NULL).
//! Rows keep their input order (they are not sorted by time).
//!
//! On an S3 root the file is written in a local temporary folder first and then created in
//! `ROOT/events/` with one conditional PUT, so it too appears whole or not at all.

mod props;
mod source;

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringBuilder, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use crate::commit::Ingest;
use crate::error::{CatalogError, Result};
use crate::storage::Root;
use crate::write::AtomicParquetWriter;
use props::{PropertiesBuilder, PropertyInference};
use source::{ContentHash, RawEvent, read_events};

/// Rows per Arrow batch written by ingest.
pub const INGEST_BATCH_ROWS: usize = 65_536;

/// The `events` schema: `event_name` Utf8 not null, `user_id` Utf8, `session_id` Utf8,
/// `timestamp` Timestamp(µs, "UTC") not null, and `properties` Struct(fields) (nullable) when
/// `properties` is Some.
pub fn events_schema(properties: Option<Fields>) -> SchemaRef {
    let mut fields = vec![
        Field::new("event_name", DataType::Utf8, false),
        Field::new("user_id", DataType::Utf8, true),
        Field::new("session_id", DataType::Utf8, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ];
    if let Some(p) = properties {
        fields.push(Field::new("properties", DataType::Struct(p), true));
    }
    Arc::new(Schema::new(fields))
}

/// What [`ingest_events`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestSummary {
    /// Event rows written.
    pub rows: u64,
    /// Input files read.
    pub files_read: usize,
    /// The new Parquet file.
    pub written: PathBuf,
    /// The `properties` struct fields written: (name, Arrow type name such as `Int64`),
    /// sorted by name. Empty (and no `properties` column) when no event had properties.
    pub properties_fields: Vec<(String, String)>,
}

/// Ingests `files` into one new Parquet file under `root/events/`. See the module docs.
pub fn ingest_events(root: impl Into<Root>, files: &[PathBuf]) -> Result<IngestSummary> {
    ingest_events_with_progress(root, files, None)
}

/// [`ingest_events`] with a progress bar: its length is set to twice the input size in bytes
/// (every byte is read once to validate and once to write) and it advances as bytes are read.
pub fn ingest_events_with_progress(
    root: impl Into<Root>,
    files: &[PathBuf],
    progress: Option<&indicatif::ProgressBar>,
) -> Result<IngestSummary> {
    let root: Root = root.into();
    if files.is_empty() {
        return Err(CatalogError::Invalid("ingest: no input files".into()));
    }
    let mut total_bytes = 0u64;
    for f in files {
        source::Format::of(f)?;
        let meta = std::fs::metadata(f).map_err(|e| CatalogError::io(f, e))?;
        if !meta.is_file() {
            return Err(CatalogError::Invalid(format!(
                "{} is not a file",
                f.display()
            )));
        }
        total_bytes += meta.len();
    }
    if let Some(pb) = progress {
        pb.set_length(2 * total_bytes);
    }

    // Pass 1: validate everything, infer the properties struct, hash the content.
    let mut inference = PropertyInference::default();
    let mut any_properties = false;
    let mut rows = 0u64;
    let mut hash = ContentHash::default();
    for f in files {
        read_events(f, &mut hash, progress, &mut |e: RawEvent| {
            rows += 1;
            if let Some(p) = &e.properties {
                any_properties = true;
                inference.observe(p);
            }
            Ok(())
        })?;
    }
    if rows == 0 {
        return Err(CatalogError::Invalid(
            "ingest: the input files hold no events".into(),
        ));
    }
    let prop_fields = inference.fields();
    let with_props = any_properties && !prop_fields.is_empty();
    let schema = events_schema(with_props.then(|| prop_fields.clone()));

    // Pass 2: write to a hidden temporary file; it is removed if anything fails. The file is
    // the ingest's one data file, visible once the ingest commits (crate::commit).
    // An S3 root: the file is staged in a local temporary folder, then uploaded whole.
    let mut ingest = Ingest::begin(&root)?;
    let (dir, staging) = match root.local() {
        Some(local) => (local.join("events"), None),
        None => {
            let t = tempfile::tempdir().map_err(|e| CatalogError::io("temporary folder", e))?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let mut writer = AtomicParquetWriter::new(&dir, &ingest.stem(), Arc::clone(&schema))?;
    let mut batch = EventsBuilder::new(with_props.then(|| prop_fields.clone()));
    let mut hash2 = ContentHash::default();
    for f in files {
        read_events(f, &mut hash2, progress, &mut |e: RawEvent| {
            batch.append(&e)?;
            if batch.len() >= INGEST_BATCH_ROWS {
                writer.write(&batch.finish(&schema)?)?;
            }
            Ok(())
        })?;
    }
    if batch.len() > 0 {
        writer.write(&batch.finish(&schema)?)?;
    }
    if hash2 != hash || writer.rows() != rows {
        return Err(CatalogError::Invalid(
            "ingest: an input file changed while it was being ingested; nothing was written".into(),
        ));
    }
    let mut written = writer.finish()?;
    if staging.is_some() {
        written = crate::write::upload_new(&root, "events", &written)?;
    }
    ingest.wrote("events");
    ingest.commit()?;
    Ok(IngestSummary {
        rows,
        files_read: files.len(),
        written,
        properties_fields: prop_fields
            .iter()
            .filter(|_| with_props)
            .map(|f| (f.name().clone(), f.data_type().to_string()))
            .collect(),
    })
}

/// Builds `events` batches from validated events.
struct EventsBuilder {
    event_name: StringBuilder,
    user_id: StringBuilder,
    session_id: StringBuilder,
    timestamp: Vec<i64>,
    properties: Option<PropertiesBuilder>,
}

impl EventsBuilder {
    fn new(properties: Option<Fields>) -> Self {
        EventsBuilder {
            event_name: StringBuilder::new(),
            user_id: StringBuilder::new(),
            session_id: StringBuilder::new(),
            timestamp: Vec::with_capacity(INGEST_BATCH_ROWS),
            properties: properties.map(PropertiesBuilder::new),
        }
    }

    fn len(&self) -> usize {
        self.timestamp.len()
    }

    fn append(&mut self, e: &RawEvent) -> Result<()> {
        self.event_name.append_value(&e.event_name);
        self.user_id.append_option(e.user_id.as_deref());
        self.session_id.append_option(e.session_id.as_deref());
        self.timestamp.push(e.timestamp_us);
        if let Some(p) = &mut self.properties {
            p.append(e.properties.as_ref())?;
        }
        Ok(())
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let ts = std::mem::replace(&mut self.timestamp, Vec::with_capacity(INGEST_BATCH_ROWS));
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.event_name.finish()),
            Arc::new(self.user_id.finish()),
            Arc::new(self.session_id.finish()),
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        ];
        if let Some(p) = &mut self.properties {
            columns.push(p.finish()?);
        }
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }
}

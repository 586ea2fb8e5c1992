//! Atomic Parquet writes: write to a hidden temporary name, fsync, then link into place.
//!
//! Readers list `*.parquet`; the temporary name is `.{stem}.parquet.tmp-<pid>-<nanos>-<n>`,
//! which starts with `.` and does not end in `.parquet`, so a reader never sees a half-written
//! file. The final name is created with create-new semantics (a hard link, which fails if the
//! target exists), so an existing file is never overwritten, even by a concurrent writer
//! ([`crate::file::NewFile`]).

use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, Encoding, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use datafusion::parquet::schema::types::ColumnPath;

use crate::error::{CatalogError, Result};
use crate::file::{FileError, NewFile};
use crate::storage::Root;

/// Maximum rows per Parquet row group.
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;

/// Maximum bytes per Parquet row group, as the writer estimates them (pages as written, so
/// after compression). A row group is the unit a scan is split into, so a text-heavy table
/// (representations) is cut into several and read on every core; an events row group of
/// 1 Mi rows is about 10 MB written, under the cap.
pub const ROW_GROUP_BYTES: usize = 16 * 1024 * 1024;

/// The page size of a `content` column, and the rows between the writer's checks of it.
pub const CONTENT_PAGE_BYTES: usize = 64 * 1024;
pub const CONTENT_PAGE_ROWS: usize = 64;

/// The writer properties every catalog Parquet file of `schema` uses: ZSTD(3), row groups of at
/// most 1 Mi rows and 16 MiB, page-level statistics, and each top-level timestamp column
/// delta-encoded without a dictionary.
///
/// Timestamps are nearly all distinct, so a dictionary only fills up (1 MiB, about 131 072
/// values) and falls back to plain pages, and a reader of any page decodes that dictionary
/// page first. In time order the deltas are small: the sample's timestamp column is 533 KB as
/// DELTA_BINARY_PACKED against 861 KB as dictionary + ZSTD, and a 30-day count over it took
/// 3.1 ms instead of 7.0 (issue 45; benches `stages`).
///
/// A `content` column (the representations' text) is written without a dictionary, in pages
/// of about [`CONTENT_PAGE_BYTES`]: CONTEXT FOR reads the packed items' content by point lookup, and a
/// reader decompresses every page holding a wanted row. With the default 1 MiB pages (at least
/// 1 024 rows, the writer's batch) 20 items of the 100k-object zipf corpus decompressed 12 MB
/// in 49 ms; with 64 KiB pages the whole answer took 37 ms instead of 96 (benches/README.md,
/// issue 46), for a file 4 % larger.
pub fn writer_properties(schema: &Schema) -> WriterProperties {
    let level = ZstdLevel::try_new(3).unwrap_or_default();
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_statistics_enabled(EnabledStatistics::Page);
    if schema.field_with_name("content").is_ok() {
        // The page size is checked after each batch of rows the writer takes.
        // Without a dictionary: texts are nearly all distinct, so it only fills (1 MiB) and
        // falls back, and a reader of any row of the row group decodes that page first.
        let content = ColumnPath::from("content");
        builder = builder
            .set_write_batch_size(CONTENT_PAGE_ROWS)
            .set_column_dictionary_enabled(content.clone(), false)
            .set_column_data_page_size_limit(content, CONTENT_PAGE_BYTES);
    }
    for field in schema.fields() {
        if matches!(field.data_type(), DataType::Timestamp(..)) {
            let path = ColumnPath::from(field.name().as_str());
            builder = builder
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        }
    }
    builder.build()
}

/// Writes `batches` to `dir/{file_stem}.parquet` atomically and returns that path.
///
/// Creates `dir` if needed. Fails (writing nothing) if the target already exists.
pub fn write_parquet_atomic(
    dir: &Path,
    file_stem: &str,
    schema: SchemaRef,
    batches: &[RecordBatch],
) -> Result<PathBuf> {
    let mut writer = AtomicParquetWriter::new(dir, file_stem, schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()
}

/// A streaming atomic Parquet writer: batches go to a hidden temporary file ([`NewFile`]);
/// [`finish`] fsyncs it and links it to `dir/{stem}.parquet`. Dropped without `finish` (or
/// after a failed `finish`), it removes the temporary file.
///
/// [`finish`]: AtomicParquetWriter::finish
pub struct AtomicParquetWriter {
    writer: ArrowWriter<NewFile>,
    rows: u64,
}

fn check_stem(stem: &str) -> Result<()> {
    let bad = stem.is_empty()
        || stem.starts_with('.')
        || stem.contains(['/', '\\'])
        || stem.chars().any(char::is_control);
    if bad {
        return Err(CatalogError::Invalid(format!(
            "invalid Parquet file stem {stem:?}: it must be non-empty, not start with '.', \
             and contain no path separators"
        )));
    }
    Ok(())
}

impl AtomicParquetWriter {
    /// Opens a temporary file in `dir` (created if needed) for `dir/{stem}.parquet`.
    /// Fails if the target already exists.
    pub fn new(dir: &Path, stem: &str, schema: SchemaRef) -> Result<Self> {
        let properties = writer_properties(&schema);
        Self::with_properties(dir, stem, schema, properties)
    }

    /// [`AtomicParquetWriter::new`] with other writer properties.
    pub fn with_properties(
        dir: &Path,
        stem: &str,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self> {
        check_stem(stem)?;
        std::fs::create_dir_all(dir).map_err(|e| CatalogError::io(dir, e))?;
        let target = dir.join(format!("{stem}.parquet"));
        if target.exists() {
            return Err(exists_error(&target.display().to_string()));
        }
        // If the writer cannot start, dropping the file removes it.
        let file = NewFile::create(&target).map_err(file_error)?;
        let writer = ArrowWriter::try_new(file, schema, Some(properties))?;
        Ok(AtomicParquetWriter { writer, rows: 0 })
    }

    /// Appends one batch (its schema must be the writer's).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        write_sliced(&mut self.writer, batch)?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The path the file will have once finished.
    pub fn target(&self) -> &Path {
        self.writer.inner().target()
    }

    /// Writes the footer, fsyncs, and links the file into place; returns its final path.
    pub fn finish(self) -> Result<PathBuf> {
        let file = self.writer.into_inner()?;
        let target = file.target().to_path_buf();
        crate::failpoint::write_step(format_args!("data file {}", target.display()));
        if !file.publish().map_err(file_error)? {
            return Err(exists_error(&target.display().to_string()));
        }
        Ok(target)
    }
}

fn file_error(e: FileError) -> CatalogError {
    CatalogError::io(e.path, e.source)
}

/// "LOCATION already exists; refusing to overwrite it", for a create-new write that found
/// its target taken.
fn exists_error(location: &str) -> CatalogError {
    CatalogError::Invalid(format!(
        "{location} already exists; refusing to overwrite it"
    ))
}

/// Rows handed to the Parquet writer at a time. The writer learns a row's size from what it
/// holds, so it can keep to [`ROW_GROUP_BYTES`] only if a large batch comes in slices.
const WRITE_SLICE_ROWS: usize = 8192;

fn write_sliced<W: std::io::Write + Send>(
    writer: &mut ArrowWriter<W>,
    batch: &RecordBatch,
) -> Result<()> {
    let mut at = 0;
    while at < batch.num_rows() {
        let n = WRITE_SLICE_ROWS.min(batch.num_rows() - at);
        writer.write(&batch.slice(at, n))?;
        at += n;
    }
    Ok(())
}

/// Writes `batches` as the new Parquet file `ROOT/{table}/{stem}.parquet` of a dataset root
/// and returns its location: locally as [`write_parquet_atomic`] does; on S3 encoded in memory
/// and created with one conditional PUT (so it appears whole, and never replaces a file).
pub fn put_parquet_new(
    root: &Root,
    table: &str,
    stem: &str,
    schema: SchemaRef,
    batches: &[RecordBatch],
) -> Result<PathBuf> {
    let properties = writer_properties(&schema);
    let mut file = NewParquet::new(root, table, stem, schema, properties)?;
    for batch in batches {
        file.write(batch)?;
    }
    file.finish()
}

/// A streaming writer of the new Parquet file `ROOT/{table}/{stem}.parquet`: locally an
/// [`AtomicParquetWriter`]; on S3 encoded in memory and created with one conditional PUT at
/// [`NewParquet::finish`].
pub enum NewParquet {
    Local(AtomicParquetWriter),
    S3 {
        root: Root,
        rel: String,
        writer: ArrowWriter<Vec<u8>>,
    },
}

impl NewParquet {
    pub fn new(
        root: &Root,
        table: &str,
        stem: &str,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self> {
        if let Some(local) = root.local() {
            return Ok(NewParquet::Local(AtomicParquetWriter::with_properties(
                &local.join(table),
                stem,
                schema,
                properties,
            )?));
        }
        check_stem(stem)?;
        Ok(NewParquet::S3 {
            root: root.clone(),
            rel: format!("{table}/{stem}.parquet"),
            writer: ArrowWriter::try_new(Vec::new(), schema, Some(properties))?,
        })
    }

    /// Appends one batch (its schema must be the writer's).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            NewParquet::Local(w) => w.write(batch),
            NewParquet::S3 { writer, .. } => write_sliced(writer, batch),
        }
    }

    /// Finishes the file and makes it exist under its name; returns its location.
    pub fn finish(self) -> Result<PathBuf> {
        match self {
            NewParquet::Local(w) => w.finish(),
            NewParquet::S3 { root, rel, writer } => {
                let bytes = writer.into_inner()?;
                put_new_or_fail(&root, &rel, bytes)
            }
        }
    }
}

/// Copies the finished local file `file` to `ROOT/{table}/<its name>` of an S3 root (one
/// conditional PUT) and returns the new location.
pub fn upload_new(root: &Root, table: &str, file: &Path) -> Result<PathBuf> {
    let bytes = std::fs::read(file).map_err(|e| CatalogError::io(file, e))?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    put_new_or_fail(root, &format!("{table}/{name}"), bytes)
}

fn put_new_or_fail(root: &Root, rel: &str, bytes: Vec<u8>) -> Result<PathBuf> {
    let location = root.display_of(rel);
    crate::failpoint::write_step(format_args!("data file {location}"));
    if root.put_new(rel, bytes)? {
        Ok(PathBuf::from(location))
    } else {
        Err(exists_error(&location))
    }
}

/// Writes `text` to `path` only if no file is there: a concurrent writer's file wins and ours
/// is dropped; an existing file is never overwritten, and the file appears whole
/// ([`crate::file::create_new`], as every create-new write of a dataset root).
pub fn write_new_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    crate::file::create_new(path, |f| f.write_all(text.as_bytes())).map_err(file_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::tests::names;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::fs::File;
    use std::sync::Arc;

    fn batch() -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        (schema, b)
    }

    #[test]
    fn text_heavy_tables_get_several_row_groups() {
        // 40 000 rows of 2 KiB text (80 MiB, about 50 MiB compressed) in one batch: cut at the 16 MiB cap into at least
        // three row groups, every row kept, in order.
        use datafusion::arrow::array::{AsArray, StringArray};
        use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Utf8, false)]));
        // Distinct windows of pseudo-random letters, so no dictionary shrinks them.
        let mut x: u64 = 42;
        let pool: String = (0..1 << 20)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from(b'a' + (x >> 59) as u8 % 26)
            })
            .collect();
        let texts: Vec<&str> = (0..40_000usize)
            .map(|i| {
                let at = (i * 7919) % (pool.len() - 2048);
                &pool[at..at + 2048]
            })
            .collect();
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(StringArray::from(texts.clone()))],
        )
        .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let path = write_parquet_atomic(tmp.path(), "big", schema, &[b]).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let groups = reader.metadata().num_row_groups();
        assert!(groups >= 3, "{groups} row groups");
        let mut back: Vec<String> = Vec::new();
        for b in reader.build().unwrap() {
            let b = b.unwrap();
            back.extend(
                b.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|s| s.unwrap().to_string()),
            );
        }
        assert!(back.iter().eq(texts.iter()));
    }

    #[test]
    fn writes_then_refuses_to_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        let (schema, b) = batch();
        let p =
            write_parquet_atomic(&dir, "f", Arc::clone(&schema), std::slice::from_ref(&b)).unwrap();
        assert_eq!(p, dir.join("f.parquet"));
        let bytes = std::fs::read(&p).unwrap();
        let err = write_parquet_atomic(&dir, "f", schema, &[b]).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), bytes);
        assert_eq!(names(&dir), ["f.parquet"]);
    }

    #[test]
    fn temp_file_is_hidden_and_removed_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let (schema, b) = batch();
        let mut w = AtomicParquetWriter::new(tmp.path(), "g", schema).unwrap();
        w.write(&b).unwrap();
        let during = names(tmp.path());
        assert_eq!(during.len(), 1);
        assert!(during[0].starts_with(".g.parquet.tmp-"), "{during:?}");
        assert!(!during[0].ends_with(".parquet"));
        drop(w);
        assert!(names(tmp.path()).is_empty());
    }

    #[test]
    fn rejects_bad_stems_and_mismatched_batches() {
        let tmp = tempfile::tempdir().unwrap();
        let (schema, _) = batch();
        for stem in ["", ".hidden", "a/b", "..", "a\\b"] {
            assert!(AtomicParquetWriter::new(tmp.path(), stem, Arc::clone(&schema)).is_err());
        }
        let other = Arc::new(Schema::new(vec![Field::new("y", DataType::Utf8, true)]));
        let (_, b) = batch();
        assert!(write_parquet_atomic(tmp.path(), "h", other, &[b]).is_err());
        assert!(names(tmp.path()).is_empty());
    }
}

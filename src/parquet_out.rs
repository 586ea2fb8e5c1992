//! `--format parquet --out FILE`: a query's result rows written as one Parquet file.

use std::path::Path;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::errors::ParquetError;

use crate::{Error, Result};

/// Writes `batches` to `path` as Parquet (the catalog's writer properties): into a temporary
/// file beside it, then renamed over it, so `path` is never half-written. Fails when there
/// are no batches (no schema to write).
pub fn write_parquet(path: &Path, batches: &[RecordBatch]) -> Result<()> {
    let Some(first) = batches.first() else {
        return Err(Error::type_error("the query returned no rows to write"));
    };
    signalql_catalog::file::replace(path, |file| {
        write_batches(file, &first.schema(), batches).map_err(std::io::Error::other)
    })
    .map_err(|e| Error::io(format!("{}: {}", path.display(), e.source)))
}

/// `batches` (of `schema`) as one Parquet file written to `out`, with the catalog's writer
/// properties: `--format parquet`'s file and `serve`'s Parquet answer.
pub fn write_batches<W: std::io::Write + Send>(
    out: W,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> std::result::Result<(), ParquetError> {
    let props = signalql_catalog::write::writer_properties(schema);
    let mut w = ArrowWriter::try_new(out, schema.clone(), Some(props))?;
    for b in batches {
        w.write(b)?;
    }
    w.close()?;
    Ok(())
}

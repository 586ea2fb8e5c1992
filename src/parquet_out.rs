//! `--format parquet --out FILE`: a query's result rows written as one Parquet file.

use std::path::Path;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;

use crate::{Error, Result};

/// Writes `batches` to `path` as Parquet (the catalog's writer properties): into a temporary
/// file beside it, then renamed over it, so `path` is never half-written. Fails when there
/// are no batches (no schema to write).
pub fn write_parquet(path: &Path, batches: &[RecordBatch]) -> Result<()> {
    let Some(first) = batches.first() else {
        return Err(Error::type_error("the query returned no rows to write"));
    };
    signalql_catalog::file::replace(path, |file| {
        let props = signalql_catalog::write::writer_properties(&first.schema());
        let mut w = ArrowWriter::try_new(file, first.schema(), Some(props))
            .map_err(std::io::Error::other)?;
        for b in batches {
            w.write(b).map_err(std::io::Error::other)?;
        }
        w.close().map_err(std::io::Error::other)?;
        Ok(())
    })
    .map_err(|e| Error::io(format!("{}: {}", path.display(), e.source)))
}

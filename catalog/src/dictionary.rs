//! A text column's distinct values read from a Parquet file's dictionary pages alone, without
//! its data pages (docs/mapping.md, "JSON-text properties"): when every row group holds the
//! column as a chunk whose data pages are all dictionary-encoded, the dictionaries are every
//! value the file's rows hold. The bind pass decides whether a JSON-text key is numeric from
//! them instead of a pass over the column's rows.

use std::io::Cursor;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{StringArray, StringBuilder};
use datafusion::parquet::basic::{Encoding, Type as PhysicalType};
use datafusion::parquet::column::page::{Page, PageReader};
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use datafusion::parquet::file::reader::{ChunkReader, Length};
use datafusion::parquet::file::serialized_reader::SerializedPageReader;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// The most bytes of dictionary pages (as stored) read from one file: past it the values are
/// held in memory outside the query pool, and the pass over the rows (which streams) is used.
pub const MAX_DICTIONARY_BYTES: u64 = 16 << 20;

/// The values of the top-level text column `column` in the file at `path` (whose footer is
/// `metadata`), read from its dictionary pages, row group by row group (a value may repeat
/// across row groups). `Ok(None)` when the dictionaries do not hold every value: a row group
/// whose chunk of the column has a data page not dictionary-encoded (a writer's fallback to
/// plain), or whose footer does not say (no page encoding statistics), or a column that is not
/// a flat byte array, or a value that is not UTF-8; and when the dictionary pages add up to
/// more than [`MAX_DICTIONARY_BYTES`]. The error is a read that failed.
pub async fn text_dictionary(
    store: &dyn ObjectStore,
    path: &Path,
    metadata: &ParquetMetaData,
    column: &str,
) -> Result<Option<StringArray>, String> {
    let descr = metadata.file_metadata().schema_descr();
    let Some(leaf) = (0..descr.num_columns()).find(|&i| {
        let c = descr.column(i);
        c.path().parts() == [column]
    }) else {
        return Ok(None);
    };
    let c = descr.column(leaf);
    if c.physical_type() != PhysicalType::BYTE_ARRAY || c.max_rep_level() != 0 {
        return Ok(None);
    }
    // Every row group's range first: nothing is read unless all of them settle it.
    let Some(ranges) = metadata
        .row_groups()
        .iter()
        .map(|g| dictionary_range(g.column(leaf)))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    if ranges.iter().map(|(s, e)| e - s).sum::<u64>() > MAX_DICTIONARY_BYTES {
        return Ok(None);
    }
    let mut values = StringBuilder::new();
    for (group, (start, end)) in metadata.row_groups().iter().zip(ranges) {
        let chunk = group.column(leaf);
        let bytes = store
            .get_range(path, start..end)
            .await
            .map_err(|e| e.to_string())?;
        let rows = group.num_rows().max(0) as usize;
        match read_dictionary(bytes, start, chunk, rows, &mut values) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => return Err(format!("a dictionary page of column {column}: {e}")),
        }
    }
    Ok(Some(values.finish()))
}

/// The byte range of `chunk`'s dictionary page, when its every data page is dictionary-encoded
/// as its footer's page encoding statistics say; `None` otherwise.
fn dictionary_range(chunk: &ColumnChunkMetaData) -> Option<(u64, u64)> {
    let all_dictionary = chunk.page_encoding_stats_mask().is_some_and(|mask| {
        mask.is_only(Encoding::RLE_DICTIONARY) || mask.is_only(Encoding::PLAIN_DICTIONARY)
    });
    let start = u64::try_from(chunk.dictionary_page_offset()?).ok()?;
    let end = u64::try_from(chunk.data_page_offset()).ok()?;
    // A footer that places the dictionary at 0 or after the data (old writers' bug) is not
    // trusted: the column's rows are read instead.
    (all_dictionary && start >= 4 && start < end).then_some((start, end))
}

/// Appends to `out` the plain-encoded byte arrays of the dictionary page at the start of
/// `bytes` (the file's bytes from offset `start`), as text; `false` when the page there is not
/// a dictionary page or a value is not UTF-8.
fn read_dictionary(
    bytes: Bytes,
    start: u64,
    chunk: &ColumnChunkMetaData,
    rows: usize,
    out: &mut StringBuilder,
) -> Result<bool, ParquetError> {
    let reader = Arc::new(Window { start, bytes });
    let mut pages = SerializedPageReader::new(reader, chunk, rows, None)?;
    let Some(Page::DictionaryPage {
        buf,
        num_values,
        encoding,
        ..
    }) = pages.get_next_page()?
    else {
        return Ok(false);
    };
    if !matches!(encoding, Encoding::PLAIN | Encoding::PLAIN_DICTIONARY) {
        return Ok(false);
    }
    let mut at = 0usize;
    for _ in 0..num_values {
        let len = buf
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| ParquetError::EOF("a dictionary value's length".into()))?;
        let value = buf
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| ParquetError::EOF("a dictionary value".into()))?;
        match std::str::from_utf8(value) {
            Ok(text) => out.append_value(text),
            Err(_) => return Ok(false),
        }
        at += 4 + len;
    }
    Ok(true)
}

/// The bytes of a file from offset `start`, read as the file at its own offsets.
struct Window {
    start: u64,
    bytes: Bytes,
}

impl Window {
    fn slice(&self, from: u64, len: usize) -> Result<Bytes, ParquetError> {
        let at = from
            .checked_sub(self.start)
            .and_then(|a| usize::try_from(a).ok())
            .filter(|a| a.saturating_add(len) <= self.bytes.len())
            .ok_or_else(|| ParquetError::EOF(format!("{len} bytes at {from}")))?;
        Ok(self.bytes.slice(at..at + len))
    }
}

impl Length for Window {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for Window {
    type T = Cursor<Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        let rest = (self.start + self.bytes.len() as u64).saturating_sub(start);
        Ok(Cursor::new(self.slice(start, rest as usize)?))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        self.slice(start, length)
    }
}

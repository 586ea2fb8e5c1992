//! Column readers the resident index's build and snapshot share: a column of a batch by
//! name as strings, integers or microseconds, a batch to and from an Arrow IPC stream, and
//! the error of a snapshot that is not whole.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::buffer::{Buffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMicrosecondType};
use datafusion::arrow::ipc::reader::StreamDecoder;
use datafusion::arrow::ipc::writer::StreamWriter;
use signalql_udfs::strings::StringColumn;

use crate::error::{CatalogError, Result};

pub(super) fn corrupt(what: &str) -> CatalogError {
    CatalogError::Invalid(format!("a resident index snapshot is corrupt: {what}"))
}

/// `array` as timestamps in microseconds (UTC), `None` when it holds no timestamps.
pub(super) fn micros(array: &dyn Array) -> Option<Vec<Option<i64>>> {
    let DataType::Timestamp(_, tz) = array.data_type() else {
        return None;
    };
    let as_micros = cast(
        array,
        &DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
    )
    .ok()?;
    let p = as_micros.as_primitive::<TimestampMicrosecondType>();
    Some(p.iter().collect())
}

/// `array` as whole integers in place: the values of a timestamp in microseconds or an Int64
/// with no NULL are the array's own buffer (no copy, a snapshot's mapping); another
/// timestamp unit or integer type is converted. `None` when it is neither, or holds a NULL.
pub(super) fn whole_numbers(array: &dyn Array) -> Option<ScalarBuffer<i64>> {
    if array.null_count() > 0 {
        return None;
    }
    match array.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some(
            array
                .as_primitive::<TimestampMicrosecondType>()
                .values()
                .clone(),
        ),
        DataType::Int64 => Some(array.as_primitive::<Int64Type>().values().clone()),
        _ => {
            let numbers = micros(array).or_else(|| integers(array))?;
            numbers
                .into_iter()
                .collect::<Option<Vec<i64>>>()
                .map(ScalarBuffer::from)
        }
    }
}

/// `array` as Int64, `None` when it is not an integer column.
pub(super) fn integers(array: &dyn Array) -> Option<Vec<Option<i64>>> {
    if !array.data_type().is_integer() {
        return None;
    }
    let as_i64 = cast(array, &DataType::Int64).ok()?;
    Some(as_i64.as_primitive::<Int64Type>().iter().collect())
}

/// A column of `batch` by name, as strings.
pub(super) fn strings(batch: &RecordBatch, name: &str) -> Option<StringColumn> {
    StringColumn::try_new(batch.column_by_name(name)?.as_ref()).ok()
}

/// A column of `batch` by name, through `read`.
pub(super) fn read<T>(
    batch: &RecordBatch,
    name: &str,
    read: impl Fn(&dyn Array) -> Option<T>,
) -> Option<T> {
    read(batch.column_by_name(name)?.as_ref())
}

/// The bytes `batch`'s arrays use: each buffer's slice, not the allocation it lies in. (A
/// snapshot's arrays are slices of one mapping, whose whole length Arrow's
/// `get_array_memory_size` would count once per buffer: 9 GB for a 1.25 GB file.)
pub(super) fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
}

/// `batch` as an Arrow IPC stream.
pub(super) fn ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

/// The one batch of an Arrow IPC stream held in `part` (`what`: for the error); its arrays
/// point into `part` where it is aligned.
pub(super) fn from_ipc(part: bytes::Bytes, what: &str) -> Result<RecordBatch> {
    let mut buffer = Buffer::from(part);
    let mut decoder = StreamDecoder::new();
    let batch = decoder
        .decode(&mut buffer)?
        .ok_or_else(|| corrupt(&format!("it has no {what}")))?;
    Ok(batch)
}

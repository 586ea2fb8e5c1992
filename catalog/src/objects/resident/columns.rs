//! Column readers the resident index's build and snapshot share: a column of a batch by
//! name as strings, integers or microseconds, and the error of a snapshot that is not whole.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMicrosecondType};
use signalql_udfs::strings::StringColumn;

use crate::error::CatalogError;

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

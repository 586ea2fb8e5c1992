//! Column readers the resident index's build and snapshot share: a column of a batch by
//! name as strings, integers or microseconds, a batch to and from an Arrow IPC stream, and
//! the error of a snapshot that is not whole.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayData, AsArray, RecordBatch};
use datafusion::arrow::buffer::{Buffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::ArrowNativeType;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMicrosecondType};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::FileDecoder;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::ipc::{Block, MessageHeader, MetadataVersion, root_as_message};
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
#[cfg(test)]
pub(super) fn ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    ipc_into(batch, &mut out)?;
    Ok(out)
}

/// `batch` as an Arrow IPC stream, written to `out`.
pub(super) fn ipc_into(batch: &RecordBatch, out: &mut impl std::io::Write) -> Result<()> {
    let mut w = StreamWriter::try_new(out, &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    Ok(())
}

/// The one batch of an Arrow IPC stream held in `part` (`what`: for the error); its arrays
/// point into `part` where it is aligned.
///
/// Every array is validated as Arrow's `validate_full` would, but the offsets of strings,
/// binaries and lists by [`offsets_valid`] rather than Arrow's per-offset iterator: at a
/// million objects that iterator was 540 M of a one-shot CONTEXT FOR's 1 800 M
/// instructions, most of it the offsets of nearly all-NULL string columns (benches/README.md,
/// "what a new process does before its first CONTEXT FOR").
pub(super) fn from_ipc(part: bytes::Bytes, what: &str) -> Result<RecordBatch> {
    let invalid = |why: String| corrupt(&format!("its {what} are not valid Arrow: {why}"));
    // The decoder builds arrays from the stream's buffers without checking them; a stream
    // this process did not write could make it panic (a buffer shorter than its length), so
    // a panic is this error. The part's checksum was checked before (a torn or damaged file
    // never gets here): only a file crafted with a matching checksum could.
    let decoded = std::panic::catch_unwind(move || unchecked_batch(Buffer::from(part)))
        .map_err(|_| invalid("a buffer does not fit its array".into()))?;
    let batch = decoded
        .map_err(|e| invalid(e.to_string()))?
        .ok_or_else(|| corrupt(&format!("it has no {what}")))?;
    for column in batch.columns() {
        valid(&column.to_data()).map_err(|e| invalid(e.to_string()))?;
    }
    // What the decoder skipped of the batch itself: column lengths, types, nullability.
    Ok(RecordBatch::try_new(
        batch.schema(),
        batch.columns().to_vec(),
    )?)
}

/// The first record batch of the Arrow IPC stream `stream`, its arrays not validated.
///
/// Arrow 59's `StreamDecoder` validates a record batch's arrays even when told not to (it
/// passes the flag to dictionaries only), so the stream's messages are walked here and read
/// by a `FileDecoder`, which takes it: a stream's messages are framed as a file's blocks.
fn unchecked_batch(stream: Buffer) -> std::result::Result<Option<RecordBatch>, ArrowError> {
    let bad = |why: &str| ArrowError::IpcError(format!("the stream is cut short: {why}"));
    let word = |at: usize| -> std::result::Result<i32, ArrowError> {
        let b = stream
            .get(at..at + 4)
            .ok_or_else(|| bad("a message's length"))?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut decoder: Option<FileDecoder> = None;
    let mut at = 0usize;
    loop {
        // A message: the continuation marker (-1) and the metadata's length, or (before
        // format 0.15) the length alone; a length of 0 ends the stream.
        let (prefix, meta) = match word(at)? {
            -1 => (8usize, word(at + 4)?),
            n => (4, n),
        };
        let meta = usize::try_from(meta).map_err(|_| bad("a negative length"))?;
        if meta == 0 {
            return Ok(None);
        }
        let header = stream
            .get(at + prefix..at + prefix + meta)
            .ok_or_else(|| bad("a message's metadata"))?;
        let message = root_as_message(header)
            .map_err(|e| ArrowError::IpcError(format!("a message is not readable: {e}")))?;
        let body = usize::try_from(message.bodyLength()).map_err(|_| bad("a negative body"))?;
        let len = (prefix + meta)
            .checked_add(body)
            .filter(|&l| at + l <= stream.len())
            .ok_or_else(|| bad("a message's body"))?;
        let block = Block::new(at as i64, (prefix + meta) as i32, body as i64);
        let buffer = stream.slice_with_length(at, len);
        match (message.header_type(), decoder.as_mut()) {
            (MessageHeader::Schema, None) => {
                let schema = message
                    .header_as_schema()
                    .ok_or_else(|| bad("the schema"))?;
                // Each message is read by its own version; `V1` turns off the decoder's check
                // that all are the schema's, which a stream decoder does not make either.
                let d = FileDecoder::new(Arc::new(fb_to_schema(schema)), MetadataVersion::V1);
                // SAFETY: see `from_ipc`: no array of this decoder is read before `valid`
                // has checked it as `ArrayData::validate_full` does.
                #[allow(unsafe_code)]
                let d = unsafe { d.with_skip_validation(true) };
                decoder = Some(d);
            }
            (MessageHeader::DictionaryBatch, Some(d)) => d.read_dictionary(&block, &buffer)?,
            (MessageHeader::RecordBatch, Some(d)) => return d.read_record_batch(&block, &buffer),
            (t, _) => {
                return Err(ArrowError::IpcError(format!(
                    "a message of type {t:?} where it does not belong"
                )));
            }
        }
        at += len;
    }
}

/// `ArrayData::validate_full` of `data`, with the offsets of strings, binaries and lists
/// checked by [`offsets_valid`].
fn valid(data: &ArrayData) -> std::result::Result<(), ArrowError> {
    data.validate()?;
    data.validate_nulls()?;
    let values = || data.buffers().get(1).map(|b| b.as_slice()).unwrap_or(&[]);
    let child = || data.child_data().first().map_or(0, ArrayData::len);
    let fast = match data.data_type() {
        DataType::Utf8 => offsets_valid::<i32>(data, values().len(), Some(values())),
        DataType::LargeUtf8 => offsets_valid::<i64>(data, values().len(), Some(values())),
        DataType::Binary => offsets_valid::<i32>(data, values().len(), None),
        DataType::LargeBinary => offsets_valid::<i64>(data, values().len(), None),
        DataType::List(_) | DataType::Map(_, _) => offsets_valid::<i32>(data, child(), None),
        DataType::LargeList(_) => offsets_valid::<i64>(data, child(), None),
        _ => false,
    };
    if !fast {
        // Not an offsets type, or one the quick check does not accept: Arrow decides (and
        // says what is wrong).
        data.validate_values()?;
    }
    data.child_data().iter().try_for_each(valid)
}

/// Whether `data`'s offsets are in order and at most `limit`, and, for `utf8` values, the
/// values are UTF-8 and each offset is at a character boundary: what Arrow's
/// `validate_values` checks of them, in passes without early exits (the order check is
/// vectorised; ASCII values need no boundary check). `false` also when the values are not
/// UTF-8 as a whole (Arrow accepts bytes outside every value's range: it is asked then).
fn offsets_valid<T: ArrowNativeType + Ord>(
    data: &ArrayData,
    limit: usize,
    utf8: Option<&[u8]>,
) -> bool {
    let buffer = &data.buffers()[0];
    if data.is_empty() && buffer.is_empty() {
        return true;
    }
    // `validate` checked the buffer's length and alignment.
    let Some(offsets) = buffer
        .typed_data::<T>()
        .get(data.offset()..data.offset() + data.len() + 1)
    else {
        return false;
    };
    let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
    // A negative last offset is above any limit as a `usize`; in order, every offset lies
    // between the first and the last.
    if first < T::usize_as(0) || last.as_usize() > limit {
        return false;
    }
    let ordered = offsets[..offsets.len() - 1]
        .iter()
        .zip(&offsets[1..])
        .fold(true, |ok, (a, b)| ok & (a <= b));
    match utf8 {
        _ if !ordered => false,
        None => true,
        // Every byte a character of its own.
        Some(values) if values.is_ascii() => true,
        Some(values) => {
            std::str::from_utf8(values).is_ok()
                && offsets.iter().all(|o| {
                    // Not a continuation byte (0b10xxxxxx), or the end.
                    values.get(o.as_usize()).is_none_or(|&b| (b as i8) >= -0x40)
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{
        ArrayRef, DictionaryArray, Int64Array, LargeStringArray, ListBuilder, StringArray,
        StringBuilder,
    };
    use datafusion::arrow::datatypes::UInt32Type;

    use datafusion::arrow::ipc::reader::StreamDecoder;

    use super::*;

    /// A batch with every kind of offsets `valid` checks itself: strings (multi-byte, NULL,
    /// empty), large strings, a list of strings, a dictionary, and a sliced column.
    fn batch() -> RecordBatch {
        let mut roles = ListBuilder::new(StringBuilder::new());
        for r in [&["body", "ßecret"][..], &[], &["title"]] {
            for v in r {
                roles.values().append_value(v);
            }
            roles.append(true);
        }
        let strings = StringArray::from(vec![Some("héllo"), None, Some("")]);
        let long = LargeStringArray::from(vec!["x", "日本語", "z"]);
        let words: DictionaryArray<UInt32Type> = vec!["a", "b", "a"].into_iter().collect();
        let sliced = StringArray::from(vec!["drop", "ça", "va", "bien"]).slice(1, 3);
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("s", Arc::new(strings)),
            ("l", Arc::new(long)),
            ("r", Arc::new(roles.finish())),
            ("d", Arc::new(words)),
            ("c", Arc::new(sliced)),
            (
                "n",
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// Arrow's own decoder, validating: the oracle.
    fn arrow_decodes(bytes: &[u8]) -> Option<RecordBatch> {
        let mut buffer = Buffer::from(bytes.to_vec());
        std::panic::catch_unwind(move || StreamDecoder::new().decode(&mut buffer))
            .ok()?
            .ok()?
    }

    #[test]
    fn a_stream_reads_back_whole() {
        let b = batch();
        let read = from_ipc(bytes::Bytes::from(ipc(&b).unwrap()), "columns").unwrap();
        assert_eq!(read, b);
    }

    /// Every single-byte change of a valid stream: what Arrow's validating decoder accepts,
    /// `from_ipc` accepts and reads the same; what `from_ipc` accepts passes Arrow's
    /// `validate_full` in every column; and nothing panics out of it. (`from_ipc` may accept
    /// a stream Arrow refuses only for a count outside the arrays that it does not use: a
    /// dictionary batch's row count.)
    #[test]
    fn a_damaged_stream_is_refused_or_read_valid() {
        let good = ipc(&batch()).unwrap();
        let (mut refused, mut accepted) = (0, 0);
        for at in 0..good.len() {
            for change in [0x01u8, 0x80, 0xff] {
                let mut bytes = good.clone();
                bytes[at] ^= change;
                let ours = from_ipc(bytes::Bytes::from(bytes.clone()), "columns");
                if let Some(theirs) = arrow_decodes(&bytes) {
                    assert_eq!(
                        ours.as_ref().ok(),
                        Some(&theirs),
                        "byte {at} ^ {change:#x}: {:?}",
                        ours.as_ref().err()
                    );
                }
                match ours {
                    Ok(b) => {
                        accepted += 1;
                        for c in b.columns() {
                            c.to_data().validate_full().unwrap();
                        }
                    }
                    Err(_) => refused += 1,
                }
            }
        }
        // Neither side of the comparison is empty.
        assert!(
            refused > 100 && accepted > 100,
            "{refused} refused, {accepted} accepted"
        );
    }

    #[test]
    fn offsets_out_of_order_or_inside_a_character_are_refused() {
        let with_offsets = |text: &[&str], o: Vec<i32>| {
            let data = StringArray::from(text.to_vec()).into_data();
            assert!(valid(&data).is_ok());
            let values = data.buffers()[1].clone();
            // Built unchecked to stand for a decoded stream; `valid` is what checks it.
            #[allow(unsafe_code)]
            unsafe {
                ArrayData::builder(DataType::Utf8)
                    .len(o.len() - 1)
                    .add_buffer(Buffer::from_vec(o))
                    .add_buffer(values)
                    .build_unchecked()
            }
        };
        // "h\u{e9}llo" is 6 bytes; 2 is inside "é".
        let multi = &["héllo", "x"][..];
        assert!(valid(&with_offsets(multi, vec![0, 6, 7])).is_ok());
        assert!(valid(&with_offsets(multi, vec![0, 2, 7])).is_err());
        assert!(valid(&with_offsets(multi, vec![0, 7, 6])).is_err());
        assert!(valid(&with_offsets(multi, vec![0, 6, 8])).is_err());
        assert!(valid(&with_offsets(multi, vec![-1, 6, 7])).is_err());
        // ASCII: no boundary to check, order and bounds still are.
        let ascii = &["hello", "x"][..];
        assert!(valid(&with_offsets(ascii, vec![0, 2, 6])).is_ok());
        assert!(valid(&with_offsets(ascii, vec![0, 5, 4])).is_err());
        assert!(valid(&with_offsets(ascii, vec![0, 5, 7])).is_err());
        assert!(valid(&with_offsets(ascii, vec![3, 2, 6])).is_err());
        assert!(valid(&with_offsets(ascii, vec![0, -2, 6])).is_err());
    }
}

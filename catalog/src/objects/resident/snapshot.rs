//! A generation's snapshot file (docs/index.md, "Snapshot files"): what `signalql index`
//! writes so that a new process opens the resident index instead of building it.
//!
//! The file is [`SNAPSHOT_MAGIC`], a little-endian u64 length, a JSON header, then its parts,
//! each starting at a multiple of [`ALIGN`] bytes from the file's start (the header gives
//! their places counted from the first one's): the per-object
//! columns and the edges (when held), each an Arrow IPC stream; the representations, an
//! Arrow IPC stream per block of objects ([`super::reps`]) after a directory of their
//! lengths and CRC-32s ([`reps_part`]); what the
//! engine asked to keep with the generation, by name (what it derived from it, where the
//! packed content lies in the representations' files); and the postings as they are in
//! memory. The header gives each part's place, length and CRC-32
//! (each bitmap's CRC-32 is in the postings' directory).
//!
//! A file is read by mapping it ([`map`]), and its parts are used where they lie: the Arrow
//! arrays point into the mapping (the IPC streams are written 64-byte aligned, so decoding
//! copies nothing; Arrow still validates them), a posting list is decoded when a query names
//! its term, and the edges are decoded on first use (a process that finds the engine's derived
//! part never does). So a one-shot command touches the pages of the parts it uses only.
//! Checksums are checked when a part is first used; a part that fails it is an error at
//! opening (columns, the representations' and the postings' directories) or is not used (a
//! block of representations, the edges: CONTEXT FOR then keeps the Parquet plan; a kept
//! part: the engine does without it).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt32Type};

use super::columns::{corrupt, from_ipc, ipc_into};
use super::context::{KeptPart, Lazy};
use super::postings::u32_at;
use super::reps::Reps;
use super::{
    FIND_COLUMNS, Generation, KIND, NO_KIND, Postings, SNAPSHOT_MAGIC, TOMBSTONED, u64_at,
};
use crate::error::{CatalogError, Result};

/// Where each part starts: a multiple of this many bytes from the file's start (the mapping
/// starts on a page), the alignment Arrow's IPC writer gives the buffers inside a stream.
const ALIGN: usize = 64;

/// The bytes of the file at `path`, mapped: only the pages used are read.
///
/// Decided (docs/index.md, "Snapshot files"): a snapshot file is written once under a name of
/// its own (the tables' key) and is only ever removed, never rewritten in place, so a mapping
/// of it stays whole while it is used (a removed file's pages stay mapped).
pub fn map(path: &Path) -> std::io::Result<bytes::Bytes> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the mapping is read-only and the file is never modified in place (above); a
    // process that truncates it by hand while it is mapped is outside what signalql writes.
    #[allow(unsafe_code)]
    let mapped = unsafe { memmap2::Mmap::map(&file)? };
    Ok(bytes::Bytes::from_owner(mapped))
}

/// The declared schema of `columns`: the columns at `views` (large strings or binaries, or
/// dictionaries of strings, in the file) as views; an error when one is none of these. The
/// arrays stay as they are in the file ([`Generation`]'s `columns`).
fn declared(columns: &RecordBatch, views: &[usize]) -> Result<SchemaRef> {
    let mut fields: Vec<Field> = columns
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for &i in views {
        let Some(f) = fields.get_mut(i) else {
            return Err(corrupt("its columns"));
        };
        let Some(t) = opened_as(f.data_type()) else {
            return Err(corrupt("its columns"));
        };
        *f = Field::new(f.name(), t, f.is_nullable());
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// A part's place in the file, as the header gives it.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Part {
    at: usize,
    len: usize,
    crc32: u32,
}

impl Part {
    /// The part's bytes, checked against the file's length (not its checksum).
    fn of(&self, bytes: &bytes::Bytes, what: &str) -> Result<bytes::Bytes> {
        let end = self
            .at
            .checked_add(self.len)
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| corrupt(&format!("its {what} are cut short")))?;
        Ok(bytes.slice(self.at..end))
    }

    /// The part's bytes, checked against the file's length and its checksum.
    fn checked(&self, bytes: &bytes::Bytes, what: &str) -> Result<bytes::Bytes> {
        let part = self.of(bytes, what)?;
        if super::crc::crc32(&part) != self.crc32 {
            return Err(corrupt(&format!("its {what}' checksum does not match")));
        }
        Ok(part)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    key: Vec<String>,
    horizon: Option<i64>,
    kinds: Vec<String>,
    terms: usize,
    columns: Part,
    reps: Part,
    /// Of the representations' directory ([`reps_part`]; each block has its own in it).
    reps_directory_crc32: u32,
    edges: Option<Part>,
    kept: BTreeMap<String, Part>,
    postings: Part,
    /// Of the postings' directory and terms (each bitmap has its own, checked when it is
    /// decoded).
    directory_crc32: u32,
    orphans: Vec<String>,
    /// The per-object columns declared as string or binary views, which the file keeps as
    /// large strings or binaries (Arrow validates a view array string by string, a large
    /// string array in one pass over its bytes), or as dictionaries when few values repeat
    /// ([`kept_column`]); opened, they stay so, cast to views only for the rows an answer
    /// takes.
    views: Vec<usize>,
}

/// The type a view column is kept as in the file, and back.
fn kept_as(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Utf8View => Some(DataType::LargeUtf8),
        DataType::BinaryView => Some(DataType::LargeBinary),
        _ => None,
    }
}

fn opened_as(t: &DataType) -> Option<DataType> {
    match t {
        DataType::LargeUtf8 => Some(DataType::Utf8View),
        DataType::LargeBinary => Some(DataType::BinaryView),
        DataType::Dictionary(_, v) if **v == DataType::Utf8 => Some(DataType::Utf8View),
        _ => None,
    }
}

/// The view column `a` (declared `declared`) as the file keeps it: a string column that
/// holds few distinct values (at most half as many as rows: a project, a state, a trust)
/// as a dictionary with the narrowest keys that hold them, else as [`kept_as`] says (a
/// million objects' six such columns took 87 of the part's 188 MB as large strings, 6 as
/// dictionaries with u8 keys, and the part is checksummed and validated whole at every
/// opening). A column opened from a file is kept as it is held.
fn kept_column(a: &ArrayRef, declared: &DataType) -> Result<ArrayRef> {
    if matches!(a.data_type(), DataType::Dictionary(..)) {
        return Ok(Arc::clone(a));
    }
    let Some(large) = kept_as(declared) else {
        return Ok(Arc::clone(a));
    };
    if declared == &DataType::Utf8View && !a.is_empty() {
        let words = |k: DataType| DataType::Dictionary(Box::new(k), Box::new(DataType::Utf8));
        let dictionary = cast(
            &cast(a.as_ref(), &DataType::Utf8)?,
            &words(DataType::UInt32),
        )?;
        let distinct = dictionary.as_any_dictionary().values().len();
        if distinct * 2 <= a.len() {
            let key = match distinct {
                0..=0xFF => DataType::UInt8,
                0x100..=0xFFFF => DataType::UInt16,
                _ => DataType::UInt32,
            };
            return Ok(cast(dictionary.as_ref(), &words(key))?);
        }
    }
    Ok(match a.data_type() == &large {
        true => Arc::clone(a),
        false => cast(a.as_ref(), &large)?,
    })
}

/// A part of a snapshot file: bytes held, or a batch written as an Arrow IPC stream when
/// the file is (encoding is deterministic: measured once, written once, compared).
enum Body<'a> {
    Bytes(&'a [u8]),
    Ipc(RecordBatch),
    /// The representations: their directory, then each block's batch as an Arrow IPC
    /// stream, each starting at a multiple of [`ALIGN`] from the part's start.
    Reps(Vec<u8>, Vec<&'a RecordBatch>),
}

impl Body<'_> {
    fn write_to(&self, w: &mut impl Write) -> Result<()> {
        let io = |e| CatalogError::io("the snapshot file", e);
        match self {
            Body::Bytes(b) => w.write_all(b).map_err(io),
            Body::Ipc(batch) => ipc_into(batch, w),
            Body::Reps(directory, blocks) => {
                let zeros = [0u8; ALIGN];
                w.write_all(directory).map_err(io)?;
                let mut at = directory.len();
                for batch in blocks {
                    w.write_all(&zeros[..at.next_multiple_of(ALIGN) - at])
                        .map_err(io)?;
                    at = at.next_multiple_of(ALIGN);
                    let mut block = Checked::new(&mut *w);
                    ipc_into(batch, &mut block)?;
                    at += block.len;
                }
                Ok(())
            }
        }
    }

    /// The part's length and CRC-32, nothing held.
    fn measure(&self) -> Result<(usize, u32)> {
        let mut sink = Checked::new(std::io::sink());
        self.write_to(&mut sink)?;
        Ok((sink.len, sink.crc.finalize()))
    }
}

/// A writer that counts and checksums what goes through it.
struct Checked<W> {
    inner: W,
    len: usize,
    crc: crc32fast::Hasher,
}

impl<W: Write> Checked<W> {
    fn new(inner: W) -> Self {
        Checked {
            inner,
            len: 0,
            crc: crc32fast::Hasher::new(),
        }
    }
}

impl<W: Write> Write for Checked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A generation's snapshot file, measured: its header and each part's place
/// ([`Generation::snapshot`]).
pub struct SnapshotFile<'a> {
    /// The magic, the header's length and the header.
    head: Vec<u8>,
    /// Where the first part starts.
    first: usize,
    end: usize,
    parts: Vec<(Body<'a>, Part)>,
}

impl SnapshotFile<'_> {
    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.end as u64
    }

    pub fn is_empty(&self) -> bool {
        self.end == 0
    }

    /// Writes the file to `out`, part by part; an error when a part's bytes are not the ones
    /// measured.
    pub fn write(&self, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
        out.write_all(&self.head)?;
        let mut at = self.head.len();
        let zeros = [0u8; ALIGN];
        for (body, part) in &self.parts {
            let start = self.first + part.at;
            out.write_all(&zeros[..start - at])?;
            let mut w = Checked::new(&mut *out);
            body.write_to(&mut w).map_err(std::io::Error::other)?;
            if w.len != part.len || w.crc.finalize() != part.crc32 {
                return Err(std::io::Error::other(
                    "a part of the snapshot file changed between measuring and writing it",
                ));
            }
            at = start + part.len;
        }
        Ok(())
    }
}

/// The directory of the representations' part: the number of blocks (u64), then per block
/// the length of its Arrow IPC stream (u64) and its CRC-32 (u32), little-endian; each stream
/// starts at the next multiple of [`ALIGN`] from the part's start after the directory or the
/// stream before it.
fn reps_directory(blocks: &[&RecordBatch]) -> Result<Vec<u8>> {
    let mut directory = Vec::with_capacity(8 + 12 * blocks.len());
    directory.extend_from_slice(&(blocks.len() as u64).to_le_bytes());
    for batch in blocks {
        let (len, crc32) = Body::Ipc((*batch).clone()).measure()?;
        directory.extend_from_slice(&(len as u64).to_le_bytes());
        directory.extend_from_slice(&crc32.to_le_bytes());
    }
    Ok(directory)
}

/// The representations of a generation of `objects` objects in `part` (as [`reps_directory`]
/// lays it out), each block's stream checked and decoded when first read; an error when the
/// directory does not match `directory_crc32` or its blocks do not fit the part.
fn reps_part(part: bytes::Bytes, directory_crc32: u32, objects: usize) -> Result<Reps> {
    let bad = || corrupt("its representations' directory");
    let count = (part.len() >= 8)
        .then(|| u64_at(&part, 0))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(bad)?;
    let end = count
        .checked_mul(12)
        .and_then(|n| n.checked_add(8))
        .filter(|&n| n <= part.len())
        .ok_or_else(bad)?;
    if super::crc::crc32(&part[..end]) != directory_crc32 {
        return Err(corrupt(
            "its representations' directory checksum does not match",
        ));
    }
    let mut at = end;
    let mut blocks = Vec::with_capacity(count);
    for entry in part[8..end].chunks_exact(12) {
        let len = usize::try_from(u64_at(entry, 0)).map_err(|_| bad())?;
        let crc32 = u32_at(entry, 8);
        let start = at.next_multiple_of(ALIGN);
        at = start
            .checked_add(len)
            .filter(|&n| n <= part.len())
            .ok_or_else(bad)?;
        blocks.push((part.slice(start..at), crc32));
    }
    Reps::mapped(blocks, objects)
}

impl Generation {
    /// The generation as a snapshot file's bytes, for the tables `key` names (the engine's
    /// fingerprints of them), with `kept`: what the engine keeps with it, by name
    /// ([`Generation::kept`] gives each back).
    pub fn to_snapshot(&self, key: &[String], kept: &[(&str, &[u8])]) -> Result<Vec<u8>> {
        let file = self.snapshot(key, kept)?;
        let mut out = Vec::with_capacity(file.len() as usize);
        file.write(&mut out)
            .map_err(|e| CatalogError::Invalid(e.to_string()))?;
        Ok(out)
    }

    /// The generation's snapshot file, measured ([`to_snapshot`](Self::to_snapshot)) and
    /// written by [`SnapshotFile::write`] part by part: the file's bytes are never held
    /// whole beside the generation (at ten million objects they would be as large as it).
    pub fn snapshot<'a>(
        &'a self,
        key: &[String],
        kept: &[(&str, &'a [u8])],
    ) -> Result<SnapshotFile<'a>> {
        let mut fields = self.column_fields();
        fields.push(Field::new(TOMBSTONED, DataType::Int64, false));
        fields.push(Field::new(KIND, DataType::UInt32, false));
        let mut arrays = self.columns.columns().to_vec();
        let mut views = Vec::new();
        for (i, (f, a)) in fields.iter_mut().zip(arrays.iter_mut()).enumerate() {
            if kept_as(f.data_type()).is_some() {
                // Held as views (built here) or already as kept (opened from a file).
                *a = kept_column(a, f.data_type())?;
                *f = Field::new(f.name(), a.data_type().clone(), f.is_nullable());
                views.push(i);
            }
        }
        arrays.push(Arc::new(Int64Array::new(self.tombstoned.clone(), None)));
        arrays.push(Arc::new(UInt32Array::new(self.kind.clone(), None)));
        let columns = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        let damaged = || corrupt("its representations' checksum does not match");
        let blocks: Vec<&RecordBatch> = self
            .reps()
            .ok_or_else(damaged)?
            .batches()
            .collect::<Option<_>>()
            .ok_or_else(damaged)?;
        let directory = reps_directory(&blocks)?;
        let reps_directory_crc32 = crc32fast::hash(&directory);
        let whole = self.postings.whole()?;
        let postings = &whole.bytes[..];
        let mut bodies: Vec<Option<Body<'a>>> = vec![
            Some(Body::Ipc(columns)),
            Some(Body::Reps(directory, blocks)),
            self.edges().map(|e| Body::Ipc(e.batch().clone())),
        ];
        bodies.extend(kept.iter().map(|(_, b)| Some(Body::Bytes(b))));
        bodies.push(Some(Body::Bytes(postings)));
        // Places are counted from the first part's start, the first multiple of ALIGN after
        // the header, so the header does not depend on its own length.
        let mut at = 0usize;
        let mut places: Vec<Option<Part>> = Vec::with_capacity(bodies.len());
        for body in &bodies {
            places.push(match body {
                None => None,
                Some(body) => {
                    at = at.next_multiple_of(ALIGN);
                    let (len, crc32) = body.measure()?;
                    let part = Part { at, len, crc32 };
                    at += len;
                    Some(part)
                }
            });
        }
        let (c, r, e, p) = (places[0], places[1], places[2], places[places.len() - 1]);
        let none = Part {
            at: 0,
            len: 0,
            crc32: 0,
        };
        let header = serde_json::to_string(&Header {
            key: key.to_vec(),
            horizon: self.horizon,
            kinds: self.kinds.clone(),
            terms: whole.count,
            columns: c.unwrap_or(none),
            reps: r.unwrap_or(none),
            reps_directory_crc32,
            edges: e,
            kept: kept
                .iter()
                .zip(&places[3..])
                .filter_map(|((name, _), p)| Some((name.to_string(), (*p)?)))
                .collect(),
            postings: p.unwrap_or(none),
            directory_crc32: crc32fast::hash(&postings[..whole.blob]),
            orphans: self.orphans.clone(),
            views,
        })
        .map_err(|e| CatalogError::Invalid(e.to_string()))?;
        let mut head = Vec::with_capacity(SNAPSHOT_MAGIC.len() + 8 + header.len());
        head.extend_from_slice(SNAPSHOT_MAGIC);
        head.extend_from_slice(&(header.len() as u64).to_le_bytes());
        head.extend_from_slice(header.as_bytes());
        let first = head.len().next_multiple_of(ALIGN);
        Ok(SnapshotFile {
            head,
            first,
            end: first + at,
            parts: bodies
                .into_iter()
                .zip(places)
                .filter_map(|(b, p)| Some((b?, p?)))
                .collect(),
        })
    }

    /// A generation opened from a snapshot file's bytes (as [`map`] gives them), with the key
    /// it was written for; an error when the bytes are not a whole snapshot.
    pub fn from_snapshot(bytes: bytes::Bytes) -> Result<(Vec<String>, Generation)> {
        let magic = SNAPSHOT_MAGIC.len();
        if bytes.len() < magic + 8 || &bytes[..magic] != SNAPSHOT_MAGIC {
            return Err(corrupt("it does not start as one"));
        }
        let header_len = u64_at(&bytes, magic) as usize;
        let header_end = (magic + 8)
            .checked_add(header_len)
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| corrupt("its header is cut short"))?;
        let h: Header = serde_json::from_slice(&bytes[magic + 8..header_end])
            .map_err(|e| corrupt(&format!("its header: {e}")))?;
        // The parts' places count from the first multiple of ALIGN after the header.
        let bytes = bytes.slice(header_end.next_multiple_of(ALIGN).min(bytes.len())..);
        let batch = from_ipc(h.columns.checked(&bytes, "columns")?, "columns")?;
        let n = batch.num_columns();
        if n != FIND_COLUMNS.len() + 2 {
            return Err(corrupt("its columns"));
        }
        let tombstoned = batch.column(n - 2).as_primitive_opt::<Int64Type>();
        let kind = batch.column(n - 1).as_primitive_opt::<UInt32Type>();
        let (Some(tombstoned), Some(kind)) = (tombstoned, kind) else {
            return Err(corrupt("its columns"));
        };
        if kind
            .values()
            .iter()
            .any(|&k| k != NO_KIND && k as usize >= h.kinds.len())
        {
            return Err(corrupt("a kind"));
        }
        let (tombstoned, kind) = (tombstoned.values().clone(), kind.values().clone());
        let columns = batch.project(&(0..n - 2).collect::<Vec<_>>())?;
        let schema = declared(&columns, &h.views)?;
        let objects = tombstoned.len();
        let postings = Postings::open(h.postings.of(&bytes, "postings")?, h.terms)?;
        if super::crc::crc32(&postings.bytes[..postings.blob]) != h.directory_crc32 {
            return Err(corrupt("its terms' checksum does not match"));
        }
        if !h.orphans.is_sorted() {
            return Err(corrupt("its orphans are not sorted"));
        }
        let edges = match &h.edges {
            Some(p) => Lazy::of(p.of(&bytes, "edges")?, p.crc32, objects),
            None => Lazy::held(None),
        };
        let reps = reps_part(
            h.reps.of(&bytes, "representations")?,
            h.reps_directory_crc32,
            objects,
        )?;
        let reps = Lazy::held(Some(reps));
        // Kept parts are checked when asked for (one that does not match is not given).
        let kept = h
            .kept
            .iter()
            .map(|(name, p)| Ok((name.clone(), KeptPart::of(p.of(&bytes, name)?, p.crc32))))
            .collect::<Result<_>>()?;
        Ok((
            h.key,
            Generation {
                schema,
                columns,
                tombstoned,
                kind,
                kinds: h.kinds,
                postings: Arc::new(super::postings::Terms::Own(postings)),
                horizon: h.horizon,
                reps,
                edges,
                kept,
                orphans: h.orphans,
                derived: OnceLock::new(),
            },
        ))
    }

    /// What the engine kept with the generation in its snapshot file under `name` (see
    /// [`to_snapshot`](Self::to_snapshot)); `None` for a generation built in this process, or
    /// when its part does not match its checksum.
    pub fn kept(&self, name: &str) -> Option<&bytes::Bytes> {
        self.kept.get(name)?.checked()
    }

    /// Whether every part of the generation is whole: its representations and edges decode
    /// and every kept part matches its checksum (the columns and the postings' directory are
    /// checked at opening; each bitmap when decoded). A snapshot file under its name that is
    /// not whole is written again.
    pub fn whole(&self) -> bool {
        self.reps.get().is_some_and(Reps::whole)
            && self.edges.whole()
            && self.kept.keys().all(|name| self.kept(name).is_some())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringViewArray;

    use super::*;

    /// A view column of few distinct values is kept as a dictionary with the narrowest keys,
    /// one of many as large strings, another type as it is; each opens back as views with
    /// the same values and NULLs.
    #[test]
    fn view_columns_are_kept_as_dictionaries_when_few_values_repeat() {
        let view = |values: Vec<Option<String>>| -> ArrayRef {
            Arc::new(StringViewArray::from_iter(values))
        };
        let few = view(
            (0..1000)
                .map(|i| (i % 7 != 3).then(|| format!("p{}", i % 5)))
                .collect(),
        );
        let wide = view((0..1000).map(|i| Some(format!("p{}", i % 400))).collect());
        let many = view((0..1000).map(|i| Some(format!("obj-{i}"))).collect());
        let words = |k: DataType| DataType::Dictionary(Box::new(k), Box::new(DataType::Utf8));
        for (a, kept) in [
            (&few, words(DataType::UInt8)),
            (&wide, words(DataType::UInt16)),
            (&many, DataType::LargeUtf8),
        ] {
            let k = kept_column(a, &DataType::Utf8View).unwrap();
            assert_eq!(k.data_type(), &kept);
            assert_eq!(opened_as(k.data_type()), Some(DataType::Utf8View));
            assert_eq!(&cast(k.as_ref(), &DataType::Utf8View).unwrap(), a);
            // Kept again as it is held.
            assert_eq!(
                kept_column(&k, &DataType::Utf8View).unwrap().data_type(),
                &kept
            );
        }
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 1, 1]));
        assert_eq!(
            kept_column(&ints, &DataType::Int64).unwrap().data_type(),
            &DataType::Int64
        );
    }
}

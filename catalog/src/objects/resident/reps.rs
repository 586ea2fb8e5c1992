//! The representations of a generation's objects: per representation of each object's
//! selected revision (metadata only: what the packer decides with, never their content), its
//! object's ordinal (sorted), name (one per name and object: a representation written twice is
//! the same), media type, content reference and hash, token count as chars-div-4-v1 gives it
//! (the stored `tokens`, else ⌈characters / 4⌉ of readable inline content, else none), whether
//! that count was stored, its effective roles (the revision's and its own), and flags: secret,
//! packable (packable media with a token count) and a bit per role of [`ROLES`].
//!
//! Held in blocks of [`BLOCK`] objects by ordinal. A snapshot file keeps each block as an
//! Arrow IPC stream with its own CRC-32 (docs/index.md, "Snapshot files"), checked and decoded
//! when an answer first reads one of the block's objects: CONTEXT FOR reads the
//! representations of its candidates only (at most MAX OBJECTS objects), so neither a new
//! process nor a server's first statement on a new snapshot checks the whole part (149 MB at a
//! million objects, 12 ms of CRC, validation and offsets) before it answers.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, FixedSizeBinaryArray, Int64Array, ListArray,
    ListBuilder, RecordBatch, StringArray, StringBuilder, StringDictionaryBuilder, UInt16Array,
    UInt32Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt16Type, UInt32Type};

use super::columns::{batch_bytes, corrupt, from_ipc};
use super::context::Decoded;
use crate::error::Result;
use crate::objects::ROLES;
use crate::objects::index::packable;

/// Objects per block of representations: at a million objects, 977 blocks of about 150 KB;
/// a CONTEXT FOR's 50 candidates touch at most 50 of them.
pub(super) const BLOCK: usize = 1024;

/// A representation's flags: secret (its effective roles include `secret`).
pub const SECRET: u16 = 1;
/// Packable media with a token count.
pub const PACKABLE: u16 = 2;

/// The flag bit of an effective role of [`ROLES`] (`None` for another name).
pub fn role_bit(role: &str) -> Option<u16> {
    ROLES.iter().position(|r| *r == role).map(|i| 4 << i)
}

/// A representation as the build collects it.
pub(super) struct RepRow {
    pub o: u32,
    pub name: Arc<str>,
    pub media: Arc<str>,
    pub content_ref: Option<String>,
    pub content_hash: ContentHash,
    pub tokens: Option<i64>,
    pub stored: bool,
    /// Its effective roles (shared with its revision's when it has none of its own).
    pub roles: Arc<[Arc<str>]>,
}

/// A representation's content hash as a build holds it: a lower-case hex SHA-256 as its 32
/// bytes ([`sha256_bytes`]), any other text as written.
pub(super) enum ContentHash {
    Sha256([u8; 32]),
    Text(Box<str>),
}

impl ContentHash {
    pub(super) fn of(hash: &str) -> ContentHash {
        match sha256_bytes(hash) {
            Some(bytes) => ContentHash::Sha256(bytes),
            None => ContentHash::Text(hash.into()),
        }
    }

    fn sha256(&self) -> Option<[u8; 32]> {
        match self {
            ContentHash::Sha256(b) => Some(*b),
            ContentHash::Text(_) => None,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            ContentHash::Sha256(_) => None,
            ContentHash::Text(t) => Some(t),
        }
    }
}

/// A dictionary of strings keyed by u32: a representation's name and media type take few
/// values (u32 keys, so that no number of distinct names can fail a build).
fn words() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

/// The bytes of a lower-case hex SHA-256 (what ingest and `gen` write), kept as 32 bytes
/// instead of 64 characters; `None` for any other text, which is kept as written.
fn sha256_bytes(hash: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    let lower = hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (hash.len() == 64 && lower && hex::decode_to_slice(hash, &mut out).is_ok()).then_some(out)
}

/// A column of `values` by u32 keys ([`words`]).
fn dictionary<'a>(values: impl Iterator<Item = &'a str>) -> Result<ArrayRef> {
    let mut b = StringDictionaryBuilder::<UInt32Type>::new();
    for v in values {
        b.append(v)?;
    }
    Ok(Arc::new(b.finish()))
}

fn reps_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("ordinal", DataType::UInt32, false),
        Field::new("name", words(), false),
        Field::new("media_type", words(), false),
        Field::new("content_ref", DataType::Utf8, true),
        // A SHA-256 as its bytes, else the hash as text (exactly one of the two is set).
        Field::new("content_sha256", DataType::FixedSizeBinary(32), true),
        Field::new("content_hash", DataType::Utf8, true),
        Field::new("tokens", DataType::Int64, true),
        Field::new("stored", DataType::Boolean, false),
        Field::new(
            "roles",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            false,
        ),
        // [`RepsBlock::flags`], decided from the roles, media type and token count when built
        // (format 8): an open reads them in place instead of deciding them per row again.
        Field::new("flags", DataType::UInt16, false),
    ]))
}

/// The flags of a representation (see [`SECRET`], [`PACKABLE`], [`role_bit`]).
fn flags_of<'a>(roles: impl Iterator<Item = &'a str>, media: &str, tokens: Option<i64>) -> u16 {
    let mut f = roles.fold(0u16, |f, role| f | role_bit(role).unwrap_or(0));
    if f & role_bit("secret").unwrap_or(0) != 0 {
        f |= SECRET;
    }
    if packable(media) && tokens.is_some() {
        f |= PACKABLE;
    }
    f
}

/// The representations of the selected revisions (see the module's documentation).
#[derive(Debug)]
pub struct Reps {
    objects: usize,
    blocks: Vec<Block>,
    /// The memory of the batch the blocks were made from (in memory: each block's batch is a
    /// slice of it, and a slice of a list column measures its whole child column).
    held: usize,
}

/// A block of [`Reps`]: decoded, or its Arrow IPC stream and CRC-32 in a snapshot file,
/// decoded when first read.
#[derive(Debug)]
struct Block {
    part: Option<(bytes::Bytes, u32)>,
    value: OnceLock<Option<Box<RepsBlock>>>,
}

impl Reps {
    /// The representations of `rows`, sorted by ordinal then name, the first of a name kept.
    pub(super) fn build(mut rows: Vec<RepRow>, objects: usize) -> Result<Reps> {
        rows.sort_by(|a, b| a.o.cmp(&b.o).then_with(|| a.name.cmp(&b.name)));
        rows.dedup_by(|b, a| a.o == b.o && a.name == b.name);
        let mut roles = ListBuilder::new(StringBuilder::new());
        for r in &rows {
            for role in r.roles.iter() {
                roles.values().append_value(role);
            }
            roles.append(true);
        }
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.o))),
            dictionary(rows.iter().map(|r| &*r.name))?,
            dictionary(rows.iter().map(|r| &*r.media))?,
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.content_ref.as_deref()),
            )),
            Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                rows.iter().map(|r| r.content_hash.sha256()),
                32,
            )?),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.content_hash.text()),
            )),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.tokens))),
            Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.stored)))),
            Arc::new(roles.finish()),
            Arc::new(UInt16Array::from_iter_values(rows.iter().map(|r| {
                flags_of(r.roles.iter().map(|x| &**x), &r.media, r.tokens)
            }))),
        ];
        Reps::open(RecordBatch::try_new(reps_schema(), arrays)?, objects)
    }

    /// The representations in `batch` (sorted by ordinal, as [`build`](Self::build) makes
    /// them) of a generation of `objects` objects, in blocks; an error when they are not.
    pub(super) fn open(batch: RecordBatch, objects: usize) -> Result<Reps> {
        let ordinals = batch
            .column(0)
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| corrupt("its representations' columns"))?
            .values()
            .clone();
        let at = |o: usize| ordinals.partition_point(|&x| (x as usize) < o);
        let mut blocks = Vec::with_capacity(objects.div_ceil(BLOCK));
        let mut covered = 0;
        for b in 0..objects.div_ceil(BLOCK) {
            let objects = b * BLOCK..((b + 1) * BLOCK).min(objects);
            let rows = at(objects.start)..at(objects.end);
            covered += rows.len();
            let block = RepsBlock::open(batch.slice(rows.start, rows.len()), objects)?;
            blocks.push(Block {
                part: None,
                value: OnceLock::from(Some(Box::new(block))),
            });
        }
        // Rows past the last object (or out of order across blocks) are in no block.
        if covered != batch.num_rows() {
            return Err(corrupt("a representation's ordinal"));
        }
        Ok(Reps {
            objects,
            blocks,
            held: batch_bytes(&batch),
        })
    }

    /// The representations of a generation of `objects` objects as a snapshot file keeps
    /// them: per block, its Arrow IPC stream and CRC-32, each checked and decoded when first
    /// read; an error when there are not as many blocks as the objects fill.
    pub(super) fn mapped(blocks: Vec<(bytes::Bytes, u32)>, objects: usize) -> Result<Reps> {
        if blocks.len() != objects.div_ceil(BLOCK) {
            return Err(corrupt("its representations' directory"));
        }
        let blocks = blocks
            .into_iter()
            .map(|part| Block {
                part: Some(part),
                value: OnceLock::new(),
            })
            .collect();
        Ok(Reps {
            objects,
            blocks,
            held: 0,
        })
    }

    /// The block `b`, decoded now if it was not; `None` when its bytes do not match their
    /// checksum or are not the block's representations.
    fn block(&self, b: usize) -> Option<&RepsBlock> {
        let block = self.blocks.get(b)?;
        block
            .value
            .get_or_init(|| {
                let (part, crc32) = block.part.as_ref()?;
                if super::crc::crc32(part) != *crc32 {
                    return None;
                }
                let batch = from_ipc(part.clone(), "representations").ok()?;
                let objects = b * BLOCK..((b + 1) * BLOCK).min(self.objects);
                RepsBlock::open(batch, objects).ok().map(Box::new)
            })
            .as_deref()
    }

    /// The representations of the object `o`: its block and their rows in it; `None` when
    /// there is no such object, or its block is damaged (a snapshot file's: CONTEXT FOR then
    /// keeps the Parquet plan).
    pub fn of(&self, o: u32) -> Option<(&RepsBlock, Range<usize>)> {
        let o = o as usize;
        if o >= self.objects {
            return None;
        }
        let block = self.block(o / BLOCK)?;
        let i = o % BLOCK;
        Some((block, block.start[i] as usize..block.start[i + 1] as usize))
    }

    /// Each block's columns, as a snapshot file keeps them (`None`: a block that does not
    /// decode), decoding those not decoded yet.
    pub(super) fn batches(&self) -> impl Iterator<Item = Option<&RecordBatch>> {
        (0..self.blocks.len()).map(|b| self.block(b).map(|b| &b.batch))
    }

    /// Whether every block decodes.
    pub(super) fn whole(&self) -> bool {
        self.batches().all(|b| b.is_some())
    }

    /// The memory of the blocks decoded (of those made in memory, the batch they share).
    pub(super) fn memory_bytes(&self) -> usize {
        let blocks = self.blocks.iter().filter_map(|b| {
            let block = b.value.get()?.as_deref()?;
            Some(match b.part {
                Some(_) => block.memory_bytes(),
                None => block.start.len() * 4,
            })
        });
        self.held + self.blocks.len() * std::mem::size_of::<Block>() + blocks.sum::<usize>()
    }
}

impl Decoded for Reps {
    fn open(batch: RecordBatch, objects: usize) -> Result<Self> {
        Reps::open(batch, objects)
    }
    fn memory_bytes(&self) -> usize {
        Reps::memory_bytes(self)
    }
    const WHAT: &'static str = "representations";
}

/// The representations of one block's objects ([`BLOCK`]), read by row (a row of
/// [`Reps::of`]'s range).
#[derive(Debug)]
pub struct RepsBlock {
    batch: RecordBatch,
    /// Per object of the block, where its representations start (one more entry than
    /// objects).
    start: Vec<u32>,
    /// The `flags` column, in place.
    flags: ScalarBuffer<u16>,
    names: Dictionary,
    media: Dictionary,
    refs: StringArray,
    sha256: FixedSizeBinaryArray,
    hashes: StringArray,
    tokens: Int64Array,
    stored: BooleanArray,
    roles: ListArray,
    /// [`memory_bytes`](Self::memory_bytes), measured when opened: each statement measures
    /// every block decoded (`Reps::memory_bytes`, asked of each generation held), and
    /// measuring each block's columns again (an `ArrayData` made per column) was 2–3 % of a
    /// warm CONTEXT FOR's samples at a million objects once every block was decoded.
    bytes: usize,
}

impl RepsBlock {
    /// The representations in `batch` of the objects `objects` (ordinals, as the first
    /// column gives them); an error when they are not.
    fn open(batch: RecordBatch, objects: Range<usize>) -> Result<RepsBlock> {
        if batch.schema().fields() != reps_schema().fields() {
            return Err(corrupt("its representations' columns"));
        }
        let bad = || corrupt("its representations' columns");
        let ordinals = batch
            .column(0)
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(bad)?;
        let s = |i: usize| {
            batch
                .column(i)
                .as_string_opt::<i32>()
                .cloned()
                .ok_or_else(bad)
        };
        let w = |i: usize| Dictionary::of(batch.column(i)).ok_or_else(bad);
        let (names, media, refs, hashes) = (w(1)?, w(2)?, s(3)?, s(5)?);
        let sha256 = batch
            .column(4)
            .as_fixed_size_binary_opt()
            .cloned()
            .ok_or_else(bad)?;
        // Exactly one form of each hash: the two validity bitmaps differ in every row
        // (compared a word at a time, not a row at a time: this runs at every open).
        let valid = |a: &dyn Array| match a.nulls() {
            Some(n) => n.inner().clone(),
            None => BooleanBuffer::new_set(a.len()),
        };
        if (&valid(&sha256) ^ &valid(&hashes)).count_set_bits() != batch.num_rows() {
            return Err(bad());
        }
        let tokens = batch
            .column(6)
            .as_primitive_opt::<datafusion::arrow::datatypes::Int64Type>()
            .cloned()
            .ok_or_else(bad)?;
        let stored = batch.column(7).as_boolean_opt().cloned().ok_or_else(bad)?;
        let roles = batch
            .column(8)
            .as_list_opt::<i32>()
            .cloned()
            .ok_or_else(bad)?;
        roles.values().as_string_opt::<i32>().ok_or_else(bad)?;
        let flags = batch
            .column(9)
            .as_primitive_opt::<UInt16Type>()
            .ok_or_else(bad)?
            .values()
            .clone();
        let mut start = vec![0u32; objects.len() + 1];
        let mut last = objects.start;
        for &o in ordinals.values() {
            let o = o as usize;
            if o < last || o >= objects.end {
                return Err(corrupt("a representation's ordinal"));
            }
            last = o;
            start[o - objects.start + 1] += 1;
        }
        for i in 0..objects.len() {
            start[i + 1] += start[i];
        }
        Ok(RepsBlock {
            bytes: batch_bytes(&batch) + start.len() * 4,
            batch,
            start,
            flags,
            names,
            media,
            refs,
            sha256,
            hashes,
            tokens,
            stored,
            roles,
        })
    }

    pub fn flags(&self, r: usize) -> u16 {
        self.flags[r]
    }

    pub fn name(&self, r: usize) -> &str {
        self.names.value(r)
    }

    pub fn media_type(&self, r: usize) -> &str {
        self.media.value(r)
    }

    pub fn content_ref(&self, r: usize) -> Option<&str> {
        self.refs.is_valid(r).then(|| self.refs.value(r))
    }

    pub fn content_hash(&self, r: usize) -> Cow<'_, str> {
        if self.sha256.is_valid(r) {
            Cow::Owned(hex::encode(self.sha256.value(r)))
        } else {
            Cow::Borrowed(self.hashes.value(r))
        }
    }

    /// The chars-div-4-v1 token count (`None`: none, so not packed).
    pub fn tokens(&self, r: usize) -> Option<i64> {
        self.tokens.is_valid(r).then(|| self.tokens.value(r))
    }

    /// Whether the count is the stored `tokens`.
    pub fn stored(&self, r: usize) -> bool {
        self.stored.value(r)
    }

    /// The effective roles, each through `f`.
    pub fn roles<T>(&self, r: usize, mut f: impl FnMut(&str) -> T) -> Vec<T> {
        let list = self.roles.value(r);
        let values = list.as_string::<i32>();
        values.iter().flatten().map(&mut f).collect()
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.bytes
    }
}

/// A dictionary column of strings by u32 keys, read in place and checked once when opened
/// (`StringColumn` would copy each key into a usize: 8 bytes per representation).
#[derive(Debug)]
struct Dictionary {
    keys: UInt32Array,
    values: StringArray,
}

impl Dictionary {
    /// `None` when `column` is not one, or a key points past its values.
    fn of(column: &ArrayRef) -> Option<Dictionary> {
        let d = column.as_dictionary_opt::<UInt32Type>()?;
        let values = d.values().as_string_opt::<i32>()?.clone();
        let n = values.len();
        let whole =
            d.keys().null_count() == 0 && d.keys().values().iter().all(|&k| (k as usize) < n);
        whole.then(|| Dictionary {
            keys: d.keys().clone(),
            values,
        })
    }

    fn value(&self, r: usize) -> &str {
        self.values.value(self.keys.value(r) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::super::columns::ipc;
    use super::*;

    fn row(o: u32, name: &str, hash: &str) -> RepRow {
        RepRow {
            o,
            name: Arc::from(name),
            media: Arc::from("text/markdown"),
            content_ref: None,
            content_hash: ContentHash::of(hash),
            tokens: Some(3),
            stored: false,
            roles: Arc::from([Arc::from("secret")]),
        }
    }

    /// The blocks of `reps` as a snapshot file keeps them (each an IPC stream and its CRC-32).
    fn streams(reps: &Reps) -> Vec<(bytes::Bytes, u32)> {
        reps.batches()
            .map(|b| {
                let bytes = ipc(b.unwrap()).unwrap();
                let crc = crc32fast::hash(&bytes);
                (bytes.into(), crc)
            })
            .collect()
    }

    /// Each object's (name, content hash) pairs, read through `of`.
    fn read(reps: &Reps, objects: u32) -> Vec<Vec<(String, String)>> {
        (0..objects)
            .map(|o| {
                let (b, rows) = reps.of(o).unwrap();
                rows.map(|r| (b.name(r).to_string(), b.content_hash(r).into_owned()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn representations_keep_their_hashes_and_names_through_a_snapshot() {
        let sha = "0123456789abcdef".repeat(4);
        let rows = vec![
            row(1, "text", &sha),
            row(0, "summary", "not-a-sha"),
            row(0, "text", &sha.to_uppercase()),
        ];
        let built = Reps::build(rows, 2).unwrap();
        let reps = Reps::mapped(streams(&built), 2).unwrap();
        // Sorted by ordinal then name; a hash that is not lower-case hex is kept as written.
        assert_eq!(
            read(&reps, 2),
            vec![
                vec![
                    ("summary".to_string(), "not-a-sha".to_string()),
                    ("text".to_string(), sha.to_uppercase()),
                ],
                vec![("text".to_string(), sha.clone())],
            ]
        );
        // Rows of the block: both objects are in the first one.
        let (b, rows) = reps.of(1).unwrap();
        assert_eq!(rows, 2..3);
        assert_eq!(b.media_type(2), "text/markdown");
        assert_ne!(b.flags(2) & SECRET, 0);
        assert!(reps.of(2).is_none());
    }

    /// Objects over several blocks (some with none) read the same from the built
    /// representations and from their blocks as a file keeps them; a damaged block answers
    /// `None` for its own objects only, and is not whole.
    #[test]
    fn blocks_answer_for_their_own_objects() {
        let objects = 2 * BLOCK + 7;
        let rows: Vec<RepRow> = (0..objects as u32)
            .filter(|o| o % 3 != 1)
            .flat_map(|o| {
                let names: &[&str] = if o % 5 == 0 {
                    &["text", "summary"]
                } else {
                    &["text"]
                };
                names
                    .iter()
                    .map(move |n| row(o, n, &format!("h{o}{n}")))
                    .collect::<Vec<_>>()
            })
            .collect();
        let expected: Vec<Vec<(String, String)>> = (0..objects as u32)
            .map(|o| match (o % 3 != 1, o % 5 == 0) {
                (false, _) => vec![],
                (true, true) => vec![
                    ("summary".to_string(), format!("h{o}summary")),
                    ("text".to_string(), format!("h{o}text")),
                ],
                (true, false) => vec![("text".to_string(), format!("h{o}text"))],
            })
            .collect();
        let built = Reps::build(rows, objects).unwrap();
        assert_eq!(read(&built, objects as u32), expected);
        // The blocks' memory is the batch they share, counted once.
        let batch_memory: usize = built.batches().map(|b| batch_bytes(b.unwrap())).sum();
        assert!(
            built.memory_bytes() < batch_memory,
            "{}",
            built.memory_bytes()
        );
        let mut parts = streams(&built);
        assert_eq!(parts.len(), 3);
        let reps = Reps::mapped(parts.clone(), objects).unwrap();
        assert!(reps.whole());
        assert_eq!(read(&reps, objects as u32), expected);
        // The second block's checksum no longer matches.
        parts[1].1 ^= 1;
        let damaged = Reps::mapped(parts.clone(), objects).unwrap();
        assert!(damaged.of(0).is_some() && damaged.of((2 * BLOCK) as u32).is_some());
        assert!(damaged.of(BLOCK as u32).is_none());
        assert!(!damaged.whole());
        // Not as many blocks as the objects fill.
        assert!(Reps::mapped(parts[..2].to_vec(), objects).is_err());
    }

    #[test]
    fn a_representation_with_both_hash_forms_or_neither_is_not_opened() {
        let sha = "0123456789abcdef".repeat(4);
        let built = Reps::build(vec![row(0, "text", &sha), row(1, "text", "x")], 2).unwrap();
        let batch = built.batches().next().unwrap().unwrap().clone();
        // Column 5 is the hash as text: set on both rows (row 0 then has both forms), or on
        // neither (row 1 then has none).
        for text in [[Some("a"), Some("x")], [None, None]] {
            let mut columns = batch.columns().to_vec();
            columns[5] = Arc::new(StringArray::from(text.to_vec()));
            let changed = RecordBatch::try_new(batch.schema(), columns).unwrap();
            assert!(Reps::open(changed, 2).is_err(), "{text:?}");
        }
        assert!(Reps::open(batch.clone(), 2).is_ok());
        // An ordinal past the objects is in no block.
        assert!(Reps::open(batch, 1).is_err());
    }
}

//! What CONTEXT FOR reads of a [`Generation`](super::Generation) beyond FIND's columns: the
//! representations of each object's selected revision (metadata only: what the packer
//! decides with, never their content) and the graph edges of the selected revisions.
//!
//! - [`Reps`]: per representation, its object's ordinal (sorted), name (one per name and
//!   object: a representation written twice is the same), media type, content reference and
//!   hash, token count as chars-div-4-v1 gives it (the stored `tokens`, else ⌈characters / 4⌉
//!   of readable inline content, else none), whether that count was stored, its effective
//!   roles (the revision's and its own), and flags: secret, packable (packable media with a
//!   token count) and a bit per role of [`ROLES`].
//! - [`Edges`]: per edge of a selected revision (links, with an `object` entity as the
//!   object's node, and derivations), the ordinal of the object it belongs to (its liveness
//!   at T decides whether the edge counts) and its two node names and relation.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, FixedSizeBinaryArray, Int64Array, ListArray,
    ListBuilder, RecordBatch, StringArray, StringBuilder, StringDictionaryBuilder, UInt16Array,
    UInt32Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt16Type, UInt32Type};
use signalql_udfs::strings::StringColumn;

use super::columns::{batch_bytes, corrupt, from_ipc, integers, read, strings};
use crate::error::Result;
use crate::objects::ROLES;
use crate::objects::index::packable;

/// The columns the build reads of `links` and of `derivations`.
pub const LINK_COLUMNS: [&str; 5] = [
    "object_id",
    "revision",
    "entity_type",
    "entity_id",
    "relation",
];
pub const DERIVATION_COLUMNS: [&str; 4] = ["object_id", "revision", "relation", "source_object_id"];

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
        // [`Reps::flags`], decided from the roles, media type and token count when built
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
    batch: RecordBatch,
    /// Per ordinal, where its representations start (one more entry than objects).
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

    /// The representations in `batch` (as [`Reps::batch`] gives them) of a generation of
    /// `objects` objects; an error when they are not.
    pub(super) fn open(batch: RecordBatch, objects: usize) -> Result<Reps> {
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
        let mut start = vec![0u32; objects + 1];
        let mut last = 0u32;
        for &o in ordinals.values() {
            if o < last || o as usize >= objects {
                return Err(corrupt("a representation's ordinal"));
            }
            last = o;
            start[o as usize + 1] += 1;
        }
        for i in 0..objects {
            start[i + 1] += start[i];
        }
        Ok(Reps {
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

    /// The columns, as a snapshot keeps them.
    pub(super) fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// The representations of the object `o`.
    pub fn of(&self, o: u32) -> Range<usize> {
        self.start[o as usize] as usize..self.start[o as usize + 1] as usize
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
        batch_bytes(&self.batch) + self.start.len() * 4
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

/// The edges as the build collects them, in the columns [`Edges`] keeps (a row of three
/// strings per edge was 160 bytes, the columns hold its characters and 16).
#[derive(Default)]
pub(super) struct EdgeColumns {
    owner: Vec<u32>,
    a: StringBuilder,
    b: StringBuilder,
    relation: StringBuilder,
}

impl EdgeColumns {
    /// Adds an edge; `false` when a column would pass what a string array's offsets can
    /// count (the graph cannot then be held).
    fn push(&mut self, owner: u32, a: &str, b: &str, relation: &str) -> bool {
        let room =
            |c: &StringBuilder, s: &str| c.values_slice().len() + s.len() <= i32::MAX as usize;
        if !(room(&self.a, a) && room(&self.b, b) && room(&self.relation, relation)) {
            return false;
        }
        self.owner.push(owner);
        self.a.append_value(a);
        self.b.append_value(b);
        self.relation.append_value(relation);
        true
    }
}

fn edges_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("owner", DataType::UInt32, false),
        Field::new("a", DataType::Utf8, false),
        Field::new("b", DataType::Utf8, false),
        Field::new("relation", DataType::Utf8, false),
    ]))
}

/// The edges of the selected revisions (see the module's documentation).
#[derive(Debug)]
pub struct Edges {
    batch: RecordBatch,
    owner: UInt32Array,
    a: StringArray,
    b: StringArray,
    relation: StringArray,
}

impl Edges {
    pub(super) fn build(mut rows: EdgeColumns, objects: usize) -> Result<Edges> {
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(rows.owner)),
            Arc::new(rows.a.finish()),
            Arc::new(rows.b.finish()),
            Arc::new(rows.relation.finish()),
        ];
        Edges::open(RecordBatch::try_new(edges_schema(), arrays)?, objects)
    }

    pub(super) fn open(batch: RecordBatch, objects: usize) -> Result<Edges> {
        let bad = || corrupt("its edges' columns");
        if batch.schema().fields() != edges_schema().fields() {
            return Err(bad());
        }
        let owner = batch
            .column(0)
            .as_primitive_opt::<UInt32Type>()
            .cloned()
            .ok_or_else(bad)?;
        if owner.values().iter().any(|&o| o as usize >= objects) {
            return Err(corrupt("an edge's object"));
        }
        let s = |i: usize| {
            batch
                .column(i)
                .as_string_opt::<i32>()
                .cloned()
                .ok_or_else(bad)
        };
        let (a, b, relation) = (s(1)?, s(2)?, s(3)?);
        Ok(Edges {
            batch,
            owner,
            a,
            b,
            relation,
        })
    }

    pub(super) fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    pub fn len(&self) -> usize {
        self.owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`th edge: the ordinal of the object it belongs to, its nodes and relation.
    pub fn edge(&self, i: usize) -> (u32, &str, &str, &str) {
        (
            self.owner.value(i),
            self.a.value(i),
            self.b.value(i),
            self.relation.value(i),
        )
    }

    pub(super) fn memory_bytes(&self) -> usize {
        batch_bytes(&self.batch)
    }
}

/// The edges of a batch of `links` ([`LINK_COLUMNS`]) or `derivations`
/// ([`DERIVATION_COLUMNS`]) that belong to a selected revision, through `owner` (an object
/// id and revision number to its ordinal when that is its selected revision), added to
/// `out`; `None` when the batch's columns are not the tables' (other types, or a NULL the
/// tables do not allow) or the edges cannot be held ([`EdgeColumns::push`]).
pub(super) fn edges_of(
    batch: &RecordBatch,
    links: bool,
    owner: impl Fn(&str, i64) -> Option<u32>,
    out: &mut EdgeColumns,
) -> Option<()> {
    let ids = strings(batch, "object_id")?;
    let numbers = read(batch, "revision", integers)?;
    let relation = strings(batch, "relation")?;
    let (first, second): (StringColumn, Option<StringColumn>) = match links {
        true => (
            strings(batch, "entity_type")?,
            Some(strings(batch, "entity_id")?),
        ),
        false => (strings(batch, "source_object_id")?, None),
    };
    let (mut a, mut b) = (String::new(), String::new());
    for (row, number) in numbers.into_iter().enumerate() {
        let (Some(id), Some(number), Some(rel), Some(x)) =
            (ids.get(row), number, relation.get(row), first.get(row))
        else {
            return None;
        };
        let Some(o) = owner(id, number) else {
            continue;
        };
        b.clear();
        match &second {
            // A link: an `object` entity is the object's node.
            Some(entity_ids) => {
                let e = entity_ids.get(row)?;
                b.extend([x, ":", e]);
            }
            None => b.extend(["object:", x]),
        };
        a.clear();
        a.extend(["object:", id]);
        out.push(o, &a, &b, rel).then_some(())?;
    }
    Some(())
}

/// What the engine kept in a snapshot file under one name ([`Generation::kept`]): its bytes,
/// checked against their CRC-32 once, when first asked for.
#[derive(Debug)]
pub(super) struct KeptPart {
    bytes: bytes::Bytes,
    crc32: u32,
    whole: OnceLock<bool>,
}

impl KeptPart {
    pub(super) fn of(bytes: bytes::Bytes, crc32: u32) -> KeptPart {
        KeptPart {
            bytes,
            crc32,
            whole: OnceLock::new(),
        }
    }

    /// The bytes, when they match their checksum.
    pub(super) fn checked(&self) -> Option<&bytes::Bytes> {
        let whole = *self
            .whole
            .get_or_init(|| super::crc::crc32(&self.bytes) == self.crc32);
        whole.then_some(&self.bytes)
    }

    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// A part of a generation decoded from its Arrow IPC stream ([`Lazy`]).
pub(super) trait Decoded: Sized {
    /// The part in `batch` of a generation of `objects` objects; an error when it is not one.
    fn open(batch: RecordBatch, objects: usize) -> Result<Self>;
    fn memory_bytes(&self) -> usize;
    /// What it is called in an error.
    const WHAT: &'static str;
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

impl Decoded for Edges {
    fn open(batch: RecordBatch, objects: usize) -> Result<Self> {
        Edges::open(batch, objects)
    }
    fn memory_bytes(&self) -> usize {
        Edges::memory_bytes(self)
    }
    const WHAT: &'static str = "edges";
}

/// A part of a generation opened from a snapshot (its representations, its edges): checked
/// against its CRC-32 and decoded on first use, so a statement that does not use it (FIND
/// OBJECT does not read representations or edges) neither reads nor checks its pages. A
/// refreshed generation's is made on first use the same way ([`Lazy::deferred`]).
#[derive(Debug)]
pub(super) struct Lazy<T> {
    part: Option<(bytes::Bytes, u32)>,
    objects: usize,
    make: Mutex<Option<Deferred<T>>>,
    value: OnceLock<Option<T>>,
}

/// What makes a deferred part, and the memory it holds until it does (an earlier
/// generation's, which it keeps).
pub(super) struct Deferred<T> {
    make: Box<dyn FnOnce() -> Option<T> + Send>,
    holds: usize,
}

impl<T> std::fmt::Debug for Deferred<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({} bytes held)", self.holds)
    }
}

impl<T: Decoded> Lazy<T> {
    /// The part in `part` (an Arrow IPC stream whose CRC-32 is `crc32`) of a generation of
    /// `objects` objects, decoded on first use.
    pub(super) fn of(part: bytes::Bytes, crc32: u32, objects: usize) -> Lazy<T> {
        Lazy {
            part: Some((part, crc32)),
            objects,
            make: Mutex::new(None),
            value: OnceLock::new(),
        }
    }

    /// A part made by `make` on first use (`None`: not held), holding `holds` bytes until then.
    pub(super) fn deferred(
        make: impl FnOnce() -> Option<T> + Send + 'static,
        holds: usize,
    ) -> Lazy<T> {
        Lazy {
            part: None,
            objects: 0,
            make: Mutex::new(Some(Deferred {
                make: Box::new(make),
                holds,
            })),
            value: OnceLock::new(),
        }
    }

    /// A part already decoded (or `None`: not held).
    pub(super) fn held(value: Option<T>) -> Lazy<T> {
        Lazy {
            part: None,
            objects: 0,
            make: Mutex::new(None),
            value: OnceLock::from(value),
        }
    }

    /// The part, decoded now if it was not; `None` when not held, or when its bytes do not
    /// match their checksum or cannot be decoded.
    pub(super) fn get(&self) -> Option<&T> {
        self.value
            .get_or_init(|| {
                let deferred = self.make.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(d) = deferred {
                    return (d.make)();
                }
                let (part, crc32) = self.part.as_ref()?;
                if super::crc::crc32(part) != *crc32 {
                    return None;
                }
                let batch = from_ipc(part.clone(), T::WHAT).ok()?;
                T::open(batch, self.objects).ok()
            })
            .as_ref()
    }

    /// A deferred part made now (nothing for another): a refresh over a generation whose
    /// parts are still deferred settles them first, so each refreshed generation keeps at
    /// most the one it was made from, never a chain of them.
    pub(super) fn settle(&self) {
        let deferred = self.make.lock().is_ok_and(|m| m.is_some());
        if deferred {
            self.get();
        }
    }

    /// Whether the part decodes, or was never in a file (not held, or made when used).
    pub(super) fn whole(&self) -> bool {
        self.part.is_none() || self.get().is_some()
    }

    /// The decoded part's memory (none before it is decoded; a deferred part's, what it
    /// holds until it is made).
    pub(super) fn memory_bytes(&self) -> usize {
        let holds = self
            .make
            .lock()
            .map_or(0, |m| m.as_ref().map_or(0, |d| d.holds));
        holds
            + self
                .value
                .get()
                .and_then(Option::as_ref)
                .map_or(0, T::memory_bytes)
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

    #[test]
    fn representations_keep_their_hashes_and_names_through_a_snapshot() {
        let sha = "0123456789abcdef".repeat(4);
        let rows = vec![
            row(1, "text", &sha),
            row(0, "summary", "not-a-sha"),
            row(0, "text", &sha.to_uppercase()),
        ];
        let built = Reps::build(rows, 2).unwrap();
        let bytes = ipc(built.batch()).unwrap();
        let reps = Reps::open(from_ipc(bytes.into(), "representations").unwrap(), 2).unwrap();
        let got: Vec<_> = (0..3)
            .map(|r| (reps.name(r).to_string(), reps.content_hash(r).into_owned()))
            .collect();
        // Sorted by ordinal then name; a hash that is not lower-case hex is kept as written.
        assert_eq!(
            got,
            vec![
                ("summary".to_string(), "not-a-sha".to_string()),
                ("text".to_string(), sha.to_uppercase()),
                ("text".to_string(), sha.clone()),
            ]
        );
        assert_eq!(reps.media_type(2), "text/markdown");
        assert_eq!(reps.of(1), 2..3);
        assert_ne!(reps.flags(0) & SECRET, 0);
    }

    #[test]
    fn a_representation_with_both_hash_forms_or_neither_is_not_opened() {
        let sha = "0123456789abcdef".repeat(4);
        let built = Reps::build(vec![row(0, "text", &sha), row(1, "text", "x")], 2).unwrap();
        let batch = built.batch();
        // Column 5 is the hash as text: set on both rows (row 0 then has both forms), or on
        // neither (row 1 then has none).
        for text in [[Some("a"), Some("x")], [None, None]] {
            let mut columns = batch.columns().to_vec();
            columns[5] = Arc::new(StringArray::from(text.to_vec()));
            let changed = RecordBatch::try_new(batch.schema(), columns).unwrap();
            assert!(Reps::open(changed, 2).is_err(), "{text:?}");
        }
        assert!(Reps::open(batch.clone(), 2).is_ok());
    }
}

//! The resident context index (DESIGN.md §5 "Scale"; docs/index.md, "The resident context
//! index"): one immutable [`Generation`] of the object tables as a query at a time at or after
//! their horizon reads them, held in memory by a long-running engine, so that FIND OBJECT
//! ABOUT scores only the objects holding a task term instead of re-deriving the live set and
//! reading every representation at each answer.
//!
//! A generation is built from the rows of `objects`, `revisions` and `representations` (the
//! engine reads them through the catalog, so it holds what the Parquet plan would read):
//!
//! - Objects are numbered by *ordinal*: their ids in byte order (FIND's tie order). Per
//!   ordinal it keeps the object's latest record (by `recorded_at`) and latest revision (by
//!   `revision`), FIND's columns as Arrow arrays, `tombstoned_at`, and the kind as a
//!   dictionary code.
//! - Postings per term, in three disjoint tiers over ordinals: the objects whose heaviest
//!   field holding the term is the title (weight 3), the `summary` representation (2), or any
//!   other representation (1), as lexical-v1 weighs them. Only *readable* representations of
//!   the selected revision count (packable media, neither they nor their revision secret),
//!   and a title counts only for an object with one: the Parquet plan joins the title to the
//!   readable representations.
//!
//! It stands for the tables only at a time `T` at or after its [`horizon`](Generation::horizon)
//! (the latest `recorded_at` or `created_at`): every row is then visible, and only
//! `tombstoned_at` depends on `T`. A store where two records of an object share the latest
//! `recorded_at`, or two revisions of it share the latest number, is not built (the Parquet
//! plan keeps both rows); nor is one whose columns have other types than the object tables'.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, GenericListArray, Int64Array, OffsetSizeTrait, RecordBatch,
    UInt32Array,
};
use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::HashMap;
pub use roaring::RoaringBitmap;
use signalql_udfs::scalar::lexical::{SUMMARY_WEIGHT, TEXT_WEIGHT, TITLE_WEIGHT};
use signalql_udfs::strings::StringColumn;

use super::index::{for_each_index_token, packable};
use crate::error::Result;

mod columns;
mod context;
mod crc;
mod dense;
pub mod keep;
pub mod locate;
mod postings;
pub mod refresh;
mod reps;
pub mod snapshot;
use columns::{batch_bytes, corrupt, integers, micros, read, strings};
pub use context::{DERIVATION_COLUMNS, Edges, LINK_COLUMNS};
use context::{EdgeColumns, Lazy};
use postings::{Postings, Terms, u64_at};
use reps::{ContentHash, RepRow};
pub use reps::{PACKABLE, Reps, RepsBlock, SECRET, role_bit};

/// FIND OBJECT's columns, in order, as the generation keeps them per ordinal: from the
/// object's record (`object_id`, `project`, `kind`, `title`) and its revision (the rest).
pub const FIND_COLUMNS: [&str; 10] = [
    "object_id",
    "revision",
    "project",
    "kind",
    "title",
    "created_at",
    "state",
    "trust",
    "origin",
    "validation",
];

/// The columns the build reads of each table.
pub const OBJECT_COLUMNS: [&str; 6] = [
    "object_id",
    "project",
    "kind",
    "title",
    "recorded_at",
    "tombstoned_at",
];
pub const REVISION_COLUMNS: [&str; 8] = [
    "object_id",
    "revision",
    "created_at",
    "origin",
    "trust",
    "validation",
    "roles",
    "state",
];
pub const REPRESENTATION_COLUMNS: [&str; 9] = [
    "object_id",
    "revision",
    "name",
    "media_type",
    "content",
    "roles",
    "content_ref",
    "content_hash",
    "tokens",
];

/// The tiers of a term's postings: title, summary, other; their lexical-v1 weights.
const TIER_WEIGHTS: [u32; 3] = [
    TITLE_WEIGHT as u32,
    SUMMARY_WEIGHT as u32,
    TEXT_WEIGHT as u32,
];

/// The snapshot's columns of `tombstoned_at` (microseconds, `i64::MAX`: none) and the kind
/// code, after FIND's.
const TOMBSTONED: &str = "__tombstoned";
const KIND: &str = "__kind";

/// No kind (a NULL `kind`): matches no `(kind)` filter.
const NO_KIND: u32 = u32::MAX;

/// An immutable image of the object tables (see the module's documentation).
#[derive(Debug)]
pub struct Generation {
    /// FIND's columns ([`FIND_COLUMNS`]) as the object tables give them.
    schema: SchemaRef,
    /// Per ordinal, FIND's columns. A column `schema` declares as string or binary views may
    /// be held as large strings or binaries instead (as a snapshot file keeps them): it is
    /// cast to the declared type only for the rows an answer takes, not at opening.
    columns: RecordBatch,
    /// Per ordinal, `tombstoned_at` in microseconds (`i64::MAX`: none). Buffers, so that a
    /// snapshot file's columns are used where they lie in its mapping.
    tombstoned: ScalarBuffer<i64>,
    /// Per ordinal, its kind's code in `kinds` ([`NO_KIND`]: NULL).
    kind: ScalarBuffer<u32>,
    kinds: Vec<String>,
    /// Per term, its disjoint tiers (title, summary, other).
    postings: Arc<Terms>,
    /// The latest `recorded_at` or `created_at` (microseconds); `None`: no rows.
    horizon: Option<i64>,
    /// The representations of the selected revisions (CONTEXT FOR's packing metadata);
    /// `None` when a snapshot's part of them is damaged (CONTEXT FOR then keeps the Parquet
    /// plan).
    reps: Lazy<Reps>,
    /// The edges of the selected revisions; `None` when the graph tables could not be held,
    /// or a representation has no name or hash (CONTEXT FOR then keeps the Parquet plan).
    edges: Lazy<Edges>,
    /// What the engine kept with the generation in its snapshot file, by name, each checked
    /// against its CRC-32 when first asked for.
    kept: std::collections::BTreeMap<String, context::KeptPart>,
    /// The ids, sorted, that some row of the tables names but that the generation does not
    /// hold (an object with no record or no revision, or rows of an unknown object): a
    /// refresh that meets one of them reads its earlier rows ([`refresh`]).
    orphans: Vec<String>,
    /// What an engine derives from the generation and keeps with it (built on first use).
    derived: OnceLock<Arc<dyn Any + Send + Sync>>,
}

/// The bytes a snapshot file starts with. Its number moves with the form of any part,
/// the parts an engine keeps included (10: the kept facts hold the bitmaps per rejection
/// predicate; 11: the representations in blocks; 12: the graph's neighbours apart from their
/// relations and owners), so a file of an earlier form has another
/// name and `signalql index` writes the current one beside it.
pub const SNAPSHOT_MAGIC: &[u8; 21] = b"signalql-resident-12\n";

/// What a FIND OBJECT asks of a generation.
#[derive(Debug, Clone, Default)]
pub struct Find<'a> {
    /// ABOUT's terms (lexical-v1's, de-duplicated); `None`: no ABOUT.
    pub terms: Option<&'a [String]>,
    /// `(kind)`.
    pub kind: Option<&'a str>,
    /// `T`, microseconds.
    pub t: i64,
    /// At most this many rows, the first in the answer's order; `None`: all.
    pub fetch: Option<usize>,
}

impl Generation {
    /// The latest time a row of the tables was recorded or created (microseconds); a query at
    /// an earlier `T` is not answered from the generation.
    pub fn horizon(&self) -> Option<i64> {
        self.horizon
    }

    /// Whether the generation stands for the tables read at `t` (microseconds).
    pub fn covers(&self, t: i64) -> bool {
        self.horizon.is_none_or(|h| t >= h)
    }

    /// Whether the postings of `terms` match their checksums (a snapshot's bitmaps are
    /// checked when decoded): a statement asks before it takes the generation's path, and
    /// takes the Parquet plan's when not. Checked, not decoded: bytes that match the checksum
    /// written with them are the bitmap that was serialised, so they decode.
    pub fn reads(&self, terms: &[String]) -> bool {
        terms.iter().all(|t| self.postings.checked(t))
    }

    /// The objects it holds.
    pub fn objects(&self) -> usize {
        self.tombstoned.len()
    }

    /// The terms it holds postings for.
    pub fn term_count(&self) -> usize {
        self.postings.count()
    }

    /// Its memory: the columns' buffers, the per-object vectors and the postings.
    pub fn memory_bytes(&self) -> usize {
        batch_bytes(&self.columns)
            + self.tombstoned.len() * 8
            + self.kind.len() * 4
            + self.kinds.iter().map(String::len).sum::<usize>()
            + self.postings.memory_bytes()
            + self.reps.memory_bytes()
            + self.edges.memory_bytes()
            + self
                .kept
                .values()
                .map(context::KeptPart::len)
                .sum::<usize>()
            + self.orphans.iter().map(|o| o.len() + 24).sum::<usize>()
    }

    /// The representations of the selected revisions; `None` when a snapshot's part of them
    /// is damaged.
    pub fn reps(&self) -> Option<&Reps> {
        self.reps.get()
    }

    /// The edges of the selected revisions, `None` when the graph tables are not held.
    pub fn edges(&self) -> Option<&Edges> {
        self.edges.get()
    }

    /// The per-object column `name` of [`FIND_COLUMNS`], as held: a declared view column may
    /// be large strings or binaries (read strings through `StringColumn`).
    pub fn column(&self, name: &str) -> Option<&ArrayRef> {
        self.columns.column_by_name(name)
    }

    /// The per-object column `name` as integers (a timestamp in microseconds, an integer as
    /// Int64) when none is NULL; in place where the column already holds microseconds or
    /// Int64 (a snapshot's mapping: nothing copied). `None` when it is neither or has a NULL.
    pub fn whole_numbers(&self, name: &str) -> Option<ScalarBuffer<i64>> {
        columns::whole_numbers(self.column(name)?.as_ref())
    }

    /// Whether the object `o` is live at `t` (microseconds).
    pub fn live(&self, o: u32, t: i64) -> bool {
        self.tombstoned[o as usize] > t
    }

    /// The tiers of `term` (title, summary, other; their weights are lexical-v1's), `None`
    /// when no object holds it.
    pub fn tiers(&self, term: &str) -> Result<Option<[RoaringBitmap; 3]>> {
        self.postings.tiers(term)
    }

    /// The tiers of `term` (title, summary, other) as a bit per object ordinal, spread from
    /// the stored posting lists without decoding them into bitmaps (`dense::set_bits`):
    /// three bitsets of `objects().div_ceil(64)` words each appended to `words`, one after
    /// the other. Per tier whether an object holds it (all false: no object holds the term);
    /// an error when a stored list does not match its checksum or its form.
    pub fn tier_bits(&self, term: &str, words: &mut Vec<u64>) -> Result<[bool; 3]> {
        let objects = self.objects();
        let each = objects.div_ceil(64);
        let start = words.len();
        words.resize(start + 3 * each, 0);
        let mut held = [false; 3];
        if let Some(tiers) = self.postings.stored_tiers(term)? {
            let tail = &mut words[start..];
            for (t, (bits, held)) in tail
                .chunks_exact_mut(each.max(1))
                .zip(&mut held)
                .enumerate()
            {
                *held = dense::set_bits(tiers.get(t), bits, objects)
                    .map_err(|why| corrupt(&format!("a posting list: {why}")))?;
            }
        }
        Ok(held)
    }

    /// What an engine derives from the generation and keeps with it: built by `build` on
    /// first use; `None` when something of another type was kept.
    pub fn derived<T: Any + Send + Sync>(&self, build: impl FnOnce(&Self) -> T) -> Option<Arc<T>> {
        let kept = self
            .derived
            .get_or_init(|| Arc::new(build(self)) as Arc<dyn Any + Send + Sync>);
        Arc::clone(kept).downcast::<T>().ok()
    }

    /// What [`derived`](Self::derived) built, if it has: never builds it.
    pub fn derived_made<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        Arc::clone(self.derived.get()?).downcast::<T>().ok()
    }

    /// The fields of the per-object columns ([`FIND_COLUMNS`]), as declared.
    fn column_fields(&self) -> Vec<Field> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect()
    }

    /// The schema of [`find`](Self::find)'s answer (`score`, Int64, last when `about`).
    pub fn find_schema(&self, about: bool) -> SchemaRef {
        let mut fields = self.column_fields();
        if about {
            fields.push(Field::new("score", DataType::Int64, true));
        }
        Arc::new(Schema::new(fields))
    }

    /// FIND OBJECT's rows: the objects live at `t` (of the kind), with ABOUT those holding a
    /// term with their lexical-v1 score, ordered by score descending then object id (byte
    /// order), the first `fetch` of them.
    pub fn find(&self, q: &Find<'_>) -> Result<RecordBatch> {
        let keep = |o: u32| {
            let o = o as usize;
            self.tombstoned[o] > q.t
                && q.kind.is_none_or(|k| {
                    self.kind[o] != NO_KIND && self.kinds[self.kind[o] as usize] == k
                })
        };
        let (ordinals, scores) = match q.terms {
            None => {
                let n = q.fetch.unwrap_or(usize::MAX);
                let ords: Vec<u32> = (0..self.objects() as u32)
                    .filter(|&o| keep(o))
                    .take(n)
                    .collect();
                (ords, None)
            }
            Some(terms) => {
                let (ords, scores) = self.top(terms, q.fetch, keep)?;
                (ords, Some(scores))
            }
        };
        let indices = UInt32Array::from(ordinals);
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(FIND_COLUMNS.len() + 1);
        for (c, f) in self.columns.columns().iter().zip(self.schema.fields()) {
            let taken = take(c.as_ref(), &indices, None)?;
            arrays.push(if taken.data_type() == f.data_type() {
                taken
            } else {
                cast(taken.as_ref(), f.data_type())?
            });
        }
        if let Some(s) = scores {
            arrays.push(Arc::new(Int64Array::from(s)));
        }
        Ok(RecordBatch::try_new(
            self.find_schema(q.terms.is_some()),
            arrays,
        )?)
    }

    /// The objects holding a term of `terms` that `keep` keeps, scored: per term the weight of
    /// its tier, summed, as lexical-v1's `floor(sum × 1 000 000 / (3 × terms))`; the first
    /// `fetch` by score descending then ordinal. The sums are counted a word of 64 objects at
    /// a time from the stored posting lists (`dense`), then walked from the highest down, each
    /// sum's objects in ordinal order, until `fetch` are kept: only those are tested by `keep`.
    fn top(
        &self,
        terms: &[String],
        fetch: Option<usize>,
        keep: impl Fn(u32) -> bool,
    ) -> Result<(Vec<u32>, Vec<i64>)> {
        if terms.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let objects = self.objects();
        let words = objects.div_ceil(64);
        let most = TITLE_WEIGHT as u32 * terms.len() as u32;
        let mut sums = dense::Sums::new(words, most);
        let mut bits = Vec::with_capacity(3 * words);
        // The highest sum an object can have: per term its heaviest tier holding an object.
        let mut highest = 0;
        for term in terms {
            bits.clear();
            let held = self.tier_bits(term, &mut bits)?;
            let mut heaviest = 0;
            for ((tier, weight), any) in bits.chunks_exact(words.max(1)).zip(TIER_WEIGHTS).zip(held)
            {
                if any {
                    sums.add(tier, weight);
                    heaviest = heaviest.max(weight);
                }
            }
            highest += heaviest;
        }
        let wanted = fetch.unwrap_or(usize::MAX);
        let mut chosen: Vec<(u32, u32)> = Vec::new();
        for level in (1..=highest).rev() {
            if chosen.len() >= wanted {
                break;
            }
            sums.each_at(level, |o| {
                if keep(o) {
                    chosen.push((level, o));
                }
                chosen.len() < wanted
            });
        }
        let denominator = 3 * terms.len() as i64;
        let scores = chosen
            .iter()
            .map(|&(s, _)| s as i64 * 1_000_000 / denominator)
            .collect();
        Ok((chosen.into_iter().map(|(_, o)| o).collect(), scores))
    }
}

/// Builds a [`Generation`]: [`Builder::new`] with the objects and revisions, then
/// [`Builder::add_representations`] per batch of representations, then
/// [`Builder::finish`].
pub struct Builder {
    /// Object id → ordinal.
    ordinal: HashMap<String, u32>,
    /// Per ordinal, the selected revision and whether its roles include `secret`.
    revision: Vec<i64>,
    revision_secret: Vec<bool>,
    /// Per ordinal, its title (tokenised at the end, for the readable objects).
    titles: Vec<Option<String>>,
    columns: RecordBatch,
    tombstoned: Vec<i64>,
    kind: Vec<u32>,
    kinds: Vec<String>,
    horizon: Option<i64>,
    /// Objects with a readable representation.
    readable: RoaringBitmap,
    terms: HashMap<Box<str>, u32>,
    /// Per term, the objects with it in a summary, and in another representation (tiers not
    /// yet disjoint).
    content: Vec<[Ordinals; 2]>,
    /// Per ordinal, its selected revision's roles.
    rev_roles: Vec<Arc<[Arc<str>]>>,
    /// One allocation per distinct name, media type and role.
    names: HashMap<String, Arc<str>>,
    reps: Vec<RepRow>,
    /// `None`: a graph table could not be held.
    edges: Option<EdgeColumns>,
    /// Ids some row names that are not held ([`Generation::orphans`]).
    orphans: std::collections::HashSet<String>,
}

/// A term's ordinals as a build collects them: a few pending in arrival order, folded into a
/// bitmap every [`Ordinals::FOLD`]. (The batches of a scan's partitions interleave, so the
/// ordinals of a term come in runs; sorting a few at a time is cheaper than inserting each
/// into a bitmap, and a common term is held as a bitmap — a bit per object at most — rather
/// than as four bytes per posting: at a million objects of W8's corpus the lists were 1.9 of
/// the build's 3.3 GB.)
#[derive(Debug, Default)]
struct Ordinals {
    pending: Vec<u32>,
    set: RoaringBitmap,
}

impl Ordinals {
    /// Ordinals held pending at most.
    const FOLD: usize = 256;

    /// Adds `o` unless it was the last added (a representation holding a term twice).
    fn add(&mut self, o: u32) {
        if self.pending.last() != Some(&o) {
            self.pending.push(o);
            if self.pending.len() >= Self::FOLD {
                self.fold();
            }
        }
    }

    fn fold(&mut self) {
        self.pending.sort_unstable();
        self.set.extend(self.pending.drain(..));
    }

    /// Every ordinal added, as a set.
    fn finish(mut self) -> RoaringBitmap {
        self.fold();
        self.set
    }
}

/// The ordinal of the object `id` among the first `n` of a generation's `ids` (its ordinals
/// are the ids in byte order), if held.
pub fn ordinal_of(ids: &StringColumn, n: usize, id: &str) -> Option<u32> {
    search(n, |i| ids.value(i).cmp(id)).map(|i| i as u32)
}

/// The position under `n` at which `cmp` (a position's order against what is sought, the
/// positions in that order) is `Equal`: a binary search over positions rather than a slice.
pub(crate) fn search(n: usize, cmp: impl Fn(usize) -> std::cmp::Ordering) -> Option<usize> {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match cmp(mid) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(mid),
        }
    }
    None
}

/// `a` holding only its own values: a view array taken from a larger one still shares that
/// one's buffers, which the generation would keep alive and a snapshot would write whole.
fn compact(a: ArrayRef) -> ArrayRef {
    match a.data_type() {
        DataType::Utf8View => Arc::new(a.as_string_view().gc()),
        DataType::BinaryView => Arc::new(a.as_binary_view().gc()),
        _ => a,
    }
}

/// Per row of a list-of-strings column, its strings (NULLs left out); `None` when the column
/// is not one.
fn role_lists(array: &dyn Array) -> Option<Vec<Vec<String>>> {
    fn each<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> Option<Vec<Vec<String>>> {
        let values = StringColumn::try_new(list.values().as_ref()).ok()?;
        let offsets = list.value_offsets();
        Some(
            (0..list.len())
                .map(|i| match list.is_null(i) {
                    true => Vec::new(),
                    false => (offsets[i].as_usize()..offsets[i + 1].as_usize())
                        .filter_map(|j| values.get(j).map(str::to_string))
                        .collect(),
                })
                .collect(),
        )
    }
    match array.data_type() {
        DataType::List(_) => each(array.as_list::<i32>()),
        DataType::LargeList(_) => each(array.as_list::<i64>()),
        DataType::Null => Some(vec![Vec::new(); array.len()]),
        _ => None,
    }
}

/// The interned `s` (one allocation per distinct value).
fn intern(names: &mut HashMap<String, Arc<str>>, s: &str) -> Arc<str> {
    if let Some(a) = names.get(s) {
        return Arc::clone(a);
    }
    let a: Arc<str> = Arc::from(s);
    names.insert(s.to_string(), Arc::clone(&a));
    a
}

/// The row of each id whose `by` is the largest (rows with a NULL id or `by` left out);
/// `None` when two rows of an id share its largest `by`.
fn latest(ids: &StringColumn, by: &[Option<i64>]) -> Option<HashMap<String, usize>> {
    let mut best: HashMap<&str, (i64, usize, bool)> = HashMap::new();
    for (row, b) in by.iter().enumerate() {
        let (Some(id), Some(b)) = (ids.get(row), *b) else {
            continue;
        };
        match best.get_mut(id) {
            None => {
                best.insert(id, (b, row, false));
            }
            Some(e) if b > e.0 => *e = (b, row, false),
            Some(e) if b == e.0 => e.2 = true,
            Some(_) => {}
        }
    }
    if best.values().any(|e| e.2) {
        return None;
    }
    Some(
        best.into_iter()
            .map(|(k, e)| (k.to_string(), e.1))
            .collect(),
    )
}

impl Builder {
    /// A builder over `objects` ([`OBJECT_COLUMNS`]) and `revisions` ([`REVISION_COLUMNS`]);
    /// `None` when the generation cannot stand for them (ties, other types).
    pub fn new(objects: &RecordBatch, revisions: &RecordBatch) -> Result<Option<Builder>> {
        let read_all = || {
            Some((
                strings(objects, "object_id")?,
                strings(revisions, "object_id")?,
                read(objects, "recorded_at", micros)?,
                read(objects, "tombstoned_at", micros)?,
                read(revisions, "created_at", micros)?,
                read(revisions, "revision", integers)?,
                read(revisions, "roles", role_lists)?,
                strings(objects, "kind")?,
                strings(objects, "title")?,
            ))
        };
        let Some((
            object_ids,
            revision_ids,
            recorded,
            tombstoned,
            created,
            numbers,
            roles,
            kinds,
            titles,
        )) = read_all()
        else {
            return Ok(None);
        };
        let horizon = recorded
            .iter()
            .chain(created.iter())
            .flatten()
            .max()
            .copied();
        // The Parquet plan keeps revisions created by T (every one, at or after the horizon)
        // and, of those, the largest number.
        let numbered: Vec<Option<i64>> = numbers
            .iter()
            .zip(&created)
            .map(|(n, c)| c.and(*n))
            .collect();
        let (Some(record), Some(revision)) = (
            latest(&object_ids, &recorded),
            latest(&revision_ids, &numbered),
        ) else {
            return Ok(None);
        };
        let mut ids: Vec<&String> = record
            .keys()
            .filter(|k| revision.contains_key(*k))
            .collect();
        ids.sort_unstable();
        let orphans = (0..objects.num_rows())
            .filter_map(|r| object_ids.get(r))
            .chain((0..revisions.num_rows()).filter_map(|r| revision_ids.get(r)))
            .filter(|id| !(record.contains_key(*id) && revision.contains_key(*id)))
            .map(str::to_string)
            .collect();
        let object_rows: Vec<u32> = ids.iter().map(|k| record[*k] as u32).collect();
        let revision_rows: Vec<u32> = ids.iter().map(|k| revision[*k] as u32).collect();
        let (object_take, revision_take) = (
            UInt32Array::from(object_rows.clone()),
            UInt32Array::from(revision_rows.clone()),
        );
        let mut fields = Vec::with_capacity(FIND_COLUMNS.len());
        let mut arrays = Vec::with_capacity(FIND_COLUMNS.len());
        for name in FIND_COLUMNS {
            let (batch, rows) = match name {
                "object_id" | "project" | "kind" | "title" => (objects, &object_take),
                _ => (revisions, &revision_take),
            };
            let Some(a) = batch.column_by_name(name) else {
                return Ok(None);
            };
            let a = compact(take(a.as_ref(), rows, None)?);
            fields.push(Field::new(name, a.data_type().clone(), true));
            arrays.push(a);
        }
        let columns = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        let mut kind_codes: HashMap<&str, u32> = HashMap::new();
        let mut kind_names = Vec::new();
        let kind = object_rows
            .iter()
            .map(|&r| match kinds.get(r as usize) {
                None => NO_KIND,
                Some(k) => *kind_codes.entry(k).or_insert_with(|| {
                    kind_names.push(k.to_string());
                    kind_names.len() as u32 - 1
                }),
            })
            .collect();
        let mut names = HashMap::new();
        // One allocation per distinct list of roles: the objects share a few.
        let mut lists: HashMap<&[String], Arc<[Arc<str>]>> = HashMap::new();
        let rev_roles: Vec<Arc<[Arc<str>]>> = revision_rows
            .iter()
            .map(|&r| {
                let list = &roles[r as usize][..];
                if let Some(shared) = lists.get(list) {
                    return Arc::clone(shared);
                }
                let shared: Arc<[Arc<str>]> = list.iter().map(|x| intern(&mut names, x)).collect();
                lists.insert(list, Arc::clone(&shared));
                shared
            })
            .collect();
        drop(lists);
        Ok(Some(Builder {
            ordinal: ids
                .iter()
                .enumerate()
                .map(|(o, k)| ((*k).clone(), o as u32))
                .collect(),
            revision: revision_rows
                .iter()
                .map(|&r| numbers[r as usize].unwrap_or_default())
                .collect(),
            revision_secret: rev_roles
                .iter()
                .map(|r| r.iter().any(|x| &**x == "secret"))
                .collect(),
            titles: object_rows
                .iter()
                .map(|&r| titles.get(r as usize).map(str::to_string))
                .collect(),
            columns,
            tombstoned: object_rows
                .iter()
                .map(|&r| tombstoned[r as usize].unwrap_or(i64::MAX))
                .collect(),
            kind,
            kinds: kind_names,
            horizon,
            readable: RoaringBitmap::new(),
            terms: HashMap::new(),
            content: Vec::new(),
            rev_roles,
            names,
            reps: Vec::new(),
            edges: Some(EdgeColumns::default()),
            orphans,
        }))
    }

    /// The index of `term`, added when new.
    fn term(&mut self, term: &str) -> usize {
        if let Some(&i) = self.terms.get(term) {
            return i as usize;
        }
        let i = self.content.len();
        self.terms.insert(term.into(), i as u32);
        self.content.push(Default::default());
        i
    }

    /// Adds a batch of representations ([`REPRESENTATION_COLUMNS`]); `Ok(false)` when the
    /// generation cannot stand for them (other types).
    pub fn add_representations(&mut self, batch: &RecordBatch) -> Result<bool> {
        let read_all = || {
            Some((
                strings(batch, "object_id")?,
                strings(batch, "name")?,
                strings(batch, "media_type")?,
                strings(batch, "content")?,
                read(batch, "revision", integers)?,
                read(batch, "roles", role_lists)?,
                strings(batch, "content_ref")?,
                strings(batch, "content_hash")?,
                read(batch, "tokens", integers)?,
            ))
        };
        let Some((ids, names, media, content, numbers, roles, refs, hashes, tokens)) = read_all()
        else {
            return Ok(false);
        };
        for row in 0..batch.num_rows() {
            let (Some(id), Some(number), Some(media)) =
                (ids.get(row), numbers[row], media.get(row))
            else {
                continue;
            };
            let Some(&o) = self.ordinal.get(id) else {
                if !self.orphans.contains(id) {
                    self.orphans.insert(id.to_string());
                }
                continue;
            };
            let ou = o as usize;
            if self.revision[ou] != number {
                continue;
            }
            let secret = self.revision_secret[ou] || roles[row].iter().any(|r| r == "secret");
            let readable = packable(media) && !secret;
            let text = content.get(row);
            if names.is_null(row) || hashes.is_null(row) {
                // The Parquet plan reads such a row as it is; CONTEXT FOR keeps it.
                self.edges = None;
            }
            if let Some(name) = names.get(row) {
                // The token count of chars-div-4-v1: the stored one, else the readable
                // inline content's characters.
                let counted = match (tokens[row], text) {
                    (Some(n), _) => Some(n),
                    (None, Some(t)) if readable => Some((t.chars().count() as i64 + 3) / 4),
                    _ => None,
                };
                let revision_roles = &self.rev_roles[ou];
                let eff = if roles[row]
                    .iter()
                    .all(|r| revision_roles.iter().any(|x| **x == **r))
                {
                    Arc::clone(revision_roles)
                } else {
                    let mut eff = revision_roles.to_vec();
                    for r in &roles[row] {
                        if !eff.iter().any(|x| **x == **r) {
                            eff.push(intern(&mut self.names, r));
                        }
                    }
                    eff.into()
                };
                self.reps.push(RepRow {
                    o,
                    name: intern(&mut self.names, name),
                    media: intern(&mut self.names, media),
                    content_ref: refs.get(row).map(str::to_string),
                    content_hash: ContentHash::of(hashes.get(row).unwrap_or_default()),
                    tokens: counted,
                    stored: tokens[row].is_some(),
                    roles: eff,
                });
            }
            if !readable {
                continue;
            }
            self.readable.insert(o);
            // A representation without a name weighs in no field (lexical-v1's summary is
            // the one named `summary`; any other is "other text").
            let tier = match names.get(row) {
                None => continue,
                Some("summary") => 0,
                Some(_) => 1,
            };
            if let Some(text) = text {
                let mut terms = Vec::new();
                for_each_index_token(text, |t| terms.push(self.term(t)));
                for t in terms {
                    self.content[t][tier].add(o);
                }
            }
        }
        Ok(true)
    }

    /// Adds a batch of `links` ([`LINK_COLUMNS`]) or, not `links`, of `derivations`
    /// ([`DERIVATION_COLUMNS`]): their edges of the selected revisions.
    pub fn add_edges(&mut self, batch: &RecordBatch, links: bool) {
        if let Some(ids) = strings(batch, "object_id") {
            for id in (0..batch.num_rows()).filter_map(|r| ids.get(r)) {
                if !self.ordinal.contains_key(id) && !self.orphans.contains(id) {
                    self.orphans.insert(id.to_string());
                }
            }
        }
        let (ordinal, revision) = (&self.ordinal, &self.revision);
        let owner = |id: &str, number: i64| {
            ordinal
                .get(id)
                .copied()
                .filter(|&o| revision[o as usize] == number)
        };
        if let Some(edges) = &mut self.edges
            && context::edges_of(batch, links, owner, edges).is_none()
        {
            self.edges = None;
        }
    }

    /// The graph tables cannot be held (CONTEXT FOR then keeps the Parquet plan).
    pub fn no_edges(&mut self) {
        self.edges = None;
    }

    /// The generation: titles tokenised for the readable objects, each term's tiers made
    /// disjoint (an object is in the tier of its heaviest field holding the term).
    pub fn finish(mut self) -> Result<Generation> {
        let mut title: Vec<Ordinals> = Vec::new();
        let titles = std::mem::take(&mut self.titles);
        let readable = std::mem::take(&mut self.readable);
        for o in readable.iter() {
            if let Some(t) = &titles[o as usize] {
                let mut terms = Vec::new();
                for_each_index_token(t, |w| terms.push(self.term(w)));
                title.resize_with(self.content.len(), Ordinals::default);
                for t in terms {
                    title[t].add(o);
                }
            }
        }
        drop(titles);
        title.resize_with(self.content.len(), Ordinals::default);
        let mut names: Vec<Box<str>> = vec![Box::from(""); self.content.len()];
        for (term, i) in self.terms {
            names[i as usize] = term;
        }
        let postings = names
            .into_iter()
            .zip(self.content)
            .zip(title)
            .map(|((term, [summary, other]), title)| {
                let (summary, other, title) = (summary.finish(), other.finish(), title.finish());
                let summary = summary - &title;
                let other = other - &title - &summary;
                (term, [title, summary, other])
            })
            .collect();
        let objects = self.tombstoned.len();
        Ok(Generation {
            schema: self.columns.schema(),
            columns: self.columns,
            tombstoned: self.tombstoned.into(),
            kind: self.kind.into(),
            kinds: self.kinds,
            postings: Arc::new(Terms::Own(Postings::build(postings)?)),
            horizon: self.horizon,
            reps: Lazy::held(Some(Reps::build(self.reps, objects)?)),
            edges: Lazy::held(match self.edges {
                Some(e) => Some(Edges::build(e, objects)?),
                None => None,
            }),
            kept: Default::default(),
            orphans: {
                let mut o: Vec<String> = self.orphans.into_iter().collect();
                o.sort_unstable();
                o
            },
            derived: OnceLock::new(),
        })
    }
}

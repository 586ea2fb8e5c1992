//! What CONTEXT FOR reads of a [`Generation`](super::Generation) beyond FIND's columns and
//! the representations ([`super::reps`]): the graph edges of the selected revisions, and how
//! a snapshot file's parts are held until used.
//!
//! - [`Edges`]: per edge of a selected revision (links, with an `object` entity as the
//!   object's node, and derivations), the ordinal of the object it belongs to (its liveness
//!   at T decides whether the edge counts) and its two node names and relation.

use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{
    ArrayRef, AsArray, RecordBatch, StringArray, StringBuilder, UInt32Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt32Type};
use signalql_udfs::strings::StringColumn;

use super::columns::{batch_bytes, corrupt, from_ipc, integers, read, strings};
use crate::error::Result;

/// The columns the build reads of `links` and of `derivations`.
pub const LINK_COLUMNS: [&str; 5] = [
    "object_id",
    "revision",
    "entity_type",
    "entity_id",
    "relation",
];
pub const DERIVATION_COLUMNS: [&str; 4] = ["object_id", "revision", "relation", "source_object_id"];

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

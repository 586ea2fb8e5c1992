//! The incremental refresh of a generation (docs/index.md, "The incremental refresh"): the
//! generation of the object tables after files were added to them, made from the generation
//! of the tables before and a small one built from the rows of the objects the new files
//! name, so that no content of an object the new files do not name is read again.
//!
//! The engine reads the new files' rows. The objects they name are *touched*. A touched object
//! the earlier generation holds, or names as an orphan ([`Generation::names`]), has rows in
//! the earlier files too, which may decide it (its latest record, its latest revision, that
//! revision's representations and edges): the engine reads those objects' earlier rows as
//! well, and builds the *delta* generation from every row of the touched objects. Every other
//! object's rows are all in the earlier files, so its part of the earlier generation is what a
//! whole build would make of it. [`Generation::refreshed`] then merges the earlier generation
//! without the touched objects and the delta, by id: per-object columns, representations and
//! edges are taken row by row, and each term's posting lists are the earlier ones without the
//! touched objects and the delta's, both renumbered (ordinals are ids in byte order, so an
//! object's ordinal moves when an id sorts before it).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{cast, interleave};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use signalql_udfs::strings::StringColumn;

use super::context::{Edges, Lazy};
use super::postings::{GONE, Terms};
use super::reps::{BLOCK, Reps};
use super::{Generation, NO_KIND, compact, ordinal_of};
use crate::error::Result;

/// The ids of `g`'s objects, by ordinal.
fn ids(g: &Generation) -> Option<StringColumn> {
    StringColumn::try_new(g.column("object_id")?.as_ref()).ok()
}

impl Generation {
    /// Whether a row of the tables this generation was built from names the object `id`:
    /// one it holds, or one of its orphans (named by a row, not held).
    pub fn names(&self, id: &str) -> bool {
        ids(self).is_some_and(|ids| ordinal_of(&ids, self.objects(), id).is_some())
            || self
                .orphans
                .binary_search_by(|o| o.as_str().cmp(id))
                .is_ok()
    }

    /// The generation of the tables after files were added: this one without the objects
    /// `touched`, with `delta`'s (built from every row of the touched objects, see the
    /// module's documentation). `None` when the two cannot be merged (their columns differ
    /// in type, or `delta` holds an object not touched): the caller builds the whole.
    pub fn refreshed(
        self: &Arc<Self>,
        delta: &Arc<Generation>,
        touched: &HashSet<String>,
    ) -> Result<Option<Generation>> {
        let (Some(old_ids), Some(new_ids)) = (ids(self), ids(delta)) else {
            return Ok(None);
        };
        let (n, m) = (self.objects(), delta.objects());
        if self.schema.fields() != delta.schema.fields()
            || (0..m).any(|j| !touched.contains(new_ids.value(j)))
        {
            return Ok(None);
        }
        let mut removed = vec![false; n];
        for id in touched {
            if let Some(o) = ordinal_of(&old_ids, n, id) {
                removed[o as usize] = true;
            }
        }
        // The merged order: (0, earlier ordinal) or (1, delta ordinal), by id.
        let mut order: Vec<(usize, usize)> = Vec::with_capacity(n + m);
        let (mut old_map, mut new_map) = (vec![GONE; n], vec![GONE; m]);
        let (mut i, mut j) = (0usize, 0usize);
        loop {
            while i < n && removed[i] {
                i += 1;
            }
            let from_old = match (i < n, j < m) {
                (false, false) => break,
                (true, false) => true,
                (false, true) => false,
                (true, true) => match old_ids.value(i).cmp(new_ids.value(j)) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    // Held by both: the delta holds only touched objects, removed here.
                    std::cmp::Ordering::Equal => return Ok(None),
                },
            };
            let at = order.len() as u32;
            if from_old {
                old_map[i] = at;
                order.push((0, i));
                i += 1;
            } else {
                new_map[j] = at;
                order.push((1, j));
                j += 1;
            }
        }
        let objects = order.len();
        let pick = |s: usize| if s == 0 { self } else { delta };

        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.num_columns());
        for ((a, b), f) in self
            .columns
            .columns()
            .iter()
            .zip(delta.columns.columns())
            .zip(self.schema.fields())
        {
            // A declared view column may be held as large strings or a dictionary in one of
            // the two (opened from a snapshot file): the delta's is cast to the earlier one's
            // large strings, and both to the declared type where the earlier one's is a
            // dictionary (whose keys might not hold the delta's values).
            let (a, b) = match (a.data_type(), b.data_type()) {
                (x, y) if x == y => (Arc::clone(a), Arc::clone(b)),
                (DataType::Dictionary(..), _) | (_, DataType::Dictionary(..)) => (
                    cast(a.as_ref(), f.data_type())?,
                    cast(b.as_ref(), f.data_type())?,
                ),
                (x, _) => (Arc::clone(a), cast(b.as_ref(), x)?),
            };
            arrays.push(compact(interleave(&[a.as_ref(), b.as_ref()], &order)?));
        }
        // Each column as now held (a dictionary merged with the delta is held as declared).
        let held: Vec<Field> = self
            .columns
            .schema()
            .fields()
            .iter()
            .zip(&arrays)
            .map(|(f, a)| Field::new(f.name(), a.data_type().clone(), f.is_nullable()))
            .collect();
        let columns = RecordBatch::try_new(Arc::new(Schema::new(held)), arrays)?;
        let tombstoned = order.iter().map(|&(s, r)| pick(s).tombstoned[r]).collect();
        let mut kinds = self.kinds.clone();
        let delta_codes: Vec<u32> = delta
            .kinds
            .iter()
            .map(|k| match kinds.iter().position(|x| x == k) {
                Some(c) => c as u32,
                None => {
                    kinds.push(k.clone());
                    kinds.len() as u32 - 1
                }
            })
            .collect();
        let kind = order
            .iter()
            .map(|&(s, r)| match (s, pick(s).kind[r]) {
                (_, NO_KIND) => NO_KIND,
                (0, k) => k,
                (_, k) => delta_codes[k as usize],
            })
            .collect();

        // The maps are shared by the postings and the deferred merge of the edges.
        let (old_map, new_map): (Arc<[u32]>, Arc<[u32]>) = (old_map.into(), new_map.into());
        let postings = Arc::new(Terms::merged(
            &self.postings,
            Arc::clone(&old_map),
            &delta.postings,
            Arc::clone(&new_map),
        )?);
        // Representations and edges are merged when a statement first uses them (CONTEXT
        // FOR): FIND does not. Until then the refreshed generation keeps the earlier one and
        // the delta (and counts the earlier one's memory as its own; its postings are
        // counted with the refreshed ones). The earlier one's own deferred parts are made
        // first, so it keeps nothing older.
        self.reps.settle();
        self.edges.settle();
        let holds = self.memory_bytes() - self.postings.memory_bytes();
        let reps = {
            let (earlier, delta) = (Arc::clone(self), Arc::clone(delta));
            Lazy::deferred(
                move || merge_reps(earlier.reps()?, delta.reps()?, &order),
                holds,
            )
        };
        let edges = {
            let (earlier, delta) = (Arc::clone(self), Arc::clone(delta));
            Lazy::deferred(
                move || match (earlier.edges(), delta.edges()) {
                    (Some(a), Some(b)) => merge_edges(a, &old_map, b, &new_map, objects).ok(),
                    _ => None,
                },
                0,
            )
        };
        let mut orphans: Vec<String> = self
            .orphans
            .iter()
            .filter(|o| !touched.contains(o.as_str()))
            .chain(&delta.orphans)
            .cloned()
            .collect();
        orphans.sort_unstable();
        orphans.dedup();
        Ok(Some(Generation {
            schema: Arc::clone(&self.schema),
            columns,
            tombstoned,
            kind,
            kinds,
            postings,
            horizon: self.horizon.max(delta.horizon),
            reps,
            edges,
            kept: Default::default(),
            orphans,
            derived: OnceLock::new(),
        }))
    }
}

/// The representations of the merged generation, in the merged `order`; `None` when a block
/// of either does not decode.
fn merge_reps(old: &Reps, delta: &Reps, order: &[(usize, usize)]) -> Option<Reps> {
    // Every block's columns, the earlier generation's then the delta's.
    let olds: Vec<&RecordBatch> = old.batches().collect::<Option<_>>()?;
    let deltas: Vec<&RecordBatch> = delta.batches().collect::<Option<_>>()?;
    let Some(first) = olds.first().or(deltas.first()) else {
        return Reps::build(Vec::new(), order.len()).ok();
    };
    let mut rows = Vec::new();
    let mut ordinals = Vec::new();
    for (at, &(s, r)) in order.iter().enumerate() {
        let (reps, offset) = if s == 0 {
            (old, 0)
        } else {
            (delta, olds.len())
        };
        let (_, range) = reps.of(r as u32)?;
        let block = offset + r / BLOCK;
        for k in range {
            rows.push((block, k));
            ordinals.push(at as u32);
        }
    }
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(ordinals))];
    for c in 1..first.num_columns() {
        let columns: Vec<&dyn Array> = olds
            .iter()
            .chain(&deltas)
            .map(|b| b.column(c).as_ref())
            .collect();
        arrays.push(interleave(&columns, &rows).ok()?);
    }
    Reps::open(
        RecordBatch::try_new(first.schema(), arrays).ok()?,
        order.len(),
    )
    .ok()
}

/// The edges of the merged generation: the earlier ones whose object stays, then the
/// delta's, their objects renumbered.
fn merge_edges(
    old: &Edges,
    old_map: &[u32],
    delta: &Edges,
    new_map: &[u32],
    objects: usize,
) -> Result<Edges> {
    let mut rows = Vec::new();
    let mut owners = Vec::new();
    for (s, edges, map) in [(0, old, old_map), (1, delta, new_map)] {
        for k in 0..edges.len() {
            let owner = map[edges.edge(k).0 as usize];
            if owner != GONE {
                rows.push((s, k));
                owners.push(owner);
            }
        }
    }
    let (a, b) = (old.batch(), delta.batch());
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(owners))];
    for c in 1..a.num_columns() {
        let column: &dyn Array = a.column(c).as_ref();
        arrays.push(interleave(&[column, b.column(c).as_ref()], &rows)?);
    }
    Edges::open(RecordBatch::try_new(a.schema(), arrays)?, objects)
}

#[cfg(test)]
mod tests {
    use super::super::reps::{ContentHash, RepRow};
    use super::*;

    /// Representations of `objects` objects, two for every third one and none for every
    /// seventh, their hashes naming `side` and the object.
    fn reps(side: &str, objects: u32) -> Reps {
        let rows = (0..objects)
            .filter(|o| o % 7 != 3)
            .flat_map(|o| {
                let names: &[&str] = if o % 3 == 0 {
                    &["summary", "text"]
                } else {
                    &["text"]
                };
                names.iter().map(move |name| RepRow {
                    o,
                    name: Arc::from(*name),
                    media: Arc::from("text/markdown"),
                    content_ref: None,
                    content_hash: ContentHash::of(&format!("{side}-{o}-{name}")),
                    tokens: Some(i64::from(o)),
                    stored: true,
                    roles: Arc::from([]),
                })
            })
            .collect();
        Reps::build(rows, objects as usize).unwrap()
    }

    fn hashes(reps: &Reps, o: u32) -> Vec<String> {
        let (block, rows) = reps.of(o).unwrap();
        rows.map(|r| block.content_hash(r).into_owned()).collect()
    }

    /// Merged over several blocks of each side, every object of the merged order has the
    /// representations of the object it came from.
    #[test]
    fn merged_representations_follow_the_order_across_blocks() {
        let (old, delta) = (
            reps("old", 2 * BLOCK as u32 + 5),
            reps("new", BLOCK as u32 + 9),
        );
        // Every third earlier object dropped, the delta's interleaved.
        let mut order: Vec<(usize, usize)> = (0..2 * BLOCK + 5)
            .filter(|r| r % 3 != 2)
            .map(|r| (0, r))
            .collect();
        for r in 0..BLOCK + 9 {
            order.insert((r * 2).min(order.len()), (1, r));
        }
        let merged = merge_reps(&old, &delta, &order).unwrap();
        for (at, &(s, r)) in order.iter().enumerate() {
            let from = if s == 0 { &old } else { &delta };
            assert_eq!(hashes(&merged, at as u32), hashes(from, r as u32), "{at}");
        }
        assert!(merged.of(order.len() as u32).is_none());
    }
}

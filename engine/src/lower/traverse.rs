//! `TRAVERSE relation DEPTH <= n` (docs/entities.md): a bounded breadth-first walk over the
//! `relationships` table, as the [`Traverse`] kernel of a two-input operator. The first input is
//! the start set (`entity_type`, `entity_id`), the second the edges of the relation as of T
//! (`src_type`, `src_id`, `dst_type`, `dst_id`). The output is every entity reachable from the
//! start set by 1 ..= n edges followed from src to dst, once, with `hops`, the fewest edges
//! from any start entity. Each entity is expanded once, so cycles end the walk.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result as DfResult};
use signalql_udfs::strings::StringColumn;

use crate::operator::Kernel;

/// The deepest TRAVERSE allowed (the issue's bound; also `metadata.limits`).
pub const MAX_DEPTH: u64 = 16;

/// The walk's parameters (the relation only labels the plan; the edges arrive filtered).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct Traverse {
    pub relation: String,
    pub depth: u64,
}

/// The output: the reached entities and their hop counts.
pub fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("entity_type", DataType::Utf8, false),
        Field::new("entity_id", DataType::Utf8, false),
        Field::new("hops", DataType::Int64, false),
    ]))
}

/// Interned (type, id) pairs.
#[derive(Default)]
struct Nodes {
    ids: HashMap<(String, String), u32>,
    keys: Vec<(String, String)>,
}

impl Nodes {
    fn intern(&mut self, t: &str, id: &str) -> u32 {
        if let Some(&n) = self.ids.get(&(t.to_string(), id.to_string())) {
            return n;
        }
        let n = self.keys.len() as u32;
        self.keys.push((t.to_string(), id.to_string()));
        self.ids.insert((t.to_string(), id.to_string()), n);
        n
    }
}

/// Text columns `cols` of every batch, row by row; rows with a NULL in any are skipped.
fn text_rows(
    batches: &[RecordBatch],
    cols: &[usize],
    mut each: impl FnMut(&[&str]),
) -> DfResult<()> {
    for b in batches {
        let arrays: Vec<StringColumn> = cols
            .iter()
            .map(|&i| StringColumn::cast_from(b.column(i).as_ref()))
            .collect::<DfResult<_>>()?;
        for r in 0..b.num_rows() {
            if arrays.iter().any(|a| a.is_null(r)) {
                continue;
            }
            let row: Vec<&str> = arrays.iter().map(|a| a.value(r)).collect();
            each(&row);
        }
    }
    Ok(())
}

impl Kernel for Traverse {
    const NAME: &'static str = "Traverse";

    fn schema(&self) -> SchemaRef {
        output_schema()
    }

    fn params(&self) -> String {
        format!("relation={} depth<={}", self.relation, self.depth)
    }

    /// The start entities, kept whole (they are few).
    type Acc = Vec<RecordBatch>;

    fn start(&self) -> Self::Acc {
        Vec::new()
    }

    fn fold(&self, acc: &mut Self::Acc, batch: RecordBatch) -> DfResult<()> {
        acc.push(batch);
        Ok(())
    }

    fn finish(&self, start: Self::Acc, edges: &[RecordBatch]) -> DfResult<RecordBatch> {
        let start = start.as_slice();
        let mut nodes = Nodes::default();
        let mut adjacency: Vec<Vec<u32>> = Vec::new();
        text_rows(edges, &[0, 1, 2, 3], |r| {
            let a = nodes.intern(r[0], r[1]);
            let b = nodes.intern(r[2], r[3]);
            if adjacency.len() < nodes.keys.len() {
                adjacency.resize(nodes.keys.len(), Vec::new());
            }
            adjacency[a as usize].push(b);
        })?;
        adjacency.resize(nodes.keys.len(), Vec::new());
        // Start entities without edges cannot reach anything: only known nodes matter.
        let mut frontier: Vec<u32> = Vec::new();
        let mut expanded = vec![false; nodes.keys.len()];
        text_rows(start, &[0, 1], |r| {
            if let Some(&n) = nodes.ids.get(&(r[0].to_string(), r[1].to_string()))
                && !expanded[n as usize]
            {
                expanded[n as usize] = true;
                frontier.push(n);
            }
        })?;
        let mut hops: Vec<u32> = vec![0; nodes.keys.len()];
        let mut reached: Vec<u32> = Vec::new();
        for level in 1..=self.depth.min(MAX_DEPTH) as u32 {
            let mut next = Vec::new();
            for &v in &frontier {
                for &w in &adjacency[v as usize] {
                    if hops[w as usize] == 0 {
                        hops[w as usize] = level;
                        reached.push(w);
                        if !expanded[w as usize] {
                            expanded[w as usize] = true;
                            next.push(w);
                        }
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        reached.sort_by(|a, b| {
            (hops[*a as usize], &nodes.keys[*a as usize])
                .cmp(&(hops[*b as usize], &nodes.keys[*b as usize]))
        });
        let types: StringArray = reached
            .iter()
            .map(|n| Some(nodes.keys[*n as usize].0.as_str()))
            .collect();
        let ids: StringArray = reached
            .iter()
            .map(|n| Some(nodes.keys[*n as usize].1.as_str()))
            .collect();
        let h: Int64Array = reached.iter().map(|n| hops[*n as usize] as i64).collect();
        RecordBatch::try_new(
            output_schema(),
            vec![Arc::new(types), Arc::new(ids), Arc::new(h)],
        )
        .map_err(DataFusionError::from)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, AsArray};

    use super::*;

    fn batch(cols: &[&[&str]]) -> RecordBatch {
        let fields: Vec<Field> = (0..cols.len())
            .map(|i| Field::new(format!("c{i}"), DataType::Utf8, true))
            .collect();
        let arrays = cols
            .iter()
            .map(|c| Arc::new(StringArray::from(c.to_vec())) as Arc<dyn Array>)
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
    }

    fn walk(start: &[&str], edges: &[(&str, &str)], depth: u64) -> Vec<(String, i64)> {
        let n = edges.len();
        let t = vec!["t"; n];
        let src: Vec<&str> = edges.iter().map(|e| e.0).collect();
        let dst: Vec<&str> = edges.iter().map(|e| e.1).collect();
        let e = batch(&[&t, &src, &t, &dst]);
        let s = batch(&[&vec!["t"; start.len()], start]);
        let out = Traverse {
            relation: "r".into(),
            depth,
        }
        .finish(vec![s], &[e])
        .unwrap();
        let ids = out.column(1).as_string::<i32>();
        let hops = out
            .column(2)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        (0..out.num_rows())
            .map(|i| (ids.value(i).to_string(), hops.value(i)))
            .collect()
    }

    fn v(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(a, b)| (a.to_string(), *b)).collect()
    }

    #[test]
    fn chain_is_cut_at_the_depth() {
        let edges = [("a", "b"), ("b", "c"), ("c", "d")];
        assert_eq!(walk(&["a"], &edges, 2), v(&[("b", 1), ("c", 2)]));
        assert_eq!(walk(&["a"], &edges, 16), v(&[("b", 1), ("c", 2), ("d", 3)]));
    }

    #[test]
    fn cycles_end_and_a_start_reached_again_counts_its_hops() {
        // a -> b -> c -> a: from a, a itself is reached after 3 edges.
        let edges = [("a", "b"), ("b", "c"), ("c", "a")];
        assert_eq!(walk(&["a"], &edges, 16), v(&[("b", 1), ("c", 2), ("a", 3)]));
        // Two starts: each reaches the other in one hop.
        assert_eq!(
            walk(&["a", "b"], &[("a", "b"), ("b", "a")], 5),
            v(&[("a", 1), ("b", 1)])
        );
    }

    #[test]
    fn fewest_hops_from_any_start_and_direction_matters() {
        let edges = [("a", "x"), ("x", "y"), ("b", "y"), ("y", "z"), ("q", "a")];
        assert_eq!(
            walk(&["a", "b"], &edges, 3),
            v(&[("x", 1), ("y", 1), ("z", 2)])
        );
        assert!(walk(&["nobody"], &edges, 3).is_empty());
    }
}

//! The packer as a DataFusion operator (DESIGN.md §5): the [`BundlePack`] kernel of a
//! [`TwoInputNode`](crate::operator::TwoInputNode) over the candidate representations (with
//! their lexical-v1 scores) and the graph edges of every revision, of which it keeps the
//! candidates' own. It decides eligibility, expands, boosts, ranks, applies MAX OBJECTS and
//! runs both packing passes, and emits one row per packed item (in rank order), one per
//! rejected object, and a summary row.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result as DfResult};
use serde_json::{Value, json};

use signalql_udfs::strings::StringColumn;

use super::candidates::CandidateFold;
use super::select::{Candidate, Edge, Reason};
use super::{Decisions, Item, PackParams, decide};
use crate::operator::Kernel;

/// The output schema: `kind` (`item`, `rejected`, `summary`), `object`, `reason`, `item` (the
/// bundle item as JSON), `explain` (its explanation entry as JSON).
pub fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("object", DataType::Utf8, true),
        Field::new("reason", DataType::Utf8, true),
        Field::new("item", DataType::Utf8, true),
        Field::new("explain", DataType::Utf8, true),
    ]))
}

/// The packer as a [`Kernel`]: the first input is the candidate rows, the second the edges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct BundlePack(pub PackParams);

impl Kernel for BundlePack {
    const NAME: &'static str = "BundlePack";

    fn schema(&self) -> SchemaRef {
        output_schema()
    }

    fn params(&self) -> String {
        format!(
            "budget={} max_objects={} max_depth={} estimator={}{}",
            self.0.budget,
            self.0.max_objects,
            self.0.max_depth,
            self.0.estimator.name(),
            match &self.0.subject {
                Some(node) => format!(" subject={node}"),
                None => String::new(),
            }
        )
    }

    /// The candidates, folded as the candidate rows stream in.
    type Acc = CandidateFold;

    fn start(&self) -> Self::Acc {
        CandidateFold::default()
    }

    fn fold(&self, acc: &mut Self::Acc, batch: RecordBatch) -> DfResult<()> {
        acc.fold(&batch, &self.0)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        // The batch's strings are copied out, so the batch itself is freed here.
        Ok(())
    }

    fn finish(&self, acc: Self::Acc, edges: &[RecordBatch]) -> DfResult<RecordBatch> {
        let candidates = acc.finish();
        let columns = edge_columns(edges)?;
        let edges = edges_from(&columns, &candidates);
        let decisions = decide(&self.0, &candidates, &edges);
        let out = encode(&decisions);
        drop(edges);
        super::free_in_background((candidates, columns, decisions));
        out
    }
}

/// One edge batch's columns: `a`, `b`, `relation`, and the `object_id` and `revision` the
/// edge belongs to.
struct EdgeCols {
    a: StringColumn,
    b: StringColumn,
    relation: StringColumn,
    object_id: StringColumn,
    revision: Int64Array,
}

/// The columns of each edge batch.
fn edge_columns(batches: &[RecordBatch]) -> DfResult<Vec<EdgeCols>> {
    batches
        .iter()
        .map(|b| {
            let s = |i: usize| StringColumn::cast_from(b.column(i).as_ref());
            let revision = b
                .column(4)
                .as_primitive_opt::<Int64Type>()
                .cloned()
                .ok_or_else(|| DataFusionError::Internal("edge revision column".into()))?;
            Ok(EdgeCols {
                a: s(0)?,
                b: s(1)?,
                relation: s(2)?,
                object_id: s(3)?,
                revision,
            })
        })
        .collect()
}

/// The edges of the selected revisions (each candidate's own), borrowing their names from the
/// batches' columns.
fn edges_from<'a>(columns: &'a [EdgeCols], candidates: &[Candidate]) -> Vec<Edge<'a>> {
    let selected: HashMap<&str, i64> = candidates
        .iter()
        .map(|c| (c.id.as_str(), c.revision))
        .collect();
    let mut out = Vec::new();
    for c in columns {
        for i in 0..c.a.len() {
            if c.a.is_null(i) || c.b.is_null(i) {
                continue;
            }
            // An edge of no object (a relationship between entities) belongs to the graph
            // whatever revisions are selected; an object's edge, to its selected revision only.
            let global = c.object_id.is_null(i) && c.revision.is_null(i);
            if !global
                && (c.object_id.is_null(i)
                    || c.revision.is_null(i)
                    || selected.get(c.object_id.value(i)) != Some(&c.revision.value(i)))
            {
                continue;
            }
            out.push(Edge {
                a: c.a.value(i),
                b: c.b.value(i),
                relation: if c.relation.is_null(i) {
                    ""
                } else {
                    c.relation.value(i)
                },
            });
        }
    }
    // Duplicates are harmless: expansion deduplicates each node's adjacency.
    out
}

/// The decisions as the operator's rows.
fn encode(d: &Decisions) -> DfResult<RecordBatch> {
    let mut kind = Vec::new();
    let mut object: Vec<Option<String>> = Vec::new();
    let mut reason: Vec<Option<&str>> = Vec::new();
    let mut item: Vec<Option<String>> = Vec::new();
    let mut explain: Vec<Option<String>> = Vec::new();
    for (it, ex) in d.items.iter().zip(&d.explained) {
        kind.push("item");
        object.push(Some(it.object.clone()));
        reason.push(None);
        item.push(Some(
            serde_json::to_string(it).map_err(|e| DataFusionError::External(Box::new(e)))?,
        ));
        explain.push(Some(ex.to_string()));
    }
    for (o, r) in &d.rejected {
        kind.push("rejected");
        object.push(Some(o.clone()));
        reason.push(Some(r.as_str()));
        item.push(None);
        explain.push(None);
    }
    kind.push("summary");
    object.push(None);
    reason.push(None);
    item.push(Some(
        json!({"used": d.used, "considered": d.considered, "seeds": d.seeds, "expanded": d.expanded, "scanned": d.scanned}).to_string(),
    ));
    explain.push(None);
    Ok(RecordBatch::try_new(
        output_schema(),
        vec![
            Arc::new(StringArray::from(kind)),
            Arc::new(StringArray::from(object)),
            Arc::new(StringArray::from(reason)),
            Arc::new(StringArray::from(item)),
            Arc::new(StringArray::from(explain)),
        ],
    )?)
}

/// The decisions back from the operator's rows.
pub fn decode(batches: &[RecordBatch]) -> crate::error::Result<Decisions> {
    let bad = |m: &str| crate::error::Error::internal(format!("BundlePackExec output: {m}"));
    let mut d = Decisions::default();
    for b in batches {
        let s = |i: usize| StringColumn::try_new(b.column(i).as_ref());
        let (kind, object, reason, item, explain) = (s(0)?, s(1)?, s(2)?, s(3)?, s(4)?);
        for i in 0..b.num_rows() {
            match kind.value(i) {
                "item" => {
                    let it: Item =
                        serde_json::from_str(item.value(i)).map_err(|e| bad(&e.to_string()))?;
                    let ex: Value =
                        serde_json::from_str(explain.value(i)).map_err(|e| bad(&e.to_string()))?;
                    d.items.push(it);
                    d.explained.push(ex);
                }
                "rejected" => {
                    let r = Reason::ALL
                        .iter()
                        .find(|r| r.as_str() == reason.value(i))
                        .ok_or_else(|| bad("unknown reason"))?;
                    d.rejected.push((object.value(i).to_string(), *r));
                }
                "summary" => {
                    let v: Value =
                        serde_json::from_str(item.value(i)).map_err(|e| bad(&e.to_string()))?;
                    let n = |k: &str| v[k].as_u64().unwrap_or(0);
                    d.used = n("used");
                    d.considered = n("considered");
                    d.seeds = n("seeds");
                    d.expanded = n("expanded");
                    d.scanned = serde_json::from_value(v["scanned"].clone())
                        .map_err(|e| bad(&e.to_string()))?;
                }
                other => return Err(bad(&format!("unknown row kind {other}"))),
            }
        }
    }
    Ok(d)
}

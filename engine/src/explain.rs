//! `EXPLAIN q` and `EXPLAIN ANALYZE q` (DESIGN.md §7, context-runtime.md §6.1; docs/runtime.md).
//!
//! `EXPLAIN` tells what a statement would do without running it: its canonical text, the
//! tables it reads (files, bytes and rows from the Parquet footers), its DataFusion logical and
//! physical plans, the SQL DataFusion's unparser gives for it, the estimate (DataFusion's of
//! the result; the footers' of what the scans read after pruning row groups by statistics)
//! and the limits that apply. `EXPLAIN ANALYZE` also runs it, and reports per operator what it
//! did (DataFusion's metrics), the scans' pruning, and each estimate beside its actual value.

use std::sync::Arc;

use datafusion::execution::SessionState;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::Opened;
use crate::error::Result;
use crate::footprint::{self, Footprint};
use crate::record::Run;

/// The JSON object `EXPLAIN q` answers (`EXPLAIN ANALYZE` fills `operators`, `pruning` and
/// `actual`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explained {
    /// The version of the runtime form (context-runtime.md; engine/src/forms.rs).
    #[serde(default = "crate::forms::runtime_forms")]
    pub spec_version: String,
    pub canonical_query: String,
    pub sources: Vec<SourceInfo>,
    pub logical_plan: String,
    pub physical_plan: String,
    /// The SQL DataFusion's unparser gives for the plan; null where it cannot express it.
    pub sql: Option<String>,
    pub estimate: Estimate,
    pub limits: Value,
    /// EXPLAIN ANALYZE: each operator of each plan run, in plan order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators: Option<Vec<Operator>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruning: Option<Pruning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<Actual>,
    /// Fields this version does not know, kept on a round trip.
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// A table the statement reads. Sizes are null for a caller whose policy filters the table
/// (they would count rows it may not see).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub table: String,
    /// Files and bytes of the table's listing (after time-partition pruning).
    pub files: Option<u64>,
    pub bytes: Option<u64>,
    /// Rows of the files the plan scans, from their footers (a file read by two scans counted
    /// once); null when it scans none.
    #[serde(default)]
    pub rows: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// What the statement is expected to return and read, from metadata alone. Null where there is
/// no estimate, and for a caller whose policy filters what is read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Result rows and bytes, DataFusion's estimate from the files' statistics.
    pub rows: Option<u64>,
    pub bytes: Option<u64>,
    /// What the scans read after pruning row groups by statistics (docs/runtime.md).
    #[serde(default)]
    pub scanned_files: Option<u64>,
    #[serde(default)]
    pub scanned_row_groups: Option<u64>,
    #[serde(default)]
    pub scanned_rows: Option<u64>,
    #[serde(default)]
    pub scanned_bytes: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// One operator of a plan that ran, with DataFusion's metrics summed over its partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operator {
    /// Which plan of the statement (0 first: a staged query, DESCRIBE and CONTEXT FOR run
    /// several).
    pub plan: usize,
    /// Depth in the plan tree (0: the root).
    pub depth: usize,
    pub name: String,
    /// The operator as the physical plan prints it.
    pub detail: String,
    pub rows: Option<u64>,
    pub bytes: Option<u64>,
    /// Compute time (DataFusion's `elapsed_compute`), in milliseconds.
    pub elapsed_ms: Option<f64>,
    /// Peak memory the operator reserved (its partitions' peaks summed).
    pub memory_bytes: Option<u64>,
    pub spilled_bytes: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// The Parquet scans' pruning, summed over every scan of every plan that ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pruning {
    /// File ranges opened, and those pruned whole by their statistics.
    pub files: u64,
    pub files_pruned: u64,
    /// Row groups considered, and those pruned by statistics and by bloom filters.
    pub row_groups: u64,
    pub row_groups_pruned_statistics: u64,
    pub row_groups_pruned_bloom_filter: u64,
    /// Pages pruned by the page index, and their rows.
    pub pages_pruned: u64,
    pub page_rows_pruned: u64,
    /// Rows a pushed-down filter removed while decoding.
    pub pushdown_rows_pruned: u64,
    pub bytes_scanned: u64,
    /// File ranges that read a slice of a row group's rows (docs/scan.md, "A row group cut
    /// into slices"). Each slice is a file range of its own, and the counts above count its
    /// row group, and the pages the page index pruned in it, once per slice.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub row_group_slices: u64,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the run did, beside each estimate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Actual {
    /// Rows of the answer: the envelope's rows, the bundle's items, DESCRIBE's records.
    pub rows: u64,
    /// Arrow bytes of the result batches of the statement's plans.
    pub bytes: u64,
    /// What the scans read; null for a caller whose policy filters what is read.
    pub scanned_rows: Option<u64>,
    pub scanned_bytes: Option<u64>,
    pub elapsed_ms: f64,
    /// Time spent planning physically and executing, over every plan.
    pub plan_ms: f64,
    pub execute_ms: f64,
    /// The peak of the engine's memory pool while the statement ran (statements running at
    /// the same time in one server share the pool); null when the session's pool does not
    /// record it (an application's own session).
    pub peak_memory_bytes: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// What simulate answers (context-runtime.md §6.2, as it applies to a query engine): what the
/// statement's scans would read after pruning, from the files' metadata, and the time it
/// would take, from the time model over the engine's traced runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Simulation {
    #[serde(default = "crate::forms::runtime_forms")]
    pub spec_version: String,
    pub canonical_query: String,
    pub sources: Vec<SourceInfo>,
    /// Files, row groups, rows and bytes the scans would read after pruning.
    pub files: Option<u64>,
    pub row_groups: Option<u64>,
    pub rows: Option<u64>,
    pub bytes: Option<u64>,
    /// DataFusion's estimate of the result's rows.
    pub result_rows: Option<u64>,
    /// Milliseconds, with its interval (p = 0.9); null before any traced run.
    pub expected_elapsed_ms: Option<crate::trace::Interval>,
    /// The traced runs the time model learnt from.
    pub based_on_samples: u64,
    pub note: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

impl Simulation {
    pub(crate) fn new(
        plan: Explained,
        expected_elapsed_ms: Option<crate::trace::Interval>,
        based_on_samples: u64,
    ) -> Simulation {
        let note = match based_on_samples {
            0 => Some(
                "no measured runs yet, so no time estimate: run statements with --trace (or \
                 [trace] enabled = true) and simulate learns from them"
                    .to_string(),
            ),
            n if n < 20 => Some(format!(
                "the time interval comes from only {n} measured run(s) and is wide"
            )),
            _ => None,
        };
        let e = plan.estimate;
        Simulation {
            spec_version: crate::forms::runtime_forms(),
            canonical_query: plan.canonical_query,
            sources: plan.sources,
            files: e.scanned_files,
            row_groups: e.scanned_row_groups,
            rows: e.scanned_rows,
            bytes: e.scanned_bytes,
            result_rows: e.rows,
            expected_elapsed_ms,
            based_on_samples,
            note,
            unknown: Default::default(),
        }
    }
}

/// The sources of a statement and the part of its estimate its scans give, from the footers
/// of the files `plans` scan. `filtered`: the caller's policy filters a table, so sizes are
/// not shown.
pub(crate) async fn sources_and_scan_estimate(
    state: &SessionState,
    plans: &[Arc<dyn ExecutionPlan>],
    opened: &[Opened],
    filtered: bool,
) -> Result<(Vec<SourceInfo>, Estimate)> {
    let mut files: Vec<(String, Footprint)> = Vec::new();
    for p in plans {
        files.extend(footprint::of_plan(state, p.as_ref()).await?);
    }
    let bare = |l: &str| l.trim_start_matches('/').to_string();
    let sources = opened
        .iter()
        .map(|o| {
            // A file two scans read holds its rows once.
            let mut mine: Vec<&(String, Footprint)> = files
                .iter()
                .filter(|(l, _)| o.files.iter().any(|(f, _)| bare(f) == *l))
                .collect();
            mine.sort_by(|a, b| a.0.cmp(&b.0));
            mine.dedup_by(|a, b| a.0 == b.0);
            // The table's rows as opened (every file's footer); else those of the files
            // its scans read.
            let rows = o.rows.or_else(|| {
                (!mine.is_empty()).then(|| footprint::total(mine.iter().map(|(_, f)| f)).rows)
            });
            SourceInfo {
                table: o.table.clone(),
                files: Some(o.files.len() as u64),
                bytes: Some(o.bytes()),
                rows,
                unknown: Default::default(),
            }
        })
        .map(|s| match filtered {
            false => s,
            true => SourceInfo {
                files: None,
                bytes: None,
                rows: None,
                ..s
            },
        })
        .collect();
    let total = footprint::total(files.iter().map(|(_, f)| f));
    let known = |v: u64| Some(v).filter(|_| !filtered);
    let estimate = Estimate {
        scanned_files: known(total.files),
        scanned_row_groups: known(total.row_groups_read),
        scanned_rows: known(total.rows_read),
        scanned_bytes: known(total.bytes_read),
        ..Estimate::default()
    };
    Ok((sources, estimate))
}

/// DataFusion's estimate of the rows and bytes `plan` returns, from the files' statistics.
pub(crate) fn result_estimate(plan: &dyn ExecutionPlan) -> Result<(Option<u64>, Option<u64>)> {
    let stats = datafusion::physical_plan::StatisticsContext::default()
        .compute(plan, &datafusion::physical_plan::StatisticsArgs::new())?;
    Ok((
        stats.num_rows.get_value().map(|n| *n as u64),
        stats.total_byte_size.get_value().map(|n| *n as u64),
    ))
}

/// Each operator of each plan that ran.
pub(crate) fn operators(runs: &[Run]) -> Vec<Operator> {
    fn walk(plan: &dyn ExecutionPlan, index: usize, depth: usize, out: &mut Vec<Operator>) {
        let m = plan.metrics().unwrap_or_default();
        let sum =
            |f: fn(&MetricValue) -> bool| m.sum(|x| f(x.value())).map(|v| v.as_usize() as u64);
        out.push(Operator {
            plan: index,
            depth,
            name: plan.name().to_string(),
            detail: datafusion::physical_plan::displayable(plan)
                .one_line()
                .to_string()
                .trim_end()
                .to_string(),
            rows: m.output_rows().map(|v| v as u64),
            bytes: sum(|v| matches!(v, MetricValue::OutputBytes(_))),
            elapsed_ms: m.elapsed_compute().map(|ns| ns as f64 / 1e6),
            memory_bytes: sum(|v| matches!(v, MetricValue::PeakMemoryUsage { .. })),
            spilled_bytes: m.spilled_bytes().map(|v| v as u64),
            unknown: Default::default(),
        });
        for c in plan.children() {
            walk(c.as_ref(), index, depth + 1, out);
        }
    }
    let mut out = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        walk(r.physical.as_ref(), i, 0, &mut out);
    }
    out
}

/// The scans' pruning over every plan that ran.
pub(crate) fn pruning(runs: &[Run]) -> Pruning {
    fn pruned_matched(m: &MetricsSet, name: &str) -> (u64, u64) {
        match m.sum_by_name(name) {
            Some(MetricValue::PruningMetrics {
                pruning_metrics, ..
            }) => (
                pruning_metrics.pruned() as u64,
                pruning_metrics.matched() as u64,
            ),
            _ => (0, 0),
        }
    }
    fn count(m: &MetricsSet, name: &str) -> u64 {
        m.sum_by_name(name).map_or(0, |v| v.as_usize() as u64)
    }
    fn walk(plan: &dyn ExecutionPlan, p: &mut Pruning) {
        if plan.children().is_empty()
            && let Some(m) = plan.metrics()
            && m.sum_by_name("bytes_scanned").is_some()
        {
            let (files_pruned, files_kept) = pruned_matched(&m, "files_ranges_pruned_statistics");
            let (rg_stats, rg_kept) = pruned_matched(&m, "row_groups_pruned_statistics");
            let (rg_bloom, _) = pruned_matched(&m, "row_groups_pruned_bloom_filter");
            p.files += files_pruned + files_kept;
            p.files_pruned += files_pruned;
            p.row_groups += rg_stats + rg_kept;
            p.row_groups_pruned_statistics += rg_stats;
            p.row_groups_pruned_bloom_filter += rg_bloom;
            p.pages_pruned += pruned_matched(&m, "page_index_pages_pruned").0;
            p.page_rows_pruned += pruned_matched(&m, "page_index_rows_pruned").0;
            p.pushdown_rows_pruned += count(&m, "pushdown_rows_pruned");
            p.bytes_scanned += count(&m, "bytes_scanned");
            p.row_group_slices += crate::distributed::row_group_slices(plan) as u64;
        }
        for c in plan.children() {
            walk(c.as_ref(), p);
        }
    }
    let mut p = Pruning::default();
    for r in runs {
        walk(r.physical.as_ref(), &mut p);
    }
    p
}

/// `EXPLAIN` as a person reads it: the header, the estimate, the plans, and for EXPLAIN
/// ANALYZE the operators, the pruning and the actual figures.
pub fn render(x: &Explained) -> String {
    let n = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let mut out = format!("-- {}\n-- sources:", x.canonical_query);
    for s in &x.sources {
        out.push_str(&format!(
            "\n--   {}: {} files, {} bytes, {} rows",
            s.table,
            n(s.files),
            n(s.bytes),
            n(s.rows)
        ));
    }
    let e = &x.estimate;
    out.push_str(&format!(
        "\n-- estimate: {} result rows; scans read {} files, {} row groups, {} rows, {} bytes\n",
        n(e.rows),
        n(e.scanned_files),
        n(e.scanned_row_groups),
        n(e.scanned_rows),
        n(e.scanned_bytes),
    ));
    if let Some(a) = &x.actual {
        out.push_str(&format!(
            "-- actual: {} result rows; scans read {} rows, {} bytes; {:.1} ms ({:.1} planning, \
             {:.1} executing); peak memory {} bytes\n",
            a.rows,
            n(a.scanned_rows),
            n(a.scanned_bytes),
            a.elapsed_ms,
            a.plan_ms,
            a.execute_ms,
            n(a.peak_memory_bytes),
        ));
    }
    if let Some(p) = &x.pruning {
        out.push_str(&format!(
            "-- pruning: {} of {} files, {} of {} row groups by statistics ({} by bloom \
             filters), {} pages ({} rows) by the page index; {} bytes scanned\n",
            p.files_pruned,
            p.files,
            p.row_groups_pruned_statistics,
            p.row_groups,
            p.row_groups_pruned_bloom_filter,
            p.pages_pruned,
            p.page_rows_pruned,
            p.bytes_scanned,
        ));
        if p.row_group_slices > 0 {
            out.push_str(&format!(
                "--   {} of those file ranges read slices of a row group (each counts its row \
                 group and pruned pages once)\n",
                p.row_group_slices
            ));
        }
    }
    out.push_str(&format!(
        "\n-- logical plan\n{}\n\n-- physical plan\n{}\n-- SQL\n{}\n",
        x.logical_plan,
        x.physical_plan,
        x.sql
            .as_deref()
            .unwrap_or("-- the unparser cannot express this plan")
    ));
    if let Some(ops) = &x.operators {
        out.push_str("\n-- operators (plan, rows, bytes, compute ms, peak memory)\n");
        for o in ops {
            out.push_str(&format!(
                "{:>2} {}{}  rows={} bytes={} ms={} mem={}\n",
                o.plan,
                "  ".repeat(o.depth),
                o.name,
                n(o.rows),
                n(o.bytes),
                o.elapsed_ms.map_or("?".into(), |v| format!("{v:.2}")),
                n(o.memory_bytes),
            ));
        }
    }
    out
}

/// simulate as a person reads it.
pub fn render_simulation(s: &Simulation) -> String {
    let n = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let time = match &s.expected_elapsed_ms {
        Some(i) => format!(
            "{:.1} ms (p90 interval {:.1} to {:.1} ms, from {} runs)",
            i.point, i.low, i.high, s.based_on_samples
        ),
        None => "unknown (no measured runs yet)".to_string(),
    };
    let mut out = format!(
        "-- {}\nreads {} files, {} row groups, {} rows, {} bytes after pruning\nresult rows \
         (estimated): {}\ntime: {time}\n",
        s.canonical_query,
        n(s.files),
        n(s.row_groups),
        n(s.rows),
        n(s.bytes),
        n(s.result_rows),
    );
    if let Some(note) = &s.note {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An EXPLAIN ANALYZE object from a later 0.x engine, with fields this one does not know at
    /// every level, reads and writes back unchanged; a 1.x one is refused.
    #[test]
    fn the_explain_form_keeps_unknown_fields_and_refuses_a_newer_major() {
        let v = json!({
            "spec_version": "0.3",
            "canonical_query": "FROM events\nRETURN count",
            "sources": [{"table": "events", "files": 1, "bytes": 10, "rows": 5, "format": "parquet"}],
            "logical_plan": "…", "physical_plan": "…", "sql": null,
            "estimate": {"rows": 1, "bytes": null, "scanned_files": 1, "scanned_row_groups": 1,
                         "scanned_rows": 5, "scanned_bytes": 9, "confidence": 0.5},
            "limits": {"max_result_rows": 10000},
            "operators": [{"plan": 0, "depth": 0, "name": "ProjectionExec", "detail": "x",
                           "rows": 1, "bytes": 8, "elapsed_ms": 0.1, "memory_bytes": null,
                           "spilled_bytes": null, "cpu_ns": 7}],
            "pruning": {"files": 1, "files_pruned": 0, "row_groups": 1,
                        "row_groups_pruned_statistics": 0, "row_groups_pruned_bloom_filter": 0,
                        "pages_pruned": 0, "page_rows_pruned": 0, "pushdown_rows_pruned": 0,
                        "bytes_scanned": 9, "dictionary_pruned": 2},
            "actual": {"rows": 1, "bytes": 8, "scanned_rows": 5, "scanned_bytes": 9,
                       "elapsed_ms": 1.5, "plan_ms": 0.5, "execute_ms": 1.0,
                       "peak_memory_bytes": 64, "spill_files": 0},
            "warnings": ["later"]
        });
        let text = serde_json::to_vec(&v).unwrap();
        let x: Explained =
            crate::forms::read("EXPLAIN", &text, crate::forms::RUNTIME_FORMS).unwrap();
        assert_eq!(x.unknown["warnings"], json!(["later"]));
        assert_eq!(serde_json::to_value(&x).unwrap(), v);
        let mut newer = v.clone();
        newer["spec_version"] = "1.2".into();
        let e = crate::forms::read::<Explained>(
            "EXPLAIN",
            &serde_json::to_vec(&newer).unwrap(),
            crate::forms::RUNTIME_FORMS,
        )
        .unwrap_err();
        assert!(e.message.contains("1.2"), "{}", e.message);
    }
}

//! `EXPLAIN q` (DESIGN.md §7, context-runtime.md's EXPLAIN object): what a statement would do,
//! without running it — its canonical text, the tables it reads (files and bytes as listed),
//! its DataFusion logical and physical plans, the SQL DataFusion's unparser gives for it, the
//! rows and bytes DataFusion estimates from the Parquet metadata after pruning, and the limits
//! that apply. `EXPLAIN ANALYZE` is not built yet (`capability_error`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The JSON object `EXPLAIN q` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explained {
    /// The SignalQL version of the statement's language (`0.3`, or `0.5` for context).
    pub spec_version: String,
    pub canonical_query: String,
    pub sources: Vec<SourceInfo>,
    pub logical_plan: String,
    pub physical_plan: String,
    /// The SQL DataFusion's unparser gives for the plan; null where it cannot express it.
    pub sql: Option<String>,
    pub estimate: Estimate,
    pub limits: Value,
}

/// A table the statement reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub table: String,
    /// Files and bytes of the table's listing (after time-partition pruning); null for a
    /// caller whose policy filters the table (they would count rows it may not see).
    pub files: Option<u64>,
    pub bytes: Option<u64>,
}

/// DataFusion's estimate of the statement's output from the files' metadata (null where it
/// has none, and for a caller whose policy filters what is read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub rows: Option<u64>,
    pub bytes: Option<u64>,
}

/// `EXPLAIN` as a person reads it: the header, then the plans.
pub fn render(x: &Explained) -> String {
    let mut out = format!("-- {}\n-- sources:", x.canonical_query);
    for s in &x.sources {
        let n = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        out.push_str(&format!(
            " {} ({} files, {} bytes);",
            s.table,
            n(s.files),
            n(s.bytes)
        ));
    }
    let n = |v: Option<u64>| v.map_or("unknown".to_string(), |v| v.to_string());
    out.push_str(&format!(
        "\n-- estimate: {} rows, {} bytes\n\n-- logical plan\n{}\n\n-- physical plan\n{}\n-- SQL\n{}\n",
        n(x.estimate.rows),
        n(x.estimate.bytes),
        x.logical_plan,
        x.physical_plan,
        x.sql
            .as_deref()
            .unwrap_or("-- the unparser cannot express this plan")
    ));
    out
}

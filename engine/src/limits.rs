//! The engine's limits (DESIGN.md §4): what they are, their defaults, and their JSON form in
//! `metadata.limits`. Where each is enforced: the window, step, bucket and depth caps in
//! lowering (`lower/`), the result-row cap in the plan's fetch and the envelope
//! ([`crate::execute`]), the memory pool in the session's runtime ([`crate::session`]) and the
//! timeout around every plan run ([`crate::execute`]), the group cap on every grouped
//! aggregate and dense series ([`crate::lower::groups`]). A dataset's `[limits]` table in
//! `signalql.toml` sets any of them ([`Limits::with_config`]).

use serde::Serialize;
use serde_json::Value;

/// Engine limits (DESIGN.md §4), all configurable, reported in `metadata.limits`.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    pub max_window_days: u64,
    pub max_funnel_steps: u64,
    /// Groups of one aggregate: rows of a grouped result, and for a dense series its
    /// buckets × groups (docs/semantics.md).
    pub max_groups: u64,
    pub max_result_rows: u64,
    pub max_buckets: u64,
    pub max_traverse_depth: u64,
    pub query_memory_bytes: u64,
    pub timeout_seconds: u64,
    /// The largest `BUDGET n TOKENS` of a CONTEXT FOR.
    pub max_budget_tokens: u64,
    /// Requests of one principal running at once on `signalql serve` (beyond: HTTP 429).
    pub max_concurrent_requests: u64,
    /// The memory of the resident context index's generations held at once (docs/index.md,
    /// "Memory"): the least recently used are dropped to stay under it, and a generation
    /// larger than it is not held (the Parquet plan answers).
    pub resident_memory_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_window_days: 366,
            max_funnel_steps: 10,
            max_groups: 100_000,
            max_result_rows: 10_000,
            max_buckets: 10_000,
            max_traverse_depth: crate::lower::traverse::MAX_DEPTH,
            query_memory_bytes: 4 << 30,
            timeout_seconds: 60,
            max_budget_tokens: crate::context::MAX_BUDGET,
            max_concurrent_requests: 8,
            resident_memory_bytes: 2 << 30,
        }
    }
}

impl Limits {
    /// These limits with a dataset's `[limits]` over them.
    pub fn with_config(mut self, c: &signalql_catalog::LimitsConfig) -> Limits {
        let set = |to: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *to = v;
            }
        };
        set(&mut self.max_window_days, c.max_window_days);
        set(&mut self.max_funnel_steps, c.max_funnel_steps);
        set(&mut self.max_groups, c.max_groups);
        set(&mut self.max_result_rows, c.max_result_rows);
        set(&mut self.max_buckets, c.max_buckets);
        set(&mut self.max_traverse_depth, c.max_traverse_depth);
        set(&mut self.query_memory_bytes, c.memory_bytes);
        set(&mut self.timeout_seconds, c.timeout_seconds);
        set(&mut self.max_budget_tokens, c.max_budget_tokens);
        set(&mut self.max_concurrent_requests, c.max_concurrent_requests);
        set(&mut self.resident_memory_bytes, c.resident_memory_bytes);
        self
    }

    /// `metadata.limits` as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

//! The engine's limits (DESIGN.md §4): what they are, their defaults, and their JSON form in
//! `metadata.limits`. Where each is enforced: the window, step, bucket and depth caps in
//! lowering (`lower/`), the result-row cap in the plan's fetch and the envelope
//! ([`crate::execute`]), the memory pool in the session's runtime ([`crate::session`]) and the
//! timeout around every plan run ([`crate::execute`]).

use serde::Serialize;
use serde_json::Value;

/// Engine limits (DESIGN.md §4), all configurable, reported in `metadata.limits`. Group
/// cardinality has no separate cap: it is bounded by the query memory pool, and what is
/// returned by `max_result_rows` (see docs/semantics.md).
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    pub max_window_days: u64,
    pub max_funnel_steps: u64,
    pub max_result_rows: u64,
    pub max_buckets: u64,
    pub max_traverse_depth: u64,
    pub query_memory_bytes: u64,
    pub timeout_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_window_days: 366,
            max_funnel_steps: 10,
            max_result_rows: 10_000,
            max_buckets: 10_000,
            max_traverse_depth: crate::lower::traverse::MAX_DEPTH,
            query_memory_bytes: 4 << 30,
            timeout_seconds: 60,
        }
    }
}

impl Limits {
    /// `metadata.limits` as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

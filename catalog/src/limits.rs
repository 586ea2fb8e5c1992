//! `[limits]`: the engine's limits (DESIGN.md §4) as `signalql.toml` and a principal of
//! `policy.toml` set them, each optional.

use serde::Deserialize;

/// `[limits]` of `signalql.toml` (or `[principals.NAME.limits]` of `policy.toml`): any of the
/// engine's limits (DESIGN.md §4).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_window_days: Option<u64>,
    pub max_funnel_steps: Option<u64>,
    pub max_groups: Option<u64>,
    pub max_result_rows: Option<u64>,
    pub max_buckets: Option<u64>,
    pub max_traverse_depth: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub timeout_seconds: Option<u64>,
    pub max_budget_tokens: Option<u64>,
    /// Requests one principal may have running at once on `signalql serve`.
    pub max_concurrent_requests: Option<u64>,
    /// What the resident context index may hold, in all (docs/index.md, "Memory").
    pub resident_memory_bytes: Option<u64>,
}

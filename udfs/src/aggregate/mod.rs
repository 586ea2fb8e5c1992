//! Aggregate functions (UDAFs), one per file; `funnel_chain` is the funnel's per-user search.

pub mod count_distinct;
pub mod funnel;
pub mod funnel_chain;
pub mod percentile;
pub mod stats;
pub mod trend;

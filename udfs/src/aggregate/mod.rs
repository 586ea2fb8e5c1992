//! Aggregate functions (UDAFs), one per file; `funnel_chain` is the funnel's per-user search.

pub mod count_distinct;
pub mod funnel;
pub mod funnel_chain;
pub mod percentile;
pub mod stats;
pub mod trend;

use datafusion::arrow::array::{Array, BooleanArray};

/// Whether row `i` passes an aggregate's FILTER (none: every row; NULL: no).
pub(crate) fn passes(filter: Option<&BooleanArray>, i: usize) -> bool {
    filter.is_none_or(|f| f.is_valid(i) && f.value(i))
}

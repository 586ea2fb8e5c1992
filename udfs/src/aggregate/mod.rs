//! Aggregate functions (UDAFs), one per file.

pub mod percentile;
pub mod stats;

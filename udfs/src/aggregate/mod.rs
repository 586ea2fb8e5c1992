//! Aggregate functions (UDAFs), one per file.

pub mod stats;

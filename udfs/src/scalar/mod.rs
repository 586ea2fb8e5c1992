//! Scalar functions, one per file.

pub mod json_get;

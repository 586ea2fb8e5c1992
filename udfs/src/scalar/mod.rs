//! Scalar functions (UDFs), one per file.

pub mod file_rank;
pub mod json_get;
pub mod lexical;
pub mod month_start;
pub mod text_time;
pub mod token_estimate;

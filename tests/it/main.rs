//! The integration tests, in one binary so `cargo test` links DataFusion once for all of them
//! (the golden cases keep their own harness, tests/golden.rs).

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod context;
mod data_sources;
mod embed;
mod envelope;
mod extended;
mod mcp;
mod s3;

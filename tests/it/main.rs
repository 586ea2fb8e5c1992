//! The integration tests, in one binary so `cargo test` links DataFusion once for all of them
//! (the golden cases keep their own harness, tests/golden.rs).

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod context;
mod data_sources;
mod embed;
mod envelope;
mod execution;
mod extended;
mod mcp;
mod module_cycles;
mod s3;

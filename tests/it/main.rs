//! The integration tests of every crate, in one binary so `cargo test` links DataFusion once
//! for all of them (the golden cases keep their own harness, tests/golden.rs): the catalog's
//! (`catalog_*`), the syntax layer's (`syntax_*`) and the engine's through the facade.

#[path = "../common/mod.rs"]
mod common;

mod bad_data;
mod catalog_generators;
mod catalog_ingest;
mod catalog_objects;
mod cli;
mod cluster;
mod context;
mod crash;
mod data_sources;
mod docs;
mod embed;
mod envelope;
mod execution;
mod explain;
mod extended;
mod foreign;
mod mcp;
mod memory;
mod module_cycles;
mod plan_cache;
mod policy;
mod query_fuzz;
mod resident;
mod s3;
mod scan;
mod serve;
mod shell;
mod syntax_errors;
mod syntax_roundtrip;
mod text_index;
mod trace;

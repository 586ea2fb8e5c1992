//! The catalog's integration tests (generators, event ingest, object ingest), in one binary.

mod gen;
mod ingest;
mod objects;

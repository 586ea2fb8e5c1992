//! The catalog's integration tests (generators, event ingest, object ingest), in one binary.

mod generators;
mod ingest;
mod objects;

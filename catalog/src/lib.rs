//! Dataset layout and table registration for signalql: dataset roots and `signalql.toml`,
//! listing tables over Parquet, ingest writers and the deterministic data generator.

pub mod dataset;

pub use dataset::{Dataset, DatasetConfig, DatasetError, PropertiesEncoding, TableInfo};

pub mod error;
pub mod r#gen;
pub mod ingest;
pub mod write;

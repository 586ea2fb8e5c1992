//! Dataset layout and table registration for signalql: dataset roots and `signalql.toml`,
//! listing tables over Parquet, ingest writers and the deterministic data generator.

pub mod columns;
pub mod commit;
pub mod dataset;
pub mod delta;
pub mod dictionary;
pub mod drift;
pub mod entity_gen;
pub mod error;
pub mod failpoint;
pub mod file;
pub mod folder;
pub mod generator;
pub mod ingest;
pub mod limits;
pub mod mapping;
pub mod metrics;
pub mod objects;
pub mod parts;
pub mod policy;
pub mod storage;
pub mod write;

pub use dataset::{
    Dataset, DatasetConfig, DatasetError, LimitsConfig, PropertiesEncoding, Restriction,
    SkippedFile, TableInfo, check_schema,
};
pub use error::CatalogError;
pub use storage::{ListedFile, Root, StorageError, StorageOptions};

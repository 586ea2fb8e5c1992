//! What a physical plan's Parquet scans would read, from the files' metadata alone (their
//! footers, through DataFusion's file-metadata cache): files, row groups and rows before and
//! after pruning the row groups by their statistics with each scan's predicate, and the
//! compressed bytes of the columns the scan reads. EXPLAIN's `sources` and `estimate`, and
//! simulate, are made from it; nothing is executed.
//!
//! The pruning is DataFusion's own ([`RowGroupAccessPlanFilter::prune_by_statistics`] with
//! the scan's [`PruningPredicate`]), so it keeps what the scan would keep before page-index
//! pruning and bloom filters, which can only skip more.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::physical_plan::ParquetSource;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::SessionState;
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};
use signalql_catalog::folder::{kept_row_groups, read_footer};

use crate::error::{Error, Result};

/// What the scans of a plan (or of one table) would read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Footprint {
    pub files: u64,
    pub row_groups: u64,
    /// Row groups left after pruning by statistics.
    pub row_groups_read: u64,
    pub rows: u64,
    /// Rows of the row groups left.
    pub rows_read: u64,
    /// Compressed bytes of the columns read, in every row group.
    pub bytes: u64,
    /// Compressed bytes of the columns read, in the row groups left.
    pub bytes_read: u64,
}

impl Footprint {
    fn add(&mut self, o: &Footprint) {
        self.files += o.files;
        self.row_groups += o.row_groups;
        self.row_groups_read += o.row_groups_read;
        self.rows += o.rows;
        self.rows_read += o.rows_read;
        self.bytes += o.bytes;
        self.bytes_read += o.bytes_read;
    }
}

/// The footprint of every Parquet file `plan` scans, keyed by the file's location (without a
/// leading `/`). A file scanned by two scans counts for each.
pub async fn of_plan(
    state: &SessionState,
    plan: &dyn ExecutionPlan,
) -> Result<Vec<(String, Footprint)>> {
    let mut out = Vec::new();
    for config in file_scans(plan) {
        let Some(source) = config.file_source().downcast_ref::<ParquetSource>() else {
            continue;
        };
        let store = state.runtime_env().object_store(&config.object_store_url)?;
        let table_schema = config.file_schema();
        let predicate =
            datafusion::datasource::physical_plan::FileSource::filter(source).and_then(|p| {
                PruningPredicateBuilder::new()
                    .with_file_schema(Arc::clone(table_schema))
                    .build(p)
            });
        let read_columns: Option<Vec<String>> = read_column_indices(config).map(|indices| {
            indices
                .iter()
                .map(|i| table_schema.field(*i).name().clone())
                .collect()
        });
        // A file split into byte ranges over partitions is read once.
        let mut files = BTreeMap::new();
        for group in &config.file_groups {
            for f in group.iter() {
                files
                    .entry(f.object_meta.location.to_string())
                    .or_insert_with(|| f.object_meta.clone());
            }
        }
        for (location, meta) in files {
            let metadata = read_footer(state.runtime_env(), store.as_ref(), &meta)
                .await
                .map_err(|e| {
                    Error::io(format!("cannot read the footer of {location}: {e}")).caused_by(e)
                })?;
            let groups = metadata.row_groups();
            let kept = kept_row_groups(&metadata, table_schema, predicate.as_deref(), &location);
            let read_bytes = |g: &datafusion::parquet::file::metadata::RowGroupMetaData| -> u64 {
                g.columns()
                    .iter()
                    .filter(|c| {
                        read_columns.as_ref().is_none_or(|names| {
                            c.column_path()
                                .parts()
                                .first()
                                .is_some_and(|root| names.iter().any(|n| n == root))
                        })
                    })
                    .map(|c| c.compressed_size().max(0) as u64)
                    .sum()
            };
            let mut fp = Footprint {
                files: 1,
                row_groups: groups.len() as u64,
                row_groups_read: kept.len() as u64,
                ..Footprint::default()
            };
            for (i, g) in groups.iter().enumerate() {
                let rows = g.num_rows().max(0) as u64;
                let bytes = read_bytes(g);
                fp.rows += rows;
                fp.bytes += bytes;
                if kept.contains(&i) {
                    fp.rows_read += rows;
                    fp.bytes_read += bytes;
                }
            }
            out.push((location, fp));
        }
    }
    Ok(out)
}

/// The sum of `files`' footprints.
pub fn total<'a>(files: impl IntoIterator<Item = &'a Footprint>) -> Footprint {
    let mut t = Footprint::default();
    for f in files {
        t.add(f);
    }
    t
}

/// The file scans of `plan` (its `DataSourceExec`s over files), in plan order.
pub(crate) fn file_scans(plan: &dyn ExecutionPlan) -> Vec<&FileScanConfig> {
    fn walk<'a>(plan: &'a dyn ExecutionPlan, out: &mut Vec<&'a FileScanConfig>) {
        if let Some(exec) = plan.downcast_ref::<DataSourceExec>()
            && let Some(config) = exec.data_source().downcast_ref::<FileScanConfig>()
        {
            out.push(config);
        }
        for child in plan.children() {
            walk(child.as_ref(), out);
        }
    }
    let mut out = Vec::new();
    walk(plan, &mut out);
    out
}

/// The file columns a scan reads: those its projection refers to (the projection may hold
/// expressions, such as a struct field's `get_field`); all when it has none.
fn read_column_indices(config: &FileScanConfig) -> Option<Vec<usize>> {
    let files = config.file_schema().fields().len();
    config.file_source().projection().map(|p| {
        p.column_indices()
            .into_iter()
            .filter(|i| *i < files)
            .collect()
    })
}

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
use datafusion::parquet::file::metadata::RowGroupMetaData;
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};
use signalql_catalog::folder::{first_page_offset, kept_row_groups, read_footer};
use signalql_catalog::parts::ScanPartsExec;

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
/// leading `/`). A file scanned by two table scans counts for each; the parts of one table
/// scan (a [`ScanPartsExec`]'s, each over some of a file's row groups) count together, and
/// a scan of byte ranges of a file counts the row groups those ranges hold.
pub async fn of_plan(
    state: &SessionState,
    plan: &dyn ExecutionPlan,
) -> Result<Vec<(String, Footprint)>> {
    let mut out = Vec::new();
    for scan in table_scans(plan) {
        // Per file: its object, and per scan part reading it, the part's predicate, the
        // columns it reads and the byte ranges (None: the whole file).
        type Reads<'a> = Vec<(&'a FileScanConfig, Option<Vec<(i64, i64)>>)>;
        let mut files: BTreeMap<String, (object_store::ObjectMeta, Reads)> = BTreeMap::new();
        for config in scan {
            if config
                .file_source()
                .downcast_ref::<ParquetSource>()
                .is_none()
            {
                continue;
            }
            for group in &config.file_groups {
                for f in group.iter() {
                    let (_, reads) = files
                        .entry(f.object_meta.location.to_string())
                        .or_insert_with(|| (f.object_meta.clone(), Vec::new()));
                    let range = f.range.as_ref().map(|r| (r.start, r.end));
                    match reads.iter_mut().find(|(c, _)| std::ptr::eq(*c, config)) {
                        Some((_, ranges)) => match (ranges.as_mut(), range) {
                            (Some(rs), Some(r)) => rs.push(r),
                            (Some(_), None) => *ranges = None,
                            (None, _) => {}
                        },
                        None => reads.push((config, range.map(|r| vec![r]))),
                    }
                }
            }
        }
        for (location, (meta, reads)) in files {
            let Some((first, _)) = reads.first() else {
                continue;
            };
            let store = state.runtime_env().object_store(&first.object_store_url)?;
            let metadata = read_footer(state.runtime_env(), store.as_ref(), &meta)
                .await
                .map_err(|e| {
                    Error::io(format!("cannot read the footer of {location}: {e}")).caused_by(e)
                })?;
            let groups = metadata.row_groups();
            let mut read = vec![false; groups.len()];
            let mut columns: Vec<Option<Vec<String>>> = Vec::new();
            let mut bytes_read = 0;
            for (config, ranges) in &reads {
                let table_schema = config.file_schema();
                let predicate = config
                    .file_source()
                    .downcast_ref::<ParquetSource>()
                    .and_then(datafusion::datasource::physical_plan::FileSource::filter)
                    .and_then(|p| {
                        PruningPredicateBuilder::new()
                            .with_file_schema(Arc::clone(table_schema))
                            .build(p)
                    });
                let names = read_column_names(config);
                let kept =
                    kept_row_groups(&metadata, table_schema, predicate.as_deref(), &location);
                for i in kept {
                    let start = first_page_offset(&groups[i]);
                    let assigned = ranges
                        .as_ref()
                        .is_none_or(|rs| rs.iter().any(|(s, e)| *s <= start && start < *e));
                    if assigned {
                        read[i] = true;
                        bytes_read += column_bytes(&groups[i], names.as_deref());
                    }
                }
                columns.push(names);
            }
            // The columns of the file any part reads (all, when one part reads all).
            let all: Option<Vec<String>> =
                columns.into_iter().try_fold(Vec::new(), |mut acc, c| {
                    c.map(|c| {
                        acc.extend(c);
                        acc
                    })
                });
            let mut fp = Footprint {
                files: 1,
                row_groups: groups.len() as u64,
                row_groups_read: read.iter().filter(|r| **r).count() as u64,
                bytes_read,
                ..Footprint::default()
            };
            for (i, g) in groups.iter().enumerate() {
                let rows = g.num_rows().max(0) as u64;
                fp.rows += rows;
                fp.bytes += column_bytes(g, all.as_deref());
                if read[i] {
                    fp.rows_read += rows;
                }
            }
            out.push((location, fp));
        }
    }
    Ok(out)
}

/// The compressed bytes of `g`'s columns under the top-level columns `names` (all: `None`).
fn column_bytes(g: &RowGroupMetaData, names: Option<&[String]>) -> u64 {
    g.columns()
        .iter()
        .filter(|c| {
            names.is_none_or(|names| {
                c.column_path()
                    .parts()
                    .first()
                    .is_some_and(|root| names.iter().any(|n| n == root))
            })
        })
        .map(|c| c.compressed_size().max(0) as u64)
        .sum()
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

/// The file scans of `plan`, one group per table scan: a [`ScanPartsExec`]'s parts together,
/// any other `DataSourceExec` over files alone; in plan order.
fn table_scans(plan: &dyn ExecutionPlan) -> Vec<Vec<&FileScanConfig>> {
    fn walk<'a>(plan: &'a dyn ExecutionPlan, out: &mut Vec<Vec<&'a FileScanConfig>>) {
        if plan.downcast_ref::<ScanPartsExec>().is_some() {
            out.push(file_scans(plan));
            return;
        }
        if let Some(exec) = plan.downcast_ref::<DataSourceExec>()
            && let Some(config) = exec.data_source().downcast_ref::<FileScanConfig>()
        {
            out.push(vec![config]);
        }
        for child in plan.children() {
            walk(child.as_ref(), out);
        }
    }
    let mut out = Vec::new();
    walk(plan, &mut out);
    out
}

/// The names of the file columns a scan reads: those its projection refers to (the
/// projection may hold expressions, such as a struct field's `get_field`), and those of its
/// predicate when the reader applies it as a row filter; all (`None`) when it has no
/// projection.
fn read_column_names(config: &FileScanConfig) -> Option<Vec<String>> {
    let schema = config.file_schema();
    let files = schema.fields().len();
    let source = config.file_source();
    let mut names: Vec<String> = source.projection().map(|p| {
        p.column_indices()
            .into_iter()
            .filter(|i| *i < files)
            .map(|i| schema.field(i).name().clone())
            .collect()
    })?;
    if let Some(parquet) = source.downcast_ref::<ParquetSource>()
        && parquet.table_parquet_options().global.pushdown_filters
        && let Some(predicate) = datafusion::datasource::physical_plan::FileSource::filter(parquet)
    {
        for c in datafusion::physical_expr::utils::collect_columns(&predicate) {
            if schema.field_with_name(c.name()).is_ok() && !names.iter().any(|n| n == c.name()) {
                names.push(c.name().to_string());
            }
        }
    }
    Some(names)
}

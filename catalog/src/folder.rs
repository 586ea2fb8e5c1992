//! The table over a dataset folder's Parquet files: exactly the files the dataset lists
//! (committed, readable), each read with its own schema as the hint, so that the strings
//! inside structs (`properties`, `traits`, `attributes`) are decoded as `Utf8View` straight
//! from their dictionary pages instead of copied out as `Utf8`; Hive partition values
//! (docs/mapping.md) when the table has partition columns; and each file's byte range
//! narrowed, at plan time, to the row groups its statistics do not rule out, so the scan is
//! split over every core by what it will read, not by the files' whole sizes (docs/scan.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, Result, ScalarValue, Statistics, project_schema};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::{ParquetFormat, transform_schema_to_view};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::listing::helpers::{expr_applicable_for_cols, filter_partitioned_file};
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::datasource::physical_plan::parquet::{
    PagePruningAccessPlanFilter, ParquetAccessPlan, ParquetFileMetrics, RowGroupAccess,
    RowGroupAccessPlanFilter, can_expr_be_pushed_down_with_schemas,
};
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use datafusion::parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, RowGroupMetaData};
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExecBuilder;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;

use crate::parts::ScanPartsExec;
use object_store::{ObjectMeta, ObjectStore};

/// The value Hive writes for a NULL partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// `schema` with every string inside a struct (at any depth, also in the structs of a list)
/// as `Utf8View`. Top-level columns are left as they are: DataFusion reads those as views
/// already (`schema_force_view_types`). Dictionary-encoded children stay dictionaries (the
/// Parquet reader has no `Dictionary(_, Utf8View)`).
pub fn nested_strings_as_views(schema: &Schema) -> Schema {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match nested_views(f.data_type(), false) {
            Some(dt) => Arc::new(f.as_ref().clone().with_data_type(dt)),
            None => Arc::clone(f),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// `dt` with its nested strings as views (`inside`: `dt` is itself a struct child); `None`
/// when nothing changes.
fn nested_views(dt: &DataType, inside: bool) -> Option<DataType> {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 if inside => Some(DataType::Utf8View),
        DataType::Struct(children) => {
            let mut changed = false;
            let fields: Vec<FieldRef> = children
                .iter()
                .map(|c| match nested_views(c.data_type(), true) {
                    Some(t) => {
                        changed = true;
                        Arc::new(c.as_ref().clone().with_data_type(t))
                    }
                    None => Arc::clone(c),
                })
                .collect();
            changed.then(|| DataType::Struct(Fields::from(fields)))
        }
        DataType::List(item) if matches!(item.data_type(), DataType::Struct(_)) => {
            nested_views(item.data_type(), inside)
                .map(|t| DataType::List(Arc::new(item.as_ref().clone().with_data_type(t))))
        }
        DataType::LargeList(item) if matches!(item.data_type(), DataType::Struct(_)) => {
            nested_views(item.data_type(), inside)
                .map(|t| DataType::LargeList(Arc::new(item.as_ref().clone().with_data_type(t))))
        }
        _ => None,
    }
}

/// The `key=value` folders of a file's path below its table folder (`rel`: the path relative
/// to the table folder), in order.
pub fn partitions_of(rel: &str) -> Vec<(String, String)> {
    let mut parts: Vec<&str> = rel.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect()
}

/// Percent-decoding of a partition value (`a%2Fb` → `a/b`), as Hive and Spark encode them.
fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(hex) = std::str::from_utf8(&bytes[i + 1..i + 3])
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| v.to_string())
}

/// The type a `[tables.T.partitions]` entry names.
pub fn partition_type(name: &str) -> Option<DataType> {
    Some(match name {
        "string" | "utf8" | "text" => DataType::Utf8,
        "date" => DataType::Date32,
        "int" | "int64" | "integer" => DataType::Int64,
        "int32" => DataType::Int32,
        "float" | "float64" | "double" => DataType::Float64,
        "bool" | "boolean" => DataType::Boolean,
        _ => return None,
    })
}

/// A table over a fixed list of Parquet files.
#[derive(Debug)]
pub struct FolderTable {
    /// The files' columns as the table reads them (nested strings as views).
    file_schema: SchemaRef,
    partition_fields: Vec<FieldRef>,
    schema: SchemaRef,
    store: ObjectStoreUrl,
    files: Vec<PartitionedFile>,
    /// Per file (index into `files`): its own columns, and its footer as read when the table
    /// was opened (`None` when the opener did not pass it).
    file_schemas: Vec<SchemaRef>,
    opened_footers: Vec<Option<Arc<ParquetMetaData>>>,
    /// Per file (index into `files`): its footer and statistics, read at the first scan.
    footers: Mutex<HashMap<usize, Footer>>,
    /// Per filter asked about: its proof when the table applies it itself (see
    /// [`FolderTable::proof`]).
    exact: Mutex<HashMap<Expr, Option<Proof>>>,
}

/// Per file (index into the table's files), per row group: whether the row group's statistics
/// prove a filter true for every one of its rows (empty for a file whose footer the opener
/// did not pass: nothing proven there).
type Proof = Arc<Vec<Vec<bool>>>;

#[derive(Debug, Clone)]
struct Footer {
    metadata: Arc<ParquetMetaData>,
    statistics: Arc<Statistics>,
}

/// One file of a table: its object-store path, size, modification time (the footer cache
/// is checked against it), its own Arrow schema (columns in file order) and its partition
/// values (as text; `None` when the file's path has no folder for the key).
pub struct FolderFile {
    pub path: String,
    pub size: u64,
    pub modified: Option<DateTime<Utc>>,
    pub schema: SchemaRef,
    pub values: Vec<Option<String>>,
    /// Its footer, when the opener has read it already.
    pub metadata: Option<Arc<ParquetMetaData>>,
}

impl FolderTable {
    /// The table over `files` (whose merged columns are `file_schema`) with the partition
    /// columns `partitions` (name, type), read through `store`. A partition value that is not
    /// of its column's type is the error, naming the file.
    pub fn try_new(
        file_schema: SchemaRef,
        partitions: Vec<(String, DataType)>,
        store: ObjectStoreUrl,
        files: Vec<FolderFile>,
    ) -> std::result::Result<Self, String> {
        let file_schema = Arc::new(nested_strings_as_views(&file_schema));
        let partition_fields: Vec<FieldRef> = partitions
            .iter()
            .map(|(n, t)| Arc::new(Field::new(n, t.clone(), true)))
            .collect();
        let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields.iter().cloned());
        let schema = Arc::new(Schema::new(fields));
        let mut parted = Vec::with_capacity(files.len());
        let mut file_schemas = Vec::with_capacity(files.len());
        let mut opened_footers = Vec::with_capacity(files.len());
        for f in files {
            let values = f
                .values
                .iter()
                .zip(&partitions)
                .map(|(v, (name, dt))| match v.as_deref() {
                    None | Some(HIVE_NULL) => ScalarValue::try_from(dt),
                    Some(text) => {
                        ScalarValue::try_from_string(text.to_string(), dt).map_err(|_| {
                            datafusion::error::DataFusionError::Plan(format!(
                                "the partition folder {name}={text} of {} is not a {dt}",
                                f.path
                            ))
                        })
                    }
                })
                .collect::<Result<Vec<_>>>()
                .map_err(|e| e.strip_backtrace())?;
            let mut file = PartitionedFile::new(f.path, f.size)
                .with_partition_values(values)
                .with_arrow_schema(Arc::new(nested_strings_as_views(&f.schema)));
            if let Some(t) = f.modified {
                file.object_meta.last_modified = t;
            }
            parted.push(file);
            file_schemas.push(f.schema);
            opened_footers.push(f.metadata);
        }
        Ok(FolderTable {
            file_schema,
            partition_fields,
            schema,
            store,
            files: parted,
            file_schemas,
            opened_footers,
            footers: Mutex::default(),
            exact: Mutex::default(),
        })
    }

    /// Per file, in the table's order: its location, size and modification time as listed,
    /// what tells a file of a later listing that is the same as one of this listing (a file
    /// rewritten in place has another time; see the resident index's refresh, docs/index.md).
    pub fn file_identities(&self) -> Vec<String> {
        self.files
            .iter()
            .map(|f| {
                let m = &f.object_meta;
                let nanos = m.last_modified.timestamp_nanos_opt().unwrap_or_default();
                format!("{}\0{}\0{nanos}", m.location, m.size)
            })
            .collect()
    }

    /// The same table over the files for which `keep` (one entry per file, in the table's
    /// order) is true; its schema stays the whole table's.
    pub fn subset(&self, keep: &[bool]) -> FolderTable {
        let pick = |i: &usize| keep.get(*i).copied().unwrap_or(false);
        let n = self.files.len();
        FolderTable {
            file_schema: Arc::clone(&self.file_schema),
            partition_fields: self.partition_fields.clone(),
            schema: Arc::clone(&self.schema),
            store: self.store.clone(),
            files: (0..n).filter(pick).map(|i| self.files[i].clone()).collect(),
            file_schemas: (0..n)
                .filter(pick)
                .map(|i| Arc::clone(&self.file_schemas[i]))
                .collect(),
            opened_footers: (0..n)
                .filter(pick)
                .map(|i| self.opened_footers[i].clone())
                .collect(),
            footers: Mutex::default(),
            exact: Mutex::default(),
        }
    }

    /// The same table with one more column, `name`: each row's file's position in the table's
    /// files (Int64), given as a partition value, so that any plan can read it (unlike
    /// `input_file_name()`, which only the scan itself can evaluate).
    pub fn with_file_column(&self, name: &str) -> FolderTable {
        let mut partition_fields = self.partition_fields.clone();
        partition_fields.push(Arc::new(Field::new(name, DataType::Int64, false)));
        let mut fields: Vec<FieldRef> = self.file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields.iter().cloned());
        let files = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut f = f.clone();
                f.partition_values.push(ScalarValue::Int64(Some(i as i64)));
                f
            })
            .collect();
        FolderTable {
            file_schema: Arc::clone(&self.file_schema),
            partition_fields,
            schema: Arc::new(Schema::new(fields)),
            store: self.store.clone(),
            files,
            file_schemas: self.file_schemas.clone(),
            opened_footers: self.opened_footers.clone(),
            footers: Mutex::default(),
            exact: Mutex::default(),
        }
    }

    fn partition_names(&self) -> Vec<&str> {
        self.partition_fields
            .iter()
            .map(|f| f.name().as_str())
            .collect()
    }

    /// The footer and statistics of file `index`: read once (through DataFusion's file
    /// metadata cache, which the scan's own reads then hit), then kept.
    async fn footer(&self, state: &dyn Session, index: usize) -> Result<Footer> {
        if let Some(f) = self
            .footers
            .lock()
            .ok()
            .and_then(|m| m.get(&index).cloned())
        {
            return Ok(f);
        }
        let meta: &ObjectMeta = &self.files[index].object_meta;
        let runtime = state.runtime_env();
        let store = runtime.object_store(&self.store)?;
        // With its page index, read here first (the table's opening reads the footer alone,
        // `read_footer_alone`): a damaged one is this file's error.
        let metadata = read_footer(runtime, store.as_ref(), meta)
            .await
            .map_err(|e| e.context(format!("cannot read the page index of {}", meta.location)))?;
        let statistics = Arc::new(DFParquetMetadata::statistics_from_parquet_metadata(
            &metadata,
            &self.file_schema,
        )?);
        let footer = Footer {
            metadata,
            statistics,
        };
        if let Ok(mut m) = self.footers.lock() {
            m.insert(index, footer.clone());
        }
        Ok(footer)
    }

    /// `files` with each row group cut into row slices when the scan has fewer row groups
    /// than `target` partitions, so that every core decodes (docs/scan.md, "A row group cut
    /// into slices"). A kept row group of at least 2 × [`SLICE_ROWS`] rows that the page
    /// index keeps (all its rows without a page index) becomes up to `target / row groups`
    /// slices, each a [`ParquetAccessPlan`] selecting
    /// consecutive rows. The slices partition the row group's rows, so the answer does not
    /// depend on where they are cut; they are cut where the rows the predicate's page
    /// statistics keep are evenly shared. When one is cut, every kept row group is read as the
    /// one-byte range of its first page. A file read by position (an extension already set)
    /// is left whole, and so is every file of a session that runs on workers
    /// ([`WholeRowGroups`]).
    async fn sliced(
        &self,
        state: &dyn Session,
        files: Vec<PartitionedFile>,
        predicate: Option<&PruningPredicate>,
        target: usize,
    ) -> Result<Vec<PartitionedFile>> {
        if target < 2
            || state.config().get_extension::<WholeRowGroups>().is_some()
            || files.iter().any(|f| !f.extensions.is_empty())
        {
            return Ok(files);
        }
        let index_of: HashMap<&object_store::path::Path, usize> = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (&f.object_meta.location, i))
            .collect();
        // (position in `files`, row group, the file's footer)
        let mut groups = Vec::new();
        for (pos, f) in files.iter().enumerate() {
            let Some(&index) = index_of.get(&f.object_meta.location) else {
                return Ok(files);
            };
            let footer = self.footer(state, index).await?;
            for (g, rg) in footer.metadata.row_groups().iter().enumerate() {
                let offset = first_page_offset(rg);
                if f.range.as_ref().is_none_or(|r| r.contains(offset)) {
                    groups.push((pos, g, footer.clone()));
                }
                if groups.len() >= target {
                    return Ok(files);
                }
            }
        }
        let per_group = target / groups.len().max(1);
        let mut out = Vec::with_capacity(target);
        let mut cut_any = false;
        for (pos, g, footer) in groups {
            let metadata = &footer.metadata;
            let rgs = metadata.row_groups();
            let start = first_page_offset(&rgs[g]);
            // The row group alone: the reader keeps the row groups whose first page lies in a
            // file's range, whatever their order in the file, and DataFusion does not cut a
            // one-byte range again into byte ranges (which would leave slices sharing a
            // partition). The file's statistics describe a superset of its rows.
            let piece = files[pos]
                .clone()
                .with_range(start, start + 1)
                .with_statistics(Arc::new(footer.statistics.as_ref().clone().to_inexact()));
            let rows = rgs[g].num_rows().max(0) as usize;
            let kept = page_kept_rows(metadata, g, rows, predicate, &self.schema);
            let total: usize = kept.iter().map(|(_, n)| n).sum();
            let k = per_group.min(total / SLICE_ROWS);
            if k < 2 {
                out.push(piece);
                continue;
            }
            cut_any = true;
            for w in slice_cuts(&kept, total, k, rows).windows(2) {
                let (from, to) = (w[0], w[1]);
                let mut selectors = Vec::with_capacity(3);
                if from > 0 {
                    selectors.push(RowSelector::skip(from));
                }
                selectors.push(RowSelector::select(to - from));
                if to < rows {
                    selectors.push(RowSelector::skip(rows - to));
                }
                let mut plan = only_row_group(rgs.len(), g);
                plan.set(g, RowGroupAccess::Selection(RowSelection::from(selectors)));
                out.push(piece.clone().with_extension(plan));
            }
        }
        // No row group is cut: the files as they were.
        Ok(if cut_any { out } else { files })
    }

    /// The pruning predicate of `filters` (those not on partition columns only) over the
    /// table's columns, when they make one.
    fn pruning(&self, state: &dyn Session, filters: &[Expr]) -> Option<Arc<PruningPredicate>> {
        let expr = conjunction(filters.iter().cloned())?;
        let df_schema = DFSchema::try_from(Arc::clone(&self.schema)).ok()?;
        let physical = state.create_physical_expr(expr, &df_schema).ok()?;
        PruningPredicateBuilder::new()
            .with_file_schema(Arc::clone(&self.schema))
            .build(physical)
    }

    /// `plan` (a scan of every column when `filters` is not empty) with `filters` applied
    /// over it, then the columns of `projection`; `plan` itself when there are no filters.
    fn filtered(
        &self,
        state: &dyn Session,
        plan: Arc<dyn ExecutionPlan>,
        filters: Vec<Expr>,
        projection: Option<&Vec<usize>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(expr) = conjunction(filters) else {
            return Ok(plan);
        };
        let schema = DFSchema::try_from(plan.schema())?;
        let predicate = state.create_physical_expr(expr, &schema)?;
        Ok(Arc::new(
            FilterExecBuilder::new(predicate, plan)
                .apply_projection(projection.cloned())?
                .build()?,
        ))
    }

    /// The proof of `filter` when the table applies it itself rather than leave it to a
    /// filter above the scan: a comparison of one of the files' top-level primitive columns
    /// (not floats) with a literal (`timestamp >= t`, a time window's bound), present with the
    /// same type in every file, that the Parquet reader can evaluate as a row filter, and that
    /// the statistics of some row group prove true for every one of its rows. Such row groups
    /// are then read without the filter (and without its column, when nothing else reads it);
    /// the others apply it in the Parquet reader (docs/scan.md, "Row groups a filter holds
    /// for"). Decided once per filter, from the footers read when the table was opened; the
    /// scan reads its parts from the same proof.
    fn proof(&self, filter: &Expr) -> Option<Proof> {
        // DataFusion asks with qualified columns (`events.timestamp`) and scans with
        // unqualified ones: both are decided as the unqualified filter.
        let filter = &unnormalize_col(filter.clone());
        if let Some(known) = self.exact.lock().ok().and_then(|m| m.get(filter).cloned()) {
            return known;
        }
        let proof = self.prove(filter);
        if let Ok(mut m) = self.exact.lock() {
            // A window anchored at now makes new filters all the time; the table lives as long
            // as its files do. (Answers already given are only needed until their scan.)
            if m.len() >= 4096 {
                m.clear();
            }
            m.insert(filter.clone(), proof.clone());
        }
        proof
    }

    /// Whether DataFusion has asked about `filter` (as [`FolderTable::proof`] keeps the
    /// answers).
    fn asked(&self, filter: &Expr) -> bool {
        let filter = unnormalize_col(filter.clone());
        self.exact.lock().is_ok_and(|m| m.contains_key(&filter))
    }

    fn prove(&self, filter: &Expr) -> Option<Proof> {
        let name = compared_column(filter)?;
        let field = self.file_schema.field_with_name(name).ok()?;
        // Not floats: Parquet's min and max leave NaN out (and a -0.0 may sit under a +0.0
        // minimum), so statistics cannot prove a comparison for every float value.
        if !field.data_type().is_primitive() || field.data_type().is_floating() {
            return None;
        }
        let everywhere = self.file_schemas.iter().all(|s| {
            s.field_with_name(name)
                .is_ok_and(|f| f.data_type() == field.data_type())
        });
        if !everywhere {
            return None;
        }
        let df_schema = DFSchema::try_from(Arc::clone(&self.schema)).ok()?;
        let physical = datafusion::physical_expr::create_physical_expr(
            filter,
            &df_schema,
            &ExecutionProps::new(),
            &Default::default(),
        )
        .ok()?;
        if !can_expr_be_pushed_down_with_schemas(&physical, &self.file_schema) {
            return None;
        }
        let predicate = PruningPredicateBuilder::new()
            .with_file_schema(Arc::clone(&self.schema))
            .build(physical)?;
        let proof: Vec<Vec<bool>> = self
            .opened_footers
            .iter()
            .zip(&self.files)
            .zip(&self.file_schemas)
            .map(|((metadata, f), own)| match metadata {
                Some(m) => {
                    let location = f.object_meta.location.to_string();
                    fully_matched(m, &self.schema, own, &predicate, &location)
                }
                None => Vec::new(),
            })
            .collect();
        proof
            .iter()
            .any(|file| file.iter().any(|m| *m))
            .then(|| Arc::new(proof))
    }
}

/// The column of a filter `column op literal` (or `literal op column`) with `op` one of `=`,
/// `<`, `<=`, `>`, `>=`: the shapes row-group statistics can prove true. (Not `BETWEEN`:
/// DataFusion's simplifier may rewrite it into a conjunction after asking, and the rewritten
/// filter would then be decided differently.)
fn compared_column(filter: &Expr) -> Option<&str> {
    let literal = |e: &Expr| matches!(e, Expr::Literal(v, _) if !v.is_null());
    match filter {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), r) if literal(r) => Some(c.name.as_str()),
            (l, Expr::Column(c)) if literal(l) => Some(c.name.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// DataFusion's reader of the footer of the file `meta` names, through the file-metadata
/// cache of `runtime` (read from `store` when it is not there, and kept there for the scans).
fn cached_footer<'a>(
    runtime: &RuntimeEnv,
    store: &'a dyn ObjectStore,
    meta: &'a ObjectMeta,
) -> DFParquetMetadata<'a> {
    DFParquetMetadata::new(store, meta)
        .with_file_metadata_cache(Some(runtime.cache_manager.get_file_metadata_cache()))
}

/// The footer of the file `meta` names, with its page index, through the cache
/// ([`cached_footer`]).
pub async fn read_footer(
    runtime: &RuntimeEnv,
    store: &dyn ObjectStore,
    meta: &ObjectMeta,
) -> Result<Arc<ParquetMetaData>> {
    cached_footer(runtime, store, meta).fetch_metadata().await
}

/// The footer of the file `meta` names without its page index, through the same cache as
/// [`read_footer`]: what opening a table needs (the file's schema, its rows). The cache
/// keeps it so; a scan or [`read_footer`] that wants the page index then reads the index
/// alone and keeps the footer with it. So a statement that scans nothing (FIND OBJECT and
/// CONTEXT FOR from the resident index) decodes no page index of the object tables: at a
/// million objects, 69 M of a one-shot CONTEXT FOR's 808 M instructions.
pub async fn read_footer_alone(
    runtime: &RuntimeEnv,
    store: &dyn ObjectStore,
    meta: &ObjectMeta,
) -> Result<Arc<ParquetMetaData>> {
    cached_footer(runtime, store, meta)
        .with_metadata_size_hint(ParquetFormat::default().metadata_size_hint())
        .with_page_index_policy(Some(PageIndexPolicy::Skip))
        .fetch_metadata()
        .await
}

/// The Arrow schema DataFusion's `ParquetFormat::default().infer_schema` gives the one file
/// whose footer is `metadata` (the schema its scans read), from the footer: the Parquet
/// schema as Arrow's reader maps it, without schema or field metadata, strings and binaries
/// as views (`schema_force_view_types`, on by default). Tested against `infer_schema`.
pub fn footer_schema(metadata: &ParquetMetaData) -> Result<Schema> {
    let file = metadata.file_metadata();
    let schema = datafusion::parquet::arrow::parquet_to_arrow_schema(
        file.schema_descr(),
        file.key_value_metadata(),
    )?;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_metadata(Default::default()))
        .collect();
    Ok(transform_schema_to_view(&Schema::new(fields)))
}

/// The row groups of `metadata` that `predicate` (over `schema`) does not rule out by their
/// statistics, as DataFusion's scan prunes them (`RowGroupAccessPlanFilter`); all of them
/// without a predicate. The file's own schema is read from the footer (see [`pruned`]).
pub fn kept_row_groups(
    metadata: &ParquetMetaData,
    schema: &Schema,
    predicate: Option<&PruningPredicate>,
    location: &str,
) -> Vec<usize> {
    let file = metadata.file_metadata();
    let own = predicate.and_then(|_| {
        datafusion::parquet::arrow::parquet_to_arrow_schema(
            file.schema_descr(),
            file.key_value_metadata(),
        )
        .ok()
    });
    kept_row_groups_of(metadata, schema, own.as_ref(), predicate, location)
}

/// [`kept_row_groups`] of a file whose own schema is `own` (as the table read it when it was
/// opened), when known.
fn kept_row_groups_of(
    metadata: &ParquetMetaData,
    schema: &Schema,
    own: Option<&Schema>,
    predicate: Option<&PruningPredicate>,
    location: &str,
) -> Vec<usize> {
    match predicate {
        Some(p) => pruned(metadata, schema, own, p, location)
            .row_group_indexes()
            .collect(),
        None => (0..metadata.row_groups().len()).collect(),
    }
}

/// Per row group of `metadata`: whether its statistics prove `predicate` true for every one
/// of its rows (DataFusion's own test, which also needs the columns' null counts to be 0).
fn fully_matched(
    metadata: &ParquetMetaData,
    schema: &Schema,
    own: &Schema,
    predicate: &PruningPredicate,
    location: &str,
) -> Vec<bool> {
    pruned(metadata, schema, Some(own), predicate, location)
        .is_fully_matched()
        .clone()
}

/// The row groups of `metadata` after DataFusion's pruning by statistics with `predicate`.
/// A file whose own type of a column the predicate reads is not the table's (a drifted file:
/// a timestamp in ms where the table reads µs, an int64 where it reads a double) keeps every
/// row group here: its statistics are in its own type, which the pruning would read as the
/// table's (1 000 times too small, for ms read as µs, and the row groups wrongly left out).
/// The scan prunes that file itself, through DataFusion's schema adapter. `own` is the file's
/// own schema; a file whose schema is not known keeps every row group too.
fn pruned(
    metadata: &ParquetMetaData,
    schema: &Schema,
    own: Option<&Schema>,
    predicate: &PruningPredicate,
    location: &str,
) -> RowGroupAccessPlanFilter {
    let groups = metadata.row_groups();
    let mut access = RowGroupAccessPlanFilter::new(ParquetAccessPlan::new_all(groups.len()));
    if !own.is_some_and(|own| statistics_read_as_table(own, schema, predicate)) {
        return access;
    }
    let metrics = ParquetFileMetrics::new(0, location, &ExecutionPlanMetricsSet::new());
    access.prune_by_statistics(
        schema,
        metadata.file_metadata().schema_descr(),
        groups,
        predicate,
        &metrics,
    );
    access
}

/// Whether the statistics of a file whose own schema is `own` can be read in the table's
/// types (`schema`) for every column `predicate` reads: the file has the column in the same
/// type, or not at all (then its statistics are absent, and DataFusion keeps the row groups).
/// A nested column (a struct, list or map: `properties`, whose fields drift from file to
/// file) has no statistics the pruning reads, so its type does not matter.
fn statistics_read_as_table(own: &Schema, schema: &Schema, predicate: &PruningPredicate) -> bool {
    datafusion::physical_expr::utils::collect_columns(predicate.orig_expr())
        .iter()
        .all(|c| {
            match (
                own.field_with_name(c.name()),
                schema.field_with_name(c.name()),
            ) {
                (_, Ok(t)) if t.data_type().is_nested() => true,
                (Ok(f), Ok(t)) => same_statistics(f.data_type(), t.data_type()),
                (Err(_), _) => true,
                (Ok(_), Err(_)) => false,
            }
        })
}

/// Whether statistics stored for a column of type `file` read the same as type `table`: the
/// same type; text as any text type (Utf8, LargeUtf8, Utf8View, the scan's views), bytes as
/// any binary type, each as a dictionary of it; a timestamp of the same unit whatever its
/// zone (the values are the same integers, and a zone-less one is read as UTC).
fn same_statistics(file: &DataType, table: &DataType) -> bool {
    use DataType::*;
    let text = signalql_udfs::strings::is_string;
    let bytes = |t: &DataType| matches!(t, Binary | LargeBinary | BinaryView);
    match (file, table) {
        (Dictionary(_, f), t) | (t, Dictionary(_, f)) if !matches!(t, Dictionary(..)) => {
            same_statistics(f, t)
        }
        (Timestamp(a, _), Timestamp(b, _)) => a == b,
        (f, t) => f == t || (text(f) && text(t)) || (bytes(f) && bytes(t)),
    }
}

/// The offset of a row group's first page: the byte by which DataFusion assigns the row group
/// to a file range (`RowGroupAccessPlanFilter::prune_by_range`).
pub fn first_page_offset(g: &RowGroupMetaData) -> i64 {
    let c = g.column(0);
    c.dictionary_page_offset()
        .unwrap_or_else(|| c.data_page_offset())
}

/// A session config extension (`SessionConfig::with_extension`): folder tables read whole
/// row groups, never slices of one ([`FolderTable::sliced`]). The engine sets it for a
/// session that sends plans to workers: a slice is a file extension, which does not travel.
#[derive(Debug, Default)]
pub struct WholeRowGroups;

/// The fewest rows of a row-group slice ([`FolderTable::sliced`]).
pub const SLICE_ROWS: usize = 32 * 1024;

/// The rows of row group `g` (of `rows` rows) that `predicate`'s page statistics keep, as
/// (first row, count) runs: every row when the file has no page index or there is no
/// predicate. Only where to cut depends on it.
fn page_kept_rows(
    metadata: &ParquetMetaData,
    g: usize,
    rows: usize,
    predicate: Option<&PruningPredicate>,
    schema: &SchemaRef,
) -> Vec<(usize, usize)> {
    let all = vec![(0, rows)];
    let (Some(predicate), Some(_), Some(_)) =
        (predicate, metadata.column_index(), metadata.offset_index())
    else {
        return all;
    };
    let plan = only_row_group(metadata.num_row_groups(), g);
    let metrics = ExecutionPlanMetricsSet::new();
    let file_metrics = ParquetFileMetrics::new(0, "slices", &metrics);
    let filter = PagePruningAccessPlanFilter::new(predicate.orig_expr(), Arc::clone(schema));
    let plan = filter.prune_plan_with_page_index(
        plan,
        schema,
        metadata.file_metadata().schema_descr(),
        metadata,
        &file_metrics,
    );
    match plan.inner().get(g) {
        Some(RowGroupAccess::Selection(selection)) => {
            let mut at = 0;
            let mut runs = Vec::new();
            for s in selection.iter() {
                if !s.skip && s.row_count > 0 {
                    runs.push((at, s.row_count));
                }
                at += s.row_count;
            }
            runs
        }
        Some(RowGroupAccess::Skip) => Vec::new(),
        _ => all,
    }
}

/// An access plan of a file of `count` row groups that reads row group `g` only.
fn only_row_group(count: usize, g: usize) -> ParquetAccessPlan {
    let mut plan = ParquetAccessPlan::new_all(count);
    for other in (0..count).filter(|o| *o != g) {
        plan.skip(other);
    }
    plan
}

/// `k + 1` cut points from 0 to `rows`: cut j where `total * j / k` of the kept runs' rows
/// lie before it, so each slice holds an even share of them.
fn slice_cuts(kept: &[(usize, usize)], total: usize, k: usize, rows: usize) -> Vec<usize> {
    let mut cuts = vec![0];
    for j in 1..k {
        let mut want = total * j / k;
        let mut cut = rows;
        for (start, n) in kept {
            if want < *n {
                cut = start + want;
                break;
            }
            want -= n;
        }
        if cut > *cuts.last().unwrap_or(&0) && cut < rows {
            cuts.push(cut);
        }
    }
    cuts.push(rows);
    cuts
}

/// What planning keeps of a file: byte ranges, each with the filters its row groups still
/// need (one flag per filter the table applies itself: `true` where the row group's
/// statistics do not prove it), and how many of its row groups it left out.
struct Kept {
    ranges: Vec<(Vec<bool>, i64, i64)>,
    pruned: usize,
}

/// The byte ranges of `metadata`'s row groups that `predicate` does not rule out, one per
/// run of consecutive row groups kept that need the same ones of `exact` (the filters the
/// table applies itself, each as its proof for this file); each range holds the offsets of
/// exactly its row groups' first pages, which is how DataFusion assigns a row group to a
/// range. `None`: the whole file (no predicate, or row groups not laid out in order).
fn kept_ranges(
    metadata: &ParquetMetaData,
    schema: &Schema,
    own: &Schema,
    predicate: Option<&PruningPredicate>,
    exact: &[&[bool]],
    file_size: u64,
    location: &str,
) -> Option<Kept> {
    predicate?;
    let groups = metadata.row_groups();
    let offsets: Vec<i64> = groups.iter().map(first_page_offset).collect();
    if groups.is_empty() || offsets.windows(2).any(|w| w[0] >= w[1]) {
        return None;
    }
    let kept = kept_row_groups_of(metadata, schema, Some(own), predicate, location);
    let pruned = groups.len() - kept.len();
    let mut ranges: Vec<(Vec<bool>, i64, i64)> = Vec::new();
    let end_of = |i: usize| offsets.get(i + 1).copied().unwrap_or(file_size as i64);
    for i in kept {
        let needs: Vec<bool> = exact
            .iter()
            .map(|p| !p.get(i).copied().unwrap_or(false))
            .collect();
        match ranges.last_mut() {
            Some(last) if last.2 == offsets[i] && last.0 == needs => last.2 = end_of(i),
            _ => ranges.push((needs, offsets[i], end_of(i))),
        }
    }
    Some(Kept { ranges, pruned })
}

#[async_trait]
impl TableProvider for FolderTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Filters on partition columns only are applied exactly, by choosing files; so are the
    /// comparisons some row group's statistics prove true ([`FolderTable::proof`]),
    /// by the scan's parts. The others are applied above the scan (and pushed into the
    /// Parquet reader by DataFusion). A table without partition columns has no partition
    /// filter (a filter on no column at all, such as `true`, is not one there).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        let names = self.partition_names();
        Ok(filters
            .iter()
            .map(|f| {
                if (!names.is_empty() && expr_applicable_for_cols(&names, f))
                    || self.proof(f).is_some()
                {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let names = self.partition_names();
        let (on_partitions, rest): (Vec<Expr>, Vec<Expr>) = filters
            .iter()
            .cloned()
            .partition(|f| !names.is_empty() && expr_applicable_for_cols(&names, f));
        // A filter DataFusion never asked about here (rewritten after it asked) may have been
        // answered `Exact` under another form: it is applied above the parts, to be sure.
        let unasked: Vec<Expr> = rest.iter().filter(|f| !self.asked(f)).cloned().collect();
        let wanted = projection;
        let projection = if unasked.is_empty() { wanted } else { None };
        let mut exact: Vec<(Expr, Proof)> = Vec::new();
        let mut others: Vec<Expr> = Vec::new();
        for f in &rest {
            match self.proof(f) {
                Some(p) => exact.push((f.clone(), p)),
                None => others.push(f.clone()),
            }
        }
        let df_schema = DFSchema::from_unqualified_fields(
            self.partition_fields.iter().cloned().collect(),
            Default::default(),
        )?;
        let predicate = self.pruning(state, &rest);
        let table_schema = || {
            TableSchema::builder(Arc::clone(&self.file_schema))
                .with_table_partition_cols(self.partition_fields.clone())
                .build()
        };
        let format = ParquetFormat::default();
        let source =
            ParquetSource::new(table_schema()).with_table_parquet_options(format.options().clone());
        // Per set of filters still to apply (see `Kept`), the files or ranges that need it.
        let mut parts: std::collections::BTreeMap<Vec<bool>, Vec<PartitionedFile>> =
            Default::default();
        for (index, f) in self.files.iter().enumerate() {
            let Some(kept) = filter_partitioned_file(f.clone(), &on_partitions, &df_schema)? else {
                continue;
            };
            let footer = self.footer(state, index).await?;
            let location = kept.object_meta.location.to_string();
            match kept_ranges(
                &footer.metadata,
                &self.schema,
                &self.file_schemas[index],
                predicate.as_deref(),
                &exact
                    .iter()
                    .map(|(_, p)| p.get(index).map_or(&[][..], Vec::as_slice))
                    .collect::<Vec<_>>(),
                kept.object_meta.size,
                &location,
            ) {
                None => parts
                    .entry(vec![true; exact.len()])
                    .or_default()
                    .push(kept.with_statistics(Arc::clone(&footer.statistics))),
                Some(k) => {
                    // The row groups left out here are counted where the scan counts its
                    // own pruning, so EXPLAIN ANALYZE reports them as pruned by statistics.
                    let metrics =
                        ParquetFileMetrics::new(0, &location, FileSource::metrics(&source));
                    metrics.row_groups_pruned_statistics.add_pruned(k.pruned);
                    if k.ranges.is_empty() {
                        metrics.files_ranges_pruned_statistics.add_pruned(1);
                    }
                    // Statistics of the whole file describe a superset of a range's rows.
                    let inexact = Arc::new(footer.statistics.as_ref().clone().to_inexact());
                    for (needs, start, end) in k.ranges {
                        parts.entry(needs).or_default().push(
                            kept.clone()
                                .with_range(start, end)
                                .with_statistics(Arc::clone(&inexact)),
                        );
                    }
                }
            }
        }
        if parts.is_empty() {
            let projected = project_schema(&self.schema, wanted)?;
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        let target = state.config().target_partitions();
        if exact.is_empty() {
            // One scan; DataFusion pushes the filters above it into the reader.
            let files = parts.into_values().flatten().collect::<Vec<_>>();
            let files = self
                .sliced(state, files, predicate.as_deref(), target)
                .await?;
            let config = FileScanConfigBuilder::new(self.store.clone(), Arc::new(source))
                .with_file_groups(FileGroup::new(files).split_files(target))
                .with_projection_indices(projection.cloned())?
                .with_limit(if others.is_empty() { limit } else { None })
                .build();
            let plan = format.create_physical_plan(state, config).await?;
            return self.filtered(state, plan, unasked, wanted);
        }
        // One scan per set of filters still to apply: the row groups that need none read
        // only the projected columns (the other filters, applied above, prune their pages);
        // the others apply theirs in the reader, exactly.
        let table_df_schema = DFSchema::try_from(Arc::clone(&self.schema))?;
        let parts_needing = parts.keys().filter(|n| n.iter().any(|x| *x)).count();
        let mut scans = Vec::with_capacity(parts.len());
        for (index, (needs, files)) in parts.into_iter().enumerate() {
            let applied: Vec<Expr> = exact
                .iter()
                .zip(&needs)
                .filter(|(_, n)| **n)
                .map(|((e, _), _)| e.clone())
                .collect();
            // The planning's pruning metrics were counted on `source`: the first part's.
            let mut part = match index {
                0 => source.clone(),
                _ => ParquetSource::new(table_schema()),
            };
            let mut options = format.options().clone();
            if applied.is_empty() {
                if let Some(expr) = conjunction(others.iter().cloned())
                    && let Ok(p) = state.create_physical_expr(expr, &table_df_schema)
                {
                    part = part.with_predicate(p);
                }
            } else {
                if let Some(expr) = conjunction(applied) {
                    part = part.with_predicate(state.create_physical_expr(expr, &table_df_schema)?);
                }
                options.global.pushdown_filters = true;
            }
            let part_format = ParquetFormat::default().with_options(options);
            let files = self
                .sliced(state, files, predicate.as_deref(), target)
                .await?;
            let config = FileScanConfigBuilder::new(self.store.clone(), Arc::new(part))
                .with_file_groups(FileGroup::new(files).split_files(target))
                .with_projection_indices(projection.cloned())?
                .build();
            scans.push(part_format.create_physical_plan(state, config).await?);
        }
        let plan: Arc<dyn ExecutionPlan> = match scans.as_slice() {
            // Every row group kept holds every such filter: one plain scan.
            [only] if parts_needing == 0 => Arc::clone(only),
            _ => Arc::new(ScanPartsExec::try_new(scans, target)?),
        };
        self.filtered(state, plan, unasked, wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `footer_schema` is the schema `ParquetFormat::default().infer_schema` gives the same
    /// file: over files of every type the engine meets (strings and binaries of each width,
    /// nested structs, lists and maps of strings, timestamps with a zone, dictionaries,
    /// schema and field metadata, no Arrow schema in the footer) and the bundled sample's.
    #[test]
    fn the_footer_schema_is_the_one_datafusion_infers() {
        use datafusion::arrow::array::{
            ArrayRef, BinaryArray, DictionaryArray, Int64Array, LargeStringArray, ListBuilder,
            MapBuilder, RecordBatch, StringArray, StringBuilder, StructArray,
            TimestampMicrosecondArray,
        };
        use datafusion::arrow::datatypes::Int32Type;
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::properties::WriterProperties;
        use datafusion::prelude::SessionContext;
        use object_store::ObjectStoreExt;

        let dir = tempfile::tempdir().unwrap();
        let strings = || -> ArrayRef { Arc::new(StringArray::from(vec![Some("a"), None])) };
        let props = StructArray::from(vec![
            (
                Arc::new(Field::new("path", DataType::Utf8, true)),
                strings(),
            ),
            (
                Arc::new(Field::new("n", DataType::Int64, true)),
                Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef,
            ),
        ]);
        let mut list = ListBuilder::new(StringBuilder::new());
        list.append_value([Some("x"), None]);
        list.append_null();
        let mut map = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        map.keys().append_value("k");
        map.values().append_value("v");
        map.append(true).unwrap();
        map.append(false).unwrap();
        let dictionary: DictionaryArray<Int32Type> = vec!["p", "q"].into_iter().collect();
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("s", strings()),
            ("l", Arc::new(LargeStringArray::from(vec![Some("b"), None]))),
            (
                "b",
                Arc::new(BinaryArray::from(vec![Some(&b"c"[..]), None])),
            ),
            ("properties", Arc::new(props)),
            ("tags", Arc::new(list.finish())),
            ("attributes", Arc::new(map.finish())),
            ("d", Arc::new(dictionary)),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(vec![1, 2]).with_timezone("UTC")),
            ),
        ];
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, a)| {
                let f = Field::new(*name, a.data_type().clone(), true);
                match *name {
                    "s" => f.with_metadata([("note".into(), "kept".into())].into()),
                    _ => f,
                }
            })
            .collect();
        let schema =
            Arc::new(Schema::new(fields).with_metadata([("writer".into(), "test".into())].into()));
        let batch = RecordBatch::try_new(
            schema.clone(),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap();
        let mut files = Vec::new();
        for (i, skip_arrow_schema) in [false, true].into_iter().enumerate() {
            // Without the Arrow schema in the footer (as writers other than arrow-rs leave
            // it), the Parquet schema alone decides.
            let path = dir.path().join(format!("f{i}.parquet"));
            let file = std::fs::File::create(&path).unwrap();
            let opts = datafusion::parquet::arrow::arrow_writer::ArrowWriterOptions::new()
                .with_properties(WriterProperties::builder().build())
                .with_skip_arrow_metadata(skip_arrow_schema);
            let mut w = ArrowWriter::try_new_with_options(file, schema.clone(), opts).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            files.push(path);
        }
        let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data");
        let mut stack = vec![sample];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                match p.is_dir() {
                    true => stack.push(p),
                    false if p.extension().is_some_and(|x| x == "parquet") => files.push(p),
                    false => {}
                }
            }
        }
        assert!(files.len() > 3, "{files:?}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ctx = SessionContext::new();
        let state = ctx.state();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new());
        for (i, path) in files.into_iter().enumerate() {
            let location = object_store::path::Path::from_filesystem_path(&path).unwrap();
            let meta = rt.block_on(store.head(&location)).unwrap();
            let inferred = rt
                .block_on(ParquetFormat::default().infer_schema(
                    &state,
                    &store,
                    std::slice::from_ref(&meta),
                ))
                .unwrap();
            let runtime = RuntimeEnv::default();
            let footer = rt
                .block_on(read_footer_alone(&runtime, store.as_ref(), &meta))
                .unwrap();
            assert!(
                footer.column_index().is_none(),
                "{path:?}: no page index read"
            );
            assert_eq!(
                &footer_schema(&footer).unwrap(),
                inferred.as_ref(),
                "{path:?}"
            );
            // A read that wants the page index then gets it, as one with nothing cached does.
            let whole = rt
                .block_on(read_footer(&runtime, store.as_ref(), &meta))
                .unwrap();
            let fresh = RuntimeEnv::default();
            let alone = rt
                .block_on(read_footer(&fresh, store.as_ref(), &meta))
                .unwrap();
            assert_eq!(whole.column_index(), alone.column_index(), "{path:?}");
            assert_eq!(whole.offset_index(), alone.offset_index(), "{path:?}");
            if i < 2 {
                assert!(whole.column_index().is_some(), "{path:?}: has a page index");
            }
        }
    }

    #[test]
    fn partitions_come_from_the_folders_in_order() {
        assert_eq!(
            partitions_of("dt=2026-06-01/platform=ios/part-0.parquet"),
            vec![
                ("dt".to_string(), "2026-06-01".to_string()),
                ("platform".to_string(), "ios".to_string())
            ]
        );
        assert_eq!(partitions_of("part-0.parquet"), vec![]);
        assert_eq!(partitions_of("plain/part-0.parquet"), vec![]);
        assert_eq!(
            partitions_of("path=a%2Fb/x.parquet"),
            vec![("path".to_string(), "a/b".to_string())]
        );
    }

    #[test]
    fn partition_types() {
        assert_eq!(partition_type("date"), Some(DataType::Date32));
        assert_eq!(partition_type("int64"), Some(DataType::Int64));
        assert_eq!(partition_type("nope"), None);
    }

    #[test]
    fn strings_inside_structs_become_views() {
        let props = DataType::Struct(Fields::from(vec![
            Field::new("path", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new(
                "inner",
                DataType::Struct(Fields::from(vec![Field::new(
                    "s",
                    DataType::LargeUtf8,
                    true,
                )])),
                true,
            ),
        ]));
        let schema = Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("properties", props, true),
        ]);
        let viewed = nested_strings_as_views(&schema);
        assert_eq!(viewed.field(0).data_type(), &DataType::Utf8);
        let DataType::Struct(children) = viewed.field(1).data_type() else {
            panic!("not a struct")
        };
        assert_eq!(children[0].data_type(), &DataType::Utf8View);
        assert_eq!(children[1].data_type(), &DataType::Int64);
        let DataType::Struct(inner) = children[2].data_type() else {
            panic!("not a struct")
        };
        assert_eq!(inner[0].data_type(), &DataType::Utf8View);
    }
}

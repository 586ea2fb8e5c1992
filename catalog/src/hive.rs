//! Hive-partitioned tables: `key=value` folders under a table are columns of it
//! (docs/mapping.md). The table is a scan of exactly the files the dataset lists (committed,
//! readable), each with its partition values; a filter on partition columns only drops the
//! files whose values fail it before any is opened.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, Result, ScalarValue, project_schema};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::listing::helpers::{expr_applicable_for_cols, filter_partitioned_file};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;

/// The value Hive writes for a NULL partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

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

/// A partitioned table over a fixed list of files.
#[derive(Debug)]
pub struct HiveTable {
    file_schema: SchemaRef,
    partition_fields: Vec<FieldRef>,
    schema: SchemaRef,
    store: ObjectStoreUrl,
    files: Vec<PartitionedFile>,
}

/// One file of a partitioned table: its object-store path, size and partition values (as
/// text; `None` when the file's path has no folder for the key).
pub struct HiveFile {
    pub path: String,
    pub size: u64,
    pub values: Vec<Option<String>>,
}

impl HiveTable {
    /// The table over `files` (whose columns are `file_schema`) with the partition columns
    /// `partitions` (name, type), read through `store`. A value that is not of its column's
    /// type is the error, naming the file.
    pub fn try_new(
        file_schema: SchemaRef,
        partitions: Vec<(String, DataType)>,
        store: ObjectStoreUrl,
        files: Vec<HiveFile>,
    ) -> std::result::Result<Self, String> {
        let partition_fields: Vec<FieldRef> = partitions
            .iter()
            .map(|(n, t)| Arc::new(Field::new(n, t.clone(), true)))
            .collect();
        let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields.iter().cloned());
        let schema = Arc::new(Schema::new(fields));
        let mut parted = Vec::with_capacity(files.len());
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
            parted.push(PartitionedFile::new(f.path, f.size).with_partition_values(values));
        }
        Ok(HiveTable {
            file_schema,
            partition_fields,
            schema,
            store,
            files: parted,
        })
    }

    fn partition_names(&self) -> Vec<&str> {
        self.partition_fields
            .iter()
            .map(|f| f.name().as_str())
            .collect()
    }
}

#[async_trait]
impl TableProvider for HiveTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Filters on partition columns only are applied exactly, by choosing files; the others
    /// are applied above the scan (and pushed into the Parquet reader by DataFusion).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        let names = self.partition_names();
        Ok(filters
            .iter()
            .map(|f| {
                if expr_applicable_for_cols(&names, f) {
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
        let (on_partitions, others): (Vec<Expr>, Vec<Expr>) = filters
            .iter()
            .cloned()
            .partition(|f| expr_applicable_for_cols(&names, f));
        let df_schema = DFSchema::from_unqualified_fields(
            self.partition_fields.iter().cloned().collect(),
            Default::default(),
        )?;
        let mut files = Vec::new();
        for f in &self.files {
            if let Some(kept) = filter_partitioned_file(f.clone(), &on_partitions, &df_schema)? {
                files.push(kept);
            }
        }
        if files.is_empty() {
            let projected = project_schema(&self.schema, projection)?;
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        let groups = FileGroup::new(files).split_files(state.config().target_partitions());
        let format = ParquetFormat::default();
        let source = format.file_source(
            TableSchema::builder(Arc::clone(&self.file_schema))
                .with_table_partition_cols(self.partition_fields.clone())
                .build(),
        );
        let config = FileScanConfigBuilder::new(self.store.clone(), source)
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(if others.is_empty() { limit } else { None })
            .build();
        format.create_physical_plan(state, config).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

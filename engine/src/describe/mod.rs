//! `DESCRIBE entities | events | signals | metrics | relationships | entity(type)`
//! (docs/describe.md): catalog records read from the dataset's Parquet schemas, its data as of
//! T and its `signalql.toml` / `metrics.toml`, in a result envelope with one fixed column set.

mod record;
mod targets;

use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::functions::core::expr_fn::get_field;
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder, lit};
use serde_json::Value;
use signalql_catalog::TableInfo;

pub use record::{EdgeInfo, FieldInfo, MAX_LISTED_VALUES, Record, SignalInfo, columns};

use crate::bind::{entity_types, unknown_entity_type};
use crate::catalog::{self, Catalog};
use crate::envelope::{Envelope, Metadata};
use crate::error::Result;
use crate::execute::Executor;
use crate::lower::fields::column;
use crate::lower::source::entity_type;
use crate::metrics::MetricInfo;
use crate::syntax::ast::DescribeTarget;

/// Per group of `keys`: the row count, and for each struct key of `bag` the count of non-null
/// values, as (group values, rows, per-key counts).
type Counts = Vec<(Vec<String>, i64, Vec<i64>)>;

fn text(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_default()
}

/// Reads catalog records from one catalog, in one session, as of one `T`.
pub(crate) struct Describer<'a> {
    pub catalog: &'a dyn Catalog,
    pub exec: &'a Executor,
    pub now: DateTime<Utc>,
}

impl Describer<'_> {
    fn dataset(&self) -> &signalql_catalog::Dataset {
        self.catalog.dataset()
    }

    fn session(&self) -> &datafusion::prelude::SessionContext {
        self.exec.session()
    }

    /// The envelope of a DESCRIBE: one row per catalog record (docs/describe.md).
    pub async fn envelope(&self, target: &DescribeTarget) -> Result<Envelope> {
        let (records, metrics) = match target {
            DescribeTarget::Metrics => self.metric_catalog()?,
            target => (self.describe(target).await?, Vec::new()),
        };
        Ok(self.catalog_envelope(records, metrics))
    }

    /// Every catalog record of the dataset: events, entities, relationships, signals and
    /// metrics, skipping the tables it does not have.
    pub async fn all(&self) -> Result<Envelope> {
        let mut records = Vec::new();
        for target in [
            DescribeTarget::Events,
            DescribeTarget::Entities,
            DescribeTarget::Relationships,
            DescribeTarget::Signals,
        ] {
            match self.describe(&target).await {
                Ok(r) => records.extend(r),
                // Tables it lacks, and those the caller may not read, are left out.
                Err(e)
                    if e.is_missing_table()
                        || e.kind == crate::error::ErrorKind::PermissionDenied => {}
                Err(e) => return Err(e),
            }
        }
        let (metric_records, metrics) = self.metric_catalog()?;
        records.extend(metric_records);
        Ok(self.catalog_envelope(records, metrics))
    }

    fn catalog_envelope(&self, records: Vec<Record>, metrics: Vec<MetricInfo>) -> Envelope {
        let rows: Vec<Vec<Value>> = records.iter().map(|r| r.row()).collect();
        let mut metadata = Metadata::new(self.exec.limits(), self.now);
        metadata.row_count = rows.len() as u64;
        metadata.metrics = metrics;
        Envelope {
            columns: columns(),
            metadata,
            rows,
        }
    }

    /// Run a DESCRIBE: its records, in order.
    pub async fn describe(&self, target: &DescribeTarget) -> Result<Vec<Record>> {
        let t = self.now;
        match target {
            DescribeTarget::Events => self.describe_events(t).await,
            DescribeTarget::Entities => self.describe_entities(None, t).await,
            DescribeTarget::Entity(name) => {
                let wanted = entity_type(name);
                let records = self.describe_entities(Some(&wanted), t).await?;
                if records.is_empty() {
                    let table = catalog::open(self.catalog, self.session(), "entities").await?;
                    let types = entity_types(self.exec, &table).await?;
                    return Err(unknown_entity_type(&wanted, &types));
                }
                Ok(records)
            }
            DescribeTarget::Signals => self.describe_signals(t).await,
            DescribeTarget::Metrics => Ok(self.metric_catalog()?.0),
            DescribeTarget::Relationships => self.describe_relationships(t).await,
        }
    }

    async fn rows_of(&self, plan: LogicalPlan) -> Result<Vec<Vec<Value>>> {
        let batches = self.exec.run(&plan).await?.batches;
        crate::envelope::rows(&batches, usize::MAX)
    }

    /// Row counts and non-null counts of `bag`'s struct keys, grouped by `keys`, over `b`.
    async fn counts(&self, b: LogicalPlanBuilder, keys: &[&str], bag: &[Field]) -> Result<Counts> {
        let mut aggs = vec![count(lit(1)).alias("__n")];
        aggs.extend(bag.iter().enumerate().map(|(i, f)| {
            count(get_field(column("__bag"), f.name().as_str())).alias(format!("__c{i}"))
        }));
        let plan = b
            .aggregate(keys.iter().map(|k| column(k)).collect::<Vec<_>>(), aggs)?
            .build()?;
        Ok(self
            .rows_of(plan)
            .await?
            .into_iter()
            .map(|r| {
                let k = r[..keys.len()].iter().map(text).collect();
                let n = r[keys.len()].as_i64().unwrap_or(0);
                let c = r[keys.len() + 1..]
                    .iter()
                    .map(|v| v.as_i64().unwrap_or(0))
                    .collect();
                (k, n, c)
            })
            .collect())
    }
}

fn scan(table: &TableInfo, name: &str) -> Result<LogicalPlanBuilder> {
    crate::catalog::scan(table, name, vec![])
}

/// `b` with its property bag `bag` (if a struct) also as the column `__bag`.
fn with_bag(b: LogicalPlanBuilder, schema: &SchemaRef, bag: &str) -> Result<LogicalPlanBuilder> {
    let mut cols = crate::lower::plan::columns(&b);
    if matches!(
        schema.field_with_name(bag).map(|f| f.data_type()),
        Ok(DataType::Struct(_))
    ) {
        cols.push(column(bag).alias("__bag"));
    }
    Ok(b.project(cols)?)
}

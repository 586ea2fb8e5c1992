//! `DESCRIBE entities | events | signals | metrics | relationships | entity(type)`
//! (docs/describe.md): catalog records read from the dataset's Parquet schemas, its data as of
//! T and its `signalql.toml` / `metrics.toml`, in a result envelope with one fixed column set.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::datasource::provider_as_source;
use datafusion::functions::core::expr_fn::get_field;
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder, cast, lit};
use serde::Serialize;
use serde_json::{Value, json};
use signalql_catalog::{PropertiesEncoding, TableInfo};

use crate::catalog::{self, Catalog};
use crate::envelope::{ColumnInfo, type_name};
use crate::envelope::{Envelope, Metadata};
use crate::error::{Error, Result};
use crate::execute::Executor;
use crate::lower::fields::{PROPERTY_BAGS, column, ts_lit, ts_type};
use crate::lower::source::{entities_as_of, entity_type};
use crate::lower::time::micros;
use crate::metrics::{MetricInfo, Registry};
use crate::syntax::ast::DescribeTarget;

/// A field of a record: a column, or a key of a property-bag column (`properties.plan`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub data_type: String,
    pub unit: Option<String>,
    pub nullable: bool,
}

/// An edge kind of the relationships table, with its number of edges as of T.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeInfo {
    pub relation: String,
    pub source_type: String,
    pub target_type: String,
    pub edges: i64,
}

/// A signal available on a record's rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignalInfo {
    pub name: String,
    pub has_probability: bool,
}

/// One catalog record (one row of a DESCRIBE envelope).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Record {
    pub identifier: String,
    pub kind: &'static str,
    pub description: Option<String>,
    pub fields: Vec<FieldInfo>,
    pub relationships: Vec<EdgeInfo>,
    pub signals: Vec<SignalInfo>,
    pub values: Vec<String>,
    pub row_count: Option<i64>,
    pub version: Option<String>,
    pub unit: Option<String>,
    pub expression: Option<String>,
}

/// A signal lists its values when it has at most this many distinct ones.
pub const MAX_LISTED_VALUES: usize = 20;

/// The envelope columns of every DESCRIBE, in order.
pub fn columns() -> Vec<ColumnInfo> {
    let c = |name: &str, t: &str| ColumnInfo {
        name: name.into(),
        data_type: t.into(),
        unit: None,
    };
    vec![
        c("identifier", "string"),
        c("kind", "string"),
        c("description", "string"),
        c("fields", "list"),
        c("relationships", "list"),
        c("signals", "list"),
        c("values", "list"),
        c("row_count", "integer"),
        c("version", "string"),
        c("unit", "string"),
        c("expression", "string"),
    ]
}

impl Record {
    /// The record as an envelope row, in [`columns`] order.
    pub fn row(&self) -> Vec<Value> {
        vec![
            json!(self.identifier),
            json!(self.kind),
            json!(self.description),
            json!(self.fields),
            json!(self.relationships),
            json!(self.signals),
            json!(self.values),
            json!(self.row_count),
            json!(self.version),
            json!(self.unit),
            json!(self.expression),
        ]
    }
}

/// The fields of a table: its columns, with a struct property bag's keys flattened
/// (`properties.plan`); units from `signalql.toml`.
fn schema_fields(schema: &SchemaRef, units: &BTreeMap<String, String>) -> Vec<FieldInfo> {
    let mut out = Vec::new();
    for f in schema.fields() {
        let bag = PROPERTY_BAGS.contains(&f.name().as_str());
        match (bag, f.data_type()) {
            (true, DataType::Struct(children)) => {
                for c in children {
                    out.push(field_info(
                        &format!("{}.{}", f.name(), c.name()),
                        c,
                        f.is_nullable() || c.is_nullable(),
                        units,
                    ));
                }
            }
            (true, dt) if PropertiesEncoding::of(dt) == Some(PropertiesEncoding::JsonText) => {
                out.push(FieldInfo {
                    name: f.name().clone(),
                    data_type: "json".into(),
                    unit: None,
                    nullable: f.is_nullable(),
                });
            }
            _ => out.push(field_info(f.name(), f, f.is_nullable(), units)),
        }
    }
    out
}

fn field_info(
    name: &str,
    f: &Field,
    nullable: bool,
    units: &BTreeMap<String, String>,
) -> FieldInfo {
    FieldInfo {
        name: name.to_string(),
        data_type: type_name(f.data_type()),
        unit: units.get(name).cloned(),
        nullable,
    }
}

/// The struct keys of a property bag column, if it is a struct.
fn bag_keys(schema: &SchemaRef, bag: &str) -> Vec<Field> {
    match schema.field_with_name(bag).map(|f| f.data_type()) {
        Ok(DataType::Struct(children)) => children.iter().map(|c| c.as_ref().clone()).collect(),
        _ => Vec::new(),
    }
}

/// Per group of `keys`: the row count, and for each struct key of `bag` the count of non-null
/// values, as (group values, rows, per-key counts).
type Counts = Vec<(Vec<String>, i64, Vec<i64>)>;

fn text(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_default()
}

/// Reads catalog records from one catalog, in one session, as of one `T`.
pub struct Describer<'a> {
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
                Err(e) if e.is_missing_table() => {}
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
                    let table = catalog::entities(self.catalog, self.session()).await?;
                    let binder = crate::bind::Binder {
                        catalog: self.catalog,
                        exec: self.exec,
                        now: self.now,
                    };
                    return Err(Error::unknown_field(format!(
                        "unknown entity type `{wanted}`: the entities table has {}",
                        binder.entity_types(&table).await?.join(", ")
                    )));
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

    async fn describe_events(&self, _t: DateTime<Utc>) -> Result<Vec<Record>> {
        let table = catalog::events(self.catalog, self.session()).await?;
        let units = &self.dataset().config().units;
        let bag = bag_keys(&table.schema, "properties");
        let scan = scan(&table, "events")?;
        let scan = with_bag(scan, &table.schema, "properties")?;
        let per_event = self.counts(scan, &["event_name"], &bag).await?;
        let signals = self.signal_names().await?;
        let total: i64 = per_event.iter().map(|(_, n, _)| n).sum();
        let mut records = vec![Record {
            identifier: "events".into(),
            kind: "table",
            description: self.dataset().config().description.clone(),
            fields: schema_fields(&table.schema, units),
            signals: signals.clone(),
            row_count: Some(total),
            ..Default::default()
        }];
        let mut per_event = per_event;
        per_event.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, n, c) in per_event {
            let fields = bag
                .iter()
                .zip(&c)
                .filter(|(_, c)| **c > 0)
                .map(|(f, c)| {
                    let name = format!("properties.{}", f.name());
                    FieldInfo {
                        data_type: type_name(f.data_type()),
                        unit: units.get(&name).cloned(),
                        name,
                        nullable: *c < n,
                    }
                })
                .collect();
            records.push(Record {
                identifier: key[0].clone(),
                kind: "event",
                fields,
                row_count: Some(n),
                ..Default::default()
            });
        }
        Ok(records)
    }

    /// Every signal name with whether any row has a probability.
    async fn signal_names(&self) -> Result<Vec<SignalInfo>> {
        let Ok(signals) = self.catalog.table(self.session(), "signals").await else {
            return Ok(Vec::new());
        };
        let plan = scan(&signals, "signals")?
            .aggregate(
                vec![column("name")],
                vec![count(column("probability")).alias("p")],
            )?
            .sort(vec![column("name").sort(true, false)])?
            .build()?;
        Ok(self
            .rows_of(plan)
            .await?
            .iter()
            .map(|r| SignalInfo {
                name: text(&r[0]),
                has_probability: r[1].as_i64().unwrap_or(0) > 0,
            })
            .collect())
    }

    async fn describe_entities(&self, only: Option<&str>, t: DateTime<Utc>) -> Result<Vec<Record>> {
        let table = catalog::entities(self.catalog, self.session()).await?;
        let units = &self.dataset().config().units;
        let bag = bag_keys(&table.schema, "attributes");
        let state = entities_as_of(&table, only, t)?;
        let state = with_bag(state, &table.schema, "attributes")?;
        let per_type = self.counts(state, &["entity_type"], &bag).await?;
        let edges = match catalog::relationships(self.catalog, self.session()).await {
            Ok(r) => self.edges(&r, t).await?,
            Err(_) => Vec::new(),
        };
        let signals = self.entity_signals(&table, only, t).await?;
        let base: Vec<FieldInfo> = schema_fields(&table.schema, units)
            .into_iter()
            .filter(|f| !f.name.starts_with("attributes."))
            .collect();
        let mut records = Vec::new();
        let mut per_type = per_type;
        per_type.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, n, c) in per_type {
            let ty = key[0].clone();
            let mut fields = base.clone();
            fields.extend(bag.iter().zip(&c).filter(|(_, c)| **c > 0).map(|(f, c)| {
                let name = format!("attributes.{}", f.name());
                FieldInfo {
                    data_type: type_name(f.data_type()),
                    unit: units.get(&name).cloned(),
                    name,
                    nullable: *c < n,
                }
            }));
            records.push(Record {
                relationships: edges
                    .iter()
                    .filter(|e| e.source_type == ty || e.target_type == ty)
                    .cloned()
                    .collect(),
                signals: signals.get(&ty).cloned().unwrap_or_default(),
                identifier: ty,
                kind: "entity_type",
                fields,
                row_count: Some(n),
                ..Default::default()
            });
        }
        Ok(records)
    }

    /// Per entity type: the signals its entities have (computed at or before T).
    async fn entity_signals(
        &self,
        entities: &TableInfo,
        only: Option<&str>,
        t: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Vec<SignalInfo>>> {
        let Ok(signals) = self.catalog.table(self.session(), "signals").await else {
            return Ok(BTreeMap::new());
        };
        let ids = entities_as_of(entities, only, t)?
            .project(vec![
                column("entity_type").alias("__type"),
                column("entity_id").alias("__id"),
            ])?
            .build()?;
        let plan = scan(&signals, "signals")?
            .filter(cast(column("computed_at"), ts_type()).lt_eq(ts_lit(micros(t))))?
            .join(
                ids,
                JoinType::Inner,
                (vec!["entity_id"], vec!["__id"]),
                None,
            )?
            .aggregate(
                vec![column("__type"), column("name")],
                vec![count(column("probability")).alias("p")],
            )?
            .sort(vec![
                column("__type").sort(true, false),
                column("name").sort(true, false),
            ])?
            .build()?;
        let mut out: BTreeMap<String, Vec<SignalInfo>> = BTreeMap::new();
        for r in self.rows_of(plan).await? {
            out.entry(text(&r[0])).or_default().push(SignalInfo {
                name: text(&r[1]),
                has_probability: r[2].as_i64().unwrap_or(0) > 0,
            });
        }
        Ok(out)
    }

    /// The edge kinds of the relationships table as of T, sorted.
    async fn edges(&self, rels: &TableInfo, t: DateTime<Utc>) -> Result<Vec<EdgeInfo>> {
        let plan = scan(rels, "relationships")?
            .filter(cast(column("created_at"), ts_type()).lt_eq(ts_lit(micros(t))))?
            .aggregate(
                vec![column("relation"), column("src_type"), column("dst_type")],
                vec![count(lit(1)).alias("n")],
            )?
            .sort(vec![
                column("relation").sort(true, false),
                column("src_type").sort(true, false),
                column("dst_type").sort(true, false),
            ])?
            .build()?;
        Ok(self
            .rows_of(plan)
            .await?
            .iter()
            .map(|r| EdgeInfo {
                relation: text(&r[0]),
                source_type: text(&r[1]),
                target_type: text(&r[2]),
                edges: r[3].as_i64().unwrap_or(0),
            })
            .collect())
    }

    async fn describe_relationships(&self, t: DateTime<Utc>) -> Result<Vec<Record>> {
        let rels = catalog::relationships(self.catalog, self.session()).await?;
        let mut by_relation: BTreeMap<String, Vec<EdgeInfo>> = BTreeMap::new();
        for e in self.edges(&rels, t).await? {
            by_relation.entry(e.relation.clone()).or_default().push(e);
        }
        Ok(by_relation
            .into_iter()
            .map(|(relation, edges)| Record {
                row_count: Some(edges.iter().map(|e| e.edges).sum()),
                identifier: relation,
                kind: "relationship",
                relationships: edges,
                ..Default::default()
            })
            .collect())
    }

    async fn describe_signals(&self, t: DateTime<Utc>) -> Result<Vec<Record>> {
        let signals = self.catalog.table(self.session(), "signals").await?;
        let plan = scan(&signals, "signals")?
            .filter(cast(column("computed_at"), ts_type()).lt_eq(ts_lit(micros(t))))?
            .aggregate(
                vec![column("name"), column("value")],
                vec![
                    count(lit(1)).alias("n"),
                    count(column("probability")).alias("p"),
                ],
            )?
            .sort(vec![
                column("name").sort(true, false),
                column("value").sort(true, false),
            ])?
            .build()?;
        let mut records: Vec<Record> = Vec::new();
        let fields = schema_fields(&signals.schema, &self.dataset().config().units)
            .into_iter()
            .filter(|f| matches!(f.name.as_str(), "value" | "probability"))
            .collect::<Vec<_>>();
        for r in self.rows_of(plan).await? {
            let name = text(&r[0]);
            if records.last().is_none_or(|l| l.identifier != name) {
                records.push(Record {
                    identifier: name.clone(),
                    kind: "signal",
                    fields: fields.clone(),
                    signals: vec![SignalInfo {
                        name,
                        has_probability: false,
                    }],
                    row_count: Some(0),
                    ..Default::default()
                });
            }
            let Some(rec) = records.last_mut() else {
                continue;
            };
            rec.row_count = Some(rec.row_count.unwrap_or(0) + r[2].as_i64().unwrap_or(0));
            if r[3].as_i64().unwrap_or(0) > 0 {
                rec.signals[0].has_probability = true;
            }
            if let Some(v) = r[1].as_str() {
                rec.values.push(v.to_string());
            }
        }
        for rec in &mut records {
            if rec.values.len() > MAX_LISTED_VALUES {
                rec.description = Some(format!("{} distinct values", rec.values.len()));
                rec.values.clear();
            }
        }
        Ok(records)
    }

    /// One record per registry entry, and the `metadata.metrics` entries, from one read of
    /// `metrics.toml`.
    fn metric_catalog(&self) -> Result<(Vec<Record>, Vec<MetricInfo>)> {
        let registry = Registry::load(self.dataset().root())?;
        let infos: Vec<MetricInfo> = registry.all().map(|m| registry.info(m)).collect();
        let records = registry
            .all()
            .zip(&infos)
            .map(|(m, info)| Record {
                identifier: info.name.clone(),
                kind: "metric",
                description: m.def.description.clone(),
                version: Some(info.version.clone()),
                unit: info.unit.clone(),
                expression: Some(info.resolved_expression.clone()),
                ..Default::default()
            })
            .collect();
        Ok((records, infos))
    }
}

fn scan(table: &TableInfo, name: &str) -> Result<LogicalPlanBuilder> {
    Ok(LogicalPlanBuilder::scan(
        name,
        provider_as_source(table.provider.clone()),
        None,
    )?)
}

/// `b` with its property bag `bag` (if a struct) also as the column `__bag`.
fn with_bag(b: LogicalPlanBuilder, schema: &SchemaRef, bag: &str) -> Result<LogicalPlanBuilder> {
    let mut cols: Vec<Expr> = b.schema().columns().into_iter().map(Expr::Column).collect();
    if matches!(
        schema.field_with_name(bag).map(|f| f.data_type()),
        Ok(DataType::Struct(_))
    ) {
        cols.push(column(bag).alias("__bag"));
    }
    Ok(b.project(cols)?)
}

//! What DESCRIBE reads for each target: events and their property keys, entity types with their
//! attributes, relationships and signals, the signals table, and the metric registry.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::{JoinType, cast, lit};
use signalql_catalog::TableInfo;

use super::record::{
    EdgeInfo, FieldInfo, MAX_LISTED_VALUES, Record, SignalInfo, bag_keys, schema_fields,
};
use super::{Describer, scan, text, with_bag};
use crate::catalog;
use crate::envelope::type_name;
use crate::error::Result;
use crate::lower::fields::{column, ts_lit, ts_type};
use crate::lower::source::entities_as_of;
use crate::lower::time::micros;
use crate::metrics::{MetricInfo, Registry};

impl Describer<'_> {
    pub(super) async fn describe_events(&self, _t: DateTime<Utc>) -> Result<Vec<Record>> {
        let table = catalog::open(self.catalog, self.session(), "events").await?;
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
            fields: schema_fields(&table, units),
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
                        source: None,
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
    pub(super) async fn signal_names(&self) -> Result<Vec<SignalInfo>> {
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

    pub(super) async fn describe_entities(
        &self,
        only: Option<&str>,
        t: DateTime<Utc>,
    ) -> Result<Vec<Record>> {
        let table = catalog::open(self.catalog, self.session(), "entities").await?;
        let units = &self.dataset().config().units;
        let bag = bag_keys(&table.schema, "attributes");
        let state = entities_as_of(&table, only, t)?;
        let state = with_bag(state, &table.schema, "attributes")?;
        let per_type = self.counts(state, &["entity_type"], &bag).await?;
        let edges = match catalog::open(self.catalog, self.session(), "relationships").await {
            Ok(r) => self.edges(&r, t).await?,
            Err(_) => Vec::new(),
        };
        let signals = self.entity_signals(&table, only, t).await?;
        let base: Vec<FieldInfo> = schema_fields(&table, units)
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
                    source: None,
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
    pub(super) async fn entity_signals(
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
    pub(super) async fn edges(&self, rels: &TableInfo, t: DateTime<Utc>) -> Result<Vec<EdgeInfo>> {
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

    pub(super) async fn describe_relationships(&self, t: DateTime<Utc>) -> Result<Vec<Record>> {
        let rels = catalog::open(self.catalog, self.session(), "relationships").await?;
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

    pub(super) async fn describe_signals(&self, t: DateTime<Utc>) -> Result<Vec<Record>> {
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
        let fields = schema_fields(&signals, &self.dataset().config().units)
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
    pub(super) fn metric_catalog(&self) -> Result<(Vec<Record>, Vec<MetricInfo>)> {
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

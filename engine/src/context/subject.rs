//! The subject of `CONTEXT FOR entity(type, "id")` (the v0.4 form, docs/context.md): the
//! entity's record as a bundle item. The objects around it are packed by the same packer as
//! the task form, the entity being the expansion's one seed (`PackParams::subject`).

use datafusion::logical_expr::{Expr, col, lit};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::bundle::{Item, canonical_json};
use super::load::optional;
use super::pack::{SUBJECT_SCORE, explained_item};
use crate::catalog::Catalog;
use crate::error::Result;
use crate::execute::Executor;
use crate::lower::fields::ts_lit;
use crate::syntax::ast::EntityRef;
use signalql_udfs::scalar::token_estimate::Estimator;

/// The address of an entity record item: `entity://type/id`.
pub fn entity_uri(e: &EntityRef) -> String {
    format!("entity://{}/{}", e.entity_type, e.entity_id)
}

/// The entity of an entity record item's address (`entity://type/id`), `None` for any other.
pub fn parse_entity_uri(uri: &str) -> Option<EntityRef> {
    let (ty, id) = uri.strip_prefix("entity://")?.split_once('/')?;
    Some(EntityRef {
        entity_type: ty.into(),
        entity_id: id.into(),
    })
}

/// The entity record as packed: the item (with content) and its explanation entry.
#[derive(Debug, Clone)]
pub struct Subject {
    pub item: Item,
    pub explained: Value,
}

/// The record of `e` at `t` (µs) as the caller reads it, as canonical JSON:
/// `{entity_type, entity_id, attributes, updated_at, relationships: [{relation, direction,
/// entity, created_at}]}`, from the latest `entities` row updated at or before `t` and the
/// relationships created at or before `t` that have it at either end (sorted). `None` when
/// the dataset has no `entities` row for it then.
pub async fn record(
    exec: &Executor,
    catalog: &dyn Catalog,
    e: &EntityRef,
    t: i64,
) -> Result<Option<String>> {
    let ctx = exec.session();
    let Some(entities) = optional(ctx, catalog, "entities").await? else {
        return Ok(None);
    };
    let has = |df: &datafusion::dataframe::DataFrame, c: &str| {
        df.schema().has_column_with_unqualified_name(c)
    };
    let mut rows = entities.filter(
        col("entity_type")
            .eq(lit(e.entity_type.as_str()))
            .and(col("entity_id").eq(lit(e.entity_id.as_str()))),
    )?;
    let mut wanted: Vec<Expr> = Vec::new();
    let updated = has(&rows, "updated_at");
    if updated {
        rows = rows.filter(col("updated_at").lt_eq(ts_lit(t)))?;
        wanted.push(col("updated_at"));
    }
    if has(&rows, "attributes") {
        wanted.push(col("attributes"));
    }
    let names: Vec<String> = wanted.iter().map(|c| c.schema_name().to_string()).collect();
    let batches = exec.collect(rows.select(wanted)?).await?;
    let found = crate::envelope::rows(&batches, usize::MAX)?;
    // The latest row (updated_at sorts as RFC 3339 text); without updated_at, the last read.
    let Some(latest) = found.into_iter().max_by(|a, b| {
        let at = |r: &Vec<Value>| r.first().and_then(Value::as_str).map(str::to_string);
        if updated {
            at(a).cmp(&at(b))
        } else {
            std::cmp::Ordering::Less
        }
    }) else {
        return Ok(None);
    };
    let field = |name: &str| -> Value {
        let v = names
            .iter()
            .position(|n| n == name)
            .map_or(Value::Null, |i| latest[i].clone());
        // Attributes kept as JSON text are the object they hold.
        match v {
            Value::String(s) if name == "attributes" => serde_json::from_str(&s)
                .ok()
                .filter(Value::is_object)
                .unwrap_or(Value::String(s)),
            v => v,
        }
    };
    let mut relationships: Vec<Value> = Vec::new();
    if let Some(rels) = optional(ctx, catalog, "relationships").await? {
        let is = |ty: &str, id: &str| {
            col(ty)
                .eq(lit(e.entity_type.as_str()))
                .and(col(id).eq(lit(e.entity_id.as_str())))
        };
        let mut rels = rels.filter(is("src_type", "src_id").or(is("dst_type", "dst_id")))?;
        let created = has(&rels, "created_at");
        let mut cols = vec![
            col("src_type"),
            col("src_id"),
            col("relation"),
            col("dst_type"),
            col("dst_id"),
        ];
        if created {
            rels = rels.filter(col("created_at").lt_eq(ts_lit(t)))?;
            cols.push(col("created_at"));
        }
        let batches = exec.collect(rels.select(cols)?).await?;
        for r in crate::envelope::rows(&batches, usize::MAX)? {
            let s = |i: usize| r[i].as_str().unwrap_or_default().to_string();
            let outgoing = s(0) == e.entity_type && s(1) == e.entity_id;
            let (direction, other) = match outgoing {
                true => ("out", format!("{}:{}", s(3), s(4))),
                false => ("in", format!("{}:{}", s(0), s(1))),
            };
            relationships.push(json!({
                "relation": r[2],
                "direction": direction,
                "entity": other,
                "created_at": r.get(5).cloned().unwrap_or(Value::Null),
            }));
        }
        relationships.sort_by_key(canonical_json);
        relationships.dedup();
    }
    let record = json!({
        "entity_type": e.entity_type,
        "entity_id": e.entity_id,
        "attributes": field("attributes"),
        "updated_at": field("updated_at"),
        "relationships": relationships,
    });
    Ok(Some(canonical_json(&record)))
}

/// The record of `e` at `t` as a bundle item (counted by `estimator`), or `None` when it has
/// none.
pub async fn subject(
    exec: &Executor,
    catalog: &dyn Catalog,
    e: &EntityRef,
    t: i64,
    estimator: Estimator,
) -> Result<Option<Subject>> {
    let Some(content) = record(exec, catalog, e, t).await? else {
        return Ok(None);
    };
    let item = Item {
        object: entity_uri(e),
        representation: "record".into(),
        media_type: "application/json".into(),
        tokens: estimator.count(&content),
        estimator: estimator.name().into(),
        score: SUBJECT_SCORE,
        why: vec![json!({"subject": {"entity": e.node()}})],
        path: vec![e.node()],
        state: "current".into(),
        origin: "system".into(),
        trust: "unknown".into(),
        validation: "none".into(),
        roles: vec!["data".into()],
        content_hash: hex::encode(Sha256::digest(content.as_bytes())),
        content: Some(content),
        content_ref: None,
        compression: None,
        unknown: Default::default(),
    };
    let explained = explained_item(
        &item,
        [
            ("terms", json!([])),
            (
                "score_breakdown",
                json!({"lexical": 0, "propagated": SUBJECT_SCORE, "boosts": []}),
            ),
        ],
    );
    Ok(Some(Subject { item, explained }))
}

/// Whether the caller reads the record of `e` with the content hash `hash` at the bundle's
/// time (its AS OF, else when it was computed): what EXPLAIN CONTEXT checks before it shows a
/// restricted caller an entity bundle.
pub async fn record_seen(
    catalog: &dyn Catalog,
    exec: &Executor,
    e: &EntityRef,
    hash: &str,
    as_of: &Option<String>,
    computed_at: &str,
) -> Result<bool> {
    let at = as_of.as_deref().unwrap_or(computed_at);
    let Ok(t) = crate::lower::time::parse_timestamp(&crate::syntax::ast::Timestamp(at.into()))
    else {
        return Ok(false);
    };
    Ok(record(exec, catalog, e, crate::lower::time::micros(t))
        .await?
        .is_some_and(|c| hex::encode(Sha256::digest(c.as_bytes())) == hash))
}

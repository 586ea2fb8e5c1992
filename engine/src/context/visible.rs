//! EXPLAIN CONTEXT for a caller a policy restricts (docs/policy.md): a stored bundle is shown
//! only when everything its items name (each item's object revision and representation, and
//! every node on each item's expansion path) is visible to the caller; otherwise the answer is
//! the one for an address that was never stored. Its rejections are cut to the objects the
//! caller may see, and its phase counts to those it can know (packed and rejected).

use std::collections::{BTreeSet, HashSet};

use datafusion::arrow::array::Array;
use datafusion::logical_expr::{Expr, col, lit};
use serde_json::Value;

use super::candidates::{int_col, string_col};
use super::{Explanation, parse_object_uri};
use crate::catalog::{Catalog, open, optional_table, scan};
use crate::error::{Error, Result};
use crate::execute::Executor;
use crate::syntax::ast::EntityRef;

/// `x` (stored for `address`) as the caller of `catalog` may see it, or `unknown_context`.
pub async fn explanation(
    catalog: &dyn Catalog,
    exec: &Executor,
    address: &str,
    mut x: Explanation,
) -> Result<Explanation> {
    let hidden = || Error::unknown_context(address);
    let mut named: Vec<(String, i64)> = Vec::new();
    let mut reps: Vec<(String, i64, String)> = Vec::new();
    let mut nodes: BTreeSet<String> = BTreeSet::new();
    let mut records: Vec<(EntityRef, String)> = Vec::new();
    for item in &x.items {
        let object = item
            .get("object")
            .and_then(Value::as_str)
            .ok_or_else(hidden)?;
        if let Some(e) = super::subject::parse_entity_uri(object) {
            // The entity record of CONTEXT FOR entity(…): shown when the caller reads the
            // same record (checked below), its relationships included.
            let hash = item.get("content_hash").and_then(Value::as_str);
            records.push((e, hash.unwrap_or_default().to_string()));
        } else {
            let (id, rev) = parse_object_uri(object).ok_or_else(hidden)?;
            named.push((id.to_string(), rev));
            if let Some(r) = item.get("representation").and_then(Value::as_str) {
                reps.push((id.to_string(), rev, r.to_string()));
            }
        }
        let from = item
            .get("why")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w.pointer("/graph_expansion/from").and_then(Value::as_str));
        let path = item
            .get("path")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        for n in path.chain(from) {
            nodes.insert(n.to_string());
        }
    }
    let scanned = x.scoring.iter().flat_map(|s| &s.scanned);
    for o in x.rejected.iter().map(|r| &r.object).chain(scanned) {
        if let Some((id, rev)) = parse_object_uri(o) {
            named.push((id.to_string(), rev));
        }
    }
    // Path nodes: objects (`object://id@rev`) and entities (`type:id`).
    let mut path_revisions: Vec<(String, i64)> = Vec::new();
    let mut entities: Vec<&str> = Vec::new();
    for n in &nodes {
        match parse_object_uri(n) {
            Some((id, rev)) => path_revisions.push((id.to_string(), rev)),
            None if n.starts_with("object://") => return Err(hidden()),
            None => entities.push(n.as_str()),
        }
    }
    let ids: BTreeSet<&str> = named
        .iter()
        .chain(&path_revisions)
        .map(|(id, _)| id.as_str())
        .collect();
    let visible = visible_revisions(catalog, exec, &ids).await?;
    let shown = |pairs: &[(String, i64)]| {
        pairs
            .iter()
            .all(|(id, rev)| visible.contains(&(id.clone(), *rev)))
    };
    let item_objects = x.items.len() - records.len();
    if !shown(&named[..item_objects]) || !shown(&path_revisions) {
        return Err(hidden());
    }
    if !visible_representations(catalog, exec, &reps).await? {
        return Err(hidden());
    }
    if !linked_entities_visible(catalog, exec, &entities).await? {
        return Err(hidden());
    }
    for (e, hash) in &records {
        if !super::subject::record_seen(catalog, exec, e, hash, &x.as_of, &x.computed_at).await? {
            return Err(hidden());
        }
    }
    x.rejected.retain(|r| {
        parse_object_uri(&r.object)
            .is_some_and(|(id, rev)| visible.contains(&(id.to_string(), rev)))
    });
    let packed = x.items.len() as u64;
    if let Some(s) = &mut x.scoring {
        // Which path the candidates the caller may know of took.
        s.scanned.retain(|o| {
            parse_object_uri(o).is_some_and(|(id, rev)| visible.contains(&(id.to_string(), rev)))
        });
        s.scan = s.scanned.len() as u64;
        s.index = (packed + x.rejected.len() as u64).saturating_sub(s.scan);
    }
    x.phases = [("packed", packed), ("rejected", x.rejected.len() as u64)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    Ok(x)
}

/// The rows of `table`, as the caller of `catalog` may see it, of the objects `ids`.
async fn of_objects(
    catalog: &dyn Catalog,
    exec: &Executor,
    table: &str,
    ids: &BTreeSet<&str>,
) -> Result<datafusion::logical_expr::LogicalPlanBuilder> {
    let list: Vec<Expr> = ids.iter().map(|id| lit(*id)).collect();
    Ok(
        scan(&open(catalog, exec.session(), table).await?, table, vec![])?
            .filter(col("object_id").in_list(list, false))?,
    )
}

/// The (object id, revision) pairs among `ids`' that the caller may see: the object's rows
/// and the revision's both pass its restrictions.
async fn visible_revisions(
    catalog: &dyn Catalog,
    exec: &Executor,
    ids: &BTreeSet<&str>,
) -> Result<HashSet<(String, i64)>> {
    let mut out = HashSet::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let objects = of_objects(catalog, exec, "objects", ids)
        .await?
        .project(vec![col("object_id").alias("o_id")])?
        .distinct()?
        .build()?;
    // `int_col` reads the revision as Int64 whatever its type.
    let plan = of_objects(catalog, exec, "revisions", ids)
        .await?
        .project(vec![col("object_id"), col("revision")])?
        .join(
            objects,
            datafusion::common::JoinType::LeftSemi,
            (vec!["object_id"], vec!["o_id"]),
            None,
        )?
        .build()?;
    for b in &exec.run(&plan).await?.batches {
        let (id, rev) = (string_col(b, "object_id")?, int_col(b, "revision")?);
        for i in 0..b.num_rows() {
            if let (Some(id), true) = (id.get(i), rev.is_valid(i)) {
                let rev = rev.value(i);
                out.insert((id.to_string(), rev));
            }
        }
    }
    Ok(out)
}

/// Whether every representation `reps` names passes the caller's restrictions.
async fn visible_representations(
    catalog: &dyn Catalog,
    exec: &Executor,
    reps: &[(String, i64, String)],
) -> Result<bool> {
    if reps.is_empty() {
        return Ok(true);
    }
    let ids: BTreeSet<&str> = reps.iter().map(|(id, _, _)| id.as_str()).collect();
    let plan = of_objects(catalog, exec, "representations", &ids)
        .await?
        .project(vec![col("object_id"), col("revision"), col("name")])?
        .build()?;
    let mut seen: HashSet<(String, i64, String)> = HashSet::new();
    for b in &exec.run(&plan).await?.batches {
        let (id, rev, name) = (
            string_col(b, "object_id")?,
            int_col(b, "revision")?,
            string_col(b, "name")?,
        );
        for i in 0..b.num_rows() {
            if let (Some(id), true, Some(name)) = (id.get(i), rev.is_valid(i), name.get(i)) {
                let rev = rev.value(i);
                seen.insert((id.to_string(), rev, name.to_string()));
            }
        }
    }
    Ok(reps.iter().all(|r| seen.contains(r)))
}

/// Whether every entity node (`type:id`) on the items' paths is named by a link the caller
/// may see (a hidden entity's links are hidden).
async fn linked_entities_visible(
    catalog: &dyn Catalog,
    exec: &Executor,
    nodes: &[&str],
) -> Result<bool> {
    if nodes.is_empty() {
        return Ok(true);
    }
    let ctx = exec.session();
    let Some(links) = optional_table(catalog, ctx, "links").await? else {
        return Ok(false);
    };
    let key = datafusion::functions::string::expr_fn::concat(vec![
        col("entity_type"),
        lit(":"),
        col("entity_id"),
    ]);
    let wanted: Vec<Expr> = nodes.iter().map(|n| lit(*n)).collect();
    let plan = scan(&links, "links", vec![])?
        .project(vec![key.alias("node")])?
        .filter(col("node").in_list(wanted, false))?
        .distinct()?
        .build()?;
    let mut seen: HashSet<String> = HashSet::new();
    for b in &exec.run(&plan).await?.batches {
        let n = string_col(b, "node")?;
        for i in 0..b.num_rows() {
            if let Some(n) = n.get(i) {
                seen.insert(n.to_string());
            }
        }
    }
    Ok(nodes.iter().all(|n| seen.contains(*n)))
}

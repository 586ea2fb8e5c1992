//! What `CONTEXT FOR` reads after packing, on the engine's execution path: the content of the
//! packed representations (a point lookup with the filter in the Parquet reader), and WITH
//! EVIDENCE's graph of the selected revisions.

use std::collections::HashMap;

use datafusion::logical_expr::{Expr, col, lit};
use datafusion::prelude::SessionContext;

use super::Graph;
use super::candidates::{int_col, string_col};
use super::load::{opened, optional, table};
use crate::catalog::Catalog;
use crate::error::Result;
use crate::execute::Executor;
use crate::lower::fields::ts_lit;

/// The content of the representations `keys` (object id, revision, name), read after packing
/// so only packed content is loaded; every key must be an eligible representation. A key
/// whose content is NULL or that no row holds is left out.
pub async fn contents(
    exec: &Executor,
    catalog: &dyn Catalog,
    keys: &[(String, i64, String)],
) -> Result<HashMap<(String, i64, String), String>> {
    let mut out = HashMap::new();
    if keys.is_empty() {
        return Ok(out);
    }
    // By locator, from the files as listed, when the caller sees the table whole and it is
    // a folder of local files read as they are (catalog::objects::resident::locate).
    let t = catalog.table(exec.session(), "representations").await?;
    if t.view.is_none() && t.restriction.is_none() && t.is_folder() {
        let files = catalog.dataset().content_files();
        if let Some(found) = files.contents(&t.files, keys) {
            return Ok(found);
        }
    }
    let ids: Vec<Expr> = keys.iter().map(|k| lit(k.0.as_str())).collect();
    // Else a point lookup: with the filter pushed into the Parquet reader, only the pages holding
    // the wanted rows have their content decoded (representations are written in object id
    // order), instead of every page of the text column.
    // The copy shares the session's catalogs; only its config is its own. (Building a state
    // with a fresh config would register a new, empty default catalog over the session's own
    // and drop every table registered in it.)
    let mut state = exec.session().state();
    state
        .config_mut()
        .options_mut()
        .execution
        .parquet
        .pushdown_filters = true;
    let lookup = SessionContext::new_with_state(state);
    let wanted_rows = opened(&lookup, &t)?
        .filter(col("object_id").in_list(ids, false))?
        .select(vec![
            col("object_id"),
            col("revision"),
            col("name"),
            col("content"),
        ])?;
    let batches = exec.collect(wanted_rows).await?;
    let wanted: std::collections::HashSet<&(String, i64, String)> = keys.iter().collect();
    for b in &batches {
        let (ids, names, content) = (
            string_col(b, "object_id")?,
            string_col(b, "name")?,
            string_col(b, "content")?,
        );
        let revs = int_col(b, "revision")?;
        for i in 0..b.num_rows() {
            let key = (
                ids.value(i).to_string(),
                revs.value(i),
                names.value(i).to_string(),
            );
            if wanted.contains(&key) && !content.is_null(i) {
                out.insert(key, content.value(i).to_string());
            }
        }
    }
    Ok(out)
}

/// The evidence rows (derivations, links) of the selected revisions, and every object's latest
/// revision as of `t` (for WITH EVIDENCE; the packer reads its edges from the plan).
pub async fn graph(
    exec: &Executor,
    catalog: &dyn Catalog,
    selected: &HashMap<String, i64>,
    t: i64,
) -> Result<Graph> {
    let ctx = exec.session();
    let mut g = Graph::default();
    if let Some(links) = optional(ctx, catalog, "links").await? {
        let rows = links.select(vec![
            col("object_id"),
            col("revision"),
            col("entity_type"),
            col("entity_id"),
            col("relation"),
        ])?;
        for b in exec.collect(rows).await? {
            let (ids, types, ents, rels) = (
                string_col(&b, "object_id")?,
                string_col(&b, "entity_type")?,
                string_col(&b, "entity_id")?,
                string_col(&b, "relation")?,
            );
            let revs = int_col(&b, "revision")?;
            for i in 0..b.num_rows() {
                let id = ids.value(i);
                if selected.get(id) != Some(&revs.value(i)) {
                    continue;
                }
                g.links.entry(id.to_string()).or_default().push((
                    types.value(i).to_string(),
                    ents.value(i).to_string(),
                    rels.value(i).to_string(),
                ));
            }
        }
    }
    if let Some(derivs) = optional(ctx, catalog, "derivations").await? {
        let rows = derivs.select(vec![
            col("object_id"),
            col("revision"),
            col("relation"),
            col("source_object_id"),
            col("source_revision"),
        ])?;
        for b in exec.collect(rows).await? {
            let (ids, rels, srcs) = (
                string_col(&b, "object_id")?,
                string_col(&b, "relation")?,
                string_col(&b, "source_object_id")?,
            );
            let (revs, src_revs) = (int_col(&b, "revision")?, int_col(&b, "source_revision")?);
            for i in 0..b.num_rows() {
                let id = ids.value(i);
                if selected.get(id) != Some(&revs.value(i)) {
                    continue;
                }
                g.derivations.entry(id.to_string()).or_default().push((
                    rels.value(i).to_string(),
                    srcs.value(i).to_string(),
                    src_revs.value(i),
                ));
            }
        }
    }
    for list in g.derivations.values_mut() {
        list.sort();
    }
    for list in g.links.values_mut() {
        list.sort();
    }
    let revisions = table(ctx, catalog, "revisions").await?;
    let rows = revisions
        .filter(col("created_at").lt_eq(ts_lit(t)))?
        .select(vec![col("object_id"), col("revision")])?;
    for b in exec.collect(rows).await? {
        let ids = string_col(&b, "object_id")?;
        let revs = int_col(&b, "revision")?;
        for i in 0..b.num_rows() {
            let e = g
                .latest
                .entry(ids.value(i).to_string())
                .or_insert(revs.value(i));
            *e = (*e).max(revs.value(i));
        }
    }
    Ok(g)
}

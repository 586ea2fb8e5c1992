//! The DataFusion plans behind `CONTEXT FOR`: candidates at T, their representations (through
//! the text index where it covers them, `indexed`; content loaded only where packable and
//! neither secret nor excluded), per row the lexical-v1 term weights of the title and of the
//! content, and the graph edges of every revision.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, ScalarValue};
use datafusion::dataframe::DataFrame;
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions::string::expr_fn::{concat, starts_with};
use datafusion::functions::unicode::expr_fn::character_length;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::functions_nested::expr_fn::{array_has, array_union, make_array};
use datafusion::logical_expr::{
    Expr, LogicalPlan, LogicalPlanBuilder, cast as cast_expr, col, lit, when,
};
use datafusion::prelude::SessionContext;
use signalql_udfs::scalar::lexical::lexical_weights;

use super::select::{CHARS_DIV_4, STORED};
use crate::catalog::{Catalog, optional_table};
use crate::error::Result;
use crate::lower::fields::ts_lit;
use crate::lower::time::micros;
use crate::lower::{plan, project};
use crate::syntax::ast::{ContextQuery, ExcludeItem, Role};
use signalql_udfs::scalar::token_estimate::{Estimator, token_count};

pub(crate) fn role_name(r: Role) -> &'static str {
    match r {
        Role::Data => "data",
        Role::Instruction => "instruction",
        Role::Prompt => "prompt",
        Role::Policy => "policy",
        Role::Executable => "executable",
        Role::Secret => "secret",
        Role::UntrustedExternal => "untrusted_external",
    }
}

/// The table `name` as a data frame of `ctx`.
pub(crate) async fn table(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    name: &str,
) -> Result<DataFrame> {
    frame(ctx, scanned(ctx, catalog, name).await?)
}

/// The opened table `t` read through its view, as a data frame of `ctx`.
pub(crate) fn opened(ctx: &SessionContext, t: &signalql_catalog::TableInfo) -> Result<DataFrame> {
    frame(ctx, read(t)?)
}

/// `b`'s plan as a data frame of `ctx` (for the callers that read with data frames).
fn frame(ctx: &SessionContext, b: LogicalPlanBuilder) -> Result<DataFrame> {
    Ok(DataFrame::new(ctx.state(), b.build()?))
}

/// `t` read through its view, as a plan builder.
fn read(t: &signalql_catalog::TableInfo) -> Result<LogicalPlanBuilder> {
    crate::catalog::scan(t, &t.name, vec![])
}

/// The table `name` read through its view, as a plan builder. The plan of `CONTEXT FOR` is
/// built from these rather than from data frames: each data frame holds a copy of the
/// session's state (every registered function by name), made again at each clone.
async fn scanned(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    name: &str,
) -> Result<LogicalPlanBuilder> {
    read(&catalog.table(ctx, name).await?)
}

/// The table `name` as a plan builder, `None` when the dataset has none.
async fn optional_scanned(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    name: &str,
) -> Result<Option<LogicalPlanBuilder>> {
    match optional_table(catalog, ctx, name).await? {
        Some(t) => Ok(Some(read(&t)?)),
        None => Ok(None),
    }
}

/// The table `name` as a data frame of `ctx`, `None` when the dataset has none.
pub(crate) async fn optional(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    name: &str,
) -> Result<Option<DataFrame>> {
    match optional_scanned(ctx, catalog, name).await? {
        Some(b) => Ok(Some(frame(ctx, b)?)),
        None => Ok(None),
    }
}

/// A representation's effective roles: its revision's (`rev_roles`) and its own
/// (`rep_roles`).
pub(crate) fn effective_roles() -> Expr {
    let empty = make_array(vec![]);
    array_union(
        coalesce(vec![col("rev_roles"), empty.clone()]),
        coalesce(vec![col("rep_roles"), empty]),
    )
}

/// Whether `media_type` is packable text (`text/*` or `application/json`).
pub(crate) fn packable_media() -> Expr {
    starts_with(col("media_type"), lit("text/")).or(col("media_type").eq(lit("application/json")))
}

/// Keeps, per `object_id`, the rows whose `by` is the largest: a hash aggregate and a join,
/// cheaper than a sorted window. Rows tied on `by` are all kept (the candidates are assembled
/// per object id, so a duplicate row changes nothing).
fn latest_per_object(b: LogicalPlanBuilder, by: &str) -> Result<LogicalPlanBuilder> {
    let cols = plan::columns(&b);
    let input = b.build()?;
    let best = plan::aggregate(
        LogicalPlanBuilder::from(input.clone()),
        vec![col("object_id")],
        vec![max(col(by)).alias("__best")],
    )?;
    let best = project(best, vec![col("object_id").alias("__oid"), col("__best")])?.build()?;
    let joined = LogicalPlanBuilder::from(input).join(
        best,
        JoinType::Inner,
        (vec!["object_id", by], vec!["__oid", "__best"]),
        None,
    )?;
    Ok(project(joined, cols)?)
}

/// The objects live at `t` at their latest revision as of `t`: object columns and revision
/// columns, one row per object.
pub(crate) async fn candidates_df(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    t: i64,
) -> Result<DataFrame> {
    frame(ctx, candidates(ctx, catalog, t).await?)
}

/// [`candidates_df`] as a plan builder.
async fn candidates(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    t: i64,
) -> Result<LogicalPlanBuilder> {
    let objects = scanned(ctx, catalog, "objects").await?;
    let objects = latest_per_object(
        plan::filter(objects, col("recorded_at").lt_eq(ts_lit(t)))?,
        "recorded_at",
    )?;
    let objects = plan::filter(
        objects,
        col("tombstoned_at")
            .is_null()
            .or(col("tombstoned_at").gt(ts_lit(t))),
    )?;
    let objects = project(
        objects,
        vec![col("object_id"), col("project"), col("kind"), col("title")],
    )?;
    let revisions = scanned(ctx, catalog, "revisions").await?;
    let revisions = latest_per_object(
        plan::filter(revisions, col("created_at").lt_eq(ts_lit(t)))?,
        "revision",
    )?;
    let revisions = project(
        revisions,
        vec![
            col("object_id").alias("r_object_id"),
            col("revision"),
            col("created_at").alias("rev_created_at"),
            col("origin"),
            col("trust"),
            col("validation"),
            col("roles").alias("rev_roles"),
            col("state"),
        ],
    )?
    .build()?;
    Ok(objects.join(
        revisions,
        JoinType::Inner,
        (vec!["object_id"], vec!["r_object_id"]),
        None,
    )?)
}

/// The logical plan of `CONTEXT FOR`: the candidate representations (metadata only) with each
/// row's lexical-v1 term weights, and the graph edges of every revision (the packer keeps the
/// selected revisions' own), under the [`BundlePack`](super::exec::BundlePack) operator.
pub async fn plan(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    q: &ContextQuery,
    t: DateTime<Utc>,
    params: &super::PackParams,
) -> Result<LogicalPlan> {
    let t_us = micros(t);
    // The title's term weights, once per object.
    let cands = candidates(ctx, catalog, t_us).await?;
    let mut with_title: Vec<Expr> = plan::columns(&cands);
    with_title.push(
        lexical_weights(lit(q.task.as_str()), col("title"), lit(""), lit(""))
            .alias("title_weights"),
    );
    let cands = project(cands, with_title)?;
    // A representation written twice (a re-run after a crash) is identical; duplicates are
    // dropped when the candidates are assembled and cannot change a score.
    let terms = signalql_udfs::scalar::lexical::terms(&q.task);
    let reps = super::indexed::representations(ctx, catalog, &terms, params.compress)
        .await?
        .build()?;
    let joined = cands.join(
        reps,
        JoinType::Left,
        (
            vec!["object_id", "revision"],
            vec!["p_object_id", "p_revision"],
        ),
        None,
    )?;

    // Effective roles, the secret and EXCLUDE ROLE tests, packability; content only where all
    // three allow it, so no later expression can read secret or excluded text.
    let eff = effective_roles();
    let has = |r: &str| array_has(col("eff_roles"), lit(r));
    let mut role_excluded = lit(false);
    for x in &q.exclude {
        if let ExcludeItem::Role { role, from } = x {
            let mut e = has(role_name(*role));
            if let Some(f) = from {
                e = e.and(has(role_name(*f)));
            }
            role_excluded = role_excluded.or(e);
        }
    }
    let packable = packable_media();
    let secret = coalesce(vec![has("secret"), lit(false)]);
    let role_excluded = coalesce(vec![role_excluded, lit(false)]);
    let packable = coalesce(vec![packable, lit(false)]);
    let readable = packable
        .clone()
        .and(!secret.clone())
        .and(!role_excluded.clone());
    // Three projections (each one re-types every column it passes on, which is most of this
    // plan's building time): the effective roles; the tests and the readable content; what
    // the packer reads.
    let dropped = [
        "rev_roles",
        "rep_roles",
        "p_object_id",
        "p_revision",
        "r_object_id",
    ];
    let mut first: Vec<Expr> = joined
        .schema()
        .columns()
        .into_iter()
        .filter(|c| !dropped.contains(&c.name.as_str()))
        .map(Expr::Column)
        .collect();
    first.push(eff.alias("eff_roles"));
    let with_roles = project(joined, first)?;
    let mut second: Vec<Expr> = with_roles
        .schema()
        .columns()
        .into_iter()
        .filter(|c| !["content", "idx_chars", "idx_o200k"].contains(&c.name.as_str()))
        .map(Expr::Column)
        .collect();
    second.extend([
        secret.alias("secret"),
        role_excluded.alias("role_excluded"),
        packable.alias("packable"),
        // Content only where readable, so nothing after this can read secret or excluded text
        // (nor count it, on the index path).
        when(readable.clone(), col("content"))
            .end()?
            .alias("content"),
        when(readable.clone(), col("idx_chars"))
            .end()?
            .alias("idx_chars"),
        when(readable, col("idx_o200k")).end()?.alias("idx_o200k"),
    ]);
    let tested = project(with_roles, second)?;

    // lexical-v1 over the loaded (eligible) content, per object: title 3, summary 2, other 1.
    // Scope, MAX AGE and the object-level EXCLUDE items filter before relevance reads
    // anything (the packer gives the same objects their rejection reasons).
    // Readable representations only (content kept by reference still lets the title count).
    let mut scope = col("packable")
        .and(col("secret").not_eq(lit(true)))
        .and(col("role_excluded").not_eq(lit(true)));
    if let Some(p) = &params.project {
        scope = scope.and(col("project").eq(lit(p.as_str())));
    }
    if let Some(k) = &params.kind {
        scope = scope.and(col("kind").eq(lit(k.as_str())));
    }
    if let Some(from) = params.min_created {
        scope = scope.and(col("rev_created_at").gt_eq(ts_lit(from)));
    }
    if params.exclude_untrusted {
        scope = scope.and(col("trust").not_eq(lit("untrusted")));
    }
    if params.exclude_stale {
        scope = scope.and(col("state").in_list(vec![lit("stale"), lit("invalid")], true));
    }
    // Each in-scope row's term weights, its title's and its content's (as the summary or as
    // other text); the packer folds an object's rows by maximum, which equals scoring the
    // object whole (`lexical_weights`), without holding or joining any text.
    // What the packer reads (`RowCols`); content only for COMPRESS, which shrinks the text of
    // what does not fit.
    let mut out: Vec<Expr> = [
        "object_id",
        "revision",
        "project",
        "rev_created_at",
        "origin",
        "trust",
        "validation",
        "state",
        "name",
        "media_type",
        "content_ref",
        "content_hash",
        "eff_roles",
        "secret",
        "role_excluded",
        "packable",
        "scanned",
    ]
    .into_iter()
    .map(col)
    .collect();
    if params.compress {
        out.push(col("content"));
    }
    // USING KIND's scope is decided by the packer too (the candidates' out_of_scope).
    if params.kind.is_some() {
        out.push(col("kind"));
    }
    let (est_tokens, estimator) = token_counts(params.estimator)?;
    out.extend([
        est_tokens.alias("est_tokens"),
        estimator.alias("estimator"),
        when(scope.clone(), col("title_weights"))
            .end()?
            .alias("title_weights"),
        when(scope, super::indexed::content_weights(&q.task)?)
            .end()?
            .alias("content_weights"),
    ]);
    let rows = project(tested, out)?.build()?;
    let edges = edges(ctx, catalog, params.subject.is_some().then_some(t_us)).await?;
    Ok(
        crate::operator::TwoInputNode::new(rows, edges, super::exec::BundlePack(params.clone()))?
            .into_plan(),
    )
}

/// A representation row's token count and the estimator that gave it (docs/context.md,
/// "Token counts"). With chars-div-4-v1, a stored `tokens` count wins (the spec's
/// reference algorithm); with o200k_base, readable inline content is counted exactly (on the
/// index path the count is the index's) and a stored count stands only for content kept by
/// reference. NULL: nothing to count, so the representation is not packed.
fn token_counts(estimator: Estimator) -> Result<(Expr, Expr)> {
    Ok(match estimator {
        Estimator::CharsDiv4 => (
            coalesce(vec![
                col("tokens"),
                (coalesce(vec![
                    cast_expr(character_length(col("content")), DataType::Int64),
                    col("idx_chars"),
                ]) + lit(3i64))
                    / lit(4i64),
            ]),
            when(col("tokens").is_not_null(), lit(STORED)).otherwise(lit(CHARS_DIV_4))?,
        ),
        // A character is a unit: the content's characters, or the index's count of them. A
        // stored `tokens` count does not say how many characters there are, so content kept
        // by reference only is not counted (and not packed).
        Estimator::Chars => {
            let chars = coalesce(vec![
                cast_expr(character_length(col("content")), DataType::Int64),
                col("idx_chars"),
            ]);
            (chars, lit(estimator.name()))
        }
        Estimator::O200k => {
            let counted = col("content")
                .is_not_null()
                .or(col("idx_o200k").is_not_null());
            (
                coalesce(vec![
                    token_count(col("content"), estimator),
                    col("idx_o200k"),
                    col("tokens"),
                ]),
                when(counted, lit(estimator.name())).otherwise(lit(STORED))?,
            )
        }
    })
}

/// The graph node of the entity in the columns `ty` and `id`: `type:id`, where an `object`
/// entity is the object's node (`object:id`).
fn node(ty: &str, id: &str) -> Result<Expr> {
    Ok(when(
        col(ty).eq(lit("object")),
        concat(vec![lit("object:"), col(id)]),
    )
    .otherwise(concat(vec![col(ty), lit(":"), col(id)]))?)
}

/// The graph edges (`a`, `b`, `relation`) of every revision: links (an `object` entity is an
/// object node) and derivations, each with the `object_id` and `revision` it belongs to. The
/// packer keeps the edges of the selected revisions (the candidates' own), so the candidates
/// are neither computed a second time nor collected while planning.
///
/// With `relationships_at` (CONTEXT FOR entity(…)), the relationships between entities
/// created at or before that instant (µs) are edges too, of no object (`object_id` and
/// `revision` NULL): the entity's subgraph reaches through them (docs/context.md).
async fn edges(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    relationships_at: Option<i64>,
) -> Result<LogicalPlan> {
    let edges_of = |rows: LogicalPlanBuilder, b: Expr| -> Result<LogicalPlanBuilder> {
        Ok(project(
            rows,
            vec![
                concat(vec![lit("object:"), col("object_id")]).alias("a"),
                b.alias("b"),
                col("relation"),
                col("object_id"),
                cast_expr(col("revision"), DataType::Int64).alias("revision"),
            ],
        )?)
    };
    let mut parts: Vec<LogicalPlanBuilder> = Vec::new();
    if let Some(links) = optional_scanned(ctx, catalog, "links").await? {
        parts.push(edges_of(links, node("entity_type", "entity_id")?)?);
    }
    if let Some(derivs) = optional_scanned(ctx, catalog, "derivations").await? {
        parts.push(edges_of(
            derivs,
            concat(vec![lit("object:"), col("source_object_id")]),
        )?);
    }
    if let Some(t) = relationships_at
        && let Some(rels) = optional_scanned(ctx, catalog, "relationships").await?
    {
        let typed = |i: usize, name: &str| -> DataType {
            parts
                .first()
                .map(|p| p.schema().field(i).data_type().clone())
                .unwrap_or(if name == "revision" {
                    DataType::Int64
                } else {
                    DataType::Utf8
                })
        };
        let created = rels.schema().has_column_with_unqualified_name("created_at");
        let rels = match created {
            true => rels.filter(col("created_at").lt_eq(ts_lit(t)))?,
            false => rels,
        };
        let out = project(
            rels,
            vec![
                node("src_type", "src_id")?.alias("a"),
                node("dst_type", "dst_id")?.alias("b"),
                cast_expr(col("relation"), typed(2, "relation")).alias("relation"),
                cast_expr(lit(ScalarValue::Utf8(None)), typed(3, "object_id")).alias("object_id"),
                lit(ScalarValue::Int64(None)).alias("revision"),
            ],
        )?;
        parts.push(out);
    }
    let mut it = parts.into_iter();
    match it.next() {
        None => {
            let schema = Arc::new(Schema::new(vec![
                Field::new("a", DataType::Utf8, true),
                Field::new("b", DataType::Utf8, true),
                Field::new("relation", DataType::Utf8, true),
                Field::new("object_id", DataType::Utf8, true),
                Field::new("revision", DataType::Int64, true),
            ]));
            Ok(ctx
                .read_batch(RecordBatch::new_empty(schema))?
                .into_unoptimized_plan())
        }
        Some(first) => {
            let mut b = first;
            for next in it {
                b = b.union(next.build()?)?;
            }
            Ok(b.build()?)
        }
    }
}

//! `FIND OBJECT [(kind)] [ABOUT "text" [USING REPRESENTATION r]] [WHERE …] [AS OF t] [LIMIT n]`
//! as a DataFusion plan giving a result envelope (docs/context.md).
//!
//! The objects are those live at T at their latest revision (as for CONTEXT FOR). `(kind)`
//! keeps objects of that kind. WHERE tests the columns below. ABOUT scores each object with
//! lexical-v1 over its title, `summary` and other packable, non-secret representations (with
//! USING REPRESENTATION, over that representation's content only: weight 2 for `summary`, 1
//! otherwise, no title), keeps scores above zero and orders by score descending, then
//! object id. An engine with a resident context index answers from its generation where it
//! stands for the tables (engine/src/context/resident.rs), with the same rows.

use chrono::{DateTime, Utc};
use datafusion::common::JoinType;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions::core::expr_fn::greatest;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::functions_nested::expr_fn::array_element;
use datafusion::functions_nested::expr_fn::array_has;
use datafusion::logical_expr::{Expr, col, lit};
use datafusion::prelude::SessionContext;
use signalql_udfs::scalar::lexical::{self, lexical_weights};

use super::load::candidates_df;
use super::resident::{Resident, find_frame};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::execute::Executor;
use crate::lower::fields::Resolved;
use crate::lower::predicate::lower_bool;
use crate::lower::time::micros;
use crate::lower::{Limits, Lowered, OutColumn, UnitSource};
use crate::syntax::ast::{FieldRef, FindObjectQuery, Operand, Span};

/// The result columns, in order (`score` last, with ABOUT): those the resident index keeps
/// per object.
pub const COLUMNS: [&str; 10] = signalql_catalog::objects::resident::FIND_COLUMNS;

/// Per object of `objects` with a readable representation (`s_object_id`), its lexical-v1
/// `score` for `about`: per term, the heaviest field holding it (the title, unless `using`
/// names the one representation that counts), from each representation's content on the
/// scan path or its postings on the index path (docs/index.md), folded by maximum.
async fn about_scores(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    objects: DataFrame,
    about: &str,
    using: Option<&str>,
) -> Result<DataFrame> {
    let terms = lexical::terms(about);
    let reps = super::indexed::representations(ctx, catalog, &terms, false)
        .await?
        .build()?;
    // The title's weights once per object (none with USING REPRESENTATION).
    let title = match using {
        None => lexical_weights(lit(about), col("title"), lit(""), lit("")),
        Some(_) => lit(ScalarValue::try_from(&DataType::List(Arc::new(
            Field::new_list_field(DataType::Int64, true),
        )))?),
    };
    let objects = objects.select(vec![
        col("object_id"),
        col("revision"),
        col("rev_roles"),
        title.alias("__title"),
    ])?;
    let rows = objects.join(
        DataFrame::new(ctx.state(), reps),
        JoinType::Inner,
        &["object_id", "revision"],
        &["p_object_id", "p_revision"],
        None,
    )?;
    // Secret when the revision's roles or the representation's own include it.
    let secret =
        array_has(col("rev_roles"), lit("secret")).or(array_has(col("rep_roles"), lit("secret")));
    let packable = super::load::packable_media();
    let mut readable = packable.and(coalesce(vec![secret, lit(false)]).not_eq(lit(true)));
    if let Some(r) = using {
        readable = readable.and(col("name").eq(lit(r)));
    }
    let rows = rows.filter(readable)?.select(vec![
        col("object_id"),
        col("__title"),
        super::indexed::content_weights(about)?.alias("__content"),
    ])?;
    let term =
        |list: &str, k: usize| coalesce(vec![array_element(col(list), lit(k as i64)), lit(0i64)]);
    let per_term: Vec<Expr> = (1..=terms.len())
        .map(|k| {
            max(greatest(vec![term("__title", k), term("__content", k)])).alias(format!("__w{k}"))
        })
        .collect();
    let folded = rows.aggregate(vec![col("object_id")], per_term)?;
    let score = if terms.is_empty() {
        lit(0i64)
    } else {
        (1..=terms.len())
            .map(|k| col(format!("__w{k}")))
            .reduce(|a, b| a + b)
            .unwrap_or(lit(0i64))
            * lit(1_000_000i64)
            / lit(3 * terms.len() as i64)
    };
    Ok(folded.select(vec![
        col("object_id").alias("s_object_id"),
        score.alias("score"),
    ])?)
}

/// The lowered query (plan, columns, limit and row cap). With `resident` (the engine's
/// resident context index and its executor), the candidates and their scores come from its
/// generation where it stands for the tables (engine/src/context/resident.rs), else from the
/// Parquet plan.
pub async fn plan(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    resident: Option<(&Resident, &Executor)>,
    q: &FindObjectQuery,
    t: DateTime<Utc>,
    limits: &Limits,
) -> Result<Lowered> {
    // A project the caller may not read, named, is refused as USING PROJECT's is.
    if let Some(access) = catalog.access()
        && let Some(w) = &q.filter
    {
        access.check_projects_named(w)?;
    }
    let cap = limits.max_result_rows;
    let (limit_applied, fetch, row_cap) = match q.limit {
        Some(n) if n <= cap => (n, n as usize, None),
        _ => (cap, cap as usize + 1, Some(cap)),
    };
    let terms = q.about.as_deref().map(lexical::terms);
    let generation = match resident {
        // USING REPRESENTATION scores one representation's content: the Parquet plan's.
        Some((r, exec)) if q.representation.is_none() => r
            .generation(ctx, catalog, exec)
            .await?
            .filter(|g| g.covers(micros(t)) && g.reads(terms.as_deref().unwrap_or_default())),
        _ => None,
    };
    let from_resident = generation.is_some();
    let mut df = match generation {
        Some(g) => find_frame(
            ctx,
            g,
            terms,
            q.name.as_deref(),
            micros(t),
            // The first rows are the answer's only when WHERE keeps every row.
            q.filter.is_none().then_some(fetch),
        )?,
        None => {
            let mut df = candidates_df(ctx, catalog, micros(t)).await?.select(vec![
                col("object_id"),
                col("revision"),
                col("project"),
                col("kind"),
                col("title"),
                col("rev_created_at").alias("created_at"),
                col("state"),
                col("trust"),
                col("origin"),
                col("validation"),
                col("rev_roles"),
            ])?;
            if let Some(kind) = &q.name {
                df = df.filter(col("kind").eq(lit(kind.as_str())))?;
            }
            df
        }
    };
    if let Some(w) = &q.filter {
        let schema = df.schema().clone();
        let pred = lower_bool(w, &|op: &Operand, span: Span| match op {
            Operand::Field(FieldRef::Path(p))
                if p.len() == 1 && COLUMNS.contains(&p[0].as_str()) =>
            {
                let name = p[0].as_str();
                let (_, field) = schema
                    .qualified_field_with_unqualified_name(name)
                    .map_err(|e| Error::internal(e.to_string()))?;
                Ok(Resolved {
                    expr: col(name),
                    data_type: field.data_type().clone(),
                    dynamic: false,
                    untyped: false,
                })
            }
            Operand::Field(f) => Err(Error::unknown_field(format!(
                "`{f}` is not an object column; FIND OBJECT's WHERE tests {}",
                COLUMNS.join(", ")
            ))
            .at(span)),
            _ => Err(Error::parse(
                "FIND OBJECT's WHERE tests object columns",
                span,
            )),
        })?;
        df = df.filter(pred)?;
    }
    let mut out: Vec<Expr> = COLUMNS.iter().map(|c| col(*c)).collect();
    let mut ordered = false;
    if let Some(about) = &q.about {
        if !from_resident {
            let scores =
                about_scores(ctx, catalog, df.clone(), about, q.representation.as_deref()).await?;
            df = df
                .join(
                    scores,
                    JoinType::Inner,
                    &["object_id"],
                    &["s_object_id"],
                    None,
                )?
                .filter(col("score").gt(lit(0i64)))?;
        }
        out.push(col("score"));
        ordered = true;
    }
    let mut sort = Vec::new();
    if ordered {
        sort.push(col("score").sort(false, true));
    }
    sort.push(col("object_id").sort(true, true));
    let plan = df
        .sort(sort)?
        .limit(0, Some(fetch))?
        .select(out)?
        .into_unoptimized_plan();
    let mut columns: Vec<OutColumn> = COLUMNS
        .iter()
        .map(|c| OutColumn {
            name: c.to_string(),
            unit: UnitSource::None,
        })
        .collect();
    if ordered {
        columns.push(OutColumn {
            name: "score".into(),
            unit: UnitSource::None,
        });
    }
    Ok(Lowered::new(plan, columns, ordered, limit_applied, row_cap))
}

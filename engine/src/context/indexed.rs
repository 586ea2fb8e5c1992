//! The representations CONTEXT FOR and FIND OBJECT ABOUT score (docs/index.md, "Queries"):
//! those of the `representations` files the text index covers are read from `index_reps`,
//! without their content, with each one's lexical-v1 term weights from the postings of the
//! task's terms; those of every other file are read whole and tokenised, as before the index.
//! Both give the same weights and token counts, so a bundle's address does not depend on
//! which path a representation took.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, Int64Builder, ListBuilder, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit, when};
use datafusion::prelude::SessionContext;
use signalql_catalog::objects::REPRESENTATIONS;
use signalql_catalog::objects::index::{
    CoveredFile, INDEX_FILES, INDEX_REPS, INDEX_TERMS, covered_by, postings, sibling,
};
use signalql_catalog::{Dataset, TableInfo};
use signalql_udfs::scalar::lexical::{SUMMARY_WEIGHT, TEXT_WEIGHT};

use crate::catalog::{Catalog, optional_table, scan};
use crate::error::{Error, Result};
use crate::lower::{plan, project};

/// The representation columns both paths give, as the `representations` table has them.
const REP_COLUMNS: [&str; 8] = [
    "object_id",
    "revision",
    "name",
    "media_type",
    "content",
    "content_ref",
    "content_hash",
    "tokens",
];

/// The rows of every representation, one per representation (a representation in two files
/// is there twice): `p_object_id`, `p_revision`, `name`, `media_type`, `content` (NULL on the
/// index path), `content_ref`, `content_hash`, `tokens`, `rep_roles`, `idx_chars` (the
/// content's characters, on the index path), `idx_weights` (per term of `terms`, the
/// representation's lexical-v1 field weight where it holds the term, else 0; NULL when it
/// holds none of them or took the scan path) and `scanned` (whether it took the scan path).
///
/// With `content`, every representation is read whole (COMPRESS shrinks the text of what does
/// not fit, so it needs the content of every candidate).
pub(crate) async fn representations(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    terms: &[String],
    content: bool,
) -> Result<LogicalPlanBuilder> {
    let reps = catalog.table(ctx, REPRESENTATIONS).await?;
    let typed = |name: &str| -> Result<DataType> {
        Ok(reps
            .schema
            .field_with_name(name)
            .map_err(|_| Error::internal(format!("representations without `{name}`")))?
            .data_type()
            .clone())
    };
    let roles_type = typed("roles")?;
    let weights_type = weights_type();
    let covered = match content {
        true => None,
        false => Covered::find(ctx, catalog, &reps).await?,
    };
    let Some(covered) = covered else {
        return scanned(&reps, &weights_type);
    };
    // The postings of the task's terms, per index file (its position among `index_reps`'
    // files) and representation ordinal.
    let ranked = &covered.ranked;
    let root = catalog.dataset().root();
    let mut hits: HashMap<(i64, i64), Vec<bool>> = HashMap::new();
    for (rank, location) in ranked.iter().enumerate() {
        postings(root, &sibling(location, INDEX_TERMS), terms, |t, rep| {
            hits.entry((rank as i64, rep))
                .or_insert_with(|| vec![false; terms.len()])[t] = true;
        })?;
    }
    let mut index = covered
        .index
        .with_file_ordinal("__ifile")
        .ok_or_else(|| Error::internal("index_reps is not a folder of Parquet files"))?;
    index.restriction = reps.restriction.clone();
    let mut b = scan(&index, REPRESENTATIONS, vec![])?;
    if let Some(valid) = covered.only.clone() {
        b = plan::filter(b, valid)?;
    }
    let weights = if hits.is_empty() {
        lit(ScalarValue::try_from(&weights_type)?)
    } else {
        b = b.join(
            hits_plan(ctx, &hits, terms.len())?,
            JoinType::Left,
            (vec!["__ifile", "rep"], vec!["h_file", "h_rep"]),
            None,
        )?;
        when(col("weight").eq(lit(SUMMARY_WEIGHT)), col("h_w2")).otherwise(col("h_w1"))?
    };
    let mut out: Vec<Expr> = Vec::new();
    for c in REP_COLUMNS {
        let e = if c == "content" {
            lit(ScalarValue::try_from(&typed(c)?)?)
        } else {
            cast(col(format!("{REPRESENTATIONS}.{c}")), typed(c)?)
        };
        out.push(e.alias(out_name(c)));
    }
    out.extend([
        cast(col(format!("{REPRESENTATIONS}.roles")), roles_type).alias("rep_roles"),
        col("chars").alias("idx_chars"),
        weights.alias("idx_weights"),
        lit(false).alias("scanned"),
    ]);
    let from_index = project(b, out)?;
    match reps.only_files(|l| !covered.files.contains(l)) {
        None => Ok(from_index),
        Some(rest) => Ok(scanned(&rest, &weights_type)?.union(from_index.build()?)?),
    }
}

/// The name a representation column has in the rows.
fn out_name(c: &str) -> &str {
    match c {
        "object_id" => "p_object_id",
        "revision" => "p_revision",
        c => c,
    }
}

/// `List<Int64>`, the type of term weights.
fn weights_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)))
}

/// The rows of `reps` read whole (the scan path).
fn scanned(reps: &TableInfo, weights_type: &DataType) -> Result<LogicalPlanBuilder> {
    let b = scan(reps, REPRESENTATIONS, vec![])?;
    let mut out: Vec<Expr> = REP_COLUMNS
        .iter()
        .map(|c| col(*c).alias(out_name(c)))
        .collect();
    out.extend([
        col("roles").alias("rep_roles"),
        lit(ScalarValue::Int64(None)).alias("idx_chars"),
        lit(ScalarValue::try_from(weights_type)?).alias("idx_weights"),
        lit(true).alias("scanned"),
    ]);
    Ok(project(b, out)?)
}

/// The postings as a table: `h_file` (index file rank), `h_rep` (ordinal), and per term the
/// weight the representation's field gives it: `h_w1` for a text field, `h_w2` for the summary.
fn hits_plan(
    ctx: &SessionContext,
    hits: &HashMap<(i64, i64), Vec<bool>>,
    terms: usize,
) -> Result<datafusion::logical_expr::LogicalPlan> {
    let mut files = Vec::with_capacity(hits.len());
    let mut reps = Vec::with_capacity(hits.len());
    let mut w1 = ListBuilder::with_capacity(Int64Builder::new(), hits.len());
    let mut w2 = ListBuilder::with_capacity(Int64Builder::new(), hits.len());
    for ((file, rep), has) in hits {
        files.push(*file);
        reps.push(*rep);
        for &h in has.iter().take(terms) {
            w1.values().append_value(if h { TEXT_WEIGHT } else { 0 });
            w2.values().append_value(if h { SUMMARY_WEIGHT } else { 0 });
        }
        w1.append(true);
        w2.append(true);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("h_file", DataType::Int64, false),
        Field::new("h_rep", DataType::Int64, false),
        Field::new("h_w1", weights_type(), true),
        Field::new("h_w2", weights_type(), true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(files)),
            Arc::new(Int64Array::from(reps)),
            Arc::new(w1.finish()),
            Arc::new(w2.finish()),
        ],
    )?;
    Ok(ctx.read_batch(batch)?.into_unoptimized_plan())
}

/// What the index covers of a `representations` table as opened.
struct Covered {
    /// `index_reps`, as committed when it was opened.
    index: TableInfo,
    /// Its files' locations, in its order (an index file's `__ifile`).
    ranked: Vec<String>,
    /// The locations of the table's files the index covers (as listed now).
    files: HashSet<String>,
    /// The `index_reps` rows to keep (by `__ifile` and `file`), when a file some index write
    /// covered is gone or rewritten; `None`: every file the index names is current.
    only: Option<Expr>,
}

impl Covered {
    /// `None` when no file is covered, or the index cannot stand for the table: a table
    /// read through a mapping, in another place, not a folder of Parquet files, or whose
    /// caller restriction hides a column the index path keys on or filters on its content.
    async fn find(
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        reps: &TableInfo,
    ) -> Result<Option<Covered>> {
        let dataset: &Dataset = catalog.dataset();
        if reps.view.is_some() || reps.only_files(|_| true).is_none() {
            return Ok(None);
        }
        let place = dataset.place(REPRESENTATIONS)?;
        if place.folder != REPRESENTATIONS || place.root.display() != dataset.root().display() {
            return Ok(None);
        }
        if let Some(r) = &reps.restriction {
            let keyed = ["object_id", "revision", "name", "content"];
            if keyed.iter().any(|c| r.hides(c)) {
                return Ok(None);
            }
            if let Some(f) = &r.filter
                && f.column_refs().iter().any(|c| c.name == "content")
            {
                return Ok(None);
            }
        }
        // The index as committed (opened through the dataset itself: it is the engine's
        // own table, no caller reads it by name; noted, so a cached plan sees it change).
        let Some(index) = optional_table(dataset, ctx, INDEX_REPS).await? else {
            return Ok(None);
        };
        let root = dataset.root();
        let ranked: Vec<String> = index.files.iter().map(|(l, _)| l.clone()).collect();
        let listed = root.parquet_files(REPRESENTATIONS)?.unwrap_or_default();
        let opened: HashSet<&str> = reps.files.iter().map(|(l, _)| l.as_str()).collect();
        let current: HashMap<CoveredFile, &str> = listed
            .iter()
            .filter(|l| opened.contains(l.location.as_str()))
            .map(|l| (CoveredFile::of(root, l), l.location.as_str()))
            .collect();
        let mut files = HashSet::new();
        let mut keep: Vec<Expr> = Vec::new();
        let mut stale = false;
        for (rank, location) in ranked.iter().enumerate() {
            let mut valid: Vec<Expr> = Vec::new();
            let named = covered_by(root, &sibling(location, INDEX_FILES))?;
            for (ordinal, file) in named.iter().enumerate() {
                match current.get(file) {
                    Some(l) => {
                        files.insert(l.to_string());
                        valid.push(lit(ordinal as i64));
                    }
                    None => stale = true,
                }
            }
            let this = col("__ifile").eq(lit(rank as i64));
            if valid.len() == named.len() {
                keep.push(this);
            } else if !valid.is_empty() {
                keep.push(this.and(col("file").in_list(valid, false)));
            }
        }
        if files.is_empty() {
            return Ok(None);
        }
        let only = match stale {
            true => keep.into_iter().reduce(Expr::or),
            false => None,
        };
        Ok(Some(Covered {
            index,
            ranked,
            files,
            only,
        }))
    }
}

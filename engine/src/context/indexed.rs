//! The representations CONTEXT FOR and FIND OBJECT ABOUT score (docs/index.md, "Queries"):
//! those of the `representations` files the text index covers are read from `index_reps`,
//! without their content, with each one's lexical-v1 term weights from the postings of the
//! task's terms; those of every other file are read whole and tokenised, as before the index.
//! Both give the same weights and token counts, so a bundle's address does not depend on
//! which path a representation took.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{BooleanBuilder, Int64Builder, ListBuilder, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, ScalarValue};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, cast, col, lit, when};
use datafusion::prelude::SessionContext;
use signalql_catalog::mapping::{Read, TableView};
use signalql_catalog::objects::REPRESENTATIONS;
use signalql_catalog::objects::index::{
    CoveredFile, INDEX_FILES, INDEX_REPS, INDEX_TERMS, O200K_COLUMN, covered_by, postings, sibling,
};
use signalql_catalog::{Dataset, TableInfo};
use signalql_udfs::scalar::index_weights::{held_type, index_weights_udf, weights_type};
use signalql_udfs::scalar::lexical::lexical_weights;

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
/// content's characters, on the index path), `idx_o200k` (its o200k_base tokens, likewise),
/// `idx_weights` (per term of `terms`, the
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
    let root = catalog.dataset().root();
    let mut hits: BTreeMap<(i64, i64), Vec<bool>> = BTreeMap::new();
    for (rank, (location, _)) in covered.index.files.iter().enumerate() {
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
        // Every representation, with the terms it holds where it holds any: the postings
        // (the smaller side) are the join's build side.
        b = LogicalPlanBuilder::from(held_terms(hits, terms.len())?).join_with_expr_keys(
            b.build()?,
            JoinType::Right,
            (
                vec![col(format!("{HELD}.h_file")), col(format!("{HELD}.h_rep"))],
                vec![
                    col("__ifile"),
                    cast(col(format!("{REPRESENTATIONS}.rep")), DataType::Int64),
                ],
            ),
            None,
        )?;
        index_weights_udf().call(vec![
            col(format!("{HELD}.h_held")),
            col(format!("{REPRESENTATIONS}.weight")),
        ])
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
        col(O200K_COLUMN).alias("idx_o200k"),
        weights.alias("idx_weights"),
        lit(false).alias("scanned"),
    ]);
    let from_index = project(b, out)?;
    match reps.only_files(|l| !covered.files.contains(l)) {
        None => Ok(from_index),
        Some(rest) => Ok(scanned(&rest, &weights_type)?.union(from_index.build()?)?),
    }
}

/// Per task term, the weight a row of [`representations`] gets from its content: its
/// lexical-v1 field weight (2 for `summary`, 1 for any other) where the content holds the
/// term, else 0; tokenised on the scan path, from the postings (`idx_weights`) on the index
/// path. To be evaluated where `content` is already NULL unless the caller may read it.
pub(crate) fn content_weights(task: &str) -> Result<Expr> {
    let summary = when(col("name").eq(lit("summary")), col("content")).end()?;
    let other = when(col("name").not_eq(lit("summary")), col("content")).end()?;
    Ok(when(
        col("scanned"),
        lexical_weights(lit(task), lit(""), summary, other),
    )
    .otherwise(col("idx_weights"))?)
}

/// The name a representation column has in the rows.
fn out_name(c: &str) -> &str {
    match c {
        "object_id" => "p_object_id",
        "revision" => "p_revision",
        c => c,
    }
}

/// The name of the table of [`held_terms`].
const HELD: &str = "__held_terms";

/// The postings of the task's terms as a table: per index file (`h_file`, its position among
/// `index_reps`' files) and representation ordinal (`h_rep`), which terms it holds (`h_held`).
/// A table rather than a parameter of `signalql_index_weights`, so that the plan carries it
/// to a cluster's workers as data.
fn held_terms(hits: BTreeMap<(i64, i64), Vec<bool>>, terms: usize) -> Result<LogicalPlan> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("h_file", DataType::Int64, false),
        Field::new("h_rep", DataType::Int64, false),
        Field::new("h_held", held_type(), false),
    ]));
    let mut files = Int64Builder::with_capacity(hits.len());
    let mut reps = Int64Builder::with_capacity(hits.len());
    // Its items are `held_type`'s: the builder's default field.
    let mut held = ListBuilder::with_capacity(
        BooleanBuilder::with_capacity(hits.len() * terms),
        hits.len(),
    );
    for ((file, rep), h) in hits {
        files.append_value(file);
        reps.append_value(rep);
        held.values().append_slice(&h);
        held.append(true);
    }
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(files.finish()),
            Arc::new(reps.finish()),
            Arc::new(held.finish()),
        ],
    )?;
    let table = MemTable::try_new(schema, vec![vec![batch]])?;
    Ok(LogicalPlanBuilder::scan(HELD, provider_as_source(Arc::new(table)), None)?.build()?)
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
        lit(ScalarValue::Int64(None)).alias("idx_o200k"),
        lit(ScalarValue::try_from(weights_type)?).alias("idx_weights"),
        lit(true).alias("scanned"),
    ]);
    Ok(project(b, out)?)
}

/// Whether a view reads every column as the file has it, or as NULL where the file lacks it
/// (what `signalql index` reads too), so `index_reps` holds what the view would read.
fn plain(view: &TableView) -> bool {
    view.columns.iter().all(|c| match &c.read {
        Read::Column(name) => *name == c.name,
        Read::Null => true,
        _ => false,
    })
}

/// What the index covers of a `representations` table as opened.
struct Covered {
    /// `index_reps`, as committed when it was opened (an index file's `__ifile` is its
    /// position in `files`).
    index: TableInfo,
    /// The locations of the table's files the index covers (as listed now).
    files: HashSet<String>,
    /// The `index_reps` rows to keep (by `__ifile` and `file`), when a file some index write
    /// covered is gone or rewritten; `None`: every file the index names is current.
    only: Option<Expr>,
}

impl Covered {
    /// `None` when no file is covered, or the index cannot stand for the table: a table
    /// read through a mapping that renames or converts a column, in another place, not a
    /// folder of Parquet files, or whose caller restriction hides a column the index path
    /// keys on or filters on its content.
    async fn find(
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        reps: &TableInfo,
    ) -> Result<Option<Covered>> {
        let dataset: &Dataset = catalog.dataset();
        if !reps.view.as_deref().is_none_or(plain) || !reps.is_folder() {
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
        let listed = root.parquet_files(REPRESENTATIONS)?.unwrap_or_default();
        let opened: HashSet<&str> = reps.files.iter().map(|(l, _)| l.as_str()).collect();
        let current: HashMap<String, (CoveredFile, &str)> = listed
            .iter()
            .filter(|l| opened.contains(l.location.as_str()))
            .map(|l| {
                let file = CoveredFile::of(root, l);
                (file.file.clone(), (file, l.location.as_str()))
            })
            .collect();
        let mut files = HashSet::new();
        let mut keep: Vec<Expr> = Vec::new();
        let mut stale = false;
        for (rank, (location, size)) in index.files.iter().enumerate() {
            // An index write of the first format (no o200k counts) covers nothing.
            let current_format = dataset
                .opened_file_schema(location, *size)
                .is_some_and(|s| s.field_with_name(O200K_COLUMN).is_ok());
            if !current_format {
                stale = true;
                continue;
            }
            let mut valid: Vec<Expr> = Vec::new();
            let named = covered_by(root, &sibling(location, INDEX_FILES))?;
            for (ordinal, file) in named.iter().enumerate() {
                match current.get(&file.file).filter(|(now, _)| file.covers(now)) {
                    Some((_, l)) => {
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
        Ok(Some(Covered { index, files, only }))
    }
}

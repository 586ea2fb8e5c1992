//! The catalog trait the bind pass opens tables through, and its two implementations: the
//! Parquet-folder dataset ([`signalql_catalog::Dataset`], `ROOT/<table>/`) and an
//! application's own `SessionContext` ([`ApplicationCatalog`]: its registered tables first,
//! the folder for the rest).

use std::cell::RefCell;
use std::future::Future;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::functions::core::expr_fn::{coalesce, named_struct};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, lit};
use datafusion::prelude::SessionContext;
use signalql_catalog::mapping::{Read, TimeEncoding, ViewColumn, utc_micros};
use signalql_catalog::{Dataset, DatasetError, SkippedFile, TableInfo, check_schema};
use signalql_udfs::scalar::text_time::text_time;

use crate::error::Result;

/// Where a statement's tables come from. `ctx` is the session the plans will run in (the
/// folder dataset registers its object store there).
#[async_trait]
pub trait Catalog: Send + Sync {
    /// The dataset root: its `signalql.toml`, `metrics.toml` and context store.
    fn dataset(&self) -> &Dataset;

    /// The caller's access when a policy governs the dataset (every table this catalog opens
    /// carries the caller's restriction); `None`: everything is readable.
    fn access(&self) -> Option<&crate::access::Access> {
        None
    }

    /// The catalog as a caller the policy does not restrict reads the dataset (itself when no
    /// policy governs it): EXPLAIN CONTEXT recomputes an unrestricted caller's bundle with it
    /// before cutting the explanation to this caller's view (context/visible.rs).
    fn unpoliced(&self) -> &dyn Catalog;

    /// The table `name` (`events`, `signals`, `objects`, …), its columns checked
    /// ([`check_schema`]), or [`DatasetError::MissingTable`] when there is none.
    async fn table(&self, ctx: &SessionContext, name: &str) -> Result<TableInfo, DatasetError>;

    /// [`Catalog::table`] for a statement that reads only the days `[first, after)`: a table
    /// with a time partition leaves the other days' files out before opening any.
    async fn table_during(
        &self,
        ctx: &SessionContext,
        name: &str,
        _days: Option<(chrono::NaiveDate, chrono::NaiveDate)>,
    ) -> Result<TableInfo, DatasetError> {
        self.table(ctx, name).await
    }
}

tokio::task_local! {
    /// What the tables opened by the statement running in this task noted.
    static NOTED: RefCell<Noted>;
}

/// What a statement's table opens noted: the files they were read without
/// (`skip_invalid_files`), and whether any was read through a principal's restriction.
#[derive(Debug, Clone, Default)]
pub struct Noted {
    pub skipped: Vec<SkippedFile>,
    /// A table was read with a filter or a mask of the caller's policy (`access_filtered`).
    pub access_filtered: bool,
    /// Each table opened, once (EXPLAIN's `sources`, the plan cache's source fingerprint).
    pub opened: Vec<Opened>,
    /// Optional tables the statement looked for and the dataset does not have.
    pub absent: Vec<String>,
}

/// A table a statement opened: its files as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    pub table: String,
    /// (location, size) of each file read, sorted.
    pub files: Vec<(String, u64)>,
    /// The fingerprint of the listing it was opened from; `None`: not fingerprinted (a Delta
    /// or application table), so a plan reading it is not cached.
    pub fingerprint: Option<String>,
    /// The rows of its files, from their footers, when read at open.
    pub rows: Option<u64>,
}

impl Opened {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, b)| b).sum()
    }
}

/// Runs `statement` (in this task), with what the tables it opened noted, so its answer can
/// list the files skipped and say whether it was access-filtered.
pub async fn noting<F: Future>(statement: F) -> (F::Output, Noted) {
    let (out, noted) = NOTED
        .scope(RefCell::new(Noted::default()), async {
            let out = statement.await;
            (out, NOTED.with(|s| s.take()))
        })
        .await;
    // A statement noting around this one (EXPLAIN ANALYZE, a trace) notes the same tables.
    let _ = NOTED.try_with(|outer| outer.borrow_mut().merge(&noted));
    (out, noted)
}

impl Noted {
    fn merge(&mut self, other: &Noted) {
        self.access_filtered |= other.access_filtered;
        for o in &other.opened {
            if !self.opened.iter().any(|s| s.table == o.table) {
                self.opened.push(o.clone());
            }
        }
        for f in &other.skipped {
            if !self.skipped.contains(f) {
                self.skipped.push(f.clone());
            }
        }
        for a in &other.absent {
            if !self.absent.contains(a) {
                self.absent.push(a.clone());
            }
        }
    }
}

/// Notes the files `table` was read without and its restriction, for [`noting`].
pub(crate) fn note(table: &TableInfo) {
    let _ = NOTED.try_with(|s| {
        let mut s = s.borrow_mut();
        s.access_filtered |= table.restriction.is_some();
        if !s.opened.iter().any(|o| o.table == table.name) {
            s.opened.push(Opened {
                table: table.name.clone(),
                files: table.files.clone(),
                fingerprint: table.fingerprint.clone(),
                rows: table.rows,
            });
        }
        for f in &table.skipped {
            if !s.skipped.contains(f) {
                s.skipped.push(f.clone());
            }
        }
    });
}

/// The table `name` (every implementation checks the columns the language relies on:
/// [`check_schema`]).
pub async fn open(catalog: &dyn Catalog, ctx: &SessionContext, name: &str) -> Result<TableInfo> {
    Ok(catalog.table(ctx, name).await?)
}

/// The table `name` when the dataset has it, `None` when it has not.
pub async fn optional_table(
    catalog: &dyn Catalog,
    ctx: &SessionContext,
    name: &str,
) -> Result<Option<TableInfo>> {
    match catalog.table(ctx, name).await {
        Ok(t) => Ok(Some(t)),
        Err(DatasetError::MissingTable { .. }) => {
            // A plan made without the table depends on its absence (the plan cache).
            let _ = NOTED.try_with(|s| {
                let mut s = s.borrow_mut();
                if !s.absent.iter().any(|a| a == name) {
                    s.absent.push(name.to_string());
                }
            });
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Notes, for [`noting`], what a statement whose plan came from the plan cache would have
/// noted opening its tables.
pub(crate) fn note_cached(skipped: &[SkippedFile], access_filtered: bool, opened: &[Opened]) {
    let _ = NOTED.try_with(|s| {
        s.borrow_mut().merge(&Noted {
            skipped: skipped.to_vec(),
            access_filtered,
            opened: opened.to_vec(),
            absent: Vec::new(),
        })
    });
}

#[async_trait]
impl Catalog for Dataset {
    fn dataset(&self) -> &Dataset {
        self
    }

    fn unpoliced(&self) -> &dyn Catalog {
        self
    }

    async fn table(&self, ctx: &SessionContext, name: &str) -> Result<TableInfo, DatasetError> {
        self.table_during(ctx, name, None).await
    }

    async fn table_during(
        &self,
        ctx: &SessionContext,
        name: &str,
        days: Option<(chrono::NaiveDate, chrono::NaiveDate)>,
    ) -> Result<TableInfo, DatasetError> {
        let t = Dataset::table_for_days(self, ctx, name, days).await?;
        check_schema(name, &t.schema)?;
        note(&t);
        Ok(t)
    }
}

/// An application's session: a table registered in its `SessionContext` under a SignalQL
/// table name is read as it is (it has no file list); any other comes from the dataset folder.
pub struct ApplicationCatalog {
    dataset: Dataset,
}

impl ApplicationCatalog {
    pub fn new(dataset: Dataset) -> Self {
        ApplicationCatalog { dataset }
    }
}

#[async_trait]
impl Catalog for ApplicationCatalog {
    fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    fn unpoliced(&self) -> &dyn Catalog {
        self
    }

    async fn table(&self, ctx: &SessionContext, name: &str) -> Result<TableInfo, DatasetError> {
        if ctx.table_exist(name).unwrap_or(false)
            && let Ok(provider) = ctx.table_provider(name).await
        {
            let schema = provider.schema();
            check_schema(name, &schema)?;
            return Ok(TableInfo {
                name: name.to_string(),
                schema,
                provider,
                view: None,
                time_partition: None,
                files: Vec::new(),
                skipped: Vec::new(),
                restriction: None,
                fingerprint: None,
                rows: None,
                decided: Default::default(),
                counted: Default::default(),
            });
        }
        let t = self.dataset.table(ctx, name).await?;
        check_schema(name, &t.schema)?;
        note(&t);
        Ok(t)
    }
}

/// A scan of `table` under `alias` as SignalQL reads it: through its view when it has one
/// (mapped columns under their SignalQL names, times as UTC microseconds; see
/// signalql_catalog::mapping), with `extra` computed in the same projection. File-dependent
/// functions (`input_file_name()`, `file_row_index()`) in `extra` are evaluated inside the
/// Parquet scan, which DataFusion does only for a projection directly on it.
pub fn scan(table: &TableInfo, alias: &str, extra: Vec<Expr>) -> Result<LogicalPlanBuilder> {
    let b = viewed(table, alias, extra)?;
    match &table.restriction {
        None => Ok(b),
        Some(r) => restrict(b, r, alias),
    }
}

/// [`scan`] before the caller's restriction.
fn viewed(table: &TableInfo, alias: &str, extra: Vec<Expr>) -> Result<LogicalPlanBuilder> {
    let b = LogicalPlanBuilder::scan(alias, provider_as_source(table.provider.clone()), None)?;
    let Some(view) = &table.view else {
        if extra.is_empty() {
            return Ok(b);
        }
        let mut cols = crate::lower::plan::columns(&b);
        cols.extend(extra);
        return Ok(crate::lower::project(b, cols)?);
    };
    // Two projections under a subquery alias: the view's expressions (and `extra`) under
    // internal names directly over the scan, then the SignalQL names. DataFusion 55's
    // leaf-projection push-down fails on one projection whose output names meet the scan's
    // ("… qualified field name events.event_name and unqualified field name event_name").
    let internal = |name: &str| format!("__view_{name}");
    let mut inner: Vec<Expr> = view
        .columns
        .iter()
        .map(|c| view_expr(c, alias, &table.name).alias(internal(&c.name)))
        .collect();
    let mut outer: Vec<Expr> = view
        .columns
        .iter()
        .map(|c| crate::lower::fields::column(&internal(&c.name)).alias(&c.name))
        .collect();
    for e in extra {
        let name = e.schema_name().to_string();
        inner.push(e);
        outer.push(crate::lower::fields::column(&name));
    }
    let b = crate::lower::project(crate::lower::project(b, inner)?, outer)?;
    Ok(b.alias(alias)?)
}

/// `b` (a table read under `alias`) as the caller may see it: only the rows the filter keeps,
/// the hidden columns as NULL of their type. Masks are two projections under the alias, as
/// views are (DataFusion 55's leaf-projection push-down, above).
fn restrict(
    b: LogicalPlanBuilder,
    r: &signalql_catalog::Restriction,
    alias: &str,
) -> Result<LogicalPlanBuilder> {
    let mut b = b;
    if let Some(f) = &r.filter {
        b = crate::lower::plan::filter(b, f.clone())?;
    }
    if r.masked.is_empty() && r.denied.is_empty() {
        return Ok(b);
    }
    let internal = |name: &str| format!("__mask_{name}");
    let fields: Vec<(Option<datafusion::common::TableReference>, String, DataType)> = b
        .schema()
        .iter()
        .map(|(q, f)| (q.cloned(), f.name().clone(), f.data_type().clone()))
        .collect();
    let inner: Vec<Expr> = fields
        .iter()
        .map(|(q, name, dt)| {
            let e = if r.hides(name) {
                lit(ScalarValue::try_from(dt).unwrap_or(ScalarValue::Null))
            } else {
                Expr::Column(Column::new(q.clone(), name))
            };
            e.alias(internal(name))
        })
        .collect();
    let outer: Vec<Expr> = fields
        .iter()
        .map(|(_, name, _)| crate::lower::fields::column(&internal(name)).alias(name))
        .collect();
    let b = crate::lower::project(crate::lower::project(b, inner)?, outer)?;
    Ok(b.alias(alias)?)
}

/// The expression reading one view column from the files' columns.
fn view_expr(c: &ViewColumn, alias: &str, table: &str) -> Expr {
    read_expr(&c.read, c, alias, table)
}

/// The expression of `read`: view column `c`'s read, or one of the reads it coalesces.
fn read_expr(read: &Read, c: &ViewColumn, alias: &str, table: &str) -> Expr {
    let file_column = |name: &str| Expr::Column(Column::new(Some(alias), name));
    match read {
        Read::Column(name) => file_column(name),
        Read::Time { column, encoding } => {
            let v = file_column(column);
            match encoding {
                TimeEncoding::Cast => cast(v, utc_micros()),
                TimeEncoding::Epoch(TimeUnit::Microsecond) => {
                    cast(cast(v, DataType::Int64), utc_micros())
                }
                TimeEncoding::Epoch(unit) => cast(
                    cast(
                        cast(v, DataType::Int64),
                        DataType::Timestamp(*unit, Some("UTC".into())),
                    ),
                    utc_micros(),
                ),
                TimeEncoding::Text => {
                    let label = if *column == c.name {
                        format!("{} of the {table} table", c.name)
                    } else {
                        format!("{} of the {table} table (file column {column})", c.name)
                    };
                    text_time(v, &label)
                }
            }
        }
        Read::Wide(columns) => named_struct(
            columns
                .iter()
                .flat_map(|name| [lit(name.as_str()), file_column(name)])
                .collect(),
        ),
        Read::Null => lit(ScalarValue::try_from(&c.data_type).unwrap_or(ScalarValue::Null)),
        Read::Coalesce(reads) => coalesce(
            reads
                .iter()
                .map(|r| read_expr(r, c, alias, table))
                .collect(),
        ),
    }
}

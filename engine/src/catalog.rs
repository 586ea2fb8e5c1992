//! The catalog trait the bind pass opens tables through, and its two implementations: the
//! Parquet-folder dataset ([`signalql_catalog::Dataset`], `ROOT/<table>/`) and an
//! application's own `SessionContext` ([`ApplicationCatalog`]: its registered tables first,
//! the folder for the rest).

use std::cell::RefCell;
use std::future::Future;

use async_trait::async_trait;
use datafusion::prelude::SessionContext;
use signalql_catalog::{Dataset, DatasetError, SkippedFile, TableInfo, check_schema};

use crate::error::Result;

/// Where a statement's tables come from. `ctx` is the session the plans will run in (the
/// folder dataset registers its object store there).
#[async_trait]
pub trait Catalog: Send + Sync {
    /// The dataset root: its `signalql.toml`, `metrics.toml` and context store.
    fn dataset(&self) -> &Dataset;

    /// The table `name` (`events`, `signals`, `objects`, …), its columns checked
    /// ([`check_schema`]), or [`DatasetError::MissingTable`] when there is none.
    async fn table(&self, ctx: &SessionContext, name: &str) -> Result<TableInfo, DatasetError>;
}

tokio::task_local! {
    /// The files the tables opened by the statement running in this task were read without.
    static SKIPPED: RefCell<Vec<SkippedFile>>;
}

/// Runs `statement` (in this task), with the files skipped by the tables it opened
/// (`skip_invalid_files`), so its answer can list them.
pub async fn noting_skipped<F: Future>(statement: F) -> (F::Output, Vec<SkippedFile>) {
    SKIPPED
        .scope(RefCell::new(Vec::new()), async {
            let out = statement.await;
            (out, SKIPPED.with(|s| s.take()))
        })
        .await
}

/// Notes the files `table` was read without, for [`noting_skipped`].
fn note(table: &TableInfo) {
    if table.skipped.is_empty() {
        return;
    }
    let _ = SKIPPED.try_with(|s| {
        let mut s = s.borrow_mut();
        for f in &table.skipped {
            if !s.contains(f) {
                s.push(f.clone());
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
        Err(DatasetError::MissingTable { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[async_trait]
impl Catalog for Dataset {
    fn dataset(&self) -> &Dataset {
        self
    }

    async fn table(&self, ctx: &SessionContext, name: &str) -> Result<TableInfo, DatasetError> {
        let t = Dataset::table(self, ctx, name).await?;
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
                files: Vec::new(),
                skipped: Vec::new(),
            });
        }
        let t = self.dataset.table(ctx, name).await?;
        check_schema(name, &t.schema)?;
        note(&t);
        Ok(t)
    }
}

//! The catalog trait the bind pass opens tables through, and its two implementations: the
//! Parquet-folder dataset ([`signalql_catalog::Dataset`], `ROOT/<table>/`) and an
//! application's own `SessionContext` ([`ApplicationCatalog`]: its registered tables first,
//! the folder for the rest).

use async_trait::async_trait;
use datafusion::prelude::SessionContext;
use signalql_catalog::{Dataset, DatasetError, TableInfo, check_schema};

use crate::error::Result;

/// Where a statement's tables come from. `ctx` is the session the plans will run in (the
/// folder dataset registers its object store there).
#[async_trait]
pub trait Catalog: Send + Sync {
    /// The dataset root: its `signalql.toml`, `metrics.toml` and context store.
    fn dataset(&self) -> &Dataset;

    /// The table `name` (`events`, `signals`, `objects`, …), or
    /// [`DatasetError::MissingTable`] when there is none.
    async fn table(&self, ctx: &SessionContext, name: &str) -> Result<TableInfo, DatasetError>;
}

/// The table `name`, with the columns the language relies on checked (events, entities and
/// relationships: [`check_schema`]).
pub async fn open(catalog: &dyn Catalog, ctx: &SessionContext, name: &str) -> Result<TableInfo> {
    let info = catalog.table(ctx, name).await?;
    check_schema(name, &info.schema)?;
    Ok(info)
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
        Dataset::table(self, ctx, name).await
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
            return Ok(TableInfo {
                name: name.to_string(),
                schema: provider.schema(),
                provider,
                files: Vec::new(),
                skipped: Vec::new(),
            });
        }
        self.dataset.table(ctx, name).await
    }
}

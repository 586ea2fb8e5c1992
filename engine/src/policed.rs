//! The catalog a caller's policy governs (docs/policy.md): every table it opens carries the
//! caller's [`Restriction`], which [`crate::catalog::scan`] applies. Besides the rows its own
//! filter and context scope keep ([`Access`]), rows that would name what the caller cannot see
//! are hidden: a `relationships` row with a hidden endpoint, a `signals` row of a hidden
//! entity, a `links`/`derivations` row of or to a hidden object or entity — so nothing hidden
//! appears or bridges.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::JoinType;
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions::string::expr_fn::concat;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, lit, not, not_in_subquery};
use datafusion::prelude::SessionContext;
use signalql_catalog::{Dataset, DatasetError, Restriction, TableInfo};

use crate::access::Access;
use crate::catalog::{Catalog, note};
use crate::error::{Error, Result};
use crate::lower::fields::{column, resolve};
use crate::lower::predicate::lower_bool;
use crate::syntax::ast::Operand;

/// A catalog that opens every table as the principal of `access` may see it.
pub struct PolicedCatalog {
    inner: Box<dyn Catalog>,
    access: Arc<Access>,
}

impl PolicedCatalog {
    pub fn new(inner: Box<dyn Catalog>, access: Arc<Access>) -> Self {
        PolicedCatalog { inner, access }
    }

    /// The principal's filter of `table` over its columns (`t`, unrestricted).
    fn own_filter(&self, t: &TableInfo) -> Result<Option<Expr>> {
        let Some(pred) = self.access.filters.get(&t.name) else {
            return Ok(None);
        };
        let schema = crate::catalog::scan(t, &t.name, vec![])?.schema().clone();
        let lowered = lower_bool(pred, &|op: &Operand, span| match op {
            Operand::Field(f) => resolve(f, &schema, span),
            _ => Err(Error::type_error(
                "a filter compares the table's own fields",
            )),
        })
        .map_err(|e| {
            Error::new(
                e.kind.clone(),
                format!(
                    "{}: [principals.{}.filters] {}: {}",
                    self.dataset().root().display_of("policy.toml"),
                    self.access.principal,
                    t.name,
                    e.message
                ),
            )
        })?;
        Ok(Some(lowered))
    }

    /// All the rows filters of `table` (its filter and context scope), over `t` unrestricted.
    fn row_filter(&self, t: &TableInfo) -> Result<Option<Expr>> {
        let mut parts: Vec<Expr> = self.own_filter(t)?.into_iter().collect();
        parts.extend(self.access.scope_filters(&t.name));
        Ok(conjunction(parts))
    }

    /// `table` as it is, when the dataset has it.
    async fn unrestricted(&self, ctx: &SessionContext, table: &str) -> Result<Option<TableInfo>> {
        crate::catalog::optional_table(self.inner.as_ref(), ctx, table).await
    }

    /// The keys (`type`, unit separator, `id`) of the entities the principal may not see: those
    /// none of whose rows its filter keeps, when its entities are filtered. An entity with one
    /// row it may see is visible (`FROM entity(T)` reads that row, and the signals rule below
    /// says the same), so its other versions do not hide its edges.
    async fn hidden_entities(&self, ctx: &SessionContext) -> Result<Option<LogicalPlanBuilder>> {
        if !self.access.filters_rows_of("entities") {
            return Ok(None);
        }
        let Some(t) = self.unrestricted(ctx, "entities").await? else {
            return Ok(None);
        };
        let Some(f) = self.row_filter(&t)? else {
            return Ok(None);
        };
        // Joins, not subqueries (as hidden_objects): the result is itself a subquery.
        let visible = crate::catalog::scan(&t, "__visible_entities", vec![])?
            .filter(coalesce(vec![f, lit(false)]))?
            .project(vec![
                node_key("entity_type", "entity_id").alias("__visible_key"),
            ])?
            .build()?;
        Ok(Some(
            crate::catalog::scan(&t, "__hidden_entities", vec![])?
                .project(vec![
                    node_key("entity_type", "entity_id").alias("__hidden_key"),
                ])?
                .join(
                    visible,
                    JoinType::LeftAnti,
                    (vec!["__hidden_key"], vec!["__visible_key"]),
                    None,
                )?,
        ))
    }

    /// The ids of the objects the principal may not see (whose object rows its scope leaves
    /// out, or which have no revision it may see), when its object tables are filtered.
    async fn hidden_objects(&self, ctx: &SessionContext) -> Result<Option<LogicalPlanBuilder>> {
        let (objects_filtered, revisions_filtered) = (
            self.access.filters_rows_of("objects"),
            self.access.filters_rows_of("revisions"),
        );
        if !objects_filtered && !revisions_filtered {
            return Ok(None);
        }
        let Some(objects) = self.unrestricted(ctx, "objects").await? else {
            return Ok(None);
        };
        // Visible: the object rows its scope keeps, of objects with a revision it may see;
        // hidden: the others. Joins, not subqueries: the result is itself a subquery of the
        // filters below, and DataFusion's decorrelation fails on a union of nested ones.
        let ids = |b: LogicalPlanBuilder, name: &str| -> Result<LogicalPlanBuilder> {
            Ok(b.filter(column("object_id").is_not_null())?
                .project(vec![column("object_id").alias(name)])?)
        };
        let mut visible = crate::catalog::scan(&objects, "__visible_objects", vec![])?;
        if let Some(f) = self.row_filter(&objects)? {
            visible = visible.filter(f)?;
        }
        let mut visible = ids(visible, "__visible_object_id")?;
        if revisions_filtered
            && let Some(revisions) = self.unrestricted(ctx, "revisions").await?
            && let Some(f) = self.row_filter(&revisions)?
        {
            let seen = ids(
                crate::catalog::scan(&revisions, "__seen_revisions", vec![])?.filter(f)?,
                "__seen_object_id",
            )?
            .build()?;
            visible = visible.join(
                seen,
                JoinType::LeftSemi,
                (vec!["__visible_object_id"], vec!["__seen_object_id"]),
                None,
            )?;
        }
        let hidden = ids(
            crate::catalog::scan(&objects, "__all_objects", vec![])?,
            "__hidden_object_id",
        )?
        .join(
            visible.build()?,
            JoinType::LeftAnti,
            (vec!["__hidden_object_id"], vec!["__visible_object_id"]),
            None,
        )?;
        Ok(Some(hidden))
    }

    /// The filters that keep `table`'s rows from naming what the principal cannot see.
    async fn reference_filters(&self, ctx: &SessionContext, table: &str) -> Result<Vec<Expr>> {
        let plan = |b: LogicalPlanBuilder| -> Result<Arc<LogicalPlan>> { Ok(Arc::new(b.build()?)) };
        let mut out = Vec::new();
        match table {
            "relationships" => {
                if let Some(h) = self.hidden_entities(ctx).await? {
                    let h = plan(h)?;
                    out.push(not_in_subquery(node_key("src_type", "src_id"), h.clone()));
                    out.push(not_in_subquery(node_key("dst_type", "dst_id"), h));
                }
            }
            "signals" => {
                // Signals name an entity by id alone: a row is hidden when a hidden entity has
                // its id and no visible one does.
                if let Some(t) = self.unrestricted(ctx, "entities").await?
                    && let Some(f) = self.row_filter(&t)?
                {
                    let ids = |keep: Expr, alias: &str| -> Result<Arc<LogicalPlan>> {
                        plan(
                            crate::catalog::scan(&t, alias, vec![])?
                                .filter(keep.and(column("entity_id").is_not_null()))?
                                .project(vec![column("entity_id").alias(alias)])?,
                        )
                    };
                    let hidden = ids(not(coalesce(vec![f.clone(), lit(false)])), "__hidden_ids")?;
                    let visible = ids(coalesce(vec![f, lit(false)]), "__visible_ids")?;
                    out.push(not_in_subquery(column("entity_id"), hidden).or(
                        datafusion::logical_expr::in_subquery(column("entity_id"), visible),
                    ));
                }
            }
            "links" => {
                let entities = self.hidden_entities(ctx).await?;
                let objects = self.hidden_objects(ctx).await?;
                if let Some(o) = &objects {
                    out.push(not_in_subquery(column("object_id"), plan(o.clone())?));
                }
                let object_keys = match objects {
                    Some(o) => Some(o.project(vec![
                        concat(vec![
                            lit(format!("object{KEY_SEP}")),
                            column("__hidden_object_id"),
                        ])
                        .alias("__hidden_key"),
                    ])?),
                    None => None,
                };
                // Two filters, not one over a union: DataFusion 55's subquery decorrelation
                // fails on a union.
                for keys in [entities, object_keys].into_iter().flatten() {
                    out.push(not_in_subquery(
                        node_key("entity_type", "entity_id"),
                        plan(keys)?,
                    ));
                }
            }
            "derivations" => {
                if let Some(o) = self.hidden_objects(ctx).await? {
                    let o = plan(o)?;
                    out.push(not_in_subquery(column("object_id"), o.clone()));
                    out.push(not_in_subquery(column("source_object_id"), o));
                }
            }
            _ => {}
        }
        Ok(out)
    }

    async fn restriction(
        &self,
        ctx: &SessionContext,
        t: &TableInfo,
    ) -> Result<Option<Restriction>> {
        let mut filters: Vec<Expr> = self.row_filter(t)?.into_iter().collect();
        filters.extend(self.reference_filters(ctx, &t.name).await?);
        let r = Restriction {
            filter: conjunction(filters).map(|f| coalesce(vec![f, lit(false)])),
            masked: self.access.columns_of(&t.name, true),
            denied: self.access.columns_of(&t.name, false),
        };
        if r.filter.is_none() && r.masked.is_empty() && r.denied.is_empty() {
            return Ok(None);
        }
        Ok(Some(r))
    }
}

/// Separates an entity's type from its id in the keys the hidden-entity filters compare.
const KEY_SEP: char = '\u{1f}';

/// `type`, [`KEY_SEP`], `id` of the columns `ty` and `id` (never NULL).
fn node_key(ty: &str, id: &str) -> Expr {
    concat(vec![
        coalesce(vec![column(ty), lit("")]),
        lit(KEY_SEP.to_string()),
        coalesce(vec![column(id), lit("")]),
    ])
}

#[async_trait]
impl Catalog for PolicedCatalog {
    fn dataset(&self) -> &Dataset {
        self.inner.dataset()
    }

    fn unpoliced(&self) -> &dyn Catalog {
        self.inner.unpoliced()
    }

    fn access(&self) -> Option<&Access> {
        Some(&self.access)
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
        if !self.access.may_read(name) {
            return Err(self.access.refuse_table(name));
        }
        let mut t = self.inner.table_during(ctx, name, days).await?;
        let r = self
            .restriction(ctx, &t)
            .await
            .map_err(|e| DatasetError::Config {
                path: self.dataset().root().display_of("policy.toml"),
                message: e.message,
            })?;
        t.restriction = r.map(Arc::new);
        note(&t);
        Ok(t)
    }
}

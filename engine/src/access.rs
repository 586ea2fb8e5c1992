//! Caller permissions (DESIGN.md §3 "Caller permissions", docs/policy.md): the principal a
//! request runs as, its rules checked and its filters parsed. [`crate::policed`] is the
//! catalog that gives every table the engine opens that principal's restriction; every plan
//! reads tables through [`crate::catalog::scan`], which applies it, so the bind pass and
//! everything after it (joins, funnels, TRAVERSE, metrics, DESCRIBE, FIND OBJECT, CONTEXT FOR,
//! EXPLAIN CONTEXT, WATCH) only ever see the rows and columns the principal may see.
//!
//! What a principal's rules become, per table:
//! - a table it may not read is `permission_denied` when opened;
//! - its filter for the table (a SignalQL predicate) and, for the object tables, its context
//!   scope (projects and kinds on `objects`; trust floor and excluded roles on `revisions`,
//!   roles on `representations`) are the rows' filter;
//! - rows that would name what it cannot see go too: a `relationships` row with a hidden
//!   endpoint, a `signals` row of a hidden entity, a `links`/`derivations` row of or to a hidden
//!   object or entity — so nothing hidden appears or bridges;
//! - its denied and masked columns are read as NULL (naming a denied one is refused in the
//!   bind pass).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions_nested::expr_fn::{array_has_any, make_array};
use datafusion::logical_expr::{Expr, lit, not};
use signalql_catalog::policy::{DEFAULT_PRINCIPAL, Policy, Principal, TRUST_LEVELS};
use signalql_catalog::{Dataset, DatasetError};

use crate::error::{Error, ErrorKind, Result};
use crate::lower::fields::column;
use crate::syntax::ast::{BoolExpr, FieldRef, Operand};
use crate::syntax::parse_predicate;
use crate::syntax::walk::operands;

/// The principal a request runs as, with its rules checked and its filters parsed.
#[derive(Debug)]
pub struct Access {
    pub principal: String,
    rules: Principal,
    /// Its filter per table, parsed.
    pub(crate) filters: BTreeMap<String, BoolExpr>,
}

/// `permission_denied` with `message`.
pub fn denied(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::PermissionDenied, message)
}

impl Access {
    /// The access a request naming `principal` (or none) has to `dataset`: `None` when the
    /// dataset has no policy (everything is readable). With a policy, a request naming no
    /// principal runs as `default` when the policy defines one and is refused otherwise; an
    /// unknown principal is refused. Every principal's filters are parsed here, so a
    /// malformed one is an error when the dataset opens.
    pub fn resolve(dataset: &Dataset, principal: Option<&str>) -> Result<Option<Arc<Access>>> {
        let Some(policy) = dataset.policy() else {
            return Ok(None);
        };
        let path = dataset.root().display_of("policy.toml");
        let mut parsed = parse_filters(policy, &path)?;
        let name = match principal {
            Some(n) => n,
            None if policy.principals.contains_key(DEFAULT_PRINCIPAL) => DEFAULT_PRINCIPAL,
            None => {
                return Err(denied(format!(
                    "{path} governs this dataset and defines no `{DEFAULT_PRINCIPAL}` \
                     principal: name one (--principal NAME, or a bearer token on \
                     `signalql serve`)"
                )));
            }
        };
        let Some(rules) = policy.principals.get(name) else {
            return Err(denied(format!("unknown principal `{name}` (see {path})")));
        };
        Ok(Some(Arc::new(Access {
            principal: name.to_string(),
            rules: rules.clone(),
            filters: parsed.remove(name).unwrap_or_default(),
        })))
    }

    /// A hash of the principal's name and rules: the plan cache's policy fingerprint (a plan
    /// made under other rules is not reused).
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let text = format!("{}\n{:?}", self.principal, self.rules);
        hex::encode(&Sha256::digest(text.as_bytes())[..16])
    }

    /// Whether the principal may read everything (its rules hide nothing).
    pub fn sees_everything(&self) -> bool {
        let r = &self.rules;
        r.tables.is_none()
            && self.filters.is_empty()
            && r.columns.deny.is_empty()
            && r.columns.mask.is_empty()
            && r.context == Default::default()
    }

    /// The principal's own `[limits]`.
    pub fn limits(&self) -> &signalql_catalog::LimitsConfig {
        &self.rules.limits
    }

    pub fn may_read(&self, table: &str) -> bool {
        self.rules.may_read(table)
    }

    /// The refusal for reading `table`.
    pub fn refuse_table(&self, table: &str) -> DatasetError {
        DatasetError::Denied(format!(
            "principal `{}` may not read the {table} table",
            self.principal
        ))
    }

    /// `USING PROJECT p` of a project outside the principal's `context.projects` is
    /// `permission_denied` naming it.
    pub fn check_project(&self, project: &str) -> Result<()> {
        match &self.rules.context.projects {
            Some(ps) if !ps.iter().any(|p| p == project) => Err(denied(format!(
                "principal `{}` may not read project {project:?}",
                self.principal
            ))),
            _ => Ok(()),
        }
    }

    /// Every project FIND OBJECT's WHERE names (`project = "p"`, `IN`, `!=`, `NOT IN`), checked
    /// as `USING PROJECT` is, the refusal at its predicate.
    pub fn check_projects_named(&self, filter: &crate::syntax::ast::BoolExpr) -> Result<()> {
        for (project, span) in crate::syntax::walk::compared_strings(filter, "project") {
            self.check_project(project).map_err(|e| e.at(span))?;
        }
        Ok(())
    }

    /// The refusal for naming the denied column `column` of `table`.
    pub fn refuse_column(&self, table: &str, field: &str) -> Error {
        denied(format!(
            "principal `{}` may not read {table}.{field}",
            self.principal
        ))
    }

    pub(crate) fn columns_of(&self, table: &str, masked: bool) -> BTreeSet<String> {
        let list = if masked {
            self.rules.masked()
        } else {
            self.rules.denied()
        };
        list.into_iter()
            .filter(|c| c.table == table)
            .map(|c| c.column)
            .collect()
    }

    /// The rows of the object tables the context scope keeps, as filters over `table`'s
    /// columns.
    pub(crate) fn scope_filters(&self, table: &str) -> Vec<Expr> {
        let scope = &self.rules.context;
        let list = |values: &[String]| values.iter().map(|v| lit(v.as_str())).collect();
        let roles_hidden = |roles: &str| {
            let excluded: Vec<Expr> = scope
                .exclude_roles
                .iter()
                .map(|r| lit(r.as_str()))
                .collect();
            not(coalesce(vec![
                array_has_any(column(roles), make_array(excluded)),
                lit(false),
            ]))
        };
        let mut out = Vec::new();
        match table {
            "objects" => {
                if let Some(p) = &scope.projects {
                    out.push(column("project").in_list(list(p), false));
                }
                if let Some(k) = &scope.kinds {
                    out.push(column("kind").in_list(list(k), false));
                }
            }
            "revisions" => {
                if let Some(floor) = &scope.min_trust {
                    let at = TRUST_LEVELS.iter().position(|t| t == floor).unwrap_or(0);
                    let levels: Vec<String> =
                        TRUST_LEVELS[at..].iter().map(|s| s.to_string()).collect();
                    out.push(column("trust").in_list(list(&levels), false));
                }
                if !scope.exclude_roles.is_empty() {
                    out.push(roles_hidden("roles"));
                }
            }
            "representations" if !scope.exclude_roles.is_empty() => {
                out.push(roles_hidden("roles"));
            }
            _ => {}
        }
        out
    }

    /// Whether any of `table`'s own rows are filtered (its filter or its context scope).
    pub(crate) fn filters_rows_of(&self, table: &str) -> bool {
        self.filters.contains_key(table) || !self.scope_filters(table).is_empty()
    }
}

/// Every principal's filters, parsed; a filter that does not parse, or reads anything but
/// the table's own fields, is an error naming the policy file and the filter.
fn parse_filters(
    policy: &Policy,
    path: &str,
) -> Result<BTreeMap<String, BTreeMap<String, BoolExpr>>> {
    let mut out = BTreeMap::new();
    for (name, p) in &policy.principals {
        let mut filters = BTreeMap::new();
        for (table, text) in &p.filters {
            let bad = |kind: ErrorKind, message: String| {
                Error::new(
                    kind,
                    format!("{path}: [principals.{name}.filters] {table} = {text:?}: {message}"),
                )
            };
            let e = parse_predicate(text).map_err(|e| {
                let at = e
                    .span
                    .map(|s| format!("at column {}: ", s.column))
                    .unwrap_or_default();
                bad(e.kind.clone(), format!("{at}{}", e.message))
            })?;
            for (op, _) in operands(&e) {
                if !matches!(op, Operand::Field(FieldRef::Path(_))) {
                    return Err(bad(
                        ErrorKind::Type,
                        "a filter compares the table's own fields (no signals, aggregates or \
                         semantic_match)"
                            .into(),
                    ));
                }
            }
            filters.insert(table.clone(), e);
        }
        out.insert(name.clone(), filters);
    }
    Ok(out)
}

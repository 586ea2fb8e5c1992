//! `policy.toml` at a dataset root: the principals that may call the engine and what each may
//! read (DESIGN.md §3, "Caller permissions"; docs/policy.md). This module reads and checks the
//! file; the engine applies it (engine/src/access.rs). A file that does not parse or names
//! something that does not exist is an error when the dataset opens, never a silent allow.

use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::limits::LimitsConfig;

/// The tables a policy may name (DESIGN.md §3): every table folder of a dataset.
pub use crate::commit::TABLES;
/// Trust levels, lowest first, and roles (signalql-v0.5-context.md).
pub use crate::objects::{ROLES, TRUST_LEVELS};

/// The principal a request naming none runs as, when the policy defines it.
pub const DEFAULT_PRINCIPAL: &str = "default";

/// A dataset's `policy.toml`, checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub principals: BTreeMap<String, Principal>,
}

/// One principal: who it is (its token hashes) and what it may read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    /// `sha256:<64 hex digits>` of each bearer token that selects it on `signalql serve`.
    #[serde(default)]
    pub tokens: Vec<String>,
    /// The tables it may read; `None`: every table.
    pub tables: Option<Vec<String>>,
    /// A SignalQL predicate per table, ANDed into every read of it.
    #[serde(default)]
    pub filters: BTreeMap<String, String>,
    #[serde(default)]
    pub columns: Columns,
    #[serde(default)]
    pub context: ContextScope,
    /// Any key of `[limits]` in signalql.toml, over the dataset's.
    #[serde(default)]
    pub limits: LimitsConfig,
}

/// Columns a principal may not see, as `table.column` (top-level columns).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Columns {
    /// Naming one in a query is `permission_denied`; it is read as NULL where the engine reads
    /// it on its own (a funnel's user id).
    #[serde(default)]
    pub deny: Vec<String>,
    /// Read as NULL.
    #[serde(default)]
    pub mask: Vec<String>,
}

/// What a principal may read of the object tables.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextScope {
    /// The object projects it may read; `None`: every project.
    pub projects: Option<Vec<String>>,
    /// The object kinds it may read; `None`: every kind.
    pub kinds: Option<Vec<String>>,
    /// Revisions and representations carrying any of these roles are hidden.
    #[serde(default)]
    pub exclude_roles: Vec<String>,
    /// Revisions below this trust level are hidden.
    pub min_trust: Option<String>,
}

/// A `table.column` reference of `[columns]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ColumnRef {
    pub table: String,
    pub column: String,
}

impl Policy {
    /// Parse and check the text of a `policy.toml`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = toml::from_str(text).map_err(|e| e.to_string())?;
        policy.check()?;
        Ok(policy)
    }

    fn check(&self) -> Result<(), String> {
        let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, p) in &self.principals {
            let at = |what: String| format!("[principals.{name}] {what}");
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                return Err(format!(
                    "principal name {name:?}: use letters, digits, `_`, `-` and `.`"
                ));
            }
            for t in &p.tokens {
                let hex = t.strip_prefix("sha256:").unwrap_or("");
                if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(at(format!(
                        "tokens: {} is not `sha256:` and 64 hex digits (the SHA-256 of the \
                         token, never the token itself)",
                        redact(t)
                    )));
                }
                let key = &t["sha256:".len()..];
                if let Some(other) = owners.insert(key, name) {
                    return Err(at(format!(
                        "tokens: a token hash is also given to principal `{other}`"
                    )));
                }
            }
            for t in p.tables.iter().flatten() {
                known_table(t).map_err(|e| at(format!("tables: {e}")))?;
            }
            for t in p.filters.keys() {
                known_table(t).map_err(|e| at(format!("filters: {e}")))?;
            }
            for (what, list) in [("deny", &p.columns.deny), ("mask", &p.columns.mask)] {
                for c in list {
                    column_ref(c).map_err(|e| at(format!("columns.{what}: {e}")))?;
                }
            }
            for r in &p.context.exclude_roles {
                if !ROLES.contains(&r.as_str()) {
                    return Err(at(format!(
                        "context.exclude_roles: unknown role {r:?} (roles: {})",
                        ROLES.join(", ")
                    )));
                }
            }
            if let Some(t) = &p.context.min_trust
                && !TRUST_LEVELS.contains(&t.as_str())
            {
                return Err(at(format!(
                    "context.min_trust: unknown trust level {t:?} (levels, lowest first: {})",
                    TRUST_LEVELS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The principal whose token hashes include the SHA-256 of `token`.
    pub fn principal_for_token(&self, token: &str) -> Option<&str> {
        let digest = hex::encode(Sha256::digest(token.as_bytes()));
        self.principals.iter().find_map(|(name, p)| {
            p.tokens
                .iter()
                .any(|t| t["sha256:".len()..].eq_ignore_ascii_case(&digest))
                .then_some(name.as_str())
        })
    }
}

impl Principal {
    /// Whether it may read `table`.
    pub fn may_read(&self, table: &str) -> bool {
        self.tables
            .as_ref()
            .is_none_or(|ts| ts.iter().any(|t| t == table))
    }

    /// Its denied columns.
    pub fn denied(&self) -> Vec<ColumnRef> {
        self.columns
            .deny
            .iter()
            .filter_map(|c| column_ref(c).ok())
            .collect()
    }

    /// Its masked columns.
    pub fn masked(&self) -> Vec<ColumnRef> {
        self.columns
            .mask
            .iter()
            .filter_map(|c| column_ref(c).ok())
            .collect()
    }
}

/// `sha256:` and the hash of `token`, as a policy's `tokens` entry holds it.
pub fn token_hash(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

fn known_table(t: &str) -> Result<(), String> {
    if TABLES.contains(&t) {
        Ok(())
    } else {
        Err(format!(
            "unknown table {t:?} (tables: {})",
            TABLES.join(", ")
        ))
    }
}

fn column_ref(text: &str) -> Result<ColumnRef, String> {
    let Some((table, column)) = text.split_once('.') else {
        return Err(format!("{text:?} is not `table.column`"));
    };
    known_table(table)?;
    if column.is_empty() {
        return Err(format!("{text:?} is not `table.column`"));
    }
    if column.contains('.') {
        return Err(format!(
            "{text:?} names a key inside a column; `[columns]` names top-level columns \
             (deny or mask the whole column, or hide the rows with a filter)"
        ));
    }
    Ok(ColumnRef {
        table: table.to_string(),
        column: column.to_string(),
    })
}

/// A token-like string shown in an error without the secret it may be.
fn redact(t: &str) -> String {
    if t.starts_with("sha256:") {
        format!("{t:?}")
    } else {
        format!("an entry of {} characters", t.chars().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[principals.acme_agent]
tokens = ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
tables = ["events", "entities", "objects"]
[principals.acme_agent.filters]
events = 'properties.tenant = "acme"'
[principals.acme_agent.columns]
deny = ["events.session_id"]
mask = ["events.user_id"]
[principals.acme_agent.context]
projects = ["atlas"]
exclude_roles = ["policy"]
min_trust = "inferred"
[principals.acme_agent.limits]
max_result_rows = 1000

[principals.default]
"#;

    #[test]
    fn a_policy_parses_and_its_tokens_select_principals() {
        let p = Policy::parse(GOOD).unwrap();
        let acme = &p.principals["acme_agent"];
        assert!(acme.may_read("events") && !acme.may_read("signals"));
        assert!(p.principals["default"].may_read("signals"));
        assert_eq!(acme.limits.max_result_rows, Some(1000));
        assert_eq!(
            acme.denied(),
            [ColumnRef {
                table: "events".into(),
                column: "session_id".into()
            }]
        );
        // sha256("test") = 9f86d08…
        assert_eq!(p.principal_for_token("test"), Some("acme_agent"));
        assert_eq!(p.principal_for_token("Test"), None);
        assert_eq!(p.principal_for_token(""), None);
        assert_eq!(token_hash("test"), acme.tokens[0]);
    }

    #[test]
    fn malformed_policies_are_errors_naming_what_is_wrong() {
        let bad = |text: &str, wanted: &str| {
            let e = Policy::parse(text).unwrap_err();
            assert!(e.contains(wanted), "{e:?} lacks {wanted:?}");
        };
        bad(
            "[principals.a]\ntables = [\"evnts\"]",
            "unknown table \"evnts\"",
        );
        bad(
            "[principals.a]\ntokens = [\"hunter2\"]",
            "an entry of 7 characters",
        );
        bad("[principals.a]\nreads = []", "unknown field `reads`");
        bad(
            "[principals.a.columns]\ndeny = [\"events.properties.email\"]",
            "top-level columns",
        );
        bad(
            "[principals.a.columns]\nmask = [\"user_id\"]",
            "not `table.column`",
        );
        bad(
            "[principals.a.context]\nmin_trust = \"high\"",
            "unknown trust level",
        );
        bad(
            "[principals.a.context]\nexclude_roles = [\"admin\"]",
            "unknown role",
        );
        bad(
            "[principals.a.limits]\nmax_rows = 3",
            "unknown field `max_rows`",
        );
        bad(
            "[principals.a.filters]\nevent = 'x = 1'",
            "unknown table \"event\"",
        );
        bad("[principals.\"a b\"]", "principal name");
        let h = token_hash("t");
        bad(
            &format!("[principals.a]\ntokens = [{h:?}]\n[principals.b]\ntokens = [{h:?}]"),
            "also given to principal `a`",
        );
        bad("principals = 3", "invalid type");
    }
}

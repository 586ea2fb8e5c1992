//! The SQL text of a plan: DataFusion's unparser, with the quoting rule of its default dialect
//! written without a regular expression.
//!
//! DataFusion 55.2's `DefaultDialect::identifier_quote_style` compiles the regular expression
//! `^[a-zA-Z_][a-zA-Z0-9_]*$` for every identifier it prints (datafusion-sql
//! src/unparser/dialect.rs:354): a third to a half of a statement's unparse time, which every
//! analytics answer pays for its `compiled_sql_digest` (1.07 ms of the sample's daily series,
//! benches `stages`). [`SqlDialect`] decides the same way, so the text, and every digest, is
//! unchanged (tested below against `plan_to_sql`).

use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;
use datafusion::sql::unparser::Unparser;
use datafusion::sql::unparser::dialect::Dialect;

use crate::error::{Error, Result};

/// The SQL text DataFusion's unparser gives for a plan (its default dialect's text).
pub fn plan_sql(plan: &LogicalPlan) -> Result<String> {
    Unparser::new(&SqlDialect)
        .plan_to_sql(&crate::group_cap::strip(plan))
        .map(|s| s.to_string())
        .map_err(Error::from)
}

/// DataFusion's `DefaultDialect`: an identifier is quoted when it is not `[a-zA-Z_][a-zA-Z0-9_]*`,
/// holds an upper-case letter, or is a SQL keyword other than `ID`.
struct SqlDialect;

impl Dialect for SqlDialect {
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        let plain = identifier
            .bytes()
            .enumerate()
            .all(|(i, b)| b == b'_' || b.is_ascii_lowercase() || (i > 0 && b.is_ascii_digit()))
            && !identifier.is_empty();
        // Only plain identifiers reach the keyword test, and their upper case is ASCII's.
        // sqlparser keeps ALL_KEYWORDS sorted (its tokenizer searches it the same way).
        let keyword = || {
            let upper = identifier.to_ascii_uppercase();
            upper != "ID" && ALL_KEYWORDS.binary_search(&upper.as_str()).is_ok()
        };
        (!plain || keyword()).then_some('"')
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::unparser::dialect::DefaultDialect;

    use super::*;

    #[test]
    fn identifiers_are_quoted_as_datafusions_default_dialect_quotes_them() {
        let names = [
            "",
            "a",
            "_",
            "_a1",
            "a_b",
            "ab1",
            "1a",
            "A",
            "aB",
            "a b",
            "a-b",
            "é",
            "ſelect",
            "select",
            "SELECT",
            "id",
            "ID",
            "Id",
            "timestamp",
            "count",
            "user_id",
            "events",
            "properties",
            "path",
            "from",
            "order",
            "a\n",
            "x$",
            "__seq",
            "level",
            "step",
        ];
        for name in names {
            assert_eq!(
                SqlDialect.identifier_quote_style(name),
                DefaultDialect {}.identifier_quote_style(name),
                "{name:?}"
            );
        }
        let mut sorted = ALL_KEYWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(
            sorted, ALL_KEYWORDS,
            "binary search needs the keywords sorted"
        );
        for keyword in ALL_KEYWORDS {
            let lower = keyword.to_ascii_lowercase();
            assert_eq!(
                SqlDialect.identifier_quote_style(&lower),
                DefaultDialect {}.identifier_quote_style(&lower),
                "{lower}"
            );
        }
    }
}

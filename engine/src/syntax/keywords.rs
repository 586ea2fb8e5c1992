//! Reserved words of SignalQL: every v0.3 grammar keyword plus the v0.1 keywords.
//!
//! A bare identifier equal to a reserved word (ASCII case-insensitive) is not a valid field
//! name; only the first segment of a dotted path is checked, so `properties.from` is fine.
//! `timestamp` and `entity_id` are ordinary identifiers. The v0.5 words (`CONTEXT`, `FOR`,
//! `USING`, `PREFER`, `OBJECT`, `EXPLAIN`, trust levels, roles, ...) are contextual: they are
//! recognised where the v0.5 grammar expects them and are not reserved.

/// The reserved words, lower case.
pub const RESERVED: &[&str] = &[
    // clauses and operators
    "from",
    "where",
    "traverse",
    "depth",
    "during",
    "last",
    "between",
    "and",
    "or",
    "not",
    "in",
    "contains",
    "is",
    "null",
    "as",
    "of",
    "bucket",
    "by",
    "group",
    "having",
    "return",
    "order",
    "asc",
    "desc",
    "limit",
    "trend",
    "up",
    "down",
    "flat",
    "over",
    "funnel",
    "within",
    "find",
    "sequence",
    "watch",
    "when",
    "describe",
    "entity",
    "events",
    "metric",
    "entities",
    "signals",
    "metrics",
    "relationships",
    // time units
    "h",
    "d",
    "w",
    "m",
    "hour",
    "hours",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    // field functions
    "signal",
    "probability",
    "semantic_match",
    // aggregates
    "count",
    "count_distinct",
    "sum",
    "avg",
    "min",
    "max",
    "variance",
    "stddev",
    "percentile",
    "stats",
    // booleans
    "true",
    "false",
    // v0.1
    "distinct",
    "users",
    "then",
];

/// Whether `word` is a reserved word (ASCII case-insensitive).
pub fn is_reserved(word: &str) -> bool {
    RESERVED.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// Whether `word` is a valid identifier (`[a-zA-Z_][a-zA-Z0-9_]*`) that is not reserved, i.e.
/// whether it can be printed bare where a field name or identifier is expected.
pub fn is_plain_identifier(word: &str) -> bool {
    let mut chars = word.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !is_reserved(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_is_case_insensitive() {
        assert!(is_reserved("FROM"));
        assert!(is_reserved("Count_Distinct"));
        assert!(!is_reserved("timestamp"));
        assert!(!is_reserved("entity_id"));
        assert!(!is_reserved("context"));
        assert!(is_plain_identifier("user_id"));
        assert!(!is_plain_identifier("d"));
        assert!(!is_plain_identifier("9a"));
    }
}

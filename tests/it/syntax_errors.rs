//! Invalid queries: each is a `parse_error` at an exact line and column of the untrimmed text.

use signalql_engine::syntax::parse;

/// Parses `query`, expects a parse_error at `line:column` whose message contains `needle`.
#[track_caller]
fn check(query: &str, line: u32, column: u32, needle: &str) {
    let err = match parse(query) {
        Ok(ast) => panic!("{query:?} parsed: {ast:?}"),
        Err(e) => e,
    };
    assert_eq!(err.code(), "parse_error", "{query:?}: {err}");
    let span = err
        .span
        .unwrap_or_else(|| panic!("{query:?}: no span in {err}"));
    assert_eq!((span.line, span.column), (line, column), "{query:?}: {err}");
    assert!(
        err.message.contains(needle),
        "{query:?}: {:?} lacks {needle:?}",
        err.message
    );
}

#[test]
fn empty_and_blank_queries() {
    check("", 1, 1, "expected a query");
    check("  \n\n   ", 3, 4, "found end of query");
    check("-- only a comment\n", 2, 1, "found end of query");
}

#[test]
fn positions_are_on_untrimmed_text() {
    check(
        "\n\n   FROM evnts RETURN count",
        3,
        9,
        "found identifier evnts",
    );
    check(
        "FROM events\nWHERE name = \"é\" AND\n\tx >= RETURN count",
        3,
        7,
        "found keyword RETURN",
    );
    check(
        "FROM events\n  WHERE a = 1 ; RETURN count",
        2,
        15,
        "unexpected character ';'",
    );
}

#[test]
fn reserved_words_are_not_field_names() {
    check(
        "FROM events\nWHERE from = 1\nRETURN count",
        2,
        7,
        "expected a field name, found keyword from",
    );
    check(
        "FROM events\nGROUP BY day\nRETURN count",
        2,
        10,
        "expected a field name, found keyword day",
    );
    check(
        "FROM events RETURN signal",
        1,
        20,
        "expected a field name, found keyword signal",
    );
}

#[test]
fn string_errors() {
    check(
        "FROM events WHERE event_name = \"abc",
        1,
        32,
        "unterminated string",
    );
    check(
        "FROM events\nWHERE a = \"abc\ndef",
        2,
        11,
        "unterminated string",
    );
    check(
        "FROM events WHERE a = \"x\\q\" RETURN count",
        1,
        25,
        "invalid escape",
    );
}

#[test]
fn timestamp_errors() {
    check(
        "FROM events\nDURING LAST 7 d AS OF \"2026-02-30T00:00:00Z\"\nRETURN count",
        2,
        23,
        "RFC 3339",
    );
    check(
        "FROM events DURING BETWEEN \"2026-01-02T00:00:00Z\" AND \"2026-01-01T00:00:00Z\" RETURN count",
        1,
        55,
        "not to be before its start",
    );
    check(
        "FROM events AS OF \"2026-01-01T00:00:00Z\" RETURN count",
        1,
        13,
        "AS OF needs a DURING window",
    );
}

#[test]
fn clause_errors() {
    check(
        "FROM events\nWHERE a = 1\n",
        3,
        1,
        "expected RETURN, found end of query",
    );
    check(
        "FROM events\nWHERE a = 1\nWHERE b = 2\nRETURN count",
        3,
        1,
        "duplicate WHERE clause",
    );
    check(
        "FROM events RETURN count foo",
        1,
        26,
        "expected end of query, found identifier foo",
    );
    check("FROM events RETURN count ORDER count", 1, 32, "expected BY");
    check(
        "FROM events RETURN count, ",
        1,
        27,
        "expected a field name, found end of query",
    );
    check(
        "FROM events HAVING sum(x) CONTAINS \"a\" RETURN count",
        1,
        27,
        "expected a comparison operator",
    );
    check(
        "WATCH (FROM events RETURN count WHEN count > 1",
        1,
        33,
        "expected ')'",
    );
    check(
        "FUNNEL \"a\" -> \"b\" FROM events DURING LAST 7 d",
        1,
        46,
        "expected WITHIN",
    );
    check("DESCRIBE tables", 1, 10, "expected entities");
}

#[test]
fn number_errors() {
    check(
        "FROM events RETURN percentile(x, 1.5)",
        1,
        34,
        "between 0 and 1",
    );
    check(
        "FROM events RETURN count LIMIT 99999999999999999999",
        1,
        32,
        "out of range",
    );
    check(
        "FROM events RETURN count LIMIT -1",
        1,
        32,
        "non-negative integer",
    );
    check(
        "FROM events WHERE a = 99999999999999999999 RETURN count",
        1,
        23,
        "out of range",
    );
}

#[test]
fn nesting_is_limited() {
    let deep = format!(
        "FROM events WHERE {}a = 1{} RETURN count",
        "(".repeat(65),
        ")".repeat(65)
    );
    check(&deep, 1, 83, "deeper than 64");
    let huge = format!(
        "FROM events WHERE {}a = 1{} RETURN count",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    check(&huge, 1, 83, "deeper than 64");
    let nots = format!("FROM events WHERE {}a = 1 RETURN count", "NOT ".repeat(70));
    check(&nots, 1, 19 + 64 * 4, "deeper than 64");
    let ok = format!(
        "FROM events WHERE {}a = 1{} RETURN count",
        "(".repeat(64),
        ")".repeat(64)
    );
    assert!(parse(&ok).is_ok());
}

#[test]
fn v01_errors() {
    check(
        "COUNT events FROM events WHERE event_name = \"a\" DURING LAST 400 DAYS",
        1,
        61,
        "between 1 and 366",
    );
    check(
        "COUNT users FROM events DURING LAST 7 DAYS",
        1,
        25,
        "expected WHERE, found keyword DURING",
    );
    check(
        "COUNT events FROM logs WHERE a = \"b\" DURING LAST 7 DAYS",
        1,
        19,
        "expected events",
    );
    check(
        "FUNNEL \"a\" THEN \"b\" -> \"c\" FROM events DURING LAST 7 DAYS",
        1,
        21,
        "cannot mix THEN and ->",
    );
    check(
        "FUNNEL \"1\" THEN \"2\" THEN \"3\" THEN \"4\" THEN \"5\" THEN \"6\" THEN \"7\" FROM events DURING LAST 7 DAYS",
        1,
        62,
        "at most 6 steps",
    );
    check(
        "COUNT events FROM events WHERE a = 1 DURING LAST 7 DAYS",
        1,
        36,
        "expected a string",
    );
}

#[test]
fn context_errors() {
    check("EXPLAIN CONTEXT \"ctx_abc\"", 1, 17, "context address");
    check(
        "CONTEXT FOR \"t\"\n  BUDGET 10 TOKENS\n  BUDGET 20 TOKENS",
        3,
        3,
        "duplicate BUDGET clause",
    );
    check(
        "CONTEXT FOR \"t\" PREFER FRESH",
        1,
        24,
        "expected CURRENT, a trust level or REPRESENTATION",
    );
    check("CONTEXT FOR \"t\" MAX AGE 3", 1, 26, "time unit");
}

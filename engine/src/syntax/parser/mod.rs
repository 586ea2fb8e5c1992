//! Recursive-descent parser for SignalQL: one `parse_<rule>` per grammar rule, a depth limit,
//! and "expected X, found Y" errors with positions on the untrimmed text.
//!
//! Dialect: a query whose first keyword (after an optional `EXPLAIN [ANALYZE]`) is `COUNT`, or
//! which is a `FUNNEL` whose first separator is `THEN`, is a v0.1 query: it is tokenized with
//! literal backslashes and desugared into the v0.3 AST (see `v01.rs`). Everything else is v0.3+.

mod context;
mod expr;
mod retrieve;
mod v01;

use chrono::{DateTime, NaiveDate, Timelike, Utc};

use crate::error::{Error, Result};
use crate::syntax::ast::{Literal, Span, Statement, TimeUnit, Timestamp};
use crate::syntax::keywords::is_reserved;
use crate::syntax::lexer::{Lexer, StringMode, Token, TokenKind, tokenize};
use crate::syntax::params::{Params, bind};

/// Maximum nesting of parentheses and `NOT` in a boolean expression.
pub const MAX_DEPTH: usize = 64;
/// Maximum `AND`/`OR` operators in one boolean expression (WHERE, HAVING, WHEN). Each one is
/// a level of the expression tree every later pass walks recursively; with [`MAX_DEPTH`] this
/// keeps the deepest tree within a 2 MiB thread stack in a debug build (tests/it/query_fuzz.rs).
/// A long list of alternatives is `IN (…)`.
pub const MAX_BOOL_OPS: usize = 64;
/// Maximum segments of a field path (`properties.a.b…`).
pub const MAX_PATH_SEGMENTS: usize = 16;

/// Parses one SignalQL statement (any dialect). A `$name` in it is a parse_error: it has no
/// value ([`parse_with`]).
pub fn parse(text: &str) -> Result<Statement> {
    parse_with(text, &Params::new())
}

/// Parses one SignalQL statement (any dialect) whose `$name` parameters take their values from
/// `params`, each bound as one literal token before parsing ([`crate::syntax::params`]).
pub fn parse_with(text: &str, params: &Params) -> Result<Statement> {
    let read = |mode: StringMode, v01: bool| {
        let mut tokens = tokenize(text, mode)?;
        bind(&mut tokens, params)?;
        Parser::new(tokens, v01).parse_statement()
    };
    match detect_v01(text) {
        V01::Count => read(StringMode::Raw, true),
        V01::FunnelThen => {
            let v01 = read(StringMode::Raw, true);
            // A v0.3 funnel whose first step contains `\" THEN ` would look like v0.1 when read
            // with literal backslashes; fall back to v0.3 so canonical text always re-parses.
            match v01 {
                Ok(statement) => Ok(statement),
                Err(err) => read(StringMode::Escapes, false).map_err(|_| err),
            }
        }
        V01::No => read(StringMode::Escapes, false),
    }
}

/// Parses a metric definition's expression (docs/metrics.md): aggregates, `metric(name)` and
/// numbers under `+ - * /` and parentheses.
pub fn parse_metric_expression(text: &str) -> Result<crate::syntax::ast::MetricExpr> {
    let mut p = Parser::new(tokenize(text, StringMode::Escapes)?, false);
    let e = p.parse_metric_expr()?;
    p.expect_end()?;
    Ok(e)
}

/// Parses a WHERE predicate on its own (a metric definition's filter).
pub fn parse_predicate(text: &str) -> Result<crate::syntax::ast::BoolExpr> {
    let mut p = Parser::new(tokenize(text, StringMode::Escapes)?, false);
    let e = p.parse_predicate_expr()?;
    p.expect_end()?;
    Ok(e)
}

enum V01 {
    Count,
    FunnelThen,
    No,
}

/// Looks at the first few tokens (read with literal backslashes) to recognise v0.1 queries.
fn detect_v01(text: &str) -> V01 {
    let mut lexer = Lexer::new(text, StringMode::Raw);
    let mut words = Vec::new();
    while words.len() < 5 {
        match lexer.next_token() {
            Ok(t) if t.kind != TokenKind::Eof => words.push(t),
            _ => break,
        }
    }
    let is = |i: usize, kw: &str| {
        words
            .get(i)
            .is_some_and(|t| t.kind == TokenKind::Word && t.text.eq_ignore_ascii_case(kw))
    };
    let mut i = 0;
    if is(0, "explain") && !is(1, "context") {
        i = if is(1, "analyze") { 2 } else { 1 };
    }
    if is(i, "count") {
        V01::Count
    } else if is(i, "funnel") && is(i + 2, "then") {
        V01::FunnelThen
    } else {
        V01::No
    }
}

pub(crate) struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    /// `AND`/`OR` operators of the boolean expression being parsed.
    bool_ops: usize,
    /// Whether this is a v0.1 query (FUNNEL takes the v0.1 form).
    v01: bool,
}

/// How a token is named in "found X".
pub(crate) fn describe(token: &Token) -> String {
    match &token.kind {
        TokenKind::Word if is_reserved(&token.text) => format!("keyword {}", token.text),
        TokenKind::Word => format!("identifier {}", token.text),
        TokenKind::Integer | TokenKind::Decimal => format!("number {}", token.text),
        TokenKind::Str(_) => {
            let mut text: String = token.text.chars().take(40).collect();
            if text.len() < token.text.len() {
                text.push('…');
            }
            format!("string {text}")
        }
        TokenKind::Uri => format!("address {}", token.text),
        TokenKind::Param => format!("parameter {}", token.text),
        TokenKind::Eof => "end of query".to_string(),
        _ => format!("'{}'", token.text),
    }
}

impl Parser {
    fn new(tokens: Vec<Token>, v01: bool) -> Self {
        Parser {
            tokens,
            pos: 0,
            depth: 0,
            bool_ops: 0,
            v01,
        }
    }

    fn parse_statement(&mut self) -> Result<Statement> {
        let statement = self.parse_query()?;
        self.expect_end()?;
        Ok(statement)
    }

    /// query ::= retrieve | funnel | sequence | watch | describe | context | explain | find object
    fn parse_query(&mut self) -> Result<Statement> {
        if self.is_kw("context") {
            return self.parse_context_task().map(Statement::ContextTask);
        }
        if self.is_kw("explain") {
            // EXPLAIN CONTEXT context://… explains a stored bundle; EXPLAIN CONTEXT FOR … is
            // the plan of a CONTEXT FOR.
            if self.is_kw_at(1, "context") && !self.is_kw_at(2, "for") {
                return self.parse_explain_context().map(Statement::ExplainContext);
            }
            return self.parse_explain().map(Statement::Explain);
        }
        if self.is_kw("describe") {
            return self.parse_describe_query().map(Statement::Describe);
        }
        if self.is_kw("find") && self.is_kw_at(1, "object") {
            return self.parse_find_object().map(Statement::FindObject);
        }
        if self.is_kw("from")
            || self.is_kw("funnel")
            || self.is_kw("find")
            || self.is_kw("watch")
            || self.is_kw("count")
        {
            return self.parse_analytics_query();
        }
        self.expected("a query (FROM, FUNNEL, FIND, WATCH, DESCRIBE, CONTEXT, EXPLAIN or COUNT)")
    }

    /// An analytics query (the statement EXPLAIN may wrap).
    fn parse_analytics_query(&mut self) -> Result<Statement> {
        if self.is_kw("from") {
            self.parse_retrieve_query().map(Statement::Retrieve)
        } else if self.is_kw("funnel") && self.v01 {
            self.parse_v01_funnel_query().map(Statement::Funnel)
        } else if self.is_kw("funnel") {
            self.parse_funnel_query().map(Statement::Funnel)
        } else if self.is_kw("find") {
            self.parse_sequence_query().map(Statement::Sequence)
        } else if self.is_kw("watch") {
            self.parse_watch_query().map(Statement::Watch)
        } else if self.is_kw("count") {
            self.parse_v01_count_query().map(Statement::Retrieve)
        } else {
            self.expected("an analytics query (FROM, FUNNEL, FIND sequence, WATCH or COUNT)")
        }
    }

    // ----- token helpers -----

    fn peek(&self) -> &Token {
        self.peek_at(0)
    }

    fn peek_at(&self, k: usize) -> &Token {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[(self.pos + k).min(last)]
    }

    fn advance(&mut self) -> Token {
        let token = self.peek().clone();
        if token.kind != TokenKind::Eof {
            self.pos += 1;
        }
        token
    }

    /// The span from `start` to the end of the last consumed token.
    fn span_from(&self, start: Span) -> Span {
        let end = if self.pos == 0 {
            start.end
        } else {
            self.tokens[self.pos - 1].span.end
        };
        Span {
            end: end.max(start.start),
            ..start
        }
    }

    fn is_kw(&self, kw: &str) -> bool {
        self.is_kw_at(0, kw)
    }

    fn is_kw_at(&self, k: usize, kw: &str) -> bool {
        let t = self.peek_at(k);
        t.kind == TokenKind::Word && t.text.eq_ignore_ascii_case(kw)
    }

    fn is(&self, kind: &TokenKind) -> bool {
        &self.peek().kind == kind
    }

    fn eat_kw(&mut self, kw: &str) -> Option<Token> {
        if self.is_kw(kw) {
            Some(self.advance())
        } else {
            None
        }
    }

    fn eat(&mut self, kind: &TokenKind) -> Option<Token> {
        if self.is(kind) {
            Some(self.advance())
        } else {
            None
        }
    }

    fn expect_kw(&mut self, kw: &str) -> Result<Token> {
        match self.eat_kw(kw) {
            Some(t) => Ok(t),
            None => self.expected(&kw.to_ascii_uppercase()),
        }
    }

    fn expect(&mut self, kind: &TokenKind, what: &str) -> Result<Token> {
        match self.eat(kind) {
            Some(t) => Ok(t),
            None => self.expected(what),
        }
    }

    fn expected<T>(&self, what: &str) -> Result<T> {
        Err(Error::parse(
            format!("expected {what}, found {}", describe(self.peek())),
            self.peek().span,
        ))
    }

    fn expect_end(&self) -> Result<()> {
        if self.is(&TokenKind::Eof) {
            Ok(())
        } else {
            self.expected("end of query")
        }
    }

    /// Enters one level of nesting (parenthesis or NOT); errors beyond [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error::parse(
                format!("expression nests deeper than {MAX_DEPTH} levels"),
                self.peek().span,
            ));
        }
        Ok(())
    }

    /// Counts one `AND`/`OR` operator at `span`; errors beyond [`MAX_BOOL_OPS`].
    fn count_bool_op(&mut self, span: Span) -> Result<()> {
        self.bool_ops += 1;
        if self.bool_ops > MAX_BOOL_OPS {
            return Err(Error::parse(
                format!(
                    "expression has more than {MAX_BOOL_OPS} AND/OR operators; \
                     write a list of alternatives as IN (…)"
                ),
                span,
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    // ----- terminals -----

    /// A word that is not reserved (`identifier`), e.g. a relation or funnel step name.
    fn parse_identifier(&mut self, what: &str) -> Result<(String, Span)> {
        let t = self.peek();
        if t.kind == TokenKind::Word && !is_reserved(&t.text) {
            let t = self.advance();
            return Ok((t.text, t.span));
        }
        self.expected(what)
    }

    /// Any word, keyword or not (a segment after `.`, a name inside `entity(...)`).
    fn parse_word(&mut self, what: &str) -> Result<(String, Span)> {
        if self.is(&TokenKind::Word) {
            let t = self.advance();
            return Ok((t.text, t.span));
        }
        self.expected(what)
    }

    /// qualified_identifier ::= identifier ( "." identifier )*
    fn parse_qualified_identifier(&mut self) -> Result<Vec<String>> {
        let mut parts = vec![self.parse_word("a qualified name")?.0];
        while self.eat(&TokenKind::Dot).is_some() {
            parts.push(self.parse_word("a name after '.'")?.0);
        }
        Ok(parts)
    }

    fn parse_string(&mut self, what: &str) -> Result<(String, Span)> {
        if let TokenKind::Str(value) = &self.peek().kind {
            let value = value.clone();
            let span = self.advance().span;
            return Ok((value, span));
        }
        self.expected(what)
    }

    /// A non-negative integer (`integer`) as u64; overflow is a parse_error at the number.
    fn parse_integer(&mut self, what: &str) -> Result<(u64, Span)> {
        let t = self.peek();
        if t.kind != TokenKind::Integer || t.text.starts_with('-') {
            return self.expected(what);
        }
        let t = self.advance();
        match t.text.parse::<u64>() {
            Ok(n) => Ok((n, t.span)),
            Err(_) => Err(Error::parse(
                format!("integer literal {} is out of range", t.text),
                t.span,
            )),
        }
    }

    /// value ::= string_literal | integer | decimal | boolean (numbers may be negative).
    fn parse_value(&mut self) -> Result<Literal> {
        let t = self.peek().clone();
        match &t.kind {
            TokenKind::Str(value) => {
                self.advance();
                Ok(Literal::String(value.clone()))
            }
            TokenKind::Integer => {
                self.advance();
                t.text.parse::<i64>().map(Literal::Integer).map_err(|_| {
                    Error::parse(
                        format!("integer literal {} is out of range", t.text),
                        t.span,
                    )
                })
            }
            TokenKind::Decimal => {
                self.advance();
                parse_decimal(&t).map(Literal::Decimal)
            }
            TokenKind::Word if t.text.eq_ignore_ascii_case("true") => {
                self.advance();
                Ok(Literal::Boolean(true))
            }
            TokenKind::Word if t.text.eq_ignore_ascii_case("false") => {
                self.advance();
                Ok(Literal::Boolean(false))
            }
            _ => self.expected("a value (string, number, true or false)"),
        }
    }

    /// time_unit ::= h | d | w | m | HOUR(S) | DAY(S) | WEEK(S) | MONTH(S)
    fn parse_time_unit(&mut self) -> Result<TimeUnit> {
        let unit = match self.peek().text.to_ascii_lowercase().as_str() {
            _ if self.peek().kind != TokenKind::Word => None,
            "h" | "hour" | "hours" => Some(TimeUnit::Hour),
            "d" | "day" | "days" => Some(TimeUnit::Day),
            "w" | "week" | "weeks" => Some(TimeUnit::Week),
            "m" | "month" | "months" => Some(TimeUnit::Month),
            _ => None,
        };
        match unit {
            Some(u) => {
                self.advance();
                Ok(u)
            }
            None => self.expected("a time unit (h, d, w, m)"),
        }
    }

    /// timestamp_literal ::= string_literal holding an RFC 3339 instant. `date_only` also
    /// accepts `YYYY-MM-DD` as UTC midnight (v0.1 BETWEEN only).
    fn parse_timestamp(&mut self, date_only: bool) -> Result<(Timestamp, DateTime<Utc>, Span)> {
        let (text, span) = self.parse_string("a timestamp string (RFC 3339)")?;
        match normalize_timestamp(&text, date_only) {
            Some((ts, instant)) => Ok((ts, instant, span)),
            None => Err(Error::parse(
                format!(
                    "expected an RFC 3339 timestamp such as \"2026-06-13T00:00:00Z\", found \"{text}\""
                ),
                span,
            )),
        }
    }
}

fn parse_decimal(t: &Token) -> Result<f64> {
    match t.text.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(Error::parse(
            format!("decimal literal {} is out of range", t.text),
            t.span,
        )),
    }
}

/// Parses an RFC 3339 instant and normalises it to UTC, microsecond precision:
/// `%Y-%m-%dT%H:%M:%SZ` without sub-seconds, else `%Y-%m-%dT%H:%M:%S%.6fZ`.
pub fn normalize_timestamp(text: &str, date_only: bool) -> Option<(Timestamp, DateTime<Utc>)> {
    let instant = match DateTime::parse_from_rfc3339(text) {
        Ok(t) => t.with_timezone(&Utc),
        Err(_) if date_only && text.len() == 10 => NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()?
            .and_hms_opt(0, 0, 0)?
            .and_utc(),
        Err(_) => return None,
    };
    if instant.nanosecond() >= 1_000_000_000 {
        return None; // leap second
    }
    let instant = instant.with_nanosecond(instant.nanosecond() / 1000 * 1000)?;
    if !(0..=9999).contains(&chrono::Datelike::year(&instant)) {
        return None;
    }
    let text = if instant.nanosecond() == 0 {
        instant.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        instant.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    };
    Some((Timestamp(text), instant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_normalise() {
        let n = |s: &str| normalize_timestamp(s, false).map(|t| t.0.0);
        assert_eq!(
            n("2026-06-13T02:00:00+02:00").as_deref(),
            Some("2026-06-13T00:00:00Z")
        );
        assert_eq!(
            n("2026-06-13T00:00:00.5Z").as_deref(),
            Some("2026-06-13T00:00:00.500000Z")
        );
        assert_eq!(
            n("2026-06-13T00:00:00.0000001Z").as_deref(),
            Some("2026-06-13T00:00:00Z")
        );
        assert_eq!(n("2026-02-30T00:00:00Z"), None);
        assert_eq!(n("2026-06-13"), None);
        assert!(normalize_timestamp("2026-06-13", true).is_some());
    }
}

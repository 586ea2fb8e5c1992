//! Parser rules for the v0.3 analytics statements: retrieve, funnel, sequence, watch,
//! describe, and `EXPLAIN [ANALYZE] <query>`.

use chrono::{DateTime, Utc};

use super::Parser;
use crate::error::{Error, Result};
use crate::syntax::ast::{
    DescribeQuery, DescribeTarget, Duration, ExplainQuery, FieldRef, FunnelOrder, FunnelQuery,
    RetrieveQuery, SequenceQuery, Source, Span, Statement, TimeWindow, Timestamp, Traverse, Trend,
    TrendDir, WatchQuery, Window,
};
use crate::syntax::lexer::TokenKind;

/// The instants a BETWEEN window starts and ends at.
type Instants = (DateTime<Utc>, DateTime<Utc>);

/// Clauses seen so far in a clause list where each may appear at most once.
#[derive(Default)]
pub(super) struct Seen(Vec<String>);

impl Seen {
    /// Records `name`; a second occurrence is a parse_error at `span`.
    pub(super) fn once(&mut self, name: &str, span: Span) -> Result<()> {
        if self.0.iter().any(|n| n == name) {
            return Err(Error::parse(format!("duplicate {name} clause"), span));
        }
        self.0.push(name.to_string());
        Ok(())
    }
}

/// A standalone `AS OF` clause waiting for its DURING window.
type PendingAsOf = Option<(Timestamp, Span)>;

impl Parser {
    /// retrieve_query ::= "FROM" source clause* with the clauses in any order, each at most
    /// once, RETURN required. `AS OF` may follow the window directly or stand alone.
    pub(super) fn parse_retrieve_query(&mut self) -> Result<RetrieveQuery> {
        let start = self.expect_kw("from")?.span;
        let source = self.parse_source()?;
        let mut q = RetrieveQuery::empty(source, start);
        let mut seen = Seen::default();
        let mut as_of: PendingAsOf = None;
        loop {
            let t = self.peek().clone();
            if t.kind != TokenKind::Word {
                break;
            }
            match t.text.to_ascii_uppercase().as_str() {
                "WHERE" => {
                    seen.once("WHERE", t.span)?;
                    self.advance();
                    q.filter = Some(self.parse_predicate_expr()?);
                }
                "TRAVERSE" => {
                    seen.once("TRAVERSE", t.span)?;
                    q.traverse = Some(self.parse_traverse_clause()?);
                }
                "DURING" => {
                    seen.once("DURING", t.span)?;
                    q.window = Some(self.parse_window_clause(&mut seen)?);
                }
                "AS" => as_of = Some(self.parse_as_of_clause(&mut seen)?),
                "BUCKET" => {
                    seen.once("BUCKET BY", t.span)?;
                    self.advance();
                    self.expect_kw("by")?;
                    q.bucket = Some(self.parse_time_unit()?);
                }
                "GROUP" => {
                    seen.once("GROUP BY", t.span)?;
                    let (dims, spans) = self.parse_group_clause()?;
                    q.group_by = dims;
                    q.group_spans = spans;
                }
                "HAVING" => {
                    seen.once("HAVING", t.span)?;
                    self.advance();
                    q.having = Some(self.parse_having_expr()?);
                }
                "RETURN" => {
                    seen.once("RETURN", t.span)?;
                    self.advance();
                    loop {
                        let (item, span) = self.parse_return_field()?;
                        q.returns.push(item);
                        q.return_spans.push(span);
                        if self.eat(&TokenKind::Comma).is_none() {
                            break;
                        }
                    }
                }
                "ORDER" => {
                    seen.once("ORDER BY", t.span)?;
                    self.advance();
                    self.expect_kw("by")?;
                    q.order_by.push(self.parse_order_term()?);
                    while self.eat(&TokenKind::Comma).is_some() {
                        q.order_by.push(self.parse_order_term()?);
                    }
                }
                "LIMIT" => {
                    seen.once("LIMIT", t.span)?;
                    self.advance();
                    q.limit = Some(self.parse_integer("a non-negative integer")?.0);
                }
                "TREND" => {
                    seen.once("TREND", t.span)?;
                    q.trend = Some(self.parse_trend_clause()?);
                }
                _ => break,
            }
        }
        if q.returns.is_empty() {
            return self.expected("RETURN");
        }
        attach_as_of(&mut q.window, as_of)?;
        q.span = self.span_from(start);
        Ok(q)
    }

    /// source ::= "events" | "entity" "(" qualified_identifier ")" | "metric" "(" … ")"
    pub(super) fn parse_source(&mut self) -> Result<Source> {
        if self.eat_kw("events").is_some() {
            return Ok(Source::Events);
        }
        for (kw, entity) in [("entity", true), ("metric", false)] {
            if self.is_kw(kw) && self.peek_at(1).kind == TokenKind::LParen {
                self.advance();
                self.advance();
                let name = self.parse_qualified_identifier()?;
                self.expect(&TokenKind::RParen, "')'")?;
                return Ok(if entity {
                    Source::Entity(name)
                } else {
                    Source::Metric(name)
                });
            }
        }
        self.expected("a source (events, entity(...) or metric(...))")
    }

    /// traverse_clause ::= "TRAVERSE" identifier "DEPTH" "<=" integer
    fn parse_traverse_clause(&mut self) -> Result<Traverse> {
        self.expect_kw("traverse")?;
        let (relation, _) = self.parse_identifier("a relationship name")?;
        self.expect_kw("depth")?;
        self.expect(&TokenKind::LtEq, "'<='")?;
        let (depth, _) = self.parse_integer("a non-negative integer")?;
        Ok(Traverse { relation, depth })
    }

    /// window_clause ::= "DURING" time_window as_of_clause?
    pub(super) fn parse_window_clause(&mut self, seen: &mut Seen) -> Result<Window> {
        let start = self.expect_kw("during")?.span;
        let range = self.parse_time_window()?.0;
        let mut as_of = None;
        if self.is_kw("as") {
            as_of = Some(self.parse_as_of_clause(seen)?.0);
        }
        Ok(Window {
            range,
            as_of,
            span: self.span_from(start),
        })
    }

    /// time_window ::= "LAST" integer time_unit | "BETWEEN" ts "AND" ts (start <= end:
    /// `BETWEEN a AND a` is the empty window `[a, a)`, as in the v0.1 reference; an end
    /// before the start is an error, docs/semantics.md).
    /// Also returns the instants of a BETWEEN window.
    pub(super) fn parse_time_window(&mut self) -> Result<(TimeWindow, Option<Instants>)> {
        if self.eat_kw("last").is_some() {
            let (n, _) = self.parse_integer("a non-negative integer")?;
            let unit = self.parse_time_unit()?;
            return Ok((TimeWindow::Last(Duration { n, unit }), None));
        }
        if self.eat_kw("between").is_some() {
            let date_only = self.v01;
            let (start, a, _) = self.parse_timestamp(date_only)?;
            self.expect_kw("and")?;
            let (end, b, span) = self.parse_timestamp(date_only)?;
            if a > b {
                return Err(Error::parse(
                    "expected the end of the window not to be before its start",
                    span,
                ));
            }
            return Ok((TimeWindow::Between { start, end }, Some((a, b))));
        }
        self.expected("LAST or BETWEEN")
    }

    /// as_of_clause ::= "AS" "OF" timestamp_literal
    pub(super) fn parse_as_of_clause(&mut self, seen: &mut Seen) -> Result<(Timestamp, Span)> {
        let t = self.expect_kw("as")?;
        seen.once("AS OF", t.span)?;
        self.expect_kw("of")?;
        let (ts, _, _) = self.parse_timestamp(false)?;
        Ok((ts, t.span))
    }

    /// group_clause ::= "GROUP" "BY" group_dim ( "," group_dim )*
    fn parse_group_clause(&mut self) -> Result<(Vec<FieldRef>, Vec<Span>)> {
        self.expect_kw("group")?;
        self.expect_kw("by")?;
        let (mut dims, mut spans) = (Vec::new(), Vec::new());
        loop {
            let start = self.peek().span;
            dims.push(self.parse_field_path()?);
            spans.push(self.span_from(start));
            if self.eat(&TokenKind::Comma).is_none() {
                return Ok((dims, spans));
            }
        }
    }

    /// trend_clause ::= "TREND" ("UP" | "DOWN" | "FLAT") "OVER" integer time_unit
    fn parse_trend_clause(&mut self) -> Result<Trend> {
        self.expect_kw("trend")?;
        let dir = if self.eat_kw("up").is_some() {
            TrendDir::Up
        } else if self.eat_kw("down").is_some() {
            TrendDir::Down
        } else if self.eat_kw("flat").is_some() {
            TrendDir::Flat
        } else {
            return self.expected("UP, DOWN or FLAT");
        };
        self.expect_kw("over")?;
        let (n, _) = self.parse_integer("a non-negative integer")?;
        let unit = self.parse_time_unit()?;
        Ok(Trend {
            dir,
            over: Duration { n, unit },
        })
    }

    /// funnel_query ::= "FUNNEL" step ("->" step)+ "FROM" source where? window? "WITHIN"
    /// integer time_unit group? — the clauses after the source in any order, each at most once.
    pub(super) fn parse_funnel_query(&mut self) -> Result<FunnelQuery> {
        let start = self.expect_kw("funnel")?.span;
        let steps = self.parse_steps("a funnel step (a string or identifier)")?;
        self.expect_kw("from")?;
        let source = self.parse_source()?;
        let (mut filter, mut window, mut within, mut group_by) = (None, None, None, Vec::new());
        let (mut order, mut excluding) = (FunnelOrder::Ordered, Vec::new());
        let mut seen = Seen::default();
        let mut as_of: PendingAsOf = None;
        loop {
            let t = self.peek().clone();
            match t.text.to_ascii_uppercase().as_str() {
                _ if t.kind != TokenKind::Word => break,
                "WHERE" => {
                    seen.once("WHERE", t.span)?;
                    self.advance();
                    filter = Some(self.parse_predicate_expr()?);
                }
                "DURING" => {
                    seen.once("DURING", t.span)?;
                    window = Some(self.parse_window_clause(&mut seen)?);
                }
                "AS" => as_of = Some(self.parse_as_of_clause(&mut seen)?),
                "WITHIN" => {
                    seen.once("WITHIN", t.span)?;
                    within = Some(self.parse_within()?);
                }
                "GROUP" => {
                    seen.once("GROUP BY", t.span)?;
                    group_by = self.parse_group_clause()?.0;
                }
                "ORDER" => {
                    seen.once("ORDER", t.span)?;
                    self.advance();
                    order = if self.eat_kw("strict").is_some() {
                        FunnelOrder::Strict
                    } else if self.eat_kw("any").is_some() {
                        FunnelOrder::Any
                    } else {
                        return self.expected("STRICT or ANY (a funnel's order mode)");
                    };
                }
                "EXCLUDING" => {
                    seen.once("EXCLUDING", t.span)?;
                    self.advance();
                    excluding = self.parse_excluding(&steps)?;
                }
                _ => break,
            }
        }
        let Some(within) = within else {
            return self.expected("WITHIN");
        };
        attach_as_of(&mut window, as_of)?;
        Ok(FunnelQuery {
            steps,
            source,
            filter,
            window,
            within,
            order,
            excluding,
            group_by,
            span: self.span_from(start),
        })
    }

    /// excluding ::= "EXCLUDING" step ("," step)* — a name may not also be a step, nor repeat.
    fn parse_excluding(&mut self, steps: &[String]) -> Result<Vec<String>> {
        let mut names: Vec<String> = Vec::new();
        loop {
            let span = self.peek().span;
            let name = self.parse_step("an excluded event name (a string or identifier)")?;
            if steps.contains(&name) {
                return Err(Error::parse(
                    format!("\"{name}\" is a step of this funnel and cannot also be excluded"),
                    span,
                ));
            }
            if !names.contains(&name) {
                names.push(name);
            }
            if self.eat(&TokenKind::Comma).is_none() {
                return Ok(names);
            }
        }
    }

    /// "WITHIN" integer time_unit
    fn parse_within(&mut self) -> Result<Duration> {
        self.expect_kw("within")?;
        let (n, _) = self.parse_integer("a non-negative integer")?;
        let unit = self.parse_time_unit()?;
        Ok(Duration { n, unit })
    }

    /// step ( "->" step )+ where step ::= string_literal | identifier
    fn parse_steps(&mut self, what: &str) -> Result<Vec<String>> {
        let mut steps = vec![self.parse_step(what)?];
        self.expect(&TokenKind::Arrow, "'->'")?;
        steps.push(self.parse_step(what)?);
        while self.eat(&TokenKind::Arrow).is_some() {
            steps.push(self.parse_step(what)?);
        }
        Ok(steps)
    }

    fn parse_step(&mut self, what: &str) -> Result<String> {
        if matches!(self.peek().kind, TokenKind::Str(_)) {
            return Ok(self.parse_string(what)?.0);
        }
        Ok(self.parse_identifier(what)?.0)
    }

    /// sequence_query ::= "FIND" "sequence" "WHERE" sequence_steps "WITHIN" integer time_unit
    pub(super) fn parse_sequence_query(&mut self) -> Result<SequenceQuery> {
        let start = self.expect_kw("find")?.span;
        if self.eat_kw("sequence").is_none() {
            return self.expected("sequence or OBJECT");
        }
        self.expect_kw("where")?;
        let steps = self.parse_steps("a sequence step (a string or identifier)")?;
        let within = self.parse_within()?;
        Ok(SequenceQuery {
            steps,
            within,
            span: self.span_from(start),
        })
    }

    /// watch_query ::= "WATCH" "(" retrieve_query ")" "WHEN" having_expr
    pub(super) fn parse_watch_query(&mut self) -> Result<WatchQuery> {
        let start = self.expect_kw("watch")?.span;
        self.expect(&TokenKind::LParen, "'('")?;
        let query = self.parse_retrieve_query()?;
        self.expect(&TokenKind::RParen, "')'")?;
        self.expect_kw("when")?;
        let when = self.parse_having_expr()?;
        Ok(WatchQuery {
            query: Box::new(query),
            when,
            span: self.span_from(start),
        })
    }

    /// describe_query ::= "DESCRIBE" describe_target
    pub(super) fn parse_describe_query(&mut self) -> Result<DescribeQuery> {
        let start = self.expect_kw("describe")?.span;
        let target = if self.eat_kw("entities").is_some() {
            DescribeTarget::Entities
        } else if self.eat_kw("events").is_some() {
            DescribeTarget::Events
        } else if self.eat_kw("signals").is_some() {
            DescribeTarget::Signals
        } else if self.eat_kw("metrics").is_some() {
            DescribeTarget::Metrics
        } else if self.eat_kw("relationships").is_some() {
            DescribeTarget::Relationships
        } else if self.is_kw("entity") && self.peek_at(1).kind == TokenKind::LParen {
            self.advance();
            self.advance();
            let name = self.parse_qualified_identifier()?;
            self.expect(&TokenKind::RParen, "')'")?;
            DescribeTarget::Entity(name)
        } else {
            return self
                .expected("entities, events, signals, metrics, relationships or entity(...)");
        };
        Ok(DescribeQuery {
            target,
            span: self.span_from(start),
        })
    }

    /// explain_query ::= "EXPLAIN" "ANALYZE"? ( analytics_query | find_object | context_task
    ///                   | describe_query )
    pub(super) fn parse_explain(&mut self) -> Result<ExplainQuery> {
        self.expect_kw("explain")?;
        let analyze = self.eat_kw("analyze").is_some();
        let statement = if self.is_kw("context") {
            Statement::ContextTask(self.parse_context_task()?)
        } else if self.is_kw("find") && self.is_kw_at(1, "object") {
            Statement::FindObject(self.parse_find_object()?)
        } else if self.is_kw("describe") {
            Statement::Describe(self.parse_describe_query()?)
        } else {
            self.parse_analytics_query()?
        };
        Ok(ExplainQuery {
            analyze,
            statement: Box::new(statement),
        })
    }
}

/// Puts a standalone `AS OF` on the window; without a DURING window it is a parse_error.
fn attach_as_of(window: &mut Option<Window>, as_of: PendingAsOf) -> Result<()> {
    if let Some((ts, span)) = as_of {
        match window {
            Some(w) => w.as_of = Some(ts),
            None => return Err(Error::parse("AS OF needs a DURING window", span)),
        }
    }
    Ok(())
}

//! Parser rules for the v0.1 forms (`COUNT …`, `FUNNEL "a" THEN "b" …`), desugared into the
//! v0.3 AST exactly as `signalql-v0.1-notes.md` specifies.

use super::Parser;
use crate::error::{Error, Result};
use crate::syntax::ast::{
    AggFn, Aggregate, BoolExpr, Comparator, Duration, FieldRef, FunnelOrder, FunnelQuery, Literal,
    Operand, Predicate, PredicateOp, RetrieveQuery, ReturnItem, Source, TimeUnit, TimeWindow,
    Window,
};
use crate::syntax::lexer::TokenKind;

/// LAST n DAYS bounds in v0.1 form.
const V01_MAX_DAYS: u64 = 366;
/// Funnel step bounds in v0.1 form.
const V01_MAX_STEPS: usize = 6;

impl Parser {
    /// aggregate_query ::= "COUNT" "DISTINCT"? ("EVENTS" | "USERS") "FROM" identifier
    ///                     "WHERE" predicate ("AND" predicate)* "DURING" window ("GROUP" "BY" "DAY")?
    ///
    /// Desugars to `FROM events WHERE … DURING … [BUCKET BY d] RETURN [timestamp,] count`
    /// (events, with or without DISTINCT) or `count_distinct(user_id)` (users).
    pub(super) fn parse_v01_count_query(&mut self) -> Result<RetrieveQuery> {
        let count = self.expect_kw("count")?;
        self.eat_kw("distinct");
        let aggregate = if self.eat_kw("events").is_some() {
            ReturnItem::Count
        } else if self.eat_kw("users").is_some() {
            ReturnItem::Aggregate(Aggregate::Standard(
                AggFn::CountDistinct,
                FieldRef::Path(vec!["user_id".to_string()]),
            ))
        } else {
            return self.expected("EVENTS or USERS");
        };
        self.parse_v01_source()?;
        self.expect_kw("where")?;
        let mut filter = BoolExpr::Predicate(self.parse_v01_predicate()?);
        while self.eat_kw("and").is_some() {
            let right = BoolExpr::Predicate(self.parse_v01_predicate()?);
            filter = BoolExpr::And(Box::new(filter), Box::new(right));
        }
        let window = self.parse_v01_window()?;
        let by_day = if self.eat_kw("group").is_some() {
            self.expect_kw("by")?;
            self.expect_kw("day")?;
            true
        } else {
            false
        };
        let (returns, bucket, time_column) = if by_day {
            let ts = ReturnItem::Field(FieldRef::Path(vec!["timestamp".to_string()]));
            (
                vec![ts, aggregate],
                Some(TimeUnit::Day),
                Some("day".to_string()),
            )
        } else {
            (vec![aggregate], None, None)
        };
        let return_spans = vec![count.span; returns.len()];
        Ok(RetrieveQuery {
            source: Source::Events,
            filter: Some(filter),
            traverse: None,
            window: Some(window.0),
            bucket,
            group_by: Vec::new(),
            having: None,
            returns,
            order_by: Vec::new(),
            limit: None,
            trend: None,
            time_column,
            span: self.span_from(count.span),
            return_spans,
            group_spans: Vec::new(),
        })
    }

    /// funnel_query ::= "FUNNEL" string ("THEN" string)+ "FROM" identifier "DURING" window
    ///
    /// Desugars to `FUNNEL "a" -> "b" … FROM events DURING w WITHIN <length of w>`. For
    /// `LAST n DAYS` the length is `n d`. For `BETWEEN a AND b` it is `b − a` rounded up to
    /// whole hours: every chain lies inside `[a, b)`, so its span is below `b − a` and any
    /// WITHIN of at least `b − a` admits exactly the same chains.
    pub(super) fn parse_v01_funnel_query(&mut self) -> Result<FunnelQuery> {
        let start = self.expect_kw("funnel")?.span;
        let mut steps = vec![self.parse_string("a funnel step string")?.0];
        self.expect_kw("then")?;
        loop {
            let (step, span) = self.parse_string("a funnel step string")?;
            if steps.len() == V01_MAX_STEPS {
                return Err(Error::parse(
                    format!("a v0.1 funnel has at most {V01_MAX_STEPS} steps"),
                    span,
                ));
            }
            steps.push(step);
            if self.is(&TokenKind::Arrow) {
                return self.expected("THEN (a funnel cannot mix THEN and ->)");
            }
            if self.eat_kw("then").is_none() {
                break;
            }
        }
        self.parse_v01_source()?;
        let (window, length) = self.parse_v01_window()?;
        Ok(FunnelQuery {
            steps,
            source: Source::Events,
            filter: None,
            window: Some(window),
            within: length,
            order: FunnelOrder::Ordered,
            excluding: Vec::new(),
            group_by: Vec::new(),
            span: self.span_from(start),
        })
    }

    /// "FROM" identifier, which must be `events`.
    fn parse_v01_source(&mut self) -> Result<()> {
        self.expect_kw("from")?;
        if self.eat_kw("events").is_none() {
            return self.expected("events");
        }
        Ok(())
    }

    /// predicate ::= field_path "=" string
    fn parse_v01_predicate(&mut self) -> Result<Predicate> {
        let start = self.peek().span;
        let field = self.parse_field_path()?;
        if !matches!(field, FieldRef::Path(_)) {
            return Err(Error::parse("expected a field path in a v0.1 query", start));
        }
        self.expect(&TokenKind::Eq, "'='")?;
        let (value, _) = self.parse_string("a string")?;
        Ok(Predicate {
            lhs: Operand::Field(field),
            op: PredicateOp::Compare(Comparator::Eq, Literal::String(value)),
            span: self.span_from(start),
        })
    }

    /// "DURING" window with window ::= "LAST" integer "DAYS" | "BETWEEN" string "AND" string;
    /// returns the window and its length.
    fn parse_v01_window(&mut self) -> Result<(Window, Duration)> {
        let start = self.expect_kw("during")?.span;
        let length = if self.eat_kw("last").is_some() {
            let (n, span) = self.parse_integer("a number of days")?;
            if !(1..=V01_MAX_DAYS).contains(&n) {
                return Err(Error::parse(
                    format!("expected a number of days between 1 and {V01_MAX_DAYS}, found {n}"),
                    span,
                ));
            }
            if self.eat_kw("days").is_none() && self.eat_kw("day").is_none() {
                return self.expected("DAYS");
            }
            Duration {
                n,
                unit: TimeUnit::Day,
            }
        } else if self.is_kw("between") {
            let (range, instants) = self.parse_time_window()?;
            let Some((a, b)) = instants else {
                return self.expected("BETWEEN");
            };
            let micros = (b - a).num_microseconds().unwrap_or(i64::MAX).max(1) as u64;
            let hours = micros.div_ceil(3_600_000_000);
            let window = Window {
                range,
                as_of: None,
                span: self.span_from(start),
            };
            return Ok((
                window,
                Duration {
                    n: hours,
                    unit: TimeUnit::Hour,
                },
            ));
        } else {
            return self.expected("LAST or BETWEEN");
        };
        let range = TimeWindow::Last(length);
        Ok((
            Window {
                range,
                as_of: None,
                span: self.span_from(start),
            },
            length,
        ))
    }
}

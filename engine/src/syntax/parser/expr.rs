//! Parser rules for field paths, aggregates, RETURN/ORDER BY items and boolean predicates.

use super::Parser;
use crate::error::{Error, Result};
use crate::syntax::ast::{
    AggFn, Aggregate, ArithOp, BoolExpr, Comparator, FieldRef, Literal, MetricExpr, Operand,
    OrderKey, OrderTerm, Predicate, PredicateOp, ReturnItem, Span,
};
use crate::syntax::keywords::is_reserved;
use crate::syntax::lexer::TokenKind;

/// The aggregate functions callable as `name(...)`.
enum AggWord {
    Standard(AggFn),
    Percentile,
    Stats,
    Metric,
}

fn agg_word(word: &str) -> Option<AggWord> {
    Some(match word.to_ascii_lowercase().as_str() {
        "count" => AggWord::Standard(AggFn::Count),
        "count_distinct" => AggWord::Standard(AggFn::CountDistinct),
        "sum" => AggWord::Standard(AggFn::Sum),
        "avg" => AggWord::Standard(AggFn::Avg),
        "min" => AggWord::Standard(AggFn::Min),
        "max" => AggWord::Standard(AggFn::Max),
        "variance" => AggWord::Standard(AggFn::Variance),
        "stddev" => AggWord::Standard(AggFn::Stddev),
        "percentile" => AggWord::Percentile,
        "stats" => AggWord::Stats,
        "metric" => AggWord::Metric,
        _ => return None,
    })
}

impl Parser {
    /// Whether the next tokens start an aggregate call (`agg_fn "("`).
    fn at_aggregate(&self) -> bool {
        self.peek().kind == TokenKind::Word
            && agg_word(&self.peek().text).is_some()
            && self.peek_at(1).kind == TokenKind::LParen
    }

    /// Whether the next token is a bare `count` (not followed by `(`).
    fn at_bare_count(&self) -> bool {
        self.is_kw("count") && self.peek_at(1).kind != TokenKind::LParen
    }

    /// field_path ::= identifier ( "." identifier )* | signal(id) | probability(id)
    ///              | semantic_match(string). Only the first segment is keyword-checked.
    pub(super) fn parse_field_path(&mut self) -> Result<FieldRef> {
        let t = self.peek().clone();
        if t.kind != TokenKind::Word {
            return self.expected("a field name");
        }
        let lower = t.text.to_ascii_lowercase();
        if self.peek_at(1).kind == TokenKind::LParen
            && matches!(lower.as_str(), "signal" | "probability" | "semantic_match")
        {
            self.advance();
            self.advance();
            let field = if lower == "semantic_match" {
                FieldRef::SemanticMatch(self.parse_string("a string")?.0)
            } else {
                let (name, _) = self.parse_word("a signal name")?;
                if lower == "signal" {
                    FieldRef::Signal(name)
                } else {
                    FieldRef::Probability(name)
                }
            };
            self.expect(&TokenKind::RParen, "')'")?;
            return Ok(field);
        }
        if is_reserved(&t.text) {
            return self.expected("a field name");
        }
        self.advance();
        let mut parts = vec![t.text];
        while let Some(dot) = self.eat(&TokenKind::Dot) {
            if parts.len() == super::MAX_PATH_SEGMENTS {
                return Err(Error::parse(
                    format!(
                        "a field path has at most {} segments",
                        super::MAX_PATH_SEGMENTS
                    ),
                    dot.span,
                ));
            }
            parts.push(self.parse_word("a field name after '.'")?.0);
        }
        Ok(FieldRef::Path(parts))
    }

    /// aggregate ::= standard_aggregate | percentile_aggregate | stats_aggregate
    pub(super) fn parse_aggregate(&mut self) -> Result<Aggregate> {
        let name = self.advance();
        let Some(word) = agg_word(&name.text) else {
            return Err(Error::parse(
                format!(
                    "expected an aggregate function, found {}",
                    super::describe(&name)
                ),
                name.span,
            ));
        };
        self.expect(&TokenKind::LParen, "'('")?;
        let aggregate = match word {
            AggWord::Standard(AggFn::Count) if self.is(&TokenKind::RParen) => Aggregate::CountAll,
            AggWord::Standard(f) => Aggregate::Standard(f, self.parse_field_path()?),
            AggWord::Stats => Aggregate::Stats(self.parse_field_path()?),
            AggWord::Metric => Aggregate::Metric(self.parse_qualified_identifier()?),
            AggWord::Percentile => {
                let field = self.parse_field_path()?;
                self.expect(&TokenKind::Comma, "','")?;
                let t = self.peek().clone();
                let p = match t.kind {
                    TokenKind::Decimal => super::parse_decimal(&t)?,
                    TokenKind::Integer => t.text.parse::<f64>().unwrap_or(f64::NAN),
                    _ => return self.expected("a percentile between 0 and 1"),
                };
                if !(0.0..=1.0).contains(&p) {
                    return Err(Error::parse(
                        format!("expected a percentile between 0 and 1, found {}", t.text),
                        t.span,
                    ));
                }
                self.advance();
                Aggregate::Percentile(field, p)
            }
        };
        self.expect(&TokenKind::RParen, "')'")?;
        Ok(aggregate)
    }

    /// return_field ::= field_path | "count" | aggregate
    pub(super) fn parse_return_field(&mut self) -> Result<(ReturnItem, Span)> {
        let start = self.peek().span;
        let item = if self.at_bare_count() {
            self.advance();
            ReturnItem::Count
        } else if self.at_aggregate() {
            ReturnItem::Aggregate(self.parse_aggregate()?)
        } else {
            ReturnItem::Field(self.parse_field_path()?)
        };
        Ok((item, self.span_from(start)))
    }

    /// order_term ::= ( field_path | aggregate | "count" ) order_dir?
    pub(super) fn parse_order_term(&mut self) -> Result<OrderTerm> {
        let start = self.peek().span;
        let key = if self.at_bare_count() {
            self.advance();
            OrderKey::Count
        } else if self.at_aggregate() {
            OrderKey::Aggregate(self.parse_aggregate()?)
        } else {
            OrderKey::Field(self.parse_field_path()?)
        };
        let descending = if self.eat_kw("desc").is_some() {
            true
        } else {
            self.eat_kw("asc");
            false
        };
        Ok(OrderTerm {
            key,
            descending,
            span: self.span_from(start),
        })
    }

    /// predicate_expr ::= predicate_term ( "OR" predicate_term )*
    pub(super) fn parse_predicate_expr(&mut self) -> Result<BoolExpr> {
        self.bool_ops = 0;
        self.parse_bool_or(false)
    }

    /// having_expr ::= having_term ( "OR" having_term )*
    pub(super) fn parse_having_expr(&mut self) -> Result<BoolExpr> {
        self.bool_ops = 0;
        self.parse_bool_or(true)
    }

    fn parse_bool_or(&mut self, having: bool) -> Result<BoolExpr> {
        let mut left = self.parse_predicate_term(having)?;
        while let Some(op) = self.eat_kw("or") {
            self.count_bool_op(op.span)?;
            let right = self.parse_predicate_term(having)?;
            left = BoolExpr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    /// predicate_term ::= predicate_factor ( "AND" predicate_factor )*
    fn parse_predicate_term(&mut self, having: bool) -> Result<BoolExpr> {
        let mut left = self.parse_predicate_factor(having)?;
        while let Some(op) = self.eat_kw("and") {
            self.count_bool_op(op.span)?;
            let right = self.parse_predicate_factor(having)?;
            left = BoolExpr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    /// predicate_factor ::= predicate | "(" predicate_expr ")" | "NOT" predicate_factor
    fn parse_predicate_factor(&mut self, having: bool) -> Result<BoolExpr> {
        if self.is(&TokenKind::LParen) {
            self.enter()?;
            self.advance();
            let inner = self.parse_bool_or(having)?;
            self.expect(&TokenKind::RParen, "')'")?;
            self.leave();
            return Ok(inner);
        }
        if self.is_kw("not") {
            self.enter()?;
            self.advance();
            let inner = self.parse_predicate_factor(having)?;
            self.leave();
            return Ok(BoolExpr::Not(Box::new(inner)));
        }
        self.parse_predicate(having).map(BoolExpr::Predicate)
    }

    /// predicate / having_predicate: `lhs comparator value`, IN, NOT IN, BETWEEN, CONTAINS
    /// (WHERE only), IS [NOT] NULL. Aggregates and bare count (HAVING only) take comparators.
    fn parse_predicate(&mut self, having: bool) -> Result<Predicate> {
        let start = self.peek().span;
        let lhs = if having && self.at_bare_count() {
            self.advance();
            Operand::CountShorthand
        } else if having && self.at_aggregate() {
            Operand::Aggregate(self.parse_aggregate()?)
        } else {
            Operand::Field(self.parse_field_path()?)
        };
        let field = matches!(lhs, Operand::Field(_));
        let comparator = match self.peek().kind {
            TokenKind::Eq => Some(Comparator::Eq),
            TokenKind::NotEq => Some(Comparator::NotEq),
            TokenKind::Lt => Some(Comparator::Lt),
            TokenKind::LtEq => Some(Comparator::LtEq),
            TokenKind::Gt => Some(Comparator::Gt),
            TokenKind::GtEq => Some(Comparator::GtEq),
            _ => None,
        };
        let op = if let Some(c) = comparator {
            self.advance();
            PredicateOp::Compare(c, self.parse_value()?)
        } else if field && self.eat_kw("in").is_some() {
            PredicateOp::In(self.parse_value_list()?)
        } else if field && self.is_kw("not") && self.is_kw_at(1, "in") {
            self.advance();
            self.advance();
            PredicateOp::NotIn(self.parse_value_list()?)
        } else if field && self.eat_kw("between").is_some() {
            let low = self.parse_value()?;
            self.expect_kw("and")?;
            PredicateOp::Between(low, self.parse_value()?)
        } else if field && !having && self.eat_kw("contains").is_some() {
            PredicateOp::Contains(self.parse_string("a string")?.0)
        } else if field && self.eat_kw("is").is_some() {
            if self.eat_kw("not").is_some() {
                self.expect_kw("null")?;
                PredicateOp::IsNotNull
            } else {
                self.expect_kw("null")?;
                PredicateOp::IsNull
            }
        } else if field && !having {
            return self.expected("a comparison operator, IN, NOT IN, BETWEEN, CONTAINS or IS");
        } else if field {
            return self.expected("a comparison operator, IN, NOT IN, BETWEEN or IS");
        } else {
            return self.expected("a comparison operator");
        };
        Ok(Predicate {
            lhs,
            op,
            span: self.span_from(start),
        })
    }

    /// "(" value_list ")" with value_list ::= value ( "," value )*
    fn parse_value_list(&mut self) -> Result<Vec<Literal>> {
        self.expect(&TokenKind::LParen, "'('")?;
        let mut values = vec![self.parse_value()?];
        while self.eat(&TokenKind::Comma).is_some() {
            values.push(self.parse_value()?);
        }
        self.expect(&TokenKind::RParen, "')' or ','")?;
        Ok(values)
    }
}

impl Parser {
    /// metric_expr ::= term (("+" | "-") term)*, in a metric definition.
    pub(super) fn parse_metric_expr(&mut self) -> Result<MetricExpr> {
        self.enter()?;
        let mut left = self.parse_metric_term()?;
        loop {
            let op = match self.peek().kind {
                TokenKind::Plus => ArithOp::Add,
                TokenKind::Minus => ArithOp::Sub,
                // `a -1` lexes as `a` and `-1`: after an operand it is a subtraction.
                TokenKind::Integer | TokenKind::Decimal if self.peek().text.starts_with('-') => {
                    let t = self.advance();
                    let number = MetricExpr::Number(metric_number(&t, &t.text[1..])?);
                    let right = self.parse_metric_term_rest(number)?;
                    left = MetricExpr::Binary(ArithOp::Sub, Box::new(left), Box::new(right));
                    continue;
                }
                _ => break,
            };
            self.advance();
            let right = self.parse_metric_term()?;
            left = MetricExpr::Binary(op, Box::new(left), Box::new(right));
        }
        self.leave();
        Ok(left)
    }

    /// term ::= factor (("*" | "/") factor)*
    fn parse_metric_term(&mut self) -> Result<MetricExpr> {
        let first = self.parse_metric_factor()?;
        self.parse_metric_term_rest(first)
    }

    fn parse_metric_term_rest(&mut self, mut left: MetricExpr) -> Result<MetricExpr> {
        loop {
            let op = match self.peek().kind {
                TokenKind::Star => ArithOp::Mul,
                TokenKind::Slash => ArithOp::Div,
                _ => return Ok(left),
            };
            self.advance();
            let right = self.parse_metric_factor()?;
            left = MetricExpr::Binary(op, Box::new(left), Box::new(right));
        }
    }

    /// factor ::= number | aggregate | metric(name) | "(" metric_expr ")" | "-" factor
    fn parse_metric_factor(&mut self) -> Result<MetricExpr> {
        let t = self.peek().clone();
        match t.kind {
            TokenKind::Integer | TokenKind::Decimal => {
                self.advance();
                Ok(MetricExpr::Number(metric_number(&t, &t.text)?))
            }
            TokenKind::Minus => {
                self.advance();
                self.enter()?;
                let inner = self.parse_metric_factor()?;
                self.leave();
                Ok(MetricExpr::Neg(Box::new(inner)))
            }
            TokenKind::LParen => {
                self.advance();
                let inner = self.parse_metric_expr()?;
                self.expect(&TokenKind::RParen, "')'")?;
                Ok(inner)
            }
            _ if self.at_aggregate() => Ok(MetricExpr::Aggregate(self.parse_aggregate()?)),
            _ if self.at_bare_count() => {
                self.advance();
                Ok(MetricExpr::Aggregate(Aggregate::CountAll))
            }
            _ => self.expected("an aggregate, metric(name), a number or '('"),
        }
    }
}

fn metric_number(t: &crate::syntax::lexer::Token, text: &str) -> Result<f64> {
    text.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| Error::parse(format!("{} is not a number", t.text), t.span))
}

//! The canonical formatter: `Display` for the AST prints the one canonical text of a query.
//!
//! Analytics queries print one clause per line in the canonical order FROM → WHERE → TRAVERSE
//! → DURING [AS OF, same line] → BUCKET BY → GROUP BY → HAVING → RETURN → ORDER BY → LIMIT →
//! TREND; keywords upper case, grammar words that the spec writes in lower case (`events`,
//! `entity(…)`, `count`, function names, short time units, `true`/`false`) lower case; ORDER BY
//! always with ASC/DESC; decimals always with a `.`; strings re-escaped. Boolean expressions
//! get the minimal parentheses that preserve the tree. Context statements (`CONTEXT FOR`,
//! `EXPLAIN CONTEXT`, `FIND OBJECT`) are one line, clauses in grammar order.

use std::fmt::{self, Display, Formatter, Write};

use crate::syntax::ast::*;
use crate::syntax::keywords::is_plain_identifier;

/// The one-line canonical text of a RETURN item, used as its result column name.
/// Both `count` and `count()` name the column `count`.
pub fn canonical_name(item: &ReturnItem) -> String {
    match item {
        ReturnItem::Count | ReturnItem::Aggregate(Aggregate::CountAll) => "count".to_string(),
        other => other.to_string(),
    }
}

/// The canonical text of an aggregate as a column name (`count()` is `count`).
pub fn aggregate_name(aggregate: &Aggregate) -> String {
    canonical_name(&ReturnItem::Aggregate(aggregate.clone()))
}

/// The canonical text of a field reference as a column name.
pub fn field_name(field: &FieldRef) -> String {
    field.to_string()
}

/// Writes `s` as a double-quoted string literal with `"` and `\` escaped.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn join<T: Display>(items: &[T], sep: &str) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        let _ = write!(out, "{item}");
    }
    out
}

/// A decimal with at least one `.` digit (Rust's f64 Display never uses exponents).
fn decimal(x: f64) -> String {
    let s = x.to_string();
    if s.contains('.') || !x.is_finite() {
        s
    } else {
        format!("{s}.0")
    }
}

impl Display for Statement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Retrieve(q) => q.fmt(f),
            Statement::Funnel(q) => q.fmt(f),
            Statement::Sequence(q) => q.fmt(f),
            Statement::Watch(q) => q.fmt(f),
            Statement::Describe(q) => q.fmt(f),
            Statement::ContextTask(q) => q.fmt(f),
            Statement::ExplainContext(q) => q.fmt(f),
            Statement::FindObject(q) => q.fmt(f),
            Statement::Explain(q) => q.fmt(f),
        }
    }
}

impl Display for Source {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Source::Events => f.write_str("events"),
            Source::Entity(name) => write!(f, "entity({})", name.join(".")),
            Source::Metric(name) => write!(f, "metric({})", name.join(".")),
        }
    }
}

impl Display for FieldRef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            FieldRef::Path(parts) => f.write_str(&parts.join(".")),
            FieldRef::Signal(name) => write!(f, "signal({name})"),
            FieldRef::Probability(name) => write!(f, "probability({name})"),
            FieldRef::SemanticMatch(text) => write!(f, "semantic_match({})", quote(text)),
        }
    }
}

impl Display for Literal {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Literal::String(s) => f.write_str(&quote(s)),
            Literal::Integer(n) => write!(f, "{n}"),
            Literal::Decimal(x) => f.write_str(&decimal(*x)),
            Literal::Boolean(b) => write!(f, "{b}"),
        }
    }
}

impl Display for Comparator {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Comparator::Eq => "=",
            Comparator::NotEq => "!=",
            Comparator::Gt => ">",
            Comparator::Lt => "<",
            Comparator::GtEq => ">=",
            Comparator::LtEq => "<=",
        })
    }
}

impl Display for Operand {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Field(field) => field.fmt(f),
            Operand::Aggregate(a) => a.fmt(f),
            Operand::CountShorthand => f.write_str("count"),
        }
    }
}

impl Display for Predicate {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.lhs)?;
        match &self.op {
            PredicateOp::Compare(c, v) => write!(f, " {c} {v}"),
            PredicateOp::In(vs) => write!(f, " IN ({})", join(vs, ", ")),
            PredicateOp::NotIn(vs) => write!(f, " NOT IN ({})", join(vs, ", ")),
            PredicateOp::Between(a, b) => write!(f, " BETWEEN {a} AND {b}"),
            PredicateOp::Contains(s) => write!(f, " CONTAINS {}", quote(s)),
            PredicateOp::IsNull => f.write_str(" IS NULL"),
            PredicateOp::IsNotNull => f.write_str(" IS NOT NULL"),
        }
    }
}

impl Display for BoolExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let is_or = |e: &BoolExpr| matches!(e, BoolExpr::Or(..));
        let is_and_or = |e: &BoolExpr| matches!(e, BoolExpr::Or(..) | BoolExpr::And(..));
        let part = |f: &mut Formatter<'_>, e: &BoolExpr, paren: bool| {
            if paren {
                write!(f, "({e})")
            } else {
                write!(f, "{e}")
            }
        };
        match self {
            BoolExpr::Or(l, r) => {
                part(f, l, false)?;
                f.write_str(" OR ")?;
                part(f, r, is_or(r))
            }
            BoolExpr::And(l, r) => {
                part(f, l, is_or(l))?;
                f.write_str(" AND ")?;
                part(f, r, is_and_or(r))
            }
            BoolExpr::Not(x) => {
                f.write_str("NOT ")?;
                part(f, x, is_and_or(x))
            }
            BoolExpr::Predicate(p) => p.fmt(f),
        }
    }
}

impl Display for TimeUnit {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeUnit::Hour => "h",
            TimeUnit::Day => "d",
            TimeUnit::Week => "w",
            TimeUnit::Month => "m",
        })
    }
}

impl Display for Duration {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.n, self.unit)
    }
}

impl Display for Timestamp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&quote(&self.0))
    }
}

impl Display for TimeWindow {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            TimeWindow::Last(d) => write!(f, "LAST {d}"),
            TimeWindow::Between { start, end } => write!(f, "BETWEEN {start} AND {end}"),
        }
    }
}

impl Display for Window {
    /// `DURING <window> [AS OF "ts"]` on one line.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "DURING {}", self.range)?;
        if let Some(ts) = &self.as_of {
            write!(f, " AS OF {ts}")?;
        }
        Ok(())
    }
}

impl Display for AggFn {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AggFn::Count => "count",
            AggFn::CountDistinct => "count_distinct",
            AggFn::Sum => "sum",
            AggFn::Avg => "avg",
            AggFn::Min => "min",
            AggFn::Max => "max",
            AggFn::Variance => "variance",
            AggFn::Stddev => "stddev",
        })
    }
}

impl Display for Aggregate {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Aggregate::CountAll => f.write_str("count()"),
            Aggregate::Standard(func, field) => write!(f, "{func}({field})"),
            Aggregate::Percentile(field, p) => write!(f, "percentile({field}, {})", decimal(*p)),
            Aggregate::Stats(field) => write!(f, "stats({field})"),
            Aggregate::Metric(name) => write!(f, "metric({})", name.join(".")),
        }
    }
}

impl Display for ReturnItem {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ReturnItem::Field(field) => field.fmt(f),
            ReturnItem::Count => f.write_str("count"),
            ReturnItem::Aggregate(a) => a.fmt(f),
        }
    }
}

impl Display for OrderKey {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            OrderKey::Field(field) => field.fmt(f),
            OrderKey::Count => f.write_str("count"),
            OrderKey::Aggregate(a) => a.fmt(f),
        }
    }
}

impl Display for OrderTerm {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            self.key,
            if self.descending { "DESC" } else { "ASC" }
        )
    }
}

impl Display for TrendDir {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrendDir::Up => "UP",
            TrendDir::Down => "DOWN",
            TrendDir::Flat => "FLAT",
        })
    }
}

impl RetrieveQuery {
    /// The canonical clause lines.
    fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!("FROM {}", self.source)];
        if let Some(w) = &self.filter {
            lines.push(format!("WHERE {w}"));
        }
        if let Some(t) = &self.traverse {
            lines.push(format!("TRAVERSE {} DEPTH <= {}", t.relation, t.depth));
        }
        if let Some(w) = &self.window {
            lines.push(w.to_string());
        }
        if let Some(u) = &self.bucket {
            lines.push(format!("BUCKET BY {u}"));
        }
        if !self.group_by.is_empty() {
            lines.push(format!("GROUP BY {}", join(&self.group_by, ", ")));
        }
        if let Some(h) = &self.having {
            lines.push(format!("HAVING {h}"));
        }
        lines.push(format!("RETURN {}", join(&self.returns, ", ")));
        if !self.order_by.is_empty() {
            lines.push(format!("ORDER BY {}", join(&self.order_by, ", ")));
        }
        if let Some(n) = self.limit {
            lines.push(format!("LIMIT {n}"));
        }
        if let Some(t) = &self.trend {
            lines.push(format!("TREND {} OVER {}", t.dir, t.over));
        }
        lines
    }
}

impl Display for RetrieveQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

fn steps(steps: &[String]) -> String {
    steps
        .iter()
        .map(|s| quote(s))
        .collect::<Vec<_>>()
        .join(" -> ")
}

impl Display for FunnelQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "FUNNEL {}\nFROM {}", steps(&self.steps), self.source)?;
        if let Some(w) = &self.filter {
            write!(f, "\nWHERE {w}")?;
        }
        if let Some(w) = &self.window {
            write!(f, "\n{w}")?;
        }
        write!(f, "\nWITHIN {}", self.within)?;
        match self.order {
            FunnelOrder::Ordered => {}
            FunnelOrder::Strict => f.write_str("\nORDER STRICT")?,
            FunnelOrder::Any => f.write_str("\nORDER ANY")?,
        }
        if !self.excluding.is_empty() {
            let names: Vec<String> = self.excluding.iter().map(|s| quote(s)).collect();
            write!(f, "\nEXCLUDING {}", names.join(", "))?;
        }
        if !self.group_by.is_empty() {
            write!(f, "\nGROUP BY {}", join(&self.group_by, ", "))?;
        }
        Ok(())
    }
}

impl Display for SequenceQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FIND sequence WHERE {} WITHIN {}",
            steps(&self.steps),
            self.within
        )
    }
}

impl Display for WatchQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("WATCH (\n")?;
        for line in self.query.lines() {
            writeln!(f, "  {line}")?;
        }
        write!(f, ") WHEN {}", self.when)
    }
}

impl Display for DescribeTarget {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            DescribeTarget::Entities => f.write_str("entities"),
            DescribeTarget::Events => f.write_str("events"),
            DescribeTarget::Signals => f.write_str("signals"),
            DescribeTarget::Metrics => f.write_str("metrics"),
            DescribeTarget::Relationships => f.write_str("relationships"),
            DescribeTarget::Entity(name) => write!(f, "entity({})", name.join(".")),
        }
    }
}

impl Display for DescribeQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "DESCRIBE {}", self.target)
    }
}

impl Display for TrustLevel {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrustLevel::Untrusted => "UNTRUSTED",
            TrustLevel::Unknown => "UNKNOWN",
            TrustLevel::Inferred => "INFERRED",
            TrustLevel::Verified => "VERIFIED",
            TrustLevel::Authoritative => "AUTHORITATIVE",
        })
    }
}

impl Display for Role {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Data => "DATA",
            Role::Instruction => "INSTRUCTION",
            Role::Prompt => "PROMPT",
            Role::Policy => "POLICY",
            Role::Executable => "EXECUTABLE",
            Role::Secret => "SECRET",
            Role::UntrustedExternal => "UNTRUSTED_EXTERNAL",
        })
    }
}

impl Display for PreferItem {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            PreferItem::Current => f.write_str("CURRENT"),
            PreferItem::Trust(level) => level.fmt(f),
            PreferItem::Representation(name) => write!(f, "REPRESENTATION {}", quote(name)),
        }
    }
}

impl Display for ExcludeItem {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ExcludeItem::Untrusted => f.write_str("UNTRUSTED"),
            ExcludeItem::Stale => f.write_str("STALE"),
            ExcludeItem::Role { role, from: None } => write!(f, "ROLE {role}"),
            ExcludeItem::Role {
                role,
                from: Some(from),
            } => write!(f, "ROLE {role} FROM {from}"),
        }
    }
}

impl Display for ContextQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Some(e) => write!(f, "CONTEXT FOR {e}")?,
            None => write!(f, "CONTEXT FOR {}", quote(&self.task))?,
        }
        if let Some(p) = &self.project {
            write!(f, " USING PROJECT {}", quote(p))?;
        }
        if let Some(k) = &self.kind {
            write!(f, " USING KIND {}", quote(k))?;
        }
        if let Some(e) = &self.estimator {
            write!(f, " USING ESTIMATOR {}", quote(e))?;
        }
        if let Some(b) = self.budget {
            write!(f, " BUDGET {b} TOKENS")?;
        }
        if !self.prefer.is_empty() {
            write!(f, " PREFER {}", join(&self.prefer, ", "))?;
        }
        if !self.exclude.is_empty() {
            write!(f, " EXCLUDE {}", join(&self.exclude, ", "))?;
        }
        if let Some(n) = self.max_objects {
            write!(f, " MAX OBJECTS {n}")?;
        }
        if let Some(n) = self.max_depth {
            write!(f, " MAX DEPTH {n}")?;
        }
        if let Some(d) = &self.max_age {
            write!(f, " MAX AGE {d}")?;
        }
        if self.with_evidence {
            f.write_str(" WITH EVIDENCE")?;
        }
        if self.compress {
            f.write_str(" COMPRESS")?;
        }
        if let Some(ts) = &self.as_of {
            write!(f, " AS OF {ts}")?;
        }
        Ok(())
    }
}

impl Display for EntityRef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "entity({}, {})",
            self.entity_type,
            quote(&self.entity_id)
        )
    }
}

impl Display for ExplainContext {
    /// The address bare when it lexes as one token, else as a string literal.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let rest = self.address.strip_prefix("context://");
        let bare = rest.is_some_and(|r| {
            !r.is_empty()
                && r.chars()
                    .all(|c| !c.is_whitespace() && !matches!(c, '(' | ')' | ',' | '"'))
        });
        if bare {
            write!(f, "EXPLAIN CONTEXT {}", self.address)
        } else {
            write!(f, "EXPLAIN CONTEXT {}", quote(&self.address))
        }
    }
}

impl Display for FindObjectQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("FIND OBJECT")?;
        if let Some(name) = &self.name {
            if is_plain_identifier(name) {
                write!(f, " ({name})")?;
            } else {
                write!(f, " ({})", quote(name))?;
            }
        }
        if let Some(about) = &self.about {
            write!(f, " ABOUT {}", quote(about))?;
            if let Some(rep) = &self.representation {
                write!(f, " USING REPRESENTATION {}", quote(rep))?;
            }
        }
        if let Some(w) = &self.filter {
            write!(f, " WHERE {w}")?;
        }
        if let Some(ts) = &self.as_of {
            write!(f, " AS OF {ts}")?;
        }
        if let Some(n) = self.limit {
            write!(f, " LIMIT {n}")?;
        }
        Ok(())
    }
}

impl Display for ExplainQuery {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(if self.analyze {
            "EXPLAIN ANALYZE "
        } else {
            "EXPLAIN "
        })?;
        self.statement.fmt(f)
    }
}

impl Display for ArithOp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
        })
    }
}

impl MetricExpr {
    fn precedence(&self) -> u8 {
        match self {
            MetricExpr::Binary(ArithOp::Add | ArithOp::Sub, _, _) => 1,
            MetricExpr::Binary(_, _, _) => 2,
            _ => 3,
        }
    }
}

/// Canonical text with the parentheses the tree needs (operators are left-associative).
impl Display for MetricExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            MetricExpr::Number(x) => {
                if x.fract() == 0.0 && x.abs() < 1e15 {
                    write!(f, "{}", *x as i64)
                } else {
                    f.write_str(&decimal(*x))
                }
            }
            MetricExpr::Aggregate(a) => a.fmt(f),
            MetricExpr::Neg(inner) if inner.precedence() < 3 => write!(f, "-({inner})"),
            MetricExpr::Neg(inner) => write!(f, "-{inner}"),
            MetricExpr::Binary(op, l, r) => {
                let p = self.precedence();
                if l.precedence() < p {
                    write!(f, "({l})")?;
                } else {
                    l.fmt(f)?;
                }
                write!(f, " {op} ")?;
                if r.precedence() <= p {
                    write!(f, "({r})")
                } else {
                    r.fmt(f)
                }
            }
        }
    }
}

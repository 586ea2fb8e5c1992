//! Walks over a parsed query that list what it names: every field, the signals it reads
//! (and those its WHERE reads), whether it reads v0.1 `traits.K`, and the governed metrics it
//! uses. The bind pass decides from them which tables a query needs; lowering, which joins.
//! Pure AST code, like the rest of `syntax/`.

use std::collections::BTreeSet;

use super::ast::{
    Aggregate, BoolExpr, Comparator, FieldRef, Literal, Operand, OrderKey, PredicateOp,
    RetrieveQuery, ReturnItem, Source, Span,
};

/// The string literals `e` compares the one-segment field `field` with by `=`, `!=`, `IN` or
/// `NOT IN` (under any AND, OR or NOT), each with its predicate's span: the values a query
/// names for that field (FIND OBJECT's `project`).
pub fn compared_strings<'a>(e: &'a BoolExpr, field: &str) -> Vec<(&'a str, Span)> {
    match e {
        BoolExpr::Or(l, r) | BoolExpr::And(l, r) => {
            let mut v = compared_strings(l, field);
            v.extend(compared_strings(r, field));
            v
        }
        BoolExpr::Not(x) => compared_strings(x, field),
        BoolExpr::Predicate(p) => {
            let values: &[Literal] = match &p.op {
                PredicateOp::Compare(Comparator::Eq | Comparator::NotEq, v) => {
                    std::slice::from_ref(v)
                }
                PredicateOp::In(vs) | PredicateOp::NotIn(vs) => vs,
                _ => &[],
            };
            match &p.lhs {
                Operand::Field(FieldRef::Path(path)) if matches!(path.as_slice(), [f] if f == field) => {
                    values
                        .iter()
                        .filter_map(|v| match v {
                            Literal::String(s) => Some((s.as_str(), p.span)),
                            _ => None,
                        })
                        .collect()
                }
                _ => Vec::new(),
            }
        }
    }
}

/// The signal names a query reads through `signal(name)` or `probability(name)`, sorted.
pub fn signal_names(q: &RetrieveQuery) -> Vec<String> {
    let mut names = BTreeSet::new();
    for f in query_fields(q) {
        if let FieldRef::Signal(n) | FieldRef::Probability(n) = f {
            names.insert(n.clone());
        }
    }
    names.into_iter().collect()
}

/// The signal names the WHERE clause reads, sorted.
pub fn signal_names_in_filter(q: &RetrieveQuery) -> Vec<String> {
    let mut names = BTreeSet::new();
    if let Some(f) = &q.filter {
        for (op, _) in operands(f) {
            if let Operand::Field(FieldRef::Signal(n) | FieldRef::Probability(n)) = op {
                names.insert(n.clone());
            }
        }
    }
    names.into_iter().collect()
}

/// The fields a query orders by value: `min`/`max` arguments (in RETURN, HAVING, ORDER BY)
/// and the fields of ORDER BY. A JSON property among them is read as a number when every
/// value the query reads is one (the bind pass decides; docs/mapping.md).
pub fn ordered_fields(q: &RetrieveQuery) -> Vec<&FieldRef> {
    use super::ast::AggFn;
    fn minmax(a: &Aggregate) -> Option<&FieldRef> {
        match a {
            Aggregate::Standard(AggFn::Min | AggFn::Max, f) => Some(f),
            _ => None,
        }
    }
    let mut out: Vec<&FieldRef> = Vec::new();
    if let Some(h) = &q.having {
        for (op, _) in operands(h) {
            if let Operand::Aggregate(a) = op {
                out.extend(minmax(a));
            }
        }
    }
    for r in &q.returns {
        if let ReturnItem::Aggregate(a) = r {
            out.extend(minmax(a));
        }
    }
    for o in &q.order_by {
        match &o.key {
            OrderKey::Field(f) => out.push(f),
            OrderKey::Aggregate(a) => out.extend(minmax(a)),
            OrderKey::Count => {}
        }
    }
    out.retain(|f| matches!(f, FieldRef::Path(_)));
    let mut seen = std::collections::HashSet::new();
    out.retain(|f| seen.insert(*f));
    out
}

/// Every field a query names, in any clause.
pub fn query_fields(q: &RetrieveQuery) -> Vec<&FieldRef> {
    located_fields(q).into_iter().map(|(f, _)| f).collect()
}

/// [`query_fields`], each with its predicate's span where it stands in WHERE or HAVING.
pub fn located_fields(q: &RetrieveQuery) -> Vec<(&FieldRef, Option<Span>)> {
    let mut out: Vec<(&FieldRef, Option<Span>)> = Vec::new();
    for e in [&q.filter, &q.having].into_iter().flatten() {
        for (op, span) in operands(e) {
            match op {
                Operand::Field(f) => out.push((f, Some(span))),
                Operand::Aggregate(a) => out.extend(aggregate_field(a).map(|f| (f, Some(span)))),
                Operand::CountShorthand => {}
            }
        }
    }
    out.extend(q.group_by.iter().map(|f| (f, None)));
    for r in &q.returns {
        match r {
            ReturnItem::Field(f) => out.push((f, None)),
            ReturnItem::Aggregate(a) => out.extend(aggregate_field(a).map(|f| (f, None))),
            ReturnItem::Count => {}
        }
    }
    for o in &q.order_by {
        match &o.key {
            OrderKey::Field(f) => out.push((f, None)),
            OrderKey::Aggregate(a) => out.extend(aggregate_field(a).map(|f| (f, None))),
            OrderKey::Count => {}
        }
    }
    out
}

/// Does the query read `traits.K` (v0.1), which lives in the users table?
pub fn reads_traits(q: &RetrieveQuery) -> bool {
    query_fields(q)
        .into_iter()
        .any(|f| matches!(f, FieldRef::Path(p) if p.first().is_some_and(|s| s == "traits")))
}

fn aggregate_field(a: &Aggregate) -> Option<&FieldRef> {
    match a {
        Aggregate::CountAll | Aggregate::Metric(_) => None,
        Aggregate::Standard(_, f) | Aggregate::Percentile(f, _) | Aggregate::Stats(f) => Some(f),
    }
}

/// The predicate operands of a HAVING expression with their spans.
pub fn operands(e: &BoolExpr) -> Vec<(&Operand, Span)> {
    match e {
        BoolExpr::Or(l, r) | BoolExpr::And(l, r) => {
            let mut v = operands(l);
            v.extend(operands(r));
            v
        }
        BoolExpr::Not(x) => operands(x),
        BoolExpr::Predicate(p) => vec![(&p.lhs, p.span)],
    }
}

/// The metrics a query names (its `FROM metric(…)` source and `metric(…)` aggregates), each once.
pub fn metric_names(q: &RetrieveQuery) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |a: &Aggregate| {
        if let Aggregate::Metric(n) = a {
            let n = n.join(".");
            if !out.contains(&n) {
                out.push(n);
            }
        }
    };
    if let Source::Metric(n) = &q.source {
        add(&Aggregate::Metric(n.clone()));
    }
    for r in &q.returns {
        if let ReturnItem::Aggregate(a) = r {
            add(a);
        }
    }
    if let Some(h) = &q.having {
        for (op, _) in operands(h) {
            if let Operand::Aggregate(a) = op {
                add(a);
            }
        }
    }
    for o in &q.order_by {
        if let OrderKey::Aggregate(a) = &o.key {
            add(a);
        }
    }
    out
}

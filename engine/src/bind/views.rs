//! The desugarings of the bind pass: the retrieve query a funnel or a sequence reads through
//! (its scan, filters and groups), and `FROM metric(m)` as a query over the metric's source.

use crate::metrics::VALUE_COLUMN;
use crate::syntax::ast::{
    Aggregate, BoolExpr, FieldRef, FunnelQuery, Operand, OrderKey, Predicate, RetrieveQuery,
    ReturnItem, SequenceQuery, Source,
};

/// The retrieve query whose scan and filters a funnel shares (source, WHERE, DURING, and the
/// GROUP BY dims, so the bind pass opens the tables they read).
pub fn funnel_view(q: &FunnelQuery) -> RetrieveQuery {
    RetrieveQuery {
        filter: q.filter.clone(),
        window: q.window.clone(),
        group_by: q.group_by.clone(),
        ..RetrieveQuery::empty(q.source.clone(), q.span)
    }
}

/// A sequence reads every event of the events table.
pub fn sequence_view(q: &SequenceQuery) -> RetrieveQuery {
    RetrieveQuery::empty(Source::Events, q.span)
}

/// `FROM metric(m) …` as a query over the metric's source, where `metric_value` (in RETURN,
/// HAVING and ORDER BY) is the aggregate `metric(m)`.
pub fn metric_view(q: &RetrieveQuery, name: &[String], source: &Source) -> RetrieveQuery {
    let is_value =
        |f: &FieldRef| matches!(f, FieldRef::Path(p) if p.len() == 1 && p[0] == VALUE_COLUMN);
    let metric = Aggregate::Metric(name.to_vec());
    fn having(e: &BoolExpr, is_value: &dyn Fn(&FieldRef) -> bool, metric: &Aggregate) -> BoolExpr {
        match e {
            BoolExpr::Or(l, r) => BoolExpr::Or(
                Box::new(having(l, is_value, metric)),
                Box::new(having(r, is_value, metric)),
            ),
            BoolExpr::And(l, r) => BoolExpr::And(
                Box::new(having(l, is_value, metric)),
                Box::new(having(r, is_value, metric)),
            ),
            BoolExpr::Not(x) => BoolExpr::Not(Box::new(having(x, is_value, metric))),
            BoolExpr::Predicate(p) => BoolExpr::Predicate(Predicate {
                lhs: match &p.lhs {
                    Operand::Field(f) if is_value(f) => Operand::Aggregate(metric.clone()),
                    other => other.clone(),
                },
                op: p.op.clone(),
                span: p.span,
            }),
        }
    }
    let mut v = q.clone();
    v.source = source.clone();
    for r in &mut v.returns {
        if let ReturnItem::Field(f) = r
            && is_value(f)
        {
            *r = ReturnItem::Aggregate(metric.clone());
        }
    }
    v.having = q.having.as_ref().map(|h| having(h, &is_value, &metric));
    for o in &mut v.order_by {
        if let OrderKey::Field(f) = &o.key
            && is_value(f)
        {
            o.key = OrderKey::Aggregate(metric.clone());
        }
    }
    v
}

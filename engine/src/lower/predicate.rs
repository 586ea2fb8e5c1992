//! Lowering of WHERE and HAVING boolean expressions. SQL three-valued logic throughout:
//! `properties.plan != "free"` is not true for a NULL plan.

use datafusion::functions::string::expr_fn::contains;
use datafusion::logical_expr::{Expr, and, lit, not, or};

use super::fields::{Resolved, coerce_literal, is_text};
use crate::error::{Error, Result};
use crate::syntax::ast::{BoolExpr, Comparator, Operand, PredicateOp, Span};

/// Lower `expr`, resolving each predicate's left-hand side with `operand`.
pub fn lower_bool<F>(expr: &BoolExpr, operand: &F) -> Result<Expr>
where
    F: Fn(&Operand, Span) -> Result<Resolved>,
{
    Ok(match expr {
        BoolExpr::Or(l, r) => or(lower_bool(l, operand)?, lower_bool(r, operand)?),
        BoolExpr::And(l, r) => and(lower_bool(l, operand)?, lower_bool(r, operand)?),
        // NOT NOT x is x in three-valued logic too (NOT NULL is NULL): a chain of NOTs lowers
        // to at most one, so a deeply negated predicate does not nest DataFusion expressions
        // (whose rewrites recurse) as deep as its text.
        BoolExpr::Not(e) => match e.as_ref() {
            BoolExpr::Not(inner) => lower_bool(inner, operand)?,
            e => not(lower_bool(e, operand)?),
        },
        BoolExpr::Predicate(p) => {
            let lhs = operand(&p.lhs, p.span)?;
            match &p.op {
                PredicateOp::Compare(c, v) => {
                    let (l, r) = coerce_literal(&lhs, v, p.span)?;
                    compare(l, *c, r)
                }
                PredicateOp::In(values) | PredicateOp::NotIn(values) => {
                    let mut field = lhs.expr.clone();
                    let mut list = Vec::with_capacity(values.len());
                    for v in values {
                        let (l, r) = coerce_literal(&lhs, v, p.span)?;
                        field = l;
                        list.push(r);
                    }
                    field.in_list(list, matches!(p.op, PredicateOp::NotIn(_)))
                }
                PredicateOp::Between(lo, hi) => {
                    let (l, lo) = coerce_literal(&lhs, lo, p.span)?;
                    let (_, hi) = coerce_literal(&lhs, hi, p.span)?;
                    l.between(lo, hi)
                }
                PredicateOp::Contains(s) => {
                    if !is_text(&lhs.data_type) {
                        return Err(Error::type_error(format!(
                            "CONTAINS needs a text field, this one has type {}",
                            lhs.data_type
                        ))
                        .at(p.span));
                    }
                    contains(lhs.expr, lit(s.as_str()))
                }
                PredicateOp::IsNull => lhs.expr.is_null(),
                PredicateOp::IsNotNull => lhs.expr.is_not_null(),
            }
        }
    })
}

fn compare(l: Expr, c: Comparator, r: Expr) -> Expr {
    match c {
        Comparator::Eq => l.eq(r),
        Comparator::NotEq => l.not_eq(r),
        Comparator::Gt => l.gt(r),
        Comparator::Lt => l.lt(r),
        Comparator::GtEq => l.gt_eq(r),
        Comparator::LtEq => l.lt_eq(r),
    }
}

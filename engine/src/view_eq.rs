//! A physical rule: a filter's equality of a string-view value with literals (`x = "a"`,
//! `x = "a" OR x = "b"`, `x IN ("a", "b")`) compares each row's 16-byte view with the literals'
//! views instead of going through arrow-ord's general comparison and, for several literals, one
//! comparison and one boolean OR per literal.
//!
//! A view holds the length and the first four bytes; a value of at most 12 bytes is held whole,
//! after its length, followed by zero bytes (the Arrow format's rule, which arrow-ord's own
//! equality relies on too). So a value equals a literal of at most 12 bytes exactly when the two
//! 128-bit views are equal, and a longer literal can only be equal when the length and the
//! first four bytes (the view's low 64 bits) are, after which the bytes are compared. The answer
//! is SQL's: NULL where the value is NULL, whatever the literals (none of which is NULL). The
//! event-name filters of the analytics workloads take this path (benches/README, issue 21).
//!
//! Only `FilterExec` predicates are rewritten, after DataFusion's own rules have used the
//! original expressions (pruning, pushdown, statistics); an input that is not a view array at
//! run time (a dictionary, say) is compared by arrow-ord as before.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use datafusion::arrow::array::builder::make_view;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, GenericByteViewArray};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::datatypes::{
    BinaryViewType, ByteViewType, DataType, Field, FieldRef, Schema, StringViewType,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, InListExpr, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ViewEquality;

impl PhysicalOptimizerRule for ViewEquality {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // A filter `x = literal` tells DataFusion that `x` is constant below it, which an
        // operator above may rely on (a window partitioned by `x` then needs no sort); the new
        // expression does not, so a plan whose requirements no longer hold keeps the original.
        let rewritten = Arc::clone(&plan).transform_up(filter_rewritten).data();
        Ok(match rewritten {
            Ok(new)
                if SanityCheckPlan::new()
                    .optimize(Arc::clone(&new), config)
                    .is_ok() =>
            {
                new
            }
            _ => plan,
        })
    }

    fn name(&self) -> &str {
        "signalql_view_equality"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with its predicate rewritten, when it is a filter that has one to rewrite.
fn filter_rewritten(node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let Some(filter) = node.downcast_ref::<FilterExec>() else {
        return Ok(Transformed::no(node));
    };
    let schema = filter.input().schema();
    let predicate =
        crate::rewrite::rewrite_up(Arc::clone(filter.predicate()), |e| Ok(rewrite(e, &schema)))?;
    if !predicate.transformed {
        return Ok(Transformed::no(node));
    }
    let rebuilt = FilterExecBuilder::from(filter)
        .with_predicate(predicate.data)
        .build()?;
    Ok(Transformed::yes(Arc::new(rebuilt)))
}

/// `e` as one [`ViewEqAny`], when it is an equality of a view-typed value with a non-NULL
/// literal, a non-negated IN list of such literals, or an OR of two such on the same value.
fn rewrite(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Arc<dyn PhysicalExpr>> {
    let is_view = |value: &Arc<dyn PhysicalExpr>| {
        matches!(
            value.data_type(schema),
            Ok(DataType::Utf8View | DataType::BinaryView)
        )
    };
    if let Some(binary) = e.downcast_ref::<BinaryExpr>() {
        match binary.op() {
            Operator::Eq => {
                let (value, needle) = match (literal(binary.left()), literal(binary.right())) {
                    (None, Some(needle)) => (binary.left(), needle),
                    (Some(needle), None) => (binary.right(), needle),
                    _ => return None,
                };
                return is_view(value).then(|| ViewEqAny::over(Arc::clone(value), vec![needle]));
            }
            Operator::Or => {
                let left = binary.left().downcast_ref::<ViewEqAny>()?;
                let right = binary.right().downcast_ref::<ViewEqAny>()?;
                if !left.value.eq(&right.value) {
                    return None;
                }
                let needles = left
                    .needles
                    .iter()
                    .chain(&right.needles)
                    .map(|n| n.bytes.clone())
                    .collect();
                return Some(ViewEqAny::over(Arc::clone(&left.value), needles));
            }
            _ => return None,
        }
    }
    let in_list = e.downcast_ref::<InListExpr>()?;
    if in_list.negated() || !is_view(in_list.expr()) {
        return None;
    }
    let needles = in_list
        .list()
        .iter()
        .map(literal)
        .collect::<Option<Vec<_>>>()?;
    Some(ViewEqAny::over(Arc::clone(in_list.expr()), needles))
}

/// The bytes of a non-NULL string- or binary-view literal.
fn literal(e: &Arc<dyn PhysicalExpr>) -> Option<Vec<u8>> {
    match e.downcast_ref::<Literal>()?.value() {
        ScalarValue::Utf8View(Some(s)) => Some(s.as_bytes().to_vec()),
        ScalarValue::BinaryView(Some(b)) => Some(b.clone()),
        _ => None,
    }
}

/// One literal: its bytes and its view (block 0, offset 0; only the low 64 bits, length and
/// prefix, mean anything for a literal longer than 12 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Needle {
    bytes: Vec<u8>,
    view: u128,
}

/// Per view, whether it is one of `needles`' views (short literals, whose views are their
/// whole value), with no branch per row: `K` is a constant, so the comparisons unroll.
fn any_of<const K: usize>(views: &[u128], needles: [u128; K]) -> BooleanBuffer {
    BooleanBuffer::collect_bool(views.len(), |i| {
        let v = views[i];
        needles.iter().fold(false, |any, &n| any | (v == n))
    })
}

/// `value = needle₁ OR value = needle₂ OR …` over a string- or binary-view `value`.
#[derive(Debug, Eq)]
pub struct ViewEqAny {
    value: Arc<dyn PhysicalExpr>,
    needles: Vec<Needle>,
}

impl PartialEq for ViewEqAny {
    fn eq(&self, other: &Self) -> bool {
        self.value.eq(&other.value) && self.needles == other.needles
    }
}

impl Hash for ViewEqAny {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.value.hash(state);
        self.needles.hash(state);
    }
}

impl ViewEqAny {
    /// The expression over `value` for the literals `needles` (duplicates dropped, order kept).
    fn over(value: Arc<dyn PhysicalExpr>, needles: Vec<Vec<u8>>) -> Arc<dyn PhysicalExpr> {
        let mut kept: Vec<Needle> = Vec::with_capacity(needles.len());
        for bytes in needles {
            if !kept.iter().any(|n| n.bytes == bytes) {
                // A literal longer than u32::MAX bytes cannot be a view's value; its view is
                // never equal to a row's (make_view would truncate the length).
                let view =
                    u32::try_from(bytes.len()).map_or(u128::MAX, |_| make_view(&bytes, 0, 0));
                kept.push(Needle { bytes, view });
            }
        }
        Arc::new(Self {
            value,
            needles: kept,
        })
    }

    /// Which rows of `array` equal one of the literals.
    fn matches<T: ByteViewType + ?Sized>(&self, array: &GenericByteViewArray<T>) -> BooleanArray {
        let views = array.views();
        let values = if self.needles.iter().all(|n| n.bytes.len() <= 12) {
            // A few literals are compared without a branch (each row against every one, their
            // count a constant), so the loop over the rows is straight-line code.
            let n = |k: usize| self.needles[k].view;
            match self.needles.len() {
                1 => any_of(views, [n(0)]),
                2 => any_of(views, [n(0), n(1)]),
                3 => any_of(views, [n(0), n(1), n(2)]),
                4 => any_of(views, [n(0), n(1), n(2), n(3)]),
                _ => BooleanBuffer::collect_bool(views.len(), |i| {
                    let v = views[i];
                    self.needles.iter().any(|n| v == n.view)
                }),
            }
        } else {
            let buffers = array.data_buffers();
            BooleanBuffer::collect_bool(views.len(), |i| {
                let v = views[i];
                self.needles.iter().any(|n| {
                    if n.bytes.len() <= 12 {
                        return v == n.view;
                    }
                    if v as u64 != n.view as u64 {
                        return false;
                    }
                    let block = (v >> 64) as u32 as usize;
                    let offset = (v >> 96) as u32 as usize;
                    buffers
                        .get(block)
                        .and_then(|b| b.as_slice().get(offset..offset + n.bytes.len()))
                        == Some(n.bytes.as_slice())
                })
            })
        };
        BooleanArray::new(values, array.nulls().cloned())
    }

    /// arrow-ord's equality, ORed over the literals, for a value that is not a view array.
    fn fallback(&self, array: &ArrayRef) -> Result<ColumnarValue> {
        let mut answer: Option<BooleanArray> = None;
        for needle in &self.needles {
            let scalar = match array.data_type() {
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                    ScalarValue::Binary(Some(needle.bytes.clone()))
                }
                _ => ScalarValue::Utf8(Some(String::from_utf8_lossy(&needle.bytes).into_owned())),
            }
            .cast_to(array.data_type())?;
            let eq = datafusion::arrow::compute::kernels::cmp::eq(array, &scalar.to_scalar()?)?;
            answer = Some(match answer {
                None => eq,
                Some(sofar) => datafusion::arrow::compute::kernels::boolean::or(&sofar, &eq)?,
            });
        }
        let answer = answer.unwrap_or_else(|| BooleanArray::from(vec![false; array.len()]));
        Ok(ColumnarValue::Array(Arc::new(answer)))
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, sql: bool) -> fmt::Result {
        if sql {
            self.value.fmt_sql(f)?;
        } else {
            write!(f, "{}", self.value)?;
        }
        let text = |n: &Needle| {
            let s = String::from_utf8_lossy(&n.bytes).into_owned();
            if sql {
                format!("'{}'", s.replace('\'', "''"))
            } else {
                s
            }
        };
        match self.needles.as_slice() {
            [one] => write!(f, " = {}", text(one)),
            many => {
                let list: Vec<String> = many.iter().map(text).collect();
                write!(f, " IN ({})", list.join(", "))
            }
        }
    }
}

impl fmt::Display for ViewEqAny {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, false)
    }
}

impl PhysicalExpr for ViewEqAny {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        let nullable = self.value.nullable(input_schema)?;
        Ok(Arc::new(Field::new(
            self.to_string(),
            DataType::Boolean,
            nullable,
        )))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let array: ArrayRef = self.value.evaluate(batch)?.into_array(batch.num_rows())?;
        let answer = match array.data_type() {
            DataType::Utf8View => self.matches(array.as_byte_view::<StringViewType>()),
            DataType::BinaryView => self.matches(array.as_byte_view::<BinaryViewType>()),
            _ => return self.fallback(&array),
        };
        Ok(ColumnarValue::Array(Arc::new(answer)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.value]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [value] = <[_; 1]>::try_from(children).map_err(|c| {
            datafusion::common::DataFusionError::Internal(format!(
                "ViewEqAny takes one child, got {}",
                c.len()
            ))
        })?;
        Ok(Arc::new(Self {
            value,
            needles: self.needles.clone(),
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BinaryViewArray, StringViewArray};
    use datafusion::physical_expr::expressions::{col, in_list, lit};

    fn eval(e: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Vec<Option<bool>> {
        let out = e
            .evaluate(batch)
            .unwrap()
            .into_array(batch.num_rows())
            .unwrap();
        out.as_boolean().iter().collect()
    }

    fn batch(values: Vec<Option<&str>>) -> RecordBatch {
        let array = StringViewArray::from(values);
        let schema = Schema::new(vec![Field::new("s", DataType::Utf8View, true)]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(array)]).unwrap()
    }

    fn view_lit(s: &str) -> Arc<dyn PhysicalExpr> {
        lit(ScalarValue::Utf8View(Some(s.to_string())))
    }

    /// Short and long values, a long value that shares the length and prefix of the literal,
    /// an empty string and NULL, against arrow-ord's own equality (the expression the rule
    /// replaces) for literals of 0, 4, 12, 13 and 30 bytes.
    #[test]
    fn equals_arrow_ord_for_short_and_long_literals() {
        let rows = vec![
            Some("page_view"),
            Some(""),
            None,
            Some("page_viex"),
            Some("abcdefghijkl"),
            Some("abcdefghijklm"),
            Some("abcdefghijklx"),
            Some("a long value past twelve bytes"),
            Some("a long value past twelve bytez"),
            Some("page"),
        ];
        let b = batch(rows);
        let s = col("s", &b.schema()).unwrap();
        let literals = [
            "",
            "page",
            "page_view",
            "abcdefghijkl",
            "abcdefghijklm",
            "a long value past twelve bytes",
        ];
        for needle in literals {
            let original: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
                Arc::clone(&s),
                Operator::Eq,
                view_lit(needle),
            ));
            let fast = rewrite(&original, &b.schema()).expect("rewritten");
            assert!(fast.downcast_ref::<ViewEqAny>().is_some());
            assert_eq!(eval(&fast, &b), eval(&original, &b), "literal {needle:?}");
        }
        // The expected answer for one literal, by hand.
        let original: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::clone(&s),
            Operator::Eq,
            view_lit("abcdefghijklm"),
        ));
        let fast = rewrite(&original, &b.schema()).unwrap();
        let by_hand = [
            false, false, false, false, false, true, false, false, false, false,
        ];
        let expected: Vec<Option<bool>> = by_hand
            .iter()
            .enumerate()
            .map(|(i, &v)| (i != 2).then_some(v))
            .collect();
        assert_eq!(eval(&fast, &b), expected);
    }

    /// One to six short literals (each count has its own loop up to four): the rows that
    /// equal any of them are those arrow-ord's OR of equalities finds.
    #[test]
    fn every_count_of_short_literals_equals_arrow_ord() {
        let words = [
            "visit",
            "signup",
            "activated",
            "click",
            "page_view",
            "logout",
        ];
        let rows: Vec<Option<&str>> = (0..200)
            .map(|i| (i % 7 != 3).then(|| words[(i * 5 + i / 9) % words.len()]))
            .chain([Some(""), Some("visits"), Some("signu")])
            .collect();
        let b = batch(rows);
        let s = col("s", &b.schema()).unwrap();
        for n in 1..=words.len() {
            let original = words[..n]
                .iter()
                .map(|w| -> Arc<dyn PhysicalExpr> {
                    Arc::new(BinaryExpr::new(Arc::clone(&s), Operator::Eq, view_lit(w)))
                })
                .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::Or, b)))
                .unwrap();
            let schema = b.schema();
            let fast =
                crate::rewrite::rewrite_up(Arc::clone(&original), |e| Ok(rewrite(e, &schema)))
                    .unwrap()
                    .data;
            assert_eq!(
                fast.downcast_ref::<ViewEqAny>()
                    .expect("one expression")
                    .needles
                    .len(),
                n
            );
            assert_eq!(eval(&fast, &b), eval(&original, &b), "{n} literals");
        }
    }

    /// `s = a OR s = b OR s = c` and `s IN (a, b, c)` become one expression with three
    /// literals; the answers equal arrow-ord's and are NULL only where `s` is.
    #[test]
    fn or_chains_and_in_lists_merge() {
        let b = batch(vec![
            Some("visit"),
            Some("signup"),
            None,
            Some("activated"),
            Some("other"),
        ]);
        let schema = b.schema();
        let s = col("s", &schema).unwrap();
        let eq = |v: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(BinaryExpr::new(Arc::clone(&s), Operator::Eq, view_lit(v)))
        };
        let or = |l, r| -> Arc<dyn PhysicalExpr> { Arc::new(BinaryExpr::new(l, Operator::Or, r)) };
        let chain = or(or(eq("visit"), eq("signup")), eq("activated"));
        let rewritten = Arc::clone(&chain)
            .transform_up(|e| Ok(rewrite(&e, &schema).map_or(Transformed::no(e), Transformed::yes)))
            .unwrap()
            .data;
        let merged = rewritten
            .downcast_ref::<ViewEqAny>()
            .expect("one expression");
        assert_eq!(merged.needles.len(), 3);
        let expected = vec![Some(true), Some(true), None, Some(true), Some(false)];
        assert_eq!(eval(&chain, &b), expected);
        assert_eq!(eval(&rewritten, &b), expected);
        assert_eq!(rewritten.to_string(), "s@0 IN (visit, signup, activated)");

        let list = in_list(
            Arc::clone(&s),
            vec![view_lit("visit"), view_lit("signup"), view_lit("activated")],
            &false,
            &schema,
        )
        .unwrap();
        let fast = rewrite(&list, &schema).expect("rewritten");
        assert_eq!(eval(&fast, &b), expected);
        // NOT IN and a list with NULL in it keep DataFusion's expression.
        let negated = in_list(Arc::clone(&s), vec![view_lit("visit")], &true, &schema).unwrap();
        assert!(rewrite(&negated, &schema).is_none());
        let with_null = in_list(
            Arc::clone(&s),
            vec![view_lit("visit"), lit(ScalarValue::Utf8View(None))],
            &false,
            &schema,
        )
        .unwrap();
        assert!(rewrite(&with_null, &schema).is_none());
    }

    /// Different values ORed, and a comparison of a non-view column, are left alone.
    #[test]
    fn other_shapes_are_left_alone() {
        let schema = Schema::new(vec![
            Field::new("s", DataType::Utf8View, true),
            Field::new("t", DataType::Utf8View, true),
            Field::new("u", DataType::Utf8, true),
        ]);
        let s = col("s", &schema).unwrap();
        let t = col("t", &schema).unwrap();
        let u = col("u", &schema).unwrap();
        let a: Arc<dyn PhysicalExpr> = ViewEqAny::over(Arc::clone(&s), vec![b"x".to_vec()]);
        let b: Arc<dyn PhysicalExpr> = ViewEqAny::over(t, vec![b"y".to_vec()]);
        let or: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(a, Operator::Or, b));
        assert!(rewrite(&or, &schema).is_none());
        let plain: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            u,
            Operator::Eq,
            lit(ScalarValue::Utf8(Some("x".into()))),
        ));
        assert!(rewrite(&plain, &schema).is_none());
    }

    /// Binary views compare the same way; a view array sliced from a larger one too.
    #[test]
    fn binary_views_and_slices() {
        let long = b"0123456789abcdefXYZ".to_vec();
        let array = BinaryViewArray::from(vec![
            Some(&b"ab"[..]),
            Some(long.as_slice()),
            None,
            Some(&b"0123456789abcdefXYQ"[..]),
            Some(&b"ab"[..]),
        ])
        .slice(1, 4);
        let schema = Schema::new(vec![Field::new("b", DataType::BinaryView, true)]);
        let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(array)]).unwrap();
        let e = ViewEqAny::over(col("b", &b.schema()).unwrap(), vec![long, b"ab".to_vec()]);
        assert_eq!(
            eval(&e, &b),
            vec![Some(true), None, Some(false), Some(true)]
        );
    }

    /// A value that is not a view array at run time (Utf8 here) is compared by arrow-ord.
    #[test]
    fn other_arrays_fall_back_to_arrow_ord() {
        let array = datafusion::arrow::array::StringArray::from(vec![Some("a"), None, Some("b")]);
        let schema = Schema::new(vec![Field::new("u", DataType::Utf8, true)]);
        let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(array)]).unwrap();
        let e = ViewEqAny::over(
            col("u", &b.schema()).unwrap(),
            vec![b"b".to_vec(), b"c".to_vec()],
        );
        assert_eq!(eval(&e, &b), vec![Some(false), None, Some(true)]);
    }
}

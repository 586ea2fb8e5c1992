//! `percentile(x, p)`: the exact continuous percentile (linear interpolation between the two
//! nearest ranks, as PostgreSQL's `percentile_cont`) of the non-null values of `x`.
//!
//! SignalQL: `FROM events WHERE event_name = "purchase" RETURN percentile(properties.amount, 0.95)`.
//!
//! DataFusion's own `percentile_cont` rounds the interpolation fraction to 1e-6, which is not
//! exact; this function keeps every value and interpolates in full f64 precision:
//! with the values sorted ascending, `pos = p · (n − 1)`, the result is
//! `v[⌊pos⌋] + (pos − ⌊pos⌋) · (v[⌈pos⌉] − v[⌊pos⌋])`. NULL when there are no values.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, ListArray, RecordBatch};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Schema};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Expr, Signature, Volatility, lit,
};

pub const NAME: &str = "percentile";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Percentile {
    signature: Signature,
}

impl Default for Percentile {
    fn default() -> Self {
        Self {
            signature: Signature::exact(
                vec![DataType::Float64, DataType::Float64],
                Volatility::Immutable,
            ),
        }
    }
}

static PERCENTILE: LazyLock<Arc<AggregateUDF>> =
    LazyLock::new(|| Arc::new(AggregateUDF::from(Percentile::default())));

/// The singleton UDAF.
pub fn percentile_udaf() -> Arc<AggregateUDF> {
    Arc::clone(&PERCENTILE)
}

/// `percentile(expr, p)` as an [`Expr`].
pub fn percentile(expr: Expr, p: f64) -> Expr {
    percentile_udaf().call(vec![expr, lit(p)])
}

/// The interpolated percentile of ascending `sorted` values (None when empty).
pub fn interpolate(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let pos = p * (n - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil().min((n - 1) as f64) as usize;
    let frac = pos - lo as f64;
    Some(if lo == hi {
        sorted[lo]
    } else {
        sorted[lo] + frac * (sorted[hi] - sorted[lo])
    })
}

impl AggregateUDFImpl for Percentile {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let item = Arc::new(Field::new_list_field(DataType::Float64, true));
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "values"),
            DataType::List(item),
            true,
        ))])
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if acc_args.is_distinct {
            return plan_err!("percentile(DISTINCT …) is not supported");
        }
        let Some(p_expr) = acc_args.exprs.get(1) else {
            return plan_err!("percentile takes two arguments");
        };
        // A literal evaluates to a scalar without any input rows.
        let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
        let p = match p_expr.evaluate(&empty) {
            Ok(ColumnarValue::Scalar(ScalarValue::Float64(Some(p)))) => p,
            _ => return plan_err!("the second argument of percentile must be a number literal"),
        };
        if !(0.0..=1.0).contains(&p) {
            return plan_err!("percentile p must be between 0 and 1, got {p}");
        }
        Ok(Box::new(PercentileAccumulator {
            values: Vec::new(),
            p,
        }))
    }
}

#[derive(Debug)]
pub struct PercentileAccumulator {
    values: Vec<f64>,
    p: f64,
}

impl Accumulator for PercentileAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(arr) = values
            .first()
            .and_then(|a| a.as_primitive_opt::<Float64Type>())
        else {
            return exec_err!("percentile expects a Float64 input");
        };
        if arr.null_count() == 0 {
            self.values.extend_from_slice(arr.values());
        } else {
            self.values.extend(arr.iter().flatten());
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(lists) = states.first().and_then(|a| a.as_list_opt::<i32>()) else {
            return exec_err!("percentile state must be a list");
        };
        for list in lists.iter().flatten() {
            let Some(values) = list.as_primitive_opt::<Float64Type>() else {
                return exec_err!("percentile state must hold Float64 values");
            };
            self.values.extend(values.iter().flatten());
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values = Float64Array::from(std::mem::take(&mut self.values));
        let field = Arc::new(Field::new_list_field(DataType::Float64, true));
        let list = ListArray::new(
            field,
            OffsetBuffer::from_lengths([values.len()]),
            Arc::new(values),
            None,
        );
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.values.sort_unstable_by(f64::total_cmp);
        Ok(ScalarValue::Float64(interpolate(&self.values, self.p)))
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.values.capacity() * size_of::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_ranks() {
        let v = [5.0, 10.0, 20.5, 30.0, 100.0];
        assert_eq!(interpolate(&v, 0.5), Some(20.5));
        assert_eq!(interpolate(&v, 0.0), Some(5.0));
        assert_eq!(interpolate(&v, 1.0), Some(100.0));
        // pos = 3.6: 30 + 0.6 * 70 = 72
        assert!((interpolate(&v, 0.9).unwrap() - 72.0).abs() < 1e-12);
        assert_eq!(interpolate(&[], 0.5), None);
        assert_eq!(interpolate(&[7.0], 0.3), Some(7.0));
    }

    #[test]
    fn merges_partial_states() {
        let mut a = PercentileAccumulator {
            values: vec![],
            p: 0.25,
        };
        let mut b = PercentileAccumulator {
            values: vec![],
            p: 0.25,
        };
        a.update_batch(&[
            Arc::new(Float64Array::from(vec![Some(4.0), None, Some(1.0)])) as ArrayRef,
        ])
        .unwrap();
        b.update_batch(&[Arc::new(Float64Array::from(vec![3.0, 2.0])) as ArrayRef])
            .unwrap();
        let state: Vec<ArrayRef> = b
            .state()
            .unwrap()
            .iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        a.merge_batch(&state).unwrap();
        // 1, 2, 3, 4: pos 0.75 → 1.75
        assert_eq!(a.evaluate().unwrap(), ScalarValue::Float64(Some(1.75)));
    }
}

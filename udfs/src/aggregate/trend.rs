//! `trend_slope(x, y, n, fill)`: the least-squares slope of a bucketed series and its mean per
//! bucket, as a struct `{slope, mean}` (for SignalQL `TREND UP|DOWN|FLAT OVER n unit`).
//!
//! Each input row is one point: `x` the bucket index (0 ..= n − 1), `y` the bucket's value.
//! With `fill` true (count measures) the series is the n buckets, a bucket without a row
//! being 0; with `fill` false only rows with a non-null `y` are points. The slope is
//! `Σ(x − x̄)(y − ȳ) / Σ(x − x̄)²`, in `y` units per bucket, NULL below two points; the mean is
//! `ȳ`, NULL without points. Centred sums keep it accurate for large values.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, ListArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, Signature, Volatility, lit,
};

pub const NAME: &str = "trend_slope";

/// The result struct's fields.
pub fn trend_fields() -> Fields {
    Fields::from(vec![
        Field::new("slope", DataType::Float64, true),
        Field::new("mean", DataType::Float64, true),
    ])
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TrendSlope {
    signature: Signature,
}

impl Default for TrendSlope {
    fn default() -> Self {
        Self {
            signature: Signature::exact(
                vec![
                    DataType::Float64,
                    DataType::Float64,
                    DataType::Int64,
                    DataType::Boolean,
                ],
                Volatility::Immutable,
            ),
        }
    }
}

static TREND: LazyLock<Arc<AggregateUDF>> =
    LazyLock::new(|| Arc::new(AggregateUDF::from(TrendSlope::default())));

/// The singleton UDAF.
pub fn trend_slope_udaf() -> Arc<AggregateUDF> {
    Arc::clone(&TREND)
}

/// `trend_slope(x, y, n, fill)` as an [`Expr`].
pub fn trend_slope(x: Expr, y: Expr, n: i64, fill: bool) -> Expr {
    trend_slope_udaf().call(vec![x, y, lit(n), lit(fill)])
}

/// Slope and mean of the points `(x, y)`.
pub fn fit(points: &[(f64, f64)]) -> (Option<f64>, Option<f64>) {
    let m = points.len();
    if m == 0 {
        return (None, None);
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / m as f64;
    let my = points.iter().map(|p| p.1).sum::<f64>() / m as f64;
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for (x, y) in points {
        sxx += (x - mx) * (x - mx);
        sxy += (x - mx) * (y - my);
    }
    let slope = (m >= 2 && sxx > 0.0).then(|| sxy / sxx);
    (slope, Some(my))
}

impl AggregateUDFImpl for TrendSlope {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(trend_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = |part: &str| {
            Arc::new(Field::new(
                format_state_name(args.name, part),
                DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true))),
                true,
            ))
        };
        Ok(vec![
            list("x"),
            list("y"),
            Arc::new(Field::new(
                format_state_name(args.name, "n"),
                DataType::Int64,
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "fill"),
                DataType::Boolean,
                true,
            )),
        ])
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if acc_args.is_distinct {
            return exec_err!("trend_slope(DISTINCT …) is not supported");
        }
        Ok(Box::<TrendAccumulator>::default())
    }
}

#[derive(Debug, Default)]
struct TrendAccumulator {
    points: Vec<(f64, f64)>,
    n: Option<i64>,
    fill: bool,
}

impl TrendAccumulator {
    fn settings(&mut self, n: &Int64Array, fill: &BooleanArray) {
        if self.n.is_none()
            && let Some(i) = (0..n.len()).find(|&i| n.is_valid(i))
        {
            self.n = Some(n.value(i));
            self.fill = fill.is_valid(i) && fill.value(i);
        }
    }
}

fn list(values: Vec<f64>) -> ScalarValue {
    let values = Float64Array::from(values);
    let field = Arc::new(Field::new_list_field(DataType::Float64, true));
    ScalarValue::List(Arc::new(ListArray::new(
        field,
        OffsetBuffer::from_lengths([values.len()]),
        Arc::new(values),
        None,
    )))
}

impl Accumulator for TrendAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let [x, y, n, fill] = values else {
            return exec_err!("trend_slope takes four arguments");
        };
        let (Some(x), Some(y)) = (
            x.as_primitive_opt::<Float64Type>(),
            y.as_primitive_opt::<Float64Type>(),
        ) else {
            return exec_err!("trend_slope expects Float64 x and y");
        };
        let (Some(n), Some(fill)) = (n.as_primitive_opt::<Int64Type>(), fill.as_boolean_opt())
        else {
            return exec_err!("trend_slope expects an Int64 n and a Boolean fill");
        };
        self.settings(n, fill);
        for i in 0..x.len() {
            if x.is_valid(i) && y.is_valid(i) {
                self.points.push((x.value(i), y.value(i)));
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let [xs, ys, n, fill] = states else {
            return exec_err!("trend_slope state has {} columns, expected 4", states.len());
        };
        let (Some(xs), Some(ys)) = (xs.as_list_opt::<i32>(), ys.as_list_opt::<i32>()) else {
            return exec_err!("trend_slope state must hold lists");
        };
        let (Some(n), Some(fill)) = (n.as_primitive_opt::<Int64Type>(), fill.as_boolean_opt())
        else {
            return exec_err!("trend_slope state must hold n and fill");
        };
        self.settings(n, fill);
        for (x, y) in xs.iter().zip(ys.iter()) {
            let (Some(x), Some(y)) = (x, y) else { continue };
            let (x, y) = (
                x.as_primitive::<Float64Type>(),
                y.as_primitive::<Float64Type>(),
            );
            self.points
                .extend(x.values().iter().copied().zip(y.values().iter().copied()));
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let (x, y): (Vec<f64>, Vec<f64>) = std::mem::take(&mut self.points).into_iter().unzip();
        Ok(vec![
            list(x),
            list(y),
            ScalarValue::Int64(self.n),
            ScalarValue::Boolean(Some(self.fill)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let (slope, mean) = if self.fill {
            // Every bucket 0 ..= n − 1 is a point; a bucket without a row is 0.
            let n = self.n.unwrap_or(0).max(0) as usize;
            let mut ys = vec![0.0; n];
            for (x, y) in &self.points {
                if *x >= 0.0 && (*x as usize) < n {
                    ys[*x as usize] += y;
                }
            }
            let points: Vec<(f64, f64)> = ys
                .into_iter()
                .enumerate()
                .map(|(i, y)| (i as f64, y))
                .collect();
            fit(&points)
        } else {
            fit(&self.points)
        };
        Ok(ScalarValue::Struct(Arc::new(
            datafusion::arrow::array::StructArray::try_new(
                trend_fields(),
                vec![
                    Arc::new(Float64Array::from(vec![slope])) as ArrayRef,
                    Arc::new(Float64Array::from(vec![mean])),
                ],
                None,
            )?,
        )))
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.points.capacity() * size_of::<(f64, f64)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_by_hand() {
        // y = 2x + 1 exactly.
        let (s, m) = fit(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]);
        assert_eq!(s, Some(2.0));
        assert_eq!(m, Some(3.0));
        // (0,1) (1,0) (2,2) (3,1): x̄ 1.5, ȳ 1; Σ(x−x̄)(y−ȳ) = 0 + 0.5 + 0.5 + 0 = 1, Σ(x−x̄)² = 5.
        let (s, _) = fit(&[(0.0, 1.0), (1.0, 0.0), (2.0, 2.0), (3.0, 1.0)]);
        assert!((s.unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(fit(&[(4.0, 2.0)]), (None, Some(2.0)));
        assert_eq!(fit(&[]), (None, None));
    }

    #[test]
    fn filled_series_counts_missing_buckets_as_zero() {
        let mut a = TrendAccumulator::default();
        let x: ArrayRef = Arc::new(Float64Array::from(vec![3.0]));
        let y: ArrayRef = Arc::new(Float64Array::from(vec![4.0]));
        let n: ArrayRef = Arc::new(Int64Array::from(vec![4]));
        let fill: ArrayRef = Arc::new(BooleanArray::from(vec![true]));
        a.update_batch(&[x, y, n, fill]).unwrap();
        // Series 0, 0, 0, 4: x̄ 1.5, ȳ 1; Σ(x−x̄)(y−ȳ) = 1.5 + 0.5 − 0.5 + 4.5 = 6, Σ(x−x̄)² = 5.
        let ScalarValue::Struct(s) = a.evaluate().unwrap() else {
            panic!()
        };
        let slope = s.column(0).as_primitive::<Float64Type>().value(0);
        let mean = s.column(1).as_primitive::<Float64Type>().value(0);
        assert!((slope - 1.2).abs() < 1e-12, "{slope}");
        assert_eq!(mean, 1.0);
    }
}

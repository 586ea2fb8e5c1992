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
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, Expr, GroupsAccumulator, Signature,
    Volatility, lit,
};

use super::passes;

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

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    /// The points of all groups in one vector of vectors, and the states and results built
    /// as columns: TREND by session (300 000 groups) held a boxed accumulator per group and
    /// built a one-row list per group for its state.
    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::<TrendGroups>::default())
    }
}

/// The four inputs: x and y as Float64, the series length and whether it is filled.
fn inputs(
    values: &[ArrayRef],
) -> Result<(&Float64Array, &Float64Array, &Int64Array, &BooleanArray)> {
    let [x, y, n, fill] = values else {
        return exec_err!("trend_slope takes four arguments");
    };
    let (Some(x), Some(y)) = (
        x.as_primitive_opt::<Float64Type>(),
        y.as_primitive_opt::<Float64Type>(),
    ) else {
        return exec_err!("trend_slope expects Float64 x and y");
    };
    let (Some(n), Some(fill)) = (n.as_primitive_opt::<Int64Type>(), fill.as_boolean_opt()) else {
        return exec_err!("trend_slope expects an Int64 n and a Boolean fill");
    };
    Ok((x, y, n, fill))
}

/// The state columns: x and y lists, n and fill.
fn state_columns(
    states: &[ArrayRef],
) -> Result<(&ListArray, &ListArray, &Int64Array, &BooleanArray)> {
    let [xs, ys, n, fill] = states else {
        return exec_err!("trend_slope state has {} columns, expected 4", states.len());
    };
    let (Some(xs), Some(ys)) = (xs.as_list_opt::<i32>(), ys.as_list_opt::<i32>()) else {
        return exec_err!("trend_slope state must hold lists");
    };
    let (Some(n), Some(fill)) = (n.as_primitive_opt::<Int64Type>(), fill.as_boolean_opt()) else {
        return exec_err!("trend_slope state must hold n and fill");
    };
    Ok((xs, ys, n, fill))
}

/// The series' settings: the first valid `n` and its `fill`.
#[derive(Debug, Default, Clone, Copy)]
struct Settings {
    n: Option<i64>,
    fill: bool,
}

impl Settings {
    fn read(&mut self, n: &Int64Array, fill: &BooleanArray) {
        if self.n.is_none()
            && let Some(i) = (0..n.len()).find(|&i| n.is_valid(i))
        {
            self.n = Some(n.value(i));
            self.fill = fill.is_valid(i) && fill.value(i);
        }
    }

    /// Slope and mean of one group's points under these settings.
    fn fit(&self, points: &[(f64, f64)]) -> (Option<f64>, Option<f64>) {
        if !self.fill {
            return fit(points);
        }
        // Every bucket 0 ..= n − 1 is a point; a bucket without a row is 0.
        let n = self.n.unwrap_or(0).max(0) as usize;
        let mut ys = vec![0.0; n];
        for (x, y) in points {
            if *x >= 0.0 && (*x as usize) < n {
                ys[*x as usize] += y;
            }
        }
        let filled: Vec<(f64, f64)> = ys
            .into_iter()
            .enumerate()
            .map(|(i, y)| (i as f64, y))
            .collect();
        fit(&filled)
    }
}

/// The `{slope, mean}` structs of fits.
fn fits_array(fits: impl Iterator<Item = (Option<f64>, Option<f64>)>) -> Result<ArrayRef> {
    let (slopes, means): (Vec<Option<f64>>, Vec<Option<f64>>) = fits.unzip();
    Ok(Arc::new(datafusion::arrow::array::StructArray::try_new(
        trend_fields(),
        vec![
            Arc::new(Float64Array::from(slopes)) as ArrayRef,
            Arc::new(Float64Array::from(means)),
        ],
        None,
    )?))
}

/// x and y lists of `groups`' points.
fn point_lists(groups: &[Vec<(f64, f64)>]) -> Result<(ArrayRef, ArrayRef)> {
    let offsets = OffsetBuffer::from_lengths(groups.iter().map(Vec::len));
    let field = Arc::new(Field::new_list_field(DataType::Float64, true));
    let xs = Float64Array::from_iter_values(groups.iter().flatten().map(|p| p.0));
    let ys = Float64Array::from_iter_values(groups.iter().flatten().map(|p| p.1));
    let list = |values: Float64Array| -> Result<ArrayRef> {
        Ok(Arc::new(ListArray::try_new(
            Arc::clone(&field),
            offsets.clone(),
            Arc::new(values),
            None,
        )?))
    };
    Ok((list(xs)?, list(ys)?))
}

/// `trend_slope` for all groups of a grouped aggregate.
#[derive(Debug, Default)]
struct TrendGroups {
    points: Vec<Vec<(f64, f64)>>,
    settings: Settings,
    /// Points held, for the memory estimate.
    held: usize,
}

impl TrendGroups {
    fn take(&mut self, emit_to: EmitTo) -> Vec<Vec<(f64, f64)>> {
        let taken = emit_to.take_needed(&mut self.points);
        self.held -= taken.iter().map(Vec::capacity).sum::<usize>();
        taken
    }
}

impl GroupsAccumulator for TrendGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let (x, y, n, fill) = inputs(values)?;
        self.settings.read(n, fill);
        self.points.resize_with(total_num_groups, Vec::new);
        for (i, &g) in group_indices.iter().enumerate() {
            if x.is_valid(i) && y.is_valid(i) && passes(opt_filter, i) {
                let before = self.points[g].capacity();
                self.points[g].push((x.value(i), y.value(i)));
                self.held += self.points[g].capacity() - before;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let groups = self.take(emit_to);
        let settings = self.settings;
        fits_array(groups.iter().map(|p| settings.fit(p)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let groups = self.take(emit_to);
        let (xs, ys) = point_lists(&groups)?;
        let rows = groups.len();
        Ok(vec![
            xs,
            ys,
            Arc::new(Int64Array::from(vec![self.settings.n; rows])),
            Arc::new(BooleanArray::from(vec![Some(self.settings.fill); rows])),
        ])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let (xs, ys, n, fill) = state_columns(values)?;
        self.settings.read(n, fill);
        self.points.resize_with(total_num_groups, Vec::new);
        let (xv, yv) = (
            xs.values().as_primitive::<Float64Type>(),
            ys.values().as_primitive::<Float64Type>(),
        );
        let (xo, yo) = (xs.value_offsets(), ys.value_offsets());
        for (i, &g) in group_indices.iter().enumerate() {
            if xs.is_null(i) || ys.is_null(i) {
                continue;
            }
            let before = self.points[g].capacity();
            let (xr, yr) = (
                xo[i] as usize..xo[i + 1] as usize,
                yo[i] as usize..yo[i + 1] as usize,
            );
            self.points[g].extend(xr.zip(yr).map(|(a, b)| (xv.value(a), yv.value(b))));
            self.held += self.points[g].capacity() - before;
        }
        Ok(())
    }

    /// Each row as the state of a group of its one point (none when NULL or filtered out).
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let (x, y, _, _) = inputs(values)?;
        let groups: Vec<Vec<(f64, f64)>> = (0..x.len())
            .map(|i| {
                if x.is_valid(i) && y.is_valid(i) && passes(opt_filter, i) {
                    vec![(x.value(i), y.value(i))]
                } else {
                    Vec::new()
                }
            })
            .collect();
        let (xs, ys) = point_lists(&groups)?;
        Ok(vec![xs, ys, Arc::clone(&values[2]), Arc::clone(&values[3])])
    }

    fn size(&self) -> usize {
        self.points.capacity() * size_of::<Vec<(f64, f64)>>()
            + self.held * size_of::<(f64, f64)>()
            + size_of_val(self)
    }
}

#[derive(Debug, Default)]
struct TrendAccumulator {
    points: Vec<(f64, f64)>,
    settings: Settings,
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
        let (x, y, n, fill) = inputs(values)?;
        self.settings.read(n, fill);
        for i in 0..x.len() {
            if x.is_valid(i) && y.is_valid(i) {
                self.points.push((x.value(i), y.value(i)));
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (xs, ys, n, fill) = state_columns(states)?;
        self.settings.read(n, fill);
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
            ScalarValue::Int64(self.settings.n),
            ScalarValue::Boolean(Some(self.settings.fill)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let fits = fits_array(std::iter::once(self.settings.fit(&self.points)))?;
        Ok(ScalarValue::Struct(Arc::new(fits.as_struct().clone())))
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

    /// The grouped form fits each group as the one-group form fits its rows, filled or not,
    /// through partial states (one of them from convert_to_state) and a first-n emission.
    #[test]
    fn groups_agree_with_the_row_accumulator() {
        for fill in [true, false] {
            let m = 120;
            let x: Vec<Option<f64>> = (0..m)
                .map(|i| (i % 11 != 0).then_some((i % 6) as f64))
                .collect();
            let y: Vec<Option<f64>> = (0..m).map(|i| Some(((i * 7) % 13) as f64 - 2.0)).collect();
            let groups: Vec<usize> = (0..m).map(|i| (i * 5) % 4).collect();
            let cols = |a: usize, b: usize| -> Vec<ArrayRef> {
                vec![
                    Arc::new(Float64Array::from(x[a..b].to_vec())),
                    Arc::new(Float64Array::from(y[a..b].to_vec())),
                    Arc::new(Int64Array::from(vec![6; b - a])),
                    Arc::new(BooleanArray::from(vec![fill; b - a])),
                ]
            };
            let mut left = TrendGroups::default();
            left.update_batch(&cols(0, 70), &groups[..70], None, 4)
                .unwrap();
            let right = TrendGroups::default()
                .convert_to_state(&cols(70, m), None)
                .unwrap();
            let mut merged = TrendGroups::default();
            merged
                .merge_batch(&left.state(EmitTo::All).unwrap(), &[0, 1, 2, 3], 4)
                .unwrap();
            merged.merge_batch(&right, &groups[70..], 4).unwrap();
            let head = merged.evaluate(EmitTo::First(1)).unwrap();
            let tail = merged.evaluate(EmitTo::All).unwrap();
            for g in 0..4 {
                let mine: Vec<usize> = (0..m).filter(|i| groups[*i] == g).collect();
                let pick = |v: &Vec<Option<f64>>| -> ArrayRef {
                    Arc::new(Float64Array::from(
                        mine.iter().map(|i| v[*i]).collect::<Vec<_>>(),
                    ))
                };
                let mut one = TrendAccumulator::default();
                one.update_batch(&[
                    pick(&x),
                    pick(&y),
                    Arc::new(Int64Array::from(vec![6; mine.len()])),
                    Arc::new(BooleanArray::from(vec![fill; mine.len()])),
                ])
                .unwrap();
                let ScalarValue::Struct(want) = one.evaluate().unwrap() else {
                    panic!()
                };
                let (arr, row) = if g == 0 { (&head, 0) } else { (&tail, g - 1) };
                let got = arr.as_struct();
                for c in 0..2 {
                    let (a, b) = (
                        got.column(c).as_primitive::<Float64Type>(),
                        want.column(c).as_primitive::<Float64Type>(),
                    );
                    assert_eq!(
                        a.is_valid(row),
                        b.is_valid(0),
                        "fill {fill} group {g} col {c}"
                    );
                    if b.is_valid(0) {
                        assert!(
                            (a.value(row) - b.value(0)).abs() < 1e-9,
                            "fill {fill} group {g}"
                        );
                    }
                }
            }
        }
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

//! `signalql_index_weights(held, weight)`: a representation's lexical-v1 term weights on the
//! text index's path (docs/index.md, "Queries"). `held` is, per task term, whether the
//! postings say the representation holds it (a `List<Boolean>`, NULL for a representation that
//! holds none of them); `weight` is the representation's field weight (2 for `summary`, 1 for
//! any other). The answer is, per term, `weight` where it is held, else 0; NULL where `held`
//! is NULL.
//!
//! The postings reach the plan as a table joined on the representation, not as a parameter
//! of the function, so the function is the same in every query and in every process (a
//! cluster's worker finds it by name).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, AsArray, Int64Builder, ListBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub const NAME: &str = "signalql_index_weights";

#[derive(Debug, PartialEq, Eq, Hash)]
struct IndexWeights {
    signature: Signature,
}

static INDEX_WEIGHTS: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(IndexWeights {
        signature: Signature::any(2, Volatility::Immutable),
    }))
});

/// The instance registered by name.
pub fn index_weights_udf() -> Arc<ScalarUDF> {
    Arc::clone(&INDEX_WEIGHTS)
}

/// `List<Int64>`, the type of term weights.
pub fn weights_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)))
}

/// `List<Boolean>`, the type of which terms a representation holds.
pub fn held_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Boolean, true)))
}

impl ScalarUDFImpl for IndexWeights {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::List(f), w] if *f.data_type() == DataType::Boolean && w.is_integer() => {
                Ok(weights_type())
            }
            [DataType::Null, _] => Ok(weights_type()),
            _ => exec_err!("{NAME}(held, weight) takes a list of booleans and an integer"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut out = ListBuilder::with_capacity(Int64Builder::new(), n);
        if arrays[0].data_type() == &DataType::Null {
            for _ in 0..n {
                out.append(false);
            }
            return Ok(ColumnarValue::Array(Arc::new(out.finish())));
        }
        let held = arrays[0].as_list::<i32>();
        let weights = datafusion::arrow::compute::cast(&arrays[1], &DataType::Int64)?;
        let weights = weights.as_primitive::<Int64Type>();
        for i in 0..n {
            if held.is_null(i) {
                out.append(false);
                continue;
            }
            let w = if weights.is_valid(i) {
                weights.value(i)
            } else {
                0
            };
            let terms = held.value(i);
            let terms = terms.as_boolean();
            for t in 0..terms.len() {
                let h = terms.is_valid(t) && terms.value(t);
                out.values().append_value(if h { w } else { 0 });
            }
            out.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BooleanBuilder, Int64Array, ListArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    #[test]
    fn held_terms_take_the_weight_and_the_rest_zero() {
        let mut held = ListBuilder::new(BooleanBuilder::new());
        held.values().append_slice(&[true, false, true]);
        held.append(true);
        held.append(false);
        held.values().append_slice(&[false, true, false]);
        held.append(true);
        let held: ListArray = held.finish();
        let weights = Int64Array::from(vec![Some(2), Some(1), None]);
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(Arc::new(held)),
                ColumnarValue::Array(Arc::new(weights)),
            ],
            arg_fields: vec![
                Arc::new(Field::new("held", held_type(), true)),
                Arc::new(Field::new("weight", DataType::Int64, true)),
            ],
            number_rows: 3,
            return_field: Arc::new(Field::new("w", weights_type(), true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        let ColumnarValue::Array(out) = index_weights_udf().invoke_with_args(args).unwrap() else {
            panic!("an array")
        };
        let out = out.as_list::<i32>();
        let row =
            |i: usize| -> Vec<i64> { out.value(i).as_primitive::<Int64Type>().values().to_vec() };
        assert_eq!(row(0), vec![2, 0, 2]);
        assert!(out.is_null(1));
        // A NULL weight (a representation without one) counts 0.
        assert_eq!(row(2), vec![0, 0, 0]);
    }
}

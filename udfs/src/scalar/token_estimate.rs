//! `token_estimate(text)`: the chars-div-4-v1 token estimate of a text, `ceil(characters / 4)`
//! with characters counted as Unicode scalar values (signalql-v0.5-context.md: a
//! representation without a stored token count is estimated this way). NULL gives NULL.
//!
//! SQL: `SELECT sum(token_estimate(content)) FROM representations`.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::strings::StringColumn;

pub const NAME: &str = "token_estimate";
/// The estimator's name, as bundles record it.
pub const ESTIMATOR: &str = "chars-div-4-v1";

/// `ceil(characters / 4)`.
pub fn chars_div_4(text: &str) -> i64 {
    (text.chars().count() as i64 + 3) / 4
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TokenEstimate {
    signature: Signature,
}

impl Default for TokenEstimate {
    fn default() -> Self {
        Self {
            signature: Signature::string(1, Volatility::Immutable),
        }
    }
}

static TOKEN_ESTIMATE: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::from(TokenEstimate::default())));

pub fn token_estimate_udf() -> Arc<ScalarUDF> {
    Arc::clone(&TOKEN_ESTIMATE)
}

/// `token_estimate(text)` as an [`Expr`].
pub fn token_estimate(text: Expr) -> Expr {
    token_estimate_udf().call(vec![text])
}

impl ScalarUDFImpl for TokenEstimate {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text] = args.args.as_slice() else {
            return exec_err!("{NAME} takes one argument");
        };
        match text {
            ColumnarValue::Scalar(s) => {
                let s = s.cast_to(&DataType::Utf8)?;
                let ScalarValue::Utf8(v) = s else {
                    return exec_err!("{NAME} takes text");
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Int64(
                    v.as_deref().map(chars_div_4),
                )))
            }
            ColumnarValue::Array(arr) => {
                let text = StringColumn::cast_from(arr.as_ref())?;
                let out: Int64Array = text.iter().map(|v| v.map(chars_div_4)).collect();
                Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_hand() {
        assert_eq!(chars_div_4(""), 0);
        assert_eq!(chars_div_4("abcd"), 1);
        assert_eq!(chars_div_4("abcde"), 2);
        // Four scalar values, eight bytes: one token.
        assert_eq!(chars_div_4("éééé"), 1);
    }
}

//! `signalql_text_time(text)`: a time column stored as RFC 3339 text, read as a UTC instant in
//! microseconds (`timestamp(us, UTC)`), for tables mapped in `signalql.toml`
//! (docs/mapping.md).
//!
//! Accepted: RFC 3339 (`2026-06-01T12:00:00Z`, `…+02:00`, fractional seconds), the same with
//! a space for `T`, without an offset (read as UTC), and a bare date (midnight UTC): what
//! arrow's text-to-timestamp parser reads. A value that is none of these is an error naming
//! the column (its file is named by the engine), never a silent NULL.
//!
//! Each table's instance knows its column's name. A plan sent to another process (a cluster's
//! worker, which finds a function by its name) carries the name as a second argument instead:
//! `signalql_text_time(text, 'received_at')` ([`TextTime::travelling`], [`text_time_udf`]).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, TimestampMicrosecondArray};
use datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExpressionPlacement, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, lit,
};

use crate::strings::StringColumn;

pub const NAME: &str = "signalql_text_time";

/// The start of an error this function raises: the engine looks for it to name the file.
pub const ERROR_PREFIX: &str = "unreadable time in column";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TextTime {
    signature: Signature,
    /// How the column is named in errors (`timestamp (file column received_at)`).
    column: String,
}

/// `signalql_text_time(text)` for the column named `column` in errors.
pub fn text_time(text: Expr, column: &str) -> Expr {
    Arc::new(ScalarUDF::from(TextTime {
        signature: super::of_text(),
        column: column.to_string(),
    }))
    .call(vec![text])
}

static TEXT_TIME: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(TextTime {
        signature: super::of_text_and_parameter(),
        column: String::new(),
    }))
});

/// The instance registered by name: `signalql_text_time(text, column)`, `column` the name
/// errors give the column.
pub fn text_time_udf() -> Arc<ScalarUDF> {
    Arc::clone(&TEXT_TIME)
}

/// Microseconds since the epoch of the time `s` holds (years 1677 to 2262, the range of
/// arrow's parser).
pub fn parse_micros(s: &str) -> Option<i64> {
    let nanos = string_to_timestamp_nanos(s.trim()).ok()?;
    Some(nanos.div_euclid(1000))
}

impl TextTime {
    /// The same function of `text` with its column's name as an argument: the form that keeps
    /// its meaning where the function is found by name.
    pub fn travelling(&self, text: Expr) -> Expr {
        text_time_udf().call(vec![text, lit(self.column.as_str())])
    }
}

/// The instant `s` holds, or an error naming `column`.
fn read(column: &str, s: &str) -> Result<i64> {
    match parse_micros(s) {
        Some(t) => Ok(t),
        None => {
            let shown: String = s.chars().take(60).collect();
            exec_err!("{ERROR_PREFIX} {column}: {shown:?} is not an RFC 3339 time")
        }
    }
}

fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

impl ScalarUDFImpl for TextTime {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(utc())
    }

    fn placement(&self, args: &[ExpressionPlacement]) -> ExpressionPlacement {
        match args {
            [ExpressionPlacement::Column | ExpressionPlacement::Literal]
            | [
                ExpressionPlacement::Column | ExpressionPlacement::Literal,
                ExpressionPlacement::Literal,
            ] => ExpressionPlacement::MoveTowardsLeafNodes,
            _ => ExpressionPlacement::KeepInPlace,
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (arg, column) = match args.args.as_slice() {
            [arg] => (arg, self.column.as_str()),
            [arg, ColumnarValue::Scalar(ScalarValue::Utf8(Some(column)))] => (arg, column.as_str()),
            _ => return exec_err!("{NAME} takes text, and with it its column's name or nothing"),
        };
        match arg {
            ColumnarValue::Scalar(s) => {
                let t = match s {
                    ScalarValue::Utf8(v) | ScalarValue::Utf8View(v) | ScalarValue::LargeUtf8(v) => {
                        v.as_deref().map(|v| read(column, v)).transpose()?
                    }
                    ScalarValue::Null => None,
                    other => return exec_err!("{NAME} takes text, got {other:?}"),
                };
                Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
                    t,
                    Some("UTC".into()),
                )))
            }
            ColumnarValue::Array(a) => {
                let text = StringColumn::try_new(a.as_ref())?;
                let out: TimestampMicrosecondArray = text
                    .iter()
                    .map(|v| v.map(|v| read(column, v)).transpose())
                    .collect::<Result<_>>()?;
                Ok(ColumnarValue::Array(
                    Arc::new(out.with_timezone("UTC")) as Arc<dyn Array>
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rfc3339_and_its_common_variants_as_utc() {
        let base = 1_780_315_200_000_000; // 2026-06-01T12:00:00Z
        assert_eq!(parse_micros("2026-06-01T12:00:00Z"), Some(base));
        assert_eq!(parse_micros("2026-06-01T14:00:00+02:00"), Some(base));
        assert_eq!(parse_micros("2026-06-01 12:00:00"), Some(base));
        assert_eq!(
            parse_micros("2026-06-01T12:00:00.25Z"),
            Some(base + 250_000)
        );
        assert_eq!(parse_micros("2026-06-01"), Some(base - 12 * 3_600_000_000));
        assert_eq!(parse_micros("yesterday"), None);
        assert_eq!(parse_micros(""), None);
    }
}

//! `signalql_month_start(ts)`: the first instant (00:00 UTC on the 1st) of the calendar month
//! of a UTC microsecond timestamp, as a UTC microsecond timestamp. `BUCKET BY m` buckets by it.
//!
//! DataFusion 55's `date_trunc('month', …)` works in nanoseconds, so it fails outside
//! 1677–2262 ("Timestamp … out of range"); it also converts every value to a local date-time.
//! This is integer arithmetic on the days since 1970-01-01 (the civil-from-days algorithm of
//! H. Hinnant's "chrono-Compatible Low-Level Date Algorithms", proleptic Gregorian), exact for
//! every microsecond timestamp whose month start is representable, NULL otherwise.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, AsArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub const NAME: &str = "signalql_month_start";

const DAY: i64 = 86_400_000_000;

fn utc_micros() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MonthStart {
    signature: Signature,
}

impl Default for MonthStart {
    fn default() -> Self {
        MonthStart {
            signature: Signature::exact(vec![utc_micros()], Volatility::Immutable),
        }
    }
}

static MONTH_START: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::from(MonthStart::default())));

/// The singleton UDF.
pub fn month_start_udf() -> Arc<ScalarUDF> {
    Arc::clone(&MONTH_START)
}

/// `signalql_month_start(ts)` as an [`Expr`] (`ts`: a UTC microsecond timestamp).
pub fn month_start(ts: Expr) -> Expr {
    month_start_udf().call(vec![ts])
}

/// The start of the month of `us` (UTC microseconds since the epoch), or `None` when it is
/// before the first representable instant.
pub fn month_start_micros(us: i64) -> Option<i64> {
    let days = us.div_euclid(DAY);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let first = days - doy + (153 * mp + 2) / 5;
    first.checked_mul(DAY)
}

impl ScalarUDFImpl for MonthStart {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(utc_micros())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(arg) = args.args.first() else {
            return exec_err!("{NAME} takes one argument");
        };
        match arg {
            ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(v, _)) => {
                Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
                    v.and_then(month_start_micros),
                    Some("UTC".into()),
                )))
            }
            ColumnarValue::Array(a) => {
                let Some(ts) = a.as_primitive_opt::<TimestampMicrosecondType>() else {
                    return exec_err!("{NAME} takes a timestamp, got {}", a.data_type());
                };
                // Runs of one month are common: compute each month's bounds once.
                let mut month: Option<(i64, i64)> = None; // [start, next start)
                let out: TimestampMicrosecondArray = ts
                    .iter()
                    .map(|v| {
                        let v = v?;
                        if let Some((lo, hi)) = month
                            && lo <= v
                            && v < hi
                        {
                            return Some(lo);
                        }
                        let s = month_start_micros(v)?;
                        // The next month starts at most 31 days later.
                        let next = s
                            .checked_add(32 * DAY)
                            .and_then(month_start_micros)
                            .unwrap_or(i64::MAX);
                        month = Some((s, next));
                        Some(s)
                    })
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(out.with_timezone("UTC"))))
            }
            other => exec_err!("{NAME} takes a timestamp, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};

    /// Against chrono's calendar: every day from 1600 to 2500 (leap years and centuries), and
    /// instants around the ends of the representable range.
    #[test]
    fn agrees_with_the_calendar() {
        let mut day = NaiveDate::from_ymd_opt(1600, 1, 1).unwrap();
        let end = NaiveDate::from_ymd_opt(2500, 12, 31).unwrap();
        while day <= end {
            let first = day.with_day(1).unwrap();
            let at = |d: NaiveDate, us: i64| {
                Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap())
                    .timestamp_micros()
                    + us
            };
            for us in [0, 1, DAY - 1] {
                assert_eq!(
                    month_start_micros(at(day, us)),
                    Some(at(first, 0)),
                    "{day} +{us}"
                );
            }
            day = day.succ_opt().unwrap();
        }
        // 9999-12-31T23:59:59.999999Z and the last representable instant.
        let late = DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999999Z")
            .unwrap()
            .timestamp_micros();
        let dec = DateTime::parse_from_rfc3339("9999-12-01T00:00:00Z")
            .unwrap()
            .timestamp_micros();
        assert_eq!(month_start_micros(late), Some(dec));
        // i64::MAX µs is in year 294247, past chrono's calendar: the start of its month is a
        // midnight less than 31 days before it, its own month's start, and the previous
        // instant is in the month before.
        let last = month_start_micros(i64::MAX).unwrap();
        assert_eq!(last % DAY, 0);
        assert!(i64::MAX - last < 31 * DAY);
        assert_eq!(month_start_micros(last), Some(last));
        assert!(month_start_micros(last - 1).unwrap() < last);
        // The first instants: their month starts before i64::MIN microseconds.
        assert_eq!(month_start_micros(i64::MIN), None);
    }
}

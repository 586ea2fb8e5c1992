//! Time arithmetic of the language: the evaluation time `T`, window bounds and bucket series.
//!
//! Decided in DESIGN.md §4: UTC throughout; `LAST n unit` is `[T − n·unit, T)` with
//! h = 3600 s, d = 86 400 s, w = 7 d and m = 30 d; `BETWEEN a AND b` is `[a, b)`;
//! `BUCKET BY m` truncates to the calendar month and `w` to the ISO week (Monday).

use chrono::{
    DateTime, Datelike, Duration as ChronoDuration, Months, NaiveDate, TimeZone, Timelike, Utc,
};

use datafusion::arrow::datatypes::{DataType, TimeUnit as ArrowTimeUnit};
use datafusion::logical_expr::{Expr, cast, lit};

use crate::error::{Error, Result};
use crate::syntax::ast::{Duration, TimeUnit, TimeWindow, Timestamp, Window};

/// Seconds in one unit when used as a window length.
pub fn unit_seconds(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Hour => 3_600,
        TimeUnit::Day => 86_400,
        TimeUnit::Week => 7 * 86_400,
        TimeUnit::Month => 30 * 86_400,
    }
}

/// The length of `n unit` in seconds; `None` when it does not fit an `i64`.
pub fn duration_seconds(d: &Duration) -> Option<i64> {
    i64::try_from(d.n)
        .ok()
        .and_then(|n| n.checked_mul(unit_seconds(d.unit)))
}

/// The length of `n unit` in whole days, saturating (for limit messages).
pub fn duration_days(d: &Duration) -> u64 {
    let days = u128::from(d.n) * unit_seconds(d.unit) as u128 / 86_400;
    u64::try_from(days).unwrap_or(u64::MAX)
}

/// Parse a normalised timestamp literal of the AST.
pub fn parse_timestamp(t: &Timestamp) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&t.0)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| Error::internal(format!("timestamp {:?} was not normalised: {e}", t.0)))
}

/// Microseconds since the epoch.
pub fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// RFC 3339 text with `Z`, seconds, and sub-seconds only when present.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A half-open interval `[start, end)` in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

impl Interval {
    pub fn days(&self) -> f64 {
        (self.end - self.start).num_seconds() as f64 / 86_400.0
    }
}

/// The evaluation time: the window's AS OF when given, else `default_now`.
pub fn anchor(window: Option<&Window>, default_now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    match window.and_then(|w| w.as_of.as_ref()) {
        Some(t) => parse_timestamp(t),
        None => Ok(default_now),
    }
}

/// The interval a window clause selects, anchored at `t`, checked against `max_days`.
pub fn window_interval(window: &Window, t: DateTime<Utc>, max_days: u64) -> Result<Interval> {
    let interval = match &window.range {
        TimeWindow::Last(d) => {
            let max_secs = i64::try_from(max_days).map_or(i64::MAX, |m| m.saturating_mul(86_400));
            let Some(secs) = duration_seconds(d).filter(|s| *s <= max_secs) else {
                return Err(
                    Error::limit("max_window_days", max_days, duration_days(d)).at(window.span)
                );
            };
            Interval {
                start: t - ChronoDuration::seconds(secs),
                end: t,
            }
        }
        TimeWindow::Between { start, end } => Interval {
            start: parse_timestamp(start)?,
            end: parse_timestamp(end)?,
        },
    };
    let span_secs = (interval.end - interval.start).num_seconds();
    if span_secs > max_days as i64 * 86_400 {
        let days = (span_secs as u64).div_ceil(86_400);
        return Err(Error::limit("max_window_days", max_days, days).at(window.span));
    }
    Ok(interval)
}

/// The start of the bucket containing `t`.
pub fn truncate(t: DateTime<Utc>, unit: TimeUnit) -> DateTime<Utc> {
    let date = t.date_naive();
    let day_start =
        |d: NaiveDate| Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap_or_default());
    match unit {
        TimeUnit::Hour => day_start(date) + ChronoDuration::hours(t.hour() as i64),
        TimeUnit::Day => day_start(date),
        TimeUnit::Week => {
            day_start(date) - ChronoDuration::days(date.weekday().num_days_from_monday() as i64)
        }
        TimeUnit::Month => day_start(date.with_day(1).unwrap_or(date)),
    }
}

/// The start of the bucket after the one starting at `b`.
pub fn next_bucket(b: DateTime<Utc>, unit: TimeUnit) -> DateTime<Utc> {
    match unit {
        TimeUnit::Hour => b + ChronoDuration::hours(1),
        TimeUnit::Day => b + ChronoDuration::days(1),
        TimeUnit::Week => b + ChronoDuration::days(7),
        TimeUnit::Month => b
            .checked_add_months(Months::new(1))
            .unwrap_or(b + ChronoDuration::days(31)),
    }
}

/// Every bucket start whose bucket overlaps `[start, end)`, ascending. At most `cap`
/// buckets (a limit error beyond it).
pub fn bucket_series(interval: Interval, unit: TimeUnit, cap: u64) -> Result<Vec<DateTime<Utc>>> {
    let mut out = Vec::new();
    if interval.start >= interval.end {
        return Ok(out);
    }
    let mut b = truncate(interval.start, unit);
    while b < interval.end {
        if out.len() as u64 >= cap {
            return Err(Error::limit("max_buckets", cap, out.len() as u64 + 1));
        }
        out.push(b);
        b = next_bucket(b, unit);
    }
    Ok(out)
}

/// The start of the bucket of `unit` containing `ts` (a timestamp column), as an expression:
/// what [`truncate`] gives, in UTC microseconds. Hours, days and weeks are fixed widths in UTC,
/// so their start is integer arithmetic on the microseconds (weeks counted from a Monday,
/// 1970-01-05, as ISO weeks are); months are `signalql_month_start`, the same arithmetic on
/// the calendar. DataFusion 55's `date_trunc` on a timestamp with a time zone converts every
/// value to a local date-time and back: on 10M generated events (W2, BUCKET BY d) it cost
/// 55-70 ms of a 150 ms query, against nothing measurable for the arithmetic (docs/semantics.md,
/// "Buckets"); and it works in nanoseconds, so it failed on times outside 1677-2262. Unlike
/// `date_bin`, which scales to nanoseconds, this is exact for every microsecond timestamp.
pub fn bucket_start(unit: TimeUnit, ts: Expr, ts_type: &DataType) -> Expr {
    const HOUR: i64 = 3_600_000_000;
    let utc_micros = DataType::Timestamp(ArrowTimeUnit::Microsecond, Some("UTC".into()));
    let ts = if *ts_type == utc_micros {
        ts
    } else {
        cast(ts, utc_micros.clone())
    };
    let (width, origin) = match unit {
        TimeUnit::Hour => (HOUR, 0),
        TimeUnit::Day => (24 * HOUR, 0),
        TimeUnit::Week => (7 * 24 * HOUR, 4 * 24 * HOUR),
        TimeUnit::Month => return signalql_udfs::scalar::month_start::month_start(ts),
    };
    let us = cast(ts, DataType::Int64);
    let since = if origin == 0 {
        us.clone()
    } else {
        us.clone() - lit(origin)
    };
    // (us - origin) mod width, in [0, width) also before the origin.
    let into = (since % lit(width) + lit(width)) % lit(width);
    cast(us - into, utc_micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ts(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// The bucket expression gives what `truncate` (chrono's calendar) gives, for every unit,
    /// at bucket edges, before 1970, and far from it.
    #[test]
    fn bucket_start_is_truncate() {
        use datafusion::arrow::array::{Array, RecordBatch, TimestampMicrosecondArray};
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::prelude::{SessionContext, col};
        let times = [
            "2026-06-13T17:45:12.5Z",
            "2026-06-08T00:00:00Z",
            "2026-06-07T23:59:59.999999Z",
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999999Z",
            "1969-12-29T00:00:00Z",
            "1900-02-28T13:00:00.000001Z",
            "2999-12-31T23:30:00Z",
            "9999-12-31T23:59:59.999999Z",
        ];
        let values: Vec<i64> = times.iter().map(|t| micros(ts(t))).collect();
        let column = TimestampMicrosecondArray::from(values.clone()).with_timezone("UTC");
        let schema = Schema::new(vec![Field::new("t", column.data_type().clone(), false)]);
        let batch = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(column)]).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // Months too, past 2262 where DataFusion's nanosecond `date_trunc` failed.
        for unit in [
            TimeUnit::Hour,
            TimeUnit::Day,
            TimeUnit::Week,
            TimeUnit::Month,
        ] {
            let n = times.len();
            let batch = batch.slice(0, n);
            let ctx = SessionContext::new();
            let out = rt.block_on(async {
                ctx.read_batch(batch.clone())
                    .unwrap()
                    .select(vec![bucket_start(
                        unit,
                        col("t"),
                        batch.column(0).data_type(),
                    )])
                    .unwrap()
                    .collect()
                    .await
                    .unwrap_or_else(|e| panic!("{unit:?}: {e}"))
            });
            let got = out[0]
                .column(0)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .unwrap();
            assert_eq!(got.data_type(), batch.column(0).data_type());
            for (i, t) in times[..n].iter().enumerate() {
                let want = micros(truncate(ts(t), unit));
                assert_eq!(got.value(i), want, "{t} by {unit:?}");
            }
        }
    }

    #[test]
    fn truncation_by_unit() {
        let t = ts("2026-06-13T17:45:12.5Z"); // a Saturday
        assert_eq!(truncate(t, TimeUnit::Hour), ts("2026-06-13T17:00:00Z"));
        assert_eq!(truncate(t, TimeUnit::Day), ts("2026-06-13T00:00:00Z"));
        assert_eq!(truncate(t, TimeUnit::Week), ts("2026-06-08T00:00:00Z"));
        assert_eq!(truncate(t, TimeUnit::Month), ts("2026-06-01T00:00:00Z"));
        assert_eq!(
            truncate(ts("2026-06-08T00:00:00Z"), TimeUnit::Week),
            ts("2026-06-08T00:00:00Z")
        );
    }

    #[test]
    fn series_covers_every_overlapping_bucket() {
        let i = Interval {
            start: ts("2026-06-10T12:00:00Z"),
            end: ts("2026-06-13T00:00:00Z"),
        };
        let days = bucket_series(i, TimeUnit::Day, 100).unwrap();
        assert_eq!(
            days,
            vec![
                ts("2026-06-10T00:00:00Z"),
                ts("2026-06-11T00:00:00Z"),
                ts("2026-06-12T00:00:00Z")
            ]
        );
        let months = bucket_series(
            Interval {
                start: ts("2026-01-31T00:00:00Z"),
                end: ts("2026-03-01T00:00:00Z"),
            },
            TimeUnit::Month,
            100,
        )
        .unwrap();
        assert_eq!(
            months,
            vec![ts("2026-01-01T00:00:00Z"), ts("2026-02-01T00:00:00Z")]
        );
        assert!(bucket_series(i, TimeUnit::Hour, 10).is_err());
    }
}

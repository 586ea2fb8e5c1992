//! `--plot FILE.svg`: a bucketed result as a line chart, one line per group (plotters, SVG).
//!
//! The x axis is the bucket time, the y axis the query's first numeric aggregate; each distinct
//! combination of the other returned fields is a group and a line (its values joined by ", ",
//! NULL shown as `NULL`). NULL values (empty buckets of non-count aggregates) leave gaps.

use chrono::{DateTime, Utc};
use plotters::prelude::*;
use serde_json::Value;

use crate::ast::{ReturnItem, Statement};
use crate::{Envelope, Error};

/// One line of the chart: its label and its (time in µs, value) points, in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

fn label(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The series of `env`: time column `time`, group columns `groups`, measure column `measure`.
pub fn series(env: &Envelope, time: usize, groups: &[usize], measure: usize) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for row in &env.rows {
        let Some(t) = row[time]
            .as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        else {
            continue;
        };
        let name = groups
            .iter()
            .map(|g| label(&row[*g]))
            .collect::<Vec<_>>()
            .join(", ");
        let idx = match out.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                out.push(Series {
                    name,
                    points: Vec::new(),
                });
                out.len() - 1
            }
        };
        if let Some(y) = row[measure].as_f64() {
            out[idx].points.push((t.timestamp_micros(), y));
        }
    }
    for s in &mut out {
        s.points.sort_by_key(|p| p.0);
    }
    out
}

fn date(us: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(us)
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default()
}

/// `--plot FILE.svg`: draws the result `env` of the bucketed retrieve query `text` and writes
/// it to `path` (a temporary file beside it, renamed over it). The x axis is the query's time
/// column (which RETURN must name), the measure its first numeric aggregate.
pub fn write_plot(path: &std::path::Path, text: &str, env: &Envelope) -> crate::Result<()> {
    let not_bucketed =
        || Error::type_error("--plot draws a bucketed series: the query needs BUCKET BY");
    let Statement::Retrieve(q) = crate::parse(text)? else {
        return Err(not_bucketed());
    };
    if q.bucket.is_none() {
        return Err(not_bucketed());
    }
    let time_name = q.time_column.clone().unwrap_or_else(|| "timestamp".into());
    let time = env
        .columns
        .iter()
        .position(|c| c.name == time_name)
        .ok_or_else(|| Error::type_error(format!("--plot needs `{time_name}` in RETURN")))?;
    let mut groups = Vec::new();
    let mut measure = None;
    for (i, (item, col)) in q.returns.iter().zip(&env.columns).enumerate() {
        match item {
            ReturnItem::Field(_) if i != time => groups.push(i),
            ReturnItem::Count | ReturnItem::Aggregate(_)
                if measure.is_none() && matches!(col.data_type.as_str(), "integer" | "number") =>
            {
                measure = Some(i)
            }
            _ => {}
        }
    }
    let measure =
        measure.ok_or_else(|| Error::type_error("--plot needs a numeric aggregate in RETURN"))?;
    let series = series(env, time, &groups, measure);
    let svg = svg(
        &series,
        &q.to_string().replace('\n', " "),
        &env.columns[measure].name,
    )
    .map_err(Error::io)?;
    signalql_catalog::file::replace(path, |f| std::io::Write::write_all(f, svg.as_bytes()))
        .map_err(|e| Error::io(format!("{}: {}", path.display(), e.source)))
}

/// The chart as SVG text.
pub fn svg(series: &[Series], title: &str, y_label: &str) -> Result<String, String> {
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (i64::MAX, i64::MIN, 0.0f64, f64::MIN);
    for (x, y) in points {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if x0 > x1 {
        return Err("the result has no points to plot".into());
    }
    if x1 == x0 {
        x1 = x0 + 1;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (960, 540)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1 * 1.05)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_labels(6)
            .x_label_formatter(&|x| date(*x))
            .y_desc(y_label)
            .draw()
            .map_err(|x| e(&x))?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|x| e(&x))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        if series.len() > 1 || !series.iter().all(|s| s.name.is_empty()) {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    Ok(text)
}

//! One trace per run (context-runtime.md §6, §3.1; docs/runtime.md): with `--trace` or
//! `[trace] enabled = true`, every statement an engine answers writes one JSON [`Trace`] to
//! `ROOT/traces/` (or `[trace] folder`): its stages as spans with rows, bytes, tokens and time,
//! the plan-cache outcome, the error if any, and its estimates (from the files' metadata, and
//! the time model's interval) beside the actual figures.
//!
//! The traces are also the samples of the time model ([`TimeModel`]) that simulate's interval
//! comes from, and of the estimator statistics ([`statistics`]). Writing a trace never fails
//! the statement: a folder that cannot be written is reported once on stderr.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use signalql_catalog::Root;

use crate::forms::{RUNTIME_FORMS, Unknown};

/// One trace's figure of a field: the estimate's point, low and high, and the actual value.
type Picked = (f64, f64, f64, f64);

/// The folder of a root's traces.
pub const FOLDER: &str = "traces";

/// The traces read for the time model and the statistics: the newest this many.
pub const SAMPLES_READ: usize = 2000;

/// The estimator whose figures traces record (the footers' counts and the time model).
pub const ESTIMATOR_VERSION: &str = "footprint-v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    #[serde(default = "crate::forms::runtime_forms")]
    pub spec_version: String,
    /// `trace_<UTC start>_<16 hex>`; also the file's name.
    pub id: String,
    /// The statement's canonical text (its text as given when it did not parse).
    pub statement: String,
    /// Where it ran: `cli`, `mcp`, `serve` or `api`.
    pub surface: String,
    pub principal: Option<String>,
    pub started_at: String,
    pub elapsed_ms: f64,
    /// `hit`, `miss` or `bypass`.
    pub plan_cache: String,
    pub spans: Vec<Span>,
    pub estimate: TraceEstimate,
    pub actual: TraceActual,
    /// The error's JSON (`{"code", "message", …}`) when the statement failed.
    pub error: Option<Value>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub id: String,
    pub parent_id: Option<String>,
    /// `statement`, `parse`, `bind`, `lower`, `plan`, `execute`, `envelope` or `pack`.
    pub name: String,
    pub start: String,
    pub end: String,
    pub elapsed_ms: f64,
    pub attrs: Map<String, Value>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: Unknown,
}

/// A predicted value and its interval (p = 0.9).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub point: f64,
    pub low: f64,
    pub high: f64,
}

/// What was expected before the statement ran, from metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceEstimate {
    /// Result rows (DataFusion's estimate; null when it has none).
    pub rows: Option<u64>,
    /// What the scans read after pruning row groups by statistics.
    pub scanned_rows: Option<u64>,
    pub scanned_bytes: Option<u64>,
    /// The time model's interval; null before any sample.
    pub elapsed_ms: Option<Interval>,
    pub based_on_samples: u64,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: Unknown,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceActual {
    pub rows: u64,
    pub scanned_rows: u64,
    pub scanned_bytes: u64,
    pub elapsed_ms: f64,
    /// Tokens of a bundle's items.
    pub tokens: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: Unknown,
}

/// Where an engine's traces go, and the time model learnt from them.
pub struct Tracer {
    folder: Root,
    /// The folder of the traces in `folder`.
    rel: String,
    /// The principal of the engine, when a policy governs the dataset: the model and the
    /// statistics read only its own traces (others' would tell what they ran and read).
    principal: Option<String>,
    reported: AtomicBool,
    model: Mutex<Option<TimeModel>>,
}

impl Tracer {
    /// Traces written to the folder `rel` of `folder`.
    pub fn new(folder: Root, rel: impl Into<String>, principal: Option<String>) -> Tracer {
        Tracer {
            folder,
            rel: rel.into(),
            principal,
            reported: AtomicBool::new(false),
            model: Mutex::new(None),
        }
    }

    /// The time model of the traces written so far (read from the folder once).
    pub fn predict(&self, scanned_rows: Option<u64>) -> (Option<Interval>, u64) {
        let mut model = match self.model.lock() {
            Ok(m) => m,
            Err(_) => return (None, 0),
        };
        let m = model.get_or_insert_with(|| TimeModel::from_traces(&self.traces()));
        (m.predict(scanned_rows), m.samples() as u64)
    }

    /// Writes `trace` and learns from it. Never fails: the first write that cannot be made is
    /// reported on stderr, later ones are not.
    pub fn write(&self, trace: &Trace) {
        if let Ok(mut m) = self.model.lock()
            && let Some(m) = m.as_mut()
        {
            m.observe(trace);
        }
        let written = serde_json::to_vec_pretty(trace)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                self.folder
                    .put_new(&format!("{}/{}.json", self.rel, trace.id), text)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written
            && !self.reported.swap(true, Ordering::SeqCst)
        {
            eprintln!(
                "signalql: cannot write traces to {}: {e} (queries still run; this is reported \
                 once)",
                self.folder.display_of(&self.rel)
            );
        }
    }

    /// The traces written so far (the newest [`SAMPLES_READ`]); with a policy, the engine's
    /// principal's only.
    pub fn traces(&self) -> Vec<Trace> {
        let mut traces = read_traces(&self.folder, &self.rel);
        if self.principal.is_some() {
            traces.retain(|t| t.principal == self.principal);
        }
        traces
    }
}

/// A new trace id: the start time, then a hash of it, the process and a counter.
pub fn new_id(started: DateTime<Utc>) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = Sha256::new();
    h.update(started.timestamp_nanos_opt().unwrap_or(0).to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(n.to_le_bytes());
    format!(
        "trace_{}_{}",
        started.format("%Y%m%dT%H%M%S%6fZ"),
        &hex::encode(h.finalize())[..16]
    )
}

/// The newest [`SAMPLES_READ`] traces in the folder `rel` of `folder`, oldest first;
/// unreadable ones are left out.
pub fn read_traces(folder: &Root, rel: &str) -> Vec<Trace> {
    let Ok(mut names) = folder.list_names(rel) else {
        return Vec::new();
    };
    names.retain(|(n, _)| n.starts_with("trace_") && n.ends_with(".json"));
    names.sort();
    let skip = names.len().saturating_sub(SAMPLES_READ);
    names
        .into_iter()
        .skip(skip)
        .filter_map(|(n, _)| {
            let text = folder.read(&format!("{rel}/{n}")).ok()??;
            crate::forms::read("trace", &text, RUNTIME_FORMS).ok()
        })
        .collect()
}

/// The time a statement takes, as a function of the rows its scans read after pruning:
/// `elapsed ≈ k · (1 + rows / 100 000)`, with `k` taken per sample from the engine's own
/// measured runs. The point is the median `k`; the interval is the 5th to 95th percentile of
/// `k` once there are 20 samples, and with fewer the range of `k` seen, halved and doubled
/// (wide, as the few samples warrant). With no sample there is no estimate.
#[derive(Debug, Clone, Default)]
pub struct TimeModel {
    ks: Vec<f64>,
}

const ROWS_SCALE: f64 = 100_000.0;
const FULL_SAMPLES: usize = 20;

fn size(rows: Option<u64>) -> f64 {
    1.0 + rows.unwrap_or(0) as f64 / ROWS_SCALE
}

impl TimeModel {
    pub fn from_traces(traces: &[Trace]) -> TimeModel {
        let mut m = TimeModel::default();
        for t in traces {
            m.observe(t);
        }
        m
    }

    pub fn samples(&self) -> usize {
        self.ks.len()
    }

    /// Learns from a completed run (failed runs are not samples).
    pub fn observe(&mut self, t: &Trace) {
        if t.error.is_none() && t.actual.elapsed_ms.is_finite() {
            // The newest SAMPLES_READ, as read from the folder.
            if self.ks.len() >= SAMPLES_READ {
                self.ks.remove(0);
            }
            self.ks
                .push(t.actual.elapsed_ms / size(t.estimate.scanned_rows));
        }
    }

    pub fn predict(&self, scanned_rows: Option<u64>) -> Option<Interval> {
        if self.ks.is_empty() {
            return None;
        }
        let mut ks = self.ks.clone();
        ks.sort_by(f64::total_cmp);
        let at = |q: f64| ks[((ks.len() - 1) as f64 * q).round() as usize];
        let s = size(scanned_rows);
        let (low, high) = if ks.len() >= FULL_SAMPLES {
            (at(0.05), at(0.95))
        } else {
            (ks[0] / 2.0, ks[ks.len() - 1] * 2.0)
        };
        Some(Interval {
            point: at(0.5) * s,
            low: low * s,
            high: high * s,
        })
    }
}

/// One estimated field's record (context-runtime.md §3.1's FieldStatistics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldStatistics {
    pub field: String,
    /// Over the samples that have both an estimate and an actual value; 0 with none.
    pub mean_absolute_error: f64,
    /// The fraction of actual values inside the estimate's interval (the interval of a count
    /// from the footers is the count itself); 0 with no samples.
    pub calibration: f64,
    /// The 5th and 95th percentiles of (actual − estimate): the interval a fresh estimate
    /// carries; 0 with no samples.
    pub ci_low: f64,
    pub ci_high: f64,
    pub sample_count: u64,
    pub last_updated: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: Unknown,
}

/// The estimator's statistics (context-runtime.md §3.1's CostModelStatistics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statistics {
    #[serde(default = "crate::forms::runtime_forms")]
    pub spec_version: String,
    pub estimator_version: String,
    pub fields: Vec<FieldStatistics>,
    /// The slice these cover; null: every statement.
    pub bucket: Option<String>,
    /// signalql's extension: the resident context index this process holds (a one-shot
    /// command holds at most the snapshot it read; absent for an engine without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident: Option<crate::context::resident::ResidentReport>,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: Unknown,
}

/// The statistics of the estimates recorded in `traces`: result rows, scanned rows, scanned
/// bytes and elapsed time.
pub fn statistics(traces: &[Trace]) -> Statistics {
    type Pick = fn(&Trace) -> Option<(f64, f64, f64, f64)>;
    let fields: [(&str, Pick); 4] = [
        ("rows", |t| {
            t.estimate
                .rows
                .map(|e| (e as f64, e as f64, e as f64, t.actual.rows as f64))
        }),
        ("scanned_rows", |t| {
            t.estimate.scanned_rows.map(|e| {
                let e = e as f64;
                (e, e, e, t.actual.scanned_rows as f64)
            })
        }),
        ("scanned_bytes", |t| {
            t.estimate.scanned_bytes.map(|e| {
                let e = e as f64;
                (e, e, e, t.actual.scanned_bytes as f64)
            })
        }),
        ("elapsed_ms", |t| {
            t.estimate
                .elapsed_ms
                .map(|i| (i.point, i.low, i.high, t.actual.elapsed_ms))
        }),
    ];
    let fields = fields
        .iter()
        .map(|(name, pick)| {
            let done: Vec<&Trace> = traces.iter().filter(|t| t.error.is_none()).collect();
            let pairs: Vec<(Picked, &str)> = done
                .iter()
                .filter_map(|t| pick(t).map(|p| (p, t.started_at.as_str())))
                .collect();
            let n = pairs.len();
            if n == 0 {
                return FieldStatistics {
                    field: name.to_string(),
                    mean_absolute_error: 0.0,
                    calibration: 0.0,
                    ci_low: 0.0,
                    ci_high: 0.0,
                    sample_count: 0,
                    last_updated: None,
                    unknown: Default::default(),
                };
            }
            let mut errors: Vec<f64> = pairs.iter().map(|((p, _, _, a), _)| a - p).collect();
            let mae = errors.iter().map(|e| e.abs()).sum::<f64>() / n as f64;
            let inside = pairs
                .iter()
                .filter(|((_, lo, hi, a), _)| a >= lo && a <= hi)
                .count();
            errors.sort_by(f64::total_cmp);
            let at = |q: f64| errors[((n - 1) as f64 * q).round() as usize];
            FieldStatistics {
                field: name.to_string(),
                mean_absolute_error: mae,
                calibration: inside as f64 / n as f64,
                ci_low: at(0.05),
                ci_high: at(0.95),
                sample_count: n as u64,
                last_updated: pairs.iter().map(|(_, s)| s.to_string()).max(),
                unknown: Default::default(),
            }
        })
        .collect();
    Statistics {
        spec_version: crate::forms::runtime_forms(),
        estimator_version: ESTIMATOR_VERSION.into(),
        fields,
        bucket: None,
        resident: None,
        unknown: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trace(elapsed_ms: f64, scanned_rows: u64, estimate: Option<u64>) -> Trace {
        Trace {
            spec_version: RUNTIME_FORMS.into(),
            id: new_id(Utc::now()),
            statement: "FROM events\nRETURN count".into(),
            surface: "api".into(),
            principal: None,
            started_at: "2026-01-01T00:00:00Z".into(),
            elapsed_ms,
            plan_cache: "bypass".into(),
            spans: Vec::new(),
            estimate: TraceEstimate {
                scanned_rows: estimate,
                ..Default::default()
            },
            actual: TraceActual {
                scanned_rows,
                elapsed_ms,
                ..Default::default()
            },
            error: None,
            unknown: Default::default(),
        }
    }

    #[test]
    fn a_trace_keeps_unknown_fields_and_refuses_a_newer_major() {
        let mut v = serde_json::to_value(trace(3.0, 10, Some(10))).unwrap();
        v["spec_version"] = "0.2".into();
        v["replay"] = json!({"seed": 1});
        v["estimate"]["cost_usd"] = json!(0.0);
        v["actual"]["cpu_ms"] = json!(2.5);
        v["spans"] = json!([{"id": "s0", "parent_id": null, "name": "statement",
            "start": "a", "end": "b", "elapsed_ms": 1.0, "attrs": {}, "kind": "retrieve"}]);
        let text = serde_json::to_vec(&v).unwrap();
        let t: Trace = crate::forms::read("trace", &text, RUNTIME_FORMS).unwrap();
        assert_eq!(t.spans[0].unknown["kind"], "retrieve");
        assert_eq!(serde_json::to_value(&t).unwrap(), v);
        v["spec_version"] = "1.0".into();
        let e =
            crate::forms::read::<Trace>("trace", &serde_json::to_vec(&v).unwrap(), RUNTIME_FORMS)
                .unwrap_err();
        assert_eq!(e.kind.code(), "io_error");
    }

    /// Statistics by hand: three runs whose scan estimates were 10 (exact), 10 (actual 6) and
    /// none; and the time model's interval with few samples.
    #[test]
    fn statistics_and_the_time_model_by_hand() {
        let none = statistics(&[]);
        assert!(
            none.fields.iter().all(|f| f.sample_count == 0
                && f.mean_absolute_error == 0.0
                && f.calibration == 0.0)
        );
        let traces = [
            trace(2.0, 10, Some(10)),
            trace(4.0, 6, Some(10)),
            trace(9.0, 1, None),
        ];
        let s = statistics(&traces);
        let rows = s.fields.iter().find(|f| f.field == "scanned_rows").unwrap();
        assert_eq!(rows.sample_count, 2);
        assert_eq!(rows.mean_absolute_error, 2.0); // (|10-10| + |6-10|) / 2
        assert_eq!(rows.calibration, 0.5); // one of the two equals its estimate
        let elapsed = s.fields.iter().find(|f| f.field == "elapsed_ms").unwrap();
        assert_eq!(
            elapsed.sample_count, 0,
            "these traces carry no time interval"
        );
        // k = elapsed / (1 + rows / 100 000): 2/1.0001, 4/1.0001, 9/1 → median 4/1.0001.
        let m = TimeModel::from_traces(&traces);
        assert_eq!(m.samples(), 3);
        let i = m.predict(Some(100_000)).unwrap();
        assert!((i.point - 2.0 * 4.0 / 1.0001).abs() < 1e-9, "{i:?}");
        assert!((i.low - 2.0 * (2.0 / 1.0001) / 2.0).abs() < 1e-9);
        assert!((i.high - 2.0 * 9.0 * 2.0).abs() < 1e-9);
        assert!(TimeModel::default().predict(Some(1)).is_none());
    }
}

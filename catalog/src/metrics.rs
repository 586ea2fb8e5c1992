//! The governed-metric registry file `ROOT/metrics.toml` (docs/metrics.md): its records as
//! written. Parsing the expressions and binding them is the engine's work.

use serde::{Deserialize, Serialize};

use crate::dataset::DatasetError;
use crate::storage::Root;

/// One `[[metric]]` record.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricDef {
    /// A qualified identifier, e.g. `analytics.weekly_active_users`.
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    pub unit: Option<String>,
    /// A SignalQL metric expression: aggregates and other metrics under `+ - * /`.
    pub expression: String,
    /// An optional SignalQL predicate on the source rows the aggregates read.
    pub filter: Option<String>,
    /// The source, `events` (default) or `entity(type)`.
    pub source: Option<String>,
    /// The source column DURING and BUCKET BY use (default: the source's time column).
    pub time_column: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsFile {
    #[serde(default)]
    metric: Vec<MetricDef>,
}

/// The records of `root/metrics.toml`, in file order; none when the file is absent. A file
/// that does not parse, or names a metric twice, is an error naming the file.
pub fn read_metrics(root: &Root) -> Result<Vec<MetricDef>, DatasetError> {
    let config = |message: String| DatasetError::Config {
        path: root.display_of("metrics.toml"),
        message,
    };
    let Some(bytes) = root.read("metrics.toml")? else {
        return Ok(Vec::new());
    };
    let text = String::from_utf8(bytes).map_err(|e| config(e.to_string()))?;
    let file: MetricsFile = toml::from_str(&text).map_err(|e| config(e.to_string()))?;
    let mut seen = std::collections::BTreeSet::new();
    for m in &file.metric {
        if !seen.insert(m.name.as_str()) {
            return Err(config(format!("metric `{}` is defined twice", m.name)));
        }
    }
    Ok(file.metric)
}

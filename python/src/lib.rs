//! `signalql._signalql`: the engine as a CPython extension. The public Python API
//! (python/signalql/__init__.py, docs/python.md) wraps these few native classes:
//!
//! - [`NativeEngine`]: one engine over one dataset root, kept for the session (its plan cache
//!   and resident context index live as long as it does). Every call runs on a process-wide
//!   Tokio runtime with the GIL released, so two Python threads run two statements at once; a
//!   pending `KeyboardInterrupt` (Ctrl-C) cancels the running statement.
//! - [`NativeResult`]: an analytics answer: the envelope's JSON and the rows as Arrow record
//!   batches, exported through the Arrow C stream interface (`__arrow_c_stream__`) without
//!   copying a buffer.
//! - [`NativeBundle`]: a context bundle, its JSON and its rendering.
//!
//! Errors are raised as the `signalql.Error` subclass of their code (python/signalql/_errors.py
//! builds them from the engine's `{"error": {code, message, line?, column?, file?, …}}`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use pyo3_arrow::ffi::{ArrayIterator, to_schema_pycapsule, to_stream_pycapsule};
use signalql::ast::Statement;
use signalql::request::{ContextRequest, DescribeRequest, explain_query};
use signalql::{Answer, Bundle, Engine, EngineOptions, Error, Params, Resident};

/// The runtime every engine of the process runs its statements on (multi-thread, the CLI's).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = signalql::runtime().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    // Another thread may have made one meanwhile: that one is kept, this one dropped.
    Ok(RUNTIME.get_or_init(|| rt))
}

/// `error` as the `signalql.Error` subclass of its code.
fn raised(py: Python<'_>, error: &Error) -> PyErr {
    let json = error.to_json().to_string();
    match py
        .import("signalql._errors")
        .and_then(|m| m.getattr("from_json"))
        .and_then(|f| f.call1((json,)))
    {
        Ok(exception) => PyErr::from_value(exception),
        Err(e) => e,
    }
}

/// How often a statement waiting in [`block`] lets Python check for Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs `work` to its end on the runtime with the GIL released. Every [`SIGNAL_CHECK`] the
/// calling thread takes the GIL back to run Python's signal handlers: a `KeyboardInterrupt`
/// they raise aborts the task (dropping its plans and streams) and is raised here.
fn block<T: Send + 'static>(
    py: Python<'_>,
    work: impl Future<Output = signalql::Result<T>> + Send + 'static,
) -> PyResult<T> {
    let rt = runtime()?;
    let mut task = rt.spawn(signalql_engine::error::catch_panics(work));
    loop {
        let polled = py
            .detach(|| rt.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut task).await }));
        match polled {
            Ok(Ok(answer)) => return answer.map_err(|e| raised(py, &e)),
            Ok(Err(join)) => {
                let e = Error::internal(format!("the statement's task ended: {join}"));
                return Err(raised(py, &e));
            }
            Err(_waiting) => {
                if let Err(interrupt) = py.check_signals() {
                    task.abort();
                    return Err(interrupt);
                }
            }
        }
    }
}

/// `params` as given from Python: a JSON object's text (json.dumps of a dict), or none.
fn params_of(py: Python<'_>, params: Option<&str>) -> PyResult<Params> {
    let Some(text) = params else {
        return Ok(Params::new());
    };
    serde_json::from_str(text).map_err(|e| {
        raised(
            py,
            &Error::type_error(format!("params must be a JSON object of values: {e}")),
        )
    })
}

fn json_of<T: serde::Serialize>(value: &T) -> signalql::Result<String> {
    serde_json::to_string(value).map_err(|e| Error::internal(format!("cannot write JSON: {e}")))
}

/// One engine over one dataset root (`signalql.connect`).
#[pyclass(frozen, module = "signalql._signalql")]
struct NativeEngine {
    engine: Arc<Engine>,
}

#[pymethods]
impl NativeEngine {
    #[new]
    #[pyo3(signature = (root=None, principal=None, now=None, s3_endpoint=None, workers=Vec::new()))]
    fn new(
        py: Python<'_>,
        root: Option<PathBuf>,
        principal: Option<String>,
        now: Option<String>,
        s3_endpoint: Option<String>,
        workers: Vec<String>,
    ) -> PyResult<Self> {
        let now = match now {
            None => None,
            Some(text) => Some(
                chrono::DateTime::parse_from_rfc3339(&text)
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .map_err(|e| {
                        raised(
                            py,
                            &Error::type_error(format!(
                                "now {text:?} is not an RFC 3339 instant: {e}"
                            )),
                        )
                    })?,
            ),
        };
        let options = EngineOptions {
            now,
            storage: signalql::catalog::StorageOptions {
                s3_endpoint,
                ..Default::default()
            },
            principal,
            workers,
            surface: "python",
            // A Python session is long-lived, as a server is: plans are kept and the object
            // tables' resident context index is built once (docs/python.md).
            plan_cache: Some(Default::default()),
            resident: Some(Arc::new(Resident::default())),
            ..Default::default()
        };
        let root = root.unwrap_or_else(signalql::sample_dataset);
        let engine = py
            .detach(|| Engine::open_with(root, options))
            .map_err(|e| raised(py, &e))?;
        Ok(NativeEngine {
            engine: Arc::new(engine),
        })
    }

    /// Runs one statement: `("envelope", NativeResult)` for analytics, DESCRIBE and FIND;
    /// `("bundle", NativeBundle)` for CONTEXT FOR; `("json", text)` for EXPLAIN and EXPLAIN
    /// CONTEXT (their JSON object).
    #[pyo3(signature = (text, params=None))]
    fn query(&self, py: Python<'_>, text: String, params: Option<&str>) -> PyResult<Py<PyAny>> {
        let params = params_of(py, params)?;
        let statement = signalql::parse_with(&text, &params).map_err(|e| raised(py, &e))?;
        let engine = Arc::clone(&self.engine);
        let batches = !matches!(
            statement,
            Statement::ContextTask(_)
                | Statement::Explain(_)
                | Statement::ExplainContext(_)
                | Statement::Describe(_)
        );
        if batches {
            let (envelope, batches) = block(py, async move {
                engine.query_batches_with(&text, &params).await
            })?;
            let result = NativeResult::new(envelope, Some(batches));
            return Ok(("envelope", result).into_pyobject(py)?.into_any().unbind());
        }
        let answer = block(py, async move { engine.answer_with(&text, &params).await })?;
        let tagged = match answer {
            Answer::Envelope(e) => {
                let result = NativeResult::new(*e, None);
                ("envelope", result).into_pyobject(py)?.into_any()
            }
            Answer::Bundle(b) => ("bundle", NativeBundle { bundle: *b })
                .into_pyobject(py)?
                .into_any(),
            Answer::Explanation(x) => ("json", json_of(&*x).map_err(|e| raised(py, &e))?)
                .into_pyobject(py)?
                .into_any(),
            Answer::Plan(p) => ("json", json_of(&*p).map_err(|e| raised(py, &e))?)
                .into_pyobject(py)?
                .into_any(),
        };
        Ok(tagged.unbind())
    }

    /// CONTEXT FOR: `request` is the JSON of the clauses' settings (python/signalql/__init__.py
    /// `Engine.context`): task, budget, project, kind, clauses, compress, prefer, exclude,
    /// max_objects, max_depth, max_age, with_evidence, as_of, estimator, params.
    fn context(&self, py: Python<'_>, request: &str) -> PyResult<NativeBundle> {
        let request = context_request(request).map_err(|e| raised(py, &e))?;
        let query = request.query().map_err(|e| raised(py, &e))?;
        let engine = Arc::clone(&self.engine);
        let bundle = block(py, async move { engine.context(&query).await })?;
        Ok(NativeBundle { bundle })
    }

    /// DESCRIBE `target` (SignalQL text), or every record without one.
    #[pyo3(signature = (target=None))]
    fn describe(&self, py: Python<'_>, target: Option<String>) -> PyResult<NativeResult> {
        let engine = Arc::clone(&self.engine);
        let envelope = block(
            py,
            async move { DescribeRequest { target }.run(&engine).await },
        )?;
        Ok(NativeResult::new(envelope, None))
    }

    /// EXPLAIN (or EXPLAIN ANALYZE) of `text`: the EXPLAIN object's JSON.
    #[pyo3(signature = (text, params=None, analyze=false))]
    fn explain(
        &self,
        py: Python<'_>,
        text: &str,
        params: Option<&str>,
        analyze: bool,
    ) -> PyResult<String> {
        let params = params_of(py, params)?;
        let q = explain_query(text, &params, analyze).map_err(|e| raised(py, &e))?;
        let engine = Arc::clone(&self.engine);
        block(py, async move { json_of(&engine.explain(&q).await?) })
    }

    /// EXPLAIN CONTEXT of a stored bundle's address: the explanation's JSON.
    fn explain_context(&self, py: Python<'_>, address: String) -> PyResult<String> {
        let engine = Arc::clone(&self.engine);
        block(py, async move {
            json_of(&engine.explain_context(&address).await?)
        })
    }

    /// The dataset root the engine reads.
    #[getter]
    fn root(&self) -> String {
        self.engine.dataset().root().display()
    }
}

/// The settings of a CONTEXT FOR call, as Python sends them.
fn context_request(json: &str) -> signalql::Result<ContextRequest> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::type_error(format!("context settings: {e}")))?;
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let number = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let flag = |k: &str| v.get(k).and_then(|x| x.as_bool());
    let list = |k: &str| -> Vec<String> {
        v.get(k)
            .and_then(|x| x.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(ContextRequest {
        task: text("task").unwrap_or_default(),
        budget: number("budget"),
        project: text("project"),
        kind: text("kind"),
        clauses: text("clauses"),
        compress: flag("compress"),
        prefer: list("prefer"),
        exclude: list("exclude"),
        max_objects: number("max_objects"),
        max_depth: number("max_depth"),
        max_age: text("max_age"),
        with_evidence: flag("with_evidence"),
        as_of: text("as_of"),
        estimator: text("estimator"),
        params: v
            .get("params")
            .and_then(|p| p.as_object())
            .cloned()
            .unwrap_or_default(),
    })
}

/// An analytics answer: the envelope and, for statements that make them, its rows as Arrow.
#[pyclass(frozen, module = "signalql._signalql")]
struct NativeResult {
    /// Without its rows when they are Arrow batches (`Engine::query_batches`): they are
    /// made JSON values only when Python asks for the envelope or `rows`.
    envelope: signalql::Envelope,
    /// The envelope's JSON, written the first time Python asks for it (`to_arrow()` alone
    /// never writes it).
    json: OnceLock<String>,
    rows: usize,
    /// The batches and their schema; `None` for DESCRIBE (its records are the envelope's rows).
    arrow: Option<(Vec<RecordBatch>, SchemaRef)>,
}

impl NativeResult {
    fn new(envelope: signalql::Envelope, batches: Option<Vec<RecordBatch>>) -> Self {
        let arrow = batches.map(|batches| {
            let schema = match batches.first() {
                Some(b) => b.schema(),
                None => Arc::new(datafusion::arrow::datatypes::Schema::empty()),
            };
            (batches, schema)
        });
        NativeResult {
            rows: envelope.metadata.row_count as usize,
            envelope,
            json: OnceLock::new(),
            arrow,
        }
    }
}

#[pymethods]
impl NativeResult {
    /// The result envelope's JSON text (`signalql query --format json`).
    #[getter]
    fn envelope_json(&self, py: Python<'_>) -> PyResult<&str> {
        if let Some(json) = self.json.get() {
            return Ok(json);
        }
        let json = py
            .detach(|| match &self.arrow {
                Some((batches, _)) => {
                    let whole = signalql::envelope::with_rows(self.envelope.clone(), batches)?;
                    json_of(&whole)
                }
                None => json_of(&self.envelope),
            })
            .map_err(|e| raised(py, &e))?;
        Ok(self.json.get_or_init(|| json))
    }

    /// The envelope's `columns` as JSON (no row is written for them).
    #[getter]
    fn columns_json(&self, py: Python<'_>) -> PyResult<String> {
        json_of(&self.envelope.columns).map_err(|e| raised(py, &e))
    }

    /// The envelope's `metadata` as JSON (no row is written for it).
    #[getter]
    fn metadata_json(&self, py: Python<'_>) -> PyResult<String> {
        json_of(&self.envelope.metadata).map_err(|e| raised(py, &e))
    }

    /// Whether the rows are Arrow batches (else only the envelope's JSON rows).
    #[getter]
    fn has_arrow(&self) -> bool {
        self.arrow.is_some()
    }

    fn __len__(&self) -> usize {
        self.rows
    }

    /// The Arrow C schema of the rows (the Arrow PyCapsule interface).
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let (_, schema) = self.arrow_or_err()?;
        Ok(to_schema_pycapsule(py, schema.as_ref())?)
    }

    /// The rows as an Arrow C stream, one struct array per record batch; the buffers are
    /// shared, not copied. `requested_schema` casts each batch where Arrow can.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyCapsule>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let (batches, schema) = self.arrow_or_err()?;
        let field = Arc::new(
            Field::new("", DataType::Struct(schema.fields().clone()), false)
                .with_metadata(schema.metadata().clone()),
        );
        let arrays: Vec<ArrayRef> = batches
            .iter()
            .map(|b| Arc::new(StructArray::from(b.clone())) as ArrayRef)
            .collect();
        let reader = ArrayIterator::new(arrays.into_iter().map(Ok), field);
        Ok(to_stream_pycapsule(py, Box::new(reader), requested_schema)?)
    }
}

impl NativeResult {
    fn arrow_or_err(&self) -> PyResult<&(Vec<RecordBatch>, SchemaRef)> {
        self.arrow.as_ref().ok_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err(
                "this answer has no Arrow batches (DESCRIBE): read its rows",
            )
        })
    }
}

/// A context bundle (CONTEXT FOR).
#[pyclass(frozen, module = "signalql._signalql")]
struct NativeBundle {
    bundle: Bundle,
}

#[pymethods]
impl NativeBundle {
    /// The bundle's JSON (`signalql context`).
    #[getter]
    fn json(&self, py: Python<'_>) -> PyResult<String> {
        json_of(&self.bundle).map_err(|e| raised(py, &e))
    }

    /// The bundle as prompt text, its quoted content fenced (`signalql context --format text`).
    fn render(&self) -> String {
        signalql::render_bundle(&self.bundle)
    }
}

/// context-packets.md's `compress_text(text, task, max_chars)`: `(text, preservation)`, the
/// text as is when it fits, else its task-relevant sentences within `max_chars` characters;
/// `("", 0.0)` when no sentence holding a task term fits (signalql_engine::context::compress_text).
#[pyfunction]
fn compress_text(py: Python<'_>, text: &str, task: &str, max_chars: u64) -> (String, f64) {
    py.detach(|| {
        signalql_engine::context::compress_text(text, task, max_chars)
            .unwrap_or((String::new(), 0.0))
    })
}

/// The extension module.
#[pymodule]
fn _signalql(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeEngine>()?;
    m.add_class::<NativeResult>()?;
    m.add_class::<NativeBundle>()?;
    m.add_function(wrap_pyfunction!(compress_text, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

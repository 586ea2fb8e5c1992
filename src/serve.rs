//! `signalql serve`: the dataset over HTTP (DESIGN.md §7, docs/serve.md). `/mcp` is the MCP
//! streamable-HTTP transport (rmcp) with the tools of `signalql mcp`; `POST /v1/query` takes
//! `{"query": "…"}` and answers the JSON `query --format json` prints (the envelope, bundle or
//! explanation, or `{"error": …}`).
//!
//! Every request runs as a principal of the dataset's policy.toml: the one whose token hash
//! matches `Authorization: Bearer TOKEN`, or `default` when the request has no token and the
//! policy defines it (docs/policy.md). Each principal has its own engine (its restrictions and
//! limits) and its share of concurrent requests. Without a policy every request reads
//! everything, as `signalql query` does.
//!
//! Refusals are JSON errors and the server keeps serving: a missing or unknown token is 401,
//! a body over `max_request_bytes` 413, a request beyond the principal's
//! `max_concurrent_requests` 429 (on `/mcp`, where a tool call has no status of its own, the
//! tool's error is that `limit_exceeded`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use signalql_catalog::policy::{DEFAULT_PRINCIPAL, Policy};
use signalql_engine::error::catch_panics;
use signalql_engine::otlp::with_traceparent;

use crate::mcp::{Caller, SignalqlServer};
use crate::{Answer, Engine, EngineOptions, Error, ErrorKind, Params};

/// `max_request_bytes` when `[serve]` does not set it.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 10 << 20;

/// Who may call, and the engine each caller's requests run on.
struct Callers {
    policy: Option<Arc<Policy>>,
    /// By principal; without a policy, one caller under the empty name.
    by_principal: HashMap<String, Arc<Caller>>,
    max_request_bytes: u64,
}

impl Callers {
    /// The caller of a request with `headers`, or the 401 refusing it.
    fn of(&self, headers: &HeaderMap) -> Result<Arc<Caller>, Box<Response>> {
        let Some(policy) = &self.policy else {
            return Ok(self.by_principal[""].clone());
        };
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let name = match token {
            Some(t) => policy.principal_for_token(t),
            None if policy.principals.contains_key(DEFAULT_PRINCIPAL) => Some(DEFAULT_PRINCIPAL),
            None => None,
        };
        match name.and_then(|n| self.by_principal.get(n)) {
            Some(c) => Ok(c.clone()),
            None => Err(Box::new(refusal(
                StatusCode::UNAUTHORIZED,
                &Error::new(
                    ErrorKind::PermissionDenied,
                    match token {
                        Some(_) => "the bearer token selects no principal of this dataset's policy",
                        None => "this dataset's policy needs `Authorization: Bearer TOKEN`",
                    },
                ),
            ))),
        }
    }
}

/// `e` as a JSON error answer with `status`.
fn refusal(status: StatusCode, e: &Error) -> Response {
    (status, axum::Json(e.to_json())).into_response()
}

/// The HTTP status of an engine error on `/v1/query`.
fn status_of(e: &Error) -> StatusCode {
    match &e.kind {
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::UnknownContext => StatusCode::NOT_FOUND,
        ErrorKind::Io | ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn too_large(max: u64, value: u64) -> Response {
    refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        &Error::limit("max_request_bytes", max, value)
            .with_help("[serve] max_request_bytes in signalql.toml sets the limit"),
    )
}

/// Every request: its size (by Content-Length) and its caller, who goes on in its extensions.
async fn admit(State(callers): State<Arc<Callers>>, mut request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared
        && n > callers.max_request_bytes
    {
        return too_large(callers.max_request_bytes, n);
    }
    let caller = match callers.of(request.headers()) {
        Ok(c) => c,
        Err(refused) => return *refused,
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The Arrow IPC stream's media type.
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// Parquet's media type.
const PARQUET: &str = "application/vnd.apache.parquet";

/// What `POST /v1/query` answers with, by the request's `Accept` header.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    /// `application/json` (also no `Accept`, `*/*`): the JSON of `query --format json`.
    Json,
    /// The rows as an Arrow IPC stream, the envelope without its rows in the schema's
    /// metadata (`signalql`).
    Arrow,
    /// The rows as `query --format csv` prints them.
    Csv,
    /// The rows as one Parquet file, with the same schema metadata.
    Parquet,
}

/// The first media type of `Accept` that is one of [`Form`]'s, in the order listed (quality
/// values are not weighed); 406 when none is.
fn form_of(headers: &HeaderMap) -> Result<Form, Box<Response>> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Form::Json);
    };
    for part in accept.split(',') {
        let media = part.split(';').next().unwrap_or_default().trim();
        let media = media.to_ascii_lowercase();
        match media.as_str() {
            "application/json" | "application/*" | "*/*" | "" => return Ok(Form::Json),
            ARROW_STREAM => return Ok(Form::Arrow),
            "text/csv" | "text/*" => return Ok(Form::Csv),
            PARQUET => return Ok(Form::Parquet),
            _ => {}
        }
    }
    Err(Box::new(refusal(
        StatusCode::NOT_ACCEPTABLE,
        &Error::type_error(format!(
            "POST /v1/query cannot answer as {accept}: it answers application/json, \
             {ARROW_STREAM}, text/csv or {PARQUET}"
        )),
    )))
}

/// `POST /v1/query`: `{"query": "…", "params"?: {…}}` in (params: the values of the
/// statement's `$name` parameters, docs/params.md); out, by `Accept`, the JSON of `query --format json`
/// or the rows as Arrow, CSV or Parquet.
async fn query(State(callers): State<Arc<Callers>>, request: Request) -> Response {
    let Some(caller) = request.extensions().get::<Arc<Caller>>().cloned() else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            &Error::internal("a request reached /v1/query without its caller"),
        );
    };
    // A W3C traceparent parents the statement's exported spans (engine/src/otlp.rs).
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let form = match form_of(request.headers()) {
        Ok(f) => f,
        Err(refused) => return *refused,
    };
    let max = callers.max_request_bytes;
    let body: Bytes = match axum::body::to_bytes(request.into_body(), max as usize).await {
        Ok(b) => b,
        // Without a Content-Length the body is only known to be too large once read.
        Err(_) => return too_large(max, max + 1),
    };
    let (text, params) = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(mut m)) => match (m.remove("query"), m.remove("params")) {
            (Some(Value::String(q)), None | Some(Value::Null)) => (q, Params::new()),
            (Some(Value::String(q)), Some(Value::Object(p))) => (q, p),
            _ => return bad_body(),
        },
        _ => return bad_body(),
    };
    let permit = match caller.admit() {
        Ok(p) => p,
        Err(e) => return refusal(StatusCode::TOO_MANY_REQUESTS, &e),
    };
    let engine = caller.engine.clone();
    // On its own task, so a client that goes away cannot cancel it half way. The permit goes
    // with the statement: a client that hangs up does not free its share while the statement
    // still runs.
    if form != Form::Json {
        let rows = tokio::spawn(async move {
            let _permit = permit;
            let rows = rows_in(&engine, &text, &params, form);
            catch_panics(with_traceparent(traceparent.as_deref(), rows)).await
        })
        .await
        .unwrap_or_else(|e| Err(Error::internal(format!("the query task failed: {e}"))));
        return match rows {
            Ok((media, body)) => {
                (StatusCode::OK, [(header::CONTENT_TYPE, media)], body).into_response()
            }
            Err(e) => refusal(status_of(&e), &e),
        };
    }
    let answer = tokio::spawn(async move {
        let _permit = permit;
        let answer = engine.answer_with(&text, &params);
        catch_panics(with_traceparent(traceparent.as_deref(), answer)).await
    })
    .await
    .unwrap_or_else(|e| Err(Error::internal(format!("the query task failed: {e}"))));
    // Written straight to bytes, not through a `Value` tree: an explanation's list of a
    // hundred thousand rejections was a map allocated per entry (80 of EXPLAIN's 104 ms).
    let body = match answer {
        Ok(Answer::Envelope(e)) => serde_json::to_vec(&*e),
        Ok(Answer::Bundle(b)) => serde_json::to_vec(&*b),
        Ok(Answer::Explanation(x)) => serde_json::to_vec(&*x),
        Ok(Answer::Plan(p)) => serde_json::to_vec(&*p),
        Err(e) => return refusal(status_of(&e), &e),
    };
    match body {
        Ok(b) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            b,
        )
            .into_response(),
        Err(e) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            &Error::internal(e.to_string()),
        ),
    }
}

/// The answer to `text` as `form` (not JSON): its media type and bytes. Only an analytics
/// statement or FIND OBJECT has rows to give so (the engine refuses the others as it does
/// `query --format parquet`); CSV, as `query --format csv`, also takes DESCRIBE.
async fn rows_in(
    engine: &Engine,
    text: &str,
    params: &Params,
    form: Form,
) -> crate::Result<(&'static str, Vec<u8>)> {
    if form == Form::Csv {
        return match engine.answer_with(text, params).await? {
            Answer::Envelope(e) => Ok((
                "text/csv; charset=utf-8",
                crate::render::csv(&e).into_bytes(),
            )),
            _ => Err(not_rows()),
        };
    }
    let (envelope, batches) = engine.query_batches_with(text, params).await?;
    let schema = rows_schema(&envelope, &batches)?;
    let io = |e: &dyn std::fmt::Display| {
        Error::internal(format!("the answer could not be written: {e}"))
    };
    // Each batch under the schema that carries the envelope, its string views as strings.
    let batches = batches
        .iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .zip(schema.fields())
                .map(|(c, f)| cast(c, f.data_type()))
                .collect::<Result<Vec<_>, _>>()?;
            RecordBatch::try_new(schema.clone(), columns)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| io(&e))?;
    let mut out = Vec::new();
    if form == Form::Parquet {
        crate::parquet_out::write_batches(&mut out, &schema, &batches).map_err(|e| io(&e))?;
        return Ok((PARQUET, out));
    }
    let mut w = StreamWriter::try_new(&mut out, &schema).map_err(|e| io(&e))?;
    for b in &batches {
        w.write(b).map_err(|e| io(&e))?;
    }
    w.finish().map_err(|e| io(&e))?;
    drop(w);
    Ok((ARROW_STREAM, out))
}

fn not_rows() -> Error {
    Error::type_error(
        "this statement answers with a bundle, an explanation or a plan, which have no rows: \
         ask for application/json",
    )
}

/// The schema of an answer's rows, with the envelope but its rows (columns with their units,
/// metadata) as JSON under the schema's metadata key `signalql`. String and binary views are
/// plain strings and binaries there, which every Arrow reader reads (pyarrow before 16 and
/// other tools do not read views).
fn rows_schema(envelope: &crate::Envelope, batches: &[RecordBatch]) -> crate::Result<SchemaRef> {
    let Some(first) = batches.first() else {
        return Err(Error::internal(
            "a query answered with no batch and so no schema",
        ));
    };
    let header = json!({"columns": envelope.columns, "metadata": envelope.metadata});
    let mut metadata = first.schema().metadata().clone();
    metadata.insert("signalql".into(), header.to_string());
    let fields: Vec<Field> = first
        .schema()
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8View => f.as_ref().clone().with_data_type(DataType::Utf8),
            DataType::BinaryView => f.as_ref().clone().with_data_type(DataType::Binary),
            _ => f.as_ref().clone(),
        })
        .collect();
    Ok(Arc::new(Schema::new_with_metadata(fields, metadata)))
}

/// `GET /health`: 200 with the version and the dataset's commit position (the objects
/// tables' last sequenced commit; 0 before any). No token is asked for.
async fn health(State(callers): State<Arc<Callers>>) -> Response {
    let Some(caller) = callers.by_principal.values().next().cloned() else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            &Error::internal("no caller"),
        );
    };
    let position = tokio::task::spawn_blocking(move || {
        signalql_catalog::commit::Snapshot::read(caller.engine.dataset().root())
            .map(|s| s.position())
    })
    .await;
    match position {
        Ok(Ok(p)) => (
            StatusCode::OK,
            axum::Json(
                json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "commit_position": p}),
            ),
        )
            .into_response(),
        Ok(Err(e)) => refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            &Error::io(format!("the commit log could not be read: {e}")),
        ),
        Err(e) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            &Error::internal(e.to_string()),
        ),
    }
}

fn bad_body() -> Response {
    refusal(
        StatusCode::BAD_REQUEST,
        &Error::new(
            ErrorKind::Parse,
            r#"the body must be a JSON object {"query": "<SignalQL statement>", "params"?: {"name": value}}"#,
        ),
    )
}

/// Any other path.
async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": {"code": "unknown_field", "message":
            "signalql serve answers POST /v1/query and the MCP transport at /mcp"}})),
    )
        .into_response()
}

/// Serve the dataset at `root` on `listen` until Ctrl-C; `ready` is told the bound address
/// (the port of `:0` chosen).
pub async fn serve(
    root: std::path::PathBuf,
    options: EngineOptions,
    listen: SocketAddr,
    ready: impl FnOnce(SocketAddr),
) -> crate::Result<()> {
    let io = |what: &str, e: &dyn std::fmt::Display| Error::io(format!("serve: {what}: {e}"));
    let dataset = signalql_catalog::Dataset::open_with(&root, &options.storage)?;
    let policy = dataset.policy().cloned();
    let mut by_principal = HashMap::new();
    match &policy {
        None => {
            let engine = Engine::open_with(&root, options.clone())?;
            by_principal.insert(String::new(), Arc::new(Caller::new(engine)));
        }
        Some(p) => {
            for name in p.principals.keys() {
                let engine = Engine::open_with(
                    &root,
                    EngineOptions {
                        principal: Some(name.clone()),
                        ..options.clone()
                    },
                )?;
                by_principal.insert(name.clone(), Arc::new(Caller::new(engine)));
            }
        }
    }
    let max_request_bytes = dataset
        .config()
        .serve
        .max_request_bytes
        .unwrap_or(DEFAULT_MAX_REQUEST_BYTES);
    let callers = Arc::new(Callers {
        policy,
        by_principal,
        max_request_bytes,
    });
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(max_request_bytes as usize);
    if !listen.ip().is_loopback() {
        let mut hosts = config.allowed_hosts.clone();
        hosts.push(listen.ip().to_string());
        hosts.push(listen.to_string());
        config = config.with_allowed_hosts(hosts);
    }
    let mcp = StreamableHttpService::new(
        || Ok(SignalqlServer::per_request()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    // Every route but /health runs as the request's caller.
    let admitted = Router::new()
        .route("/v1/query", post(query))
        .nest_service("/mcp", mcp)
        .fallback(not_found)
        .layer(from_fn_with_state(callers.clone(), admit));
    let app = Router::new()
        .route("/health", get(health))
        .merge(admitted)
        .with_state(callers);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| io(&format!("cannot listen on {listen}"), &e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| io("no local address", &e))?;
    ready(bound);
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| io("the server stopped", &e))
}

//! `signalql mcp`: an MCP server over stdio (the official Rust SDK, rmcp) with the tools
//! `query`, `describe`, `context`, `watch`, `explain_context`, `explain`, `simulate`, `stats`
//! and `format`. The same server answers at `/mcp` of `signalql serve` (src/serve.rs), where
//! each request's bearer token selects the caller whose engine answers it.
//!
//! Every tool is annotated read-only, not destructive and closed-world, and idempotent but
//! `watch` (each call polls anew). Each declares an `outputSchema` (mcp/schemas.rs) and
//! answers with it as `structuredContent`, beside one text content holding the same JSON: the
//! result envelope (`query`, `describe`), the bundle (`context`), `{polls, holds, alert}`
//! (`watch`), the explanation (`explain_context`), the EXPLAIN object (`explain`), the
//! simulation (`simulate`), the estimator statistics (`stats`) or `{"canonical": …}`
//! (`format`). A failure is an MCP tool error (`isError: true`) whose text is the engine's
//! `{"error": {"code", "message", "line"?, "column"?, …}}`.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ProgressNotificationParam, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam, Role, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use signalql_engine::error::catch_panics;

use crate::request::{ContextRequest, DescribeRequest};
use crate::{Answer, Engine, Error};

mod cap;
pub mod grammar;
mod schemas;

pub use cap::DEFAULT_MAX_RESULT_CHARS;

/// `query`: run one SignalQL statement.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct QueryArgs {
    #[schemars(
        description = "A SignalQL statement: FROM … RETURN …, FUNNEL …, FIND sequence …, \
                       DESCRIBE …, FIND OBJECT …, CONTEXT FOR …, EXPLAIN CONTEXT …"
    )]
    pub query: String,
    #[schemars(
        description = "Values of the statement's $name parameters, bound as literals \
                       (never spliced into the text), e.g. {\"event\": \"page_view\", \"days\": 7}"
    )]
    pub params: Option<crate::Params>,
}

/// `describe`: catalog records.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DescribeArgs {
    #[schemars(
        description = "events, entities, signals, metrics, relationships or entity(TYPE); \
                       omitted: every record of every table the dataset has"
    )]
    pub target: Option<String>,
}

/// `context`: a context bundle for a task.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ContextArgs {
    #[schemars(description = "The task the context is for (CONTEXT FOR \"task\")")]
    pub task: String,
    #[schemars(description = "Token budget (BUDGET n TOKENS); default 8000")]
    pub budget: Option<u64>,
    #[schemars(description = "Project to read (USING PROJECT \"p\")")]
    pub project: Option<String>,
    #[schemars(
        description = "Further clauses in SignalQL v0.5 syntax, e.g. `PREFER current \
                       EXCLUDE stale MAX OBJECTS 5 WITH EVIDENCE`"
    )]
    pub clauses: Option<String>,
    #[schemars(
        description = "Values of the clauses' $name parameters, bound as literals \
                       (never spliced into the text), e.g. {\"event\": \"page_view\", \"days\": 7}"
    )]
    pub params: Option<crate::Params>,
    #[schemars(description = "Shrink items that do not fit to their task-relevant sentences")]
    pub compress: Option<bool>,
    #[schemars(
        description = "PREFER items: `current`, a trust level (`verified`, `authoritative`…), \
                       `representation \"NAME\"`"
    )]
    pub prefer: Option<Vec<String>>,
    #[schemars(
        description = "EXCLUDE items: `untrusted`, `stale`, `role ROLE`, `role ROLE from ROLE`"
    )]
    pub exclude: Option<Vec<String>>,
    #[schemars(description = "MAX OBJECTS n (default 20)")]
    pub max_objects: Option<u64>,
    #[schemars(description = "MAX DEPTH n: graph hops of expansion (default 1)")]
    pub max_depth: Option<u64>,
    #[schemars(description = "MAX AGE as `N UNIT`, e.g. `30 d`, `12 h`")]
    pub max_age: Option<String>,
    #[schemars(description = "WITH EVIDENCE: add the items' derivations and entities")]
    pub with_evidence: Option<bool>,
    #[schemars(description = "AS OF: build the bundle as of this RFC 3339 instant")]
    pub as_of: Option<String>,
    #[schemars(
        description = "Token estimator (USING ESTIMATOR): `chars-div-4-v1` or `o200k_base` \
                       (exact GPT-4o tokens); default: the dataset's"
    )]
    pub estimator: Option<String>,
}

/// `watch`: wait for a WATCH condition.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WatchArgs {
    #[schemars(description = "A WATCH statement: WATCH (FROM … RETURN …) WHEN condition")]
    pub watch: String,
    #[schemars(description = "Seconds between polls (default 5)")]
    pub interval_seconds: Option<f64>,
    #[schemars(
        description = "Polls at most (default 1): the call answers at the first alert, or \
                       after this many polls without one"
    )]
    pub max_polls: Option<u64>,
}

/// The longest a `watch` call may wait between its first and last poll.
pub const MAX_WATCH_SECONDS: u64 = 600;

/// What a `watch` call found.
#[derive(Debug, Serialize)]
pub struct WatchAnswer {
    /// The polls run.
    pub polls: u64,
    /// Whether the condition held at the last poll.
    pub holds: bool,
    /// The alert of the first poll where the condition held (docs/watch.md), else null.
    pub alert: Option<crate::watch::Alert>,
}

/// `explain_context`: the explanation of a stored bundle.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ExplainArgs {
    #[schemars(description = "A bundle address, context://ctx_…")]
    pub address: String,
}

/// `explain`: the plan of a statement (EXPLAIN), or the plan and what running it did.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanArgs {
    #[schemars(description = "A SignalQL statement (with or without a leading EXPLAIN)")]
    pub query: String,
    #[schemars(
        description = "Values of the statement's $name parameters, bound as literals \
                       (never spliced into the text), e.g. {\"event\": \"page_view\", \"days\": 7}"
    )]
    pub params: Option<crate::Params>,
    #[schemars(description = "Also run it and report per operator what it did (EXPLAIN ANALYZE)")]
    pub analyze: Option<bool>,
}

/// `simulate`: what a statement would cost.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SimulateArgs {
    #[schemars(description = "A SignalQL statement")]
    pub query: String,
    #[schemars(
        description = "Values of the statement's $name parameters, bound as literals \
                       (never spliced into the text), e.g. {\"event\": \"page_view\", \"days\": 7}"
    )]
    pub params: Option<crate::Params>,
}

/// `stats`: the estimator statistics.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StatsArgs {
    #[schemars(
        description = "Only this estimated field: rows, scanned_rows, scanned_bytes or elapsed_ms"
    )]
    pub field: Option<String>,
}

/// `format`: the canonical text of a statement.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct FormatArgs {
    #[schemars(description = "A SignalQL statement")]
    pub query: String,
    #[schemars(
        description = "Values of the statement's $name parameters, bound as literals \
                       (never spliced into the text), e.g. {\"event\": \"page_view\", \"days\": 7}"
    )]
    pub params: Option<crate::Params>,
}

/// The catalog records listed as resources, each `signalql://describe/TARGET`.
const DESCRIBE_TARGETS: [&str; 5] = ["events", "entities", "signals", "metrics", "relationships"];
const DESCRIBE_PREFIX: &str = "signalql://describe/";

/// Who a request runs as: the engine of its principal (docs/policy.md) and the principal's
/// share of concurrent requests (`max_concurrent_requests`).
pub struct Caller {
    pub engine: Arc<Engine>,
    permits: Arc<tokio::sync::Semaphore>,
    limit: u64,
    /// `[mcp] max_result_chars` of the caller's dataset.
    max_result_chars: u64,
}

impl Caller {
    pub fn new(engine: Engine) -> Caller {
        let limit = engine.limits().max_concurrent_requests;
        let max_result_chars = engine
            .dataset()
            .config()
            .mcp
            .max_result_chars
            .unwrap_or(DEFAULT_MAX_RESULT_CHARS);
        Caller {
            engine: Arc::new(engine),
            permits: Arc::new(tokio::sync::Semaphore::new(limit as usize)),
            limit,
            max_result_chars,
        }
    }

    /// A slot for one request, or `limit_exceeded` when the principal already has
    /// `max_concurrent_requests` running.
    pub fn admit(&self) -> crate::Result<tokio::sync::OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().map_err(|_| {
            Error::limit("max_concurrent_requests", self.limit, self.limit + 1).with_help(
                "this principal has that many requests running; retry when one has answered",
            )
        })
    }
}

/// The server: over stdio one caller; over HTTP, the caller each request carries.
#[derive(Clone)]
pub struct SignalqlServer {
    /// The stdio caller; `None` on HTTP, where the request's extensions hold it.
    caller: Option<Arc<Caller>>,
    tool_router: ToolRouter<Self>,
    /// The session's subscriptions to WATCH resources, by URI.
    watches: Arc<std::sync::Mutex<HashMap<String, Subscription>>>,
}

/// The prefix of a WATCH resource: `signalql://watch/{statement}`, the statement
/// percent-encoded, optionally followed by `?interval_seconds=S` (default 5).
const WATCH_PREFIX: &str = "signalql://watch/";
/// The shortest pause between a subscription's polls, in seconds.
const MIN_WATCH_INTERVAL: f64 = 0.1;

/// A `resources/subscribe` to a WATCH resource: its poll loop, and what its last poll found
/// (`{polls, holds, alert}`, `alert` the last alert; `error` when the last poll failed). The
/// loop ends when the subscription is dropped (unsubscribed, replaced, or the session ends).
struct Subscription {
    polls: tokio::task::JoinHandle<()>,
    last: Arc<std::sync::Mutex<serde_json::Value>>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.polls.abort();
    }
}

/// The WATCH statement and the pause between polls a `signalql://watch/…` URI names; `None`
/// for any other URI.
fn watch_resource(
    uri: &str,
) -> Option<crate::Result<(crate::ast::WatchQuery, std::time::Duration)>> {
    let rest = uri.strip_prefix(WATCH_PREFIX)?;
    let (statement, options) = rest.split_once('?').unwrap_or((rest, ""));
    Some((|| {
        let text = percent_encoding::percent_decode_str(statement)
            .decode_utf8()
            .map_err(|e| Error::type_error(format!("{uri}: the statement is not UTF-8: {e}")))?;
        let interval = match options {
            "" => 5.0,
            o => o
                .strip_prefix("interval_seconds=")
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| {
                    Error::type_error(format!(
                        "{uri}: the one option of a WATCH resource is ?interval_seconds=S"
                    ))
                })?,
        };
        if interval < MIN_WATCH_INTERVAL {
            return Err(Error::type_error(format!(
                "{uri}: interval_seconds is at least {MIN_WATCH_INTERVAL}"
            )));
        }
        crate::watch_loop::watch_request(
            &text,
            interval,
            "a signalql://watch/ resource names a WATCH (query) WHEN condition statement",
            "interval_seconds",
        )
    })())
}

/// What a poll found, as a WATCH resource reads.
fn watch_state(polls: u64, holds: bool, alert: Option<&crate::watch::Alert>) -> serde_json::Value {
    serde_json::json!({ "polls": polls, "holds": holds, "alert": alert })
}

/// Every tool annotated read-only, not destructive and closed-world, and idempotent but
/// `watch` (each call polls anew): one rule for all, so a tool added later has it too.
fn annotated(mut router: ToolRouter<SignalqlServer>) -> ToolRouter<SignalqlServer> {
    for (name, route) in router.map.iter_mut() {
        let idempotent = name != "watch";
        route.attr.annotations = Some(ToolAnnotations::from_raw(
            None,
            Some(true),
            Some(false),
            Some(idempotent),
            Some(false),
        ));
    }
    router
}

/// A tool's answer: `value` as `structuredContent` (checked against the tool's
/// `outputSchema` by clients that validate) and, for clients that read text, the same JSON as
/// its one text content; cut to `max` characters (mcp/cap.rs).
fn ok(value: &impl Serialize, max: u64) -> Result<CallToolResult, ErrorData> {
    let value = match serde_json::to_value(value) {
        Ok(v) => v,
        Err(e) => {
            return failed(&Error::internal(format!(
                "an answer did not serialise: {e}"
            )));
        }
    };
    match cap::cap(value, max) {
        Ok(v) => Ok(CallToolResult::structured(v)),
        Err(e) => failed(&e),
    }
}

fn failed(e: &Error) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::error(vec![ContentBlock::text(
        e.to_json().to_string(),
    )]))
}

fn answer(a: Answer, max: u64) -> Result<CallToolResult, ErrorData> {
    match a {
        Answer::Envelope(e) => ok(&*e, max),
        Answer::Bundle(b) => ok(&*b, max),
        Answer::Explanation(x) => ok(&*x, max),
        Answer::Plan(p) => ok(&*p, max),
    }
}

#[tool_router]
impl SignalqlServer {
    pub fn new(engine: Engine) -> Self {
        SignalqlServer {
            caller: Some(Arc::new(Caller::new(engine))),
            tool_router: annotated(Self::tool_router()),
            watches: Default::default(),
        }
    }

    /// A server whose every request carries its caller (set by `signalql serve`).
    pub fn per_request() -> Self {
        SignalqlServer {
            caller: None,
            tool_router: annotated(Self::tool_router()),
            watches: Default::default(),
        }
    }

    /// The caller of `ctx`'s request.
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> crate::Result<Arc<Caller>> {
        match &self.caller {
            Some(c) => Ok(c.clone()),
            None => ctx
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Arc<Caller>>())
                .cloned()
                .ok_or_else(|| Error::internal("an HTTP request reached MCP without its caller")),
        }
    }

    /// The caller of `ctx`'s request, admitted.
    fn admit(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> crate::Result<(Arc<Engine>, tokio::sync::OwnedSemaphorePermit)> {
        let caller = self.caller(ctx)?;
        let permit = caller.admit()?;
        Ok((caller.engine.clone(), permit))
    }

    /// The most characters an answer to `ctx`'s caller holds.
    fn max_chars(&self, ctx: &RequestContext<RoleServer>) -> u64 {
        self.caller(ctx)
            .map_or(DEFAULT_MAX_RESULT_CHARS, |c| c.max_result_chars)
    }

    #[tool(
        description = "Run a SignalQL statement over the dataset. Analytics give the typed \
                       result envelope {columns, rows, metadata}; CONTEXT FOR gives a bundle.",
        output_schema = schemas::answer()
    )]
    async fn query(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<QueryArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            engine
                .answer_with(&args.query, &args.params.clone().unwrap_or_default())
                .await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(a) => answer(a, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "Catalog records (DESCRIBE): fields with types, units and nullability, \
                       relationship edges, signals, metric versions",
        output_schema = schemas::envelope()
    )]
    async fn describe(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<DescribeArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let request = DescribeRequest {
            target: args.target,
        };
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            request.run(&engine).await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(env) => ok(&env, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "Build the context bundle for a task: the smallest relevant, current, \
                       trusted set of text within a token budget, with provenance",
        output_schema = schemas::bundle()
    )]
    async fn context(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<ContextArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            context_bundle(&engine, &args).await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(b) => ok(&b, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "Wait for a WATCH condition: poll `WATCH (query) WHEN condition` every \
                       interval_seconds, up to max_polls times, and answer at the first poll \
                       where it holds with the alert (its rows' envelope), or with alert null",
        output_schema = schemas::watch()
    )]
    async fn watch(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<WatchArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let cancelled = ctx.ct.clone().cancelled_owned();
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            watch_until_alert(&engine, &args, cancelled).await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(w) => ok(&w, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "Explain a stored context bundle: phases, scores, rejections",
        output_schema = schemas::explanation()
    )]
    async fn explain_context(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<ExplainArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            engine.explain_context(&args.address).await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(x) => ok(&x, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "The plan of a SignalQL statement without running it (EXPLAIN): sources \
                       with files, bytes and rows, logical and physical plans, SQL, estimate, \
                       limits; with analyze, also run it and report operators, pruning and \
                       actual figures",
        output_schema = schemas::plan()
    )]
    async fn explain(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<PlanArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            let q = crate::request::explain_query(
                &args.query,
                &args.params.clone().unwrap_or_default(),
                args.analyze.unwrap_or(false),
            )?;
            engine.explain(&q).await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(x) => ok(&x, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "What a SignalQL statement would read (files, row groups, rows, bytes \
                       after pruning) and how long it would take, from metadata only",
        output_schema = schemas::simulation()
    )]
    async fn simulate(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<SimulateArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            let params = args.params.clone().unwrap_or_default();
            engine
                .simulate(&crate::parse_with(&args.query, &params)?)
                .await
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(x) => ok(&x, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "How good the engine's estimates have been: per estimated field the mean \
                       absolute error, the calibration and the sample count over traced runs",
        output_schema = schemas::statistics()
    )]
    async fn stats(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<StatsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            let mut stats = engine.statistics().await;
            if let Some(f) = &args.field {
                stats.fields.retain(|s| s.field == *f);
                if stats.fields.is_empty() {
                    return Err(Error::type_error(format!(
                        "no estimated field {f:?}: rows, scanned_rows, scanned_bytes or elapsed_ms"
                    )));
                }
            }
            Ok(stats)
        };
        match catch_panics(supervised(&ctx, run)).await {
            Ok(x) => ok(&x, self.max_chars(&ctx)),
            Err(e) => failed(&e),
        }
    }

    #[tool(
        description = "The canonical text of a SignalQL statement (v0.1 prints as v0.3)",
        output_schema = schemas::canonical()
    )]
    async fn format(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<FormatArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let params = args.params.clone().unwrap_or_default();
        match catch_panics(supervised(&ctx, async {
            crate::parse_with(&args.query, &params)
        }))
        .await
        {
            Ok(s) => ok(
                &serde_json::json!({ "canonical": s.to_string() }),
                self.max_chars(&ctx),
            ),
            Err(e) => failed(&e),
        }
    }
}

/// How often a running tool reports progress, to a client that asked for it.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Runs a tool's work under its request (docs/runtime.md, "Progress and cancellation"): the
/// work's future is dropped when the client cancels the request (`notifications/cancelled`),
/// and with it the statement's plans, their streams and its share of
/// `max_concurrent_requests`; while it runs, a client that gave a progress token gets a
/// `notifications/progress` every [`PROGRESS_EVERY`] in which the rows read by the plans the
/// statement has started grew (the first once a plan has started), with those rows as
/// `progress`.
async fn supervised<T>(
    ctx: &RequestContext<RoleServer>,
    work: impl std::future::Future<Output = crate::Result<T>>,
) -> crate::Result<T> {
    use signalql_engine::progress::{Watched, watching};
    let watched = Arc::new(Watched::default());
    // A W3C traceparent in the request's _meta parents its exported spans (engine/src/otlp.rs).
    let traceparent = ctx.meta.get("traceparent").and_then(|v| v.as_str());
    let work = signalql_engine::otlp::with_traceparent(traceparent, work);
    let work = watching(Arc::clone(&watched), work);
    let report = async {
        let Some(token) = ctx.meta.get_progress_token() else {
            return std::future::pending().await;
        };
        let mut ticks = tokio::time::interval(PROGRESS_EVERY);
        ticks.tick().await;
        let mut reported: Option<u64> = None;
        loop {
            ticks.tick().await;
            let (plans, rows) = watched.read();
            if plans == 0 || reported.is_some_and(|r| rows <= r) {
                continue;
            }
            reported = Some(rows);
            let note = ProgressNotificationParam::new(token.clone(), rows as f64)
                .with_message(format!("{rows} rows read by {plans} plan(s)"));
            // A client that went away is the cancellation's business.
            let _ = ctx.peer.notify_progress(note).await;
        }
    };
    tokio::select! {
        done = work => done,
        never = report => never,
        () = ctx.ct.cancelled() => Err(Error::io("cancelled by the client (notifications/cancelled)")),
    }
}

async fn context_bundle(engine: &Engine, args: &ContextArgs) -> crate::Result<crate::Bundle> {
    let q = ContextRequest {
        task: args.task.clone(),
        budget: args.budget,
        project: args.project.clone(),
        // USING KIND through the clauses (docs/context.md).
        kind: None,
        clauses: args.clauses.clone(),
        compress: args.compress,
        prefer: args.prefer.clone().unwrap_or_default(),
        exclude: args.exclude.clone().unwrap_or_default(),
        max_objects: args.max_objects,
        max_depth: args.max_depth,
        max_age: args.max_age.clone(),
        with_evidence: args.with_evidence,
        as_of: args.as_of.clone(),
        estimator: args.estimator.clone(),
        params: args.params.clone().unwrap_or_default(),
    }
    .query()?;
    engine.context(&q).await
}

/// Polls `args.watch` until an alert, `max_polls` polls, or the client cancels the request.
/// A failing poll is the call's error (a WATCH that cannot run is not waited on).
async fn watch_until_alert(
    engine: &Engine,
    args: &WatchArgs,
    cancelled: impl std::future::Future<Output = ()>,
) -> crate::Result<WatchAnswer> {
    tokio::pin!(cancelled);
    let interval = args.interval_seconds.unwrap_or(5.0);
    let (w, pause) = crate::watch_loop::watch_request(
        &args.watch,
        interval,
        "the watch tool takes a WATCH (query) WHEN condition statement; use query for others",
        "interval_seconds",
    )?;
    let max_polls = args.max_polls.unwrap_or(1);
    if max_polls == 0 {
        return Err(Error::type_error("max_polls must be at least 1"));
    }
    let waited = interval * (max_polls - 1) as f64;
    if waited > MAX_WATCH_SECONDS as f64 {
        return Err(
            Error::limit("watch_seconds", MAX_WATCH_SECONDS, waited.ceil() as u64).with_help(
                "interval_seconds × (max_polls − 1) is how long the call may wait; call again \
                 to wait longer",
            ),
        );
    }
    let mut watcher = crate::watch::Watcher::new(w);
    loop {
        let poll = watcher.poll(engine).await?;
        if poll.alert.is_some() || watcher.polls() >= max_polls {
            return Ok(WatchAnswer {
                polls: watcher.polls(),
                holds: poll.holds,
                alert: poll.alert,
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = &mut cancelled => {
                return Err(Error::io("watch: the client cancelled the request"));
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SignalqlServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_prompts()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("signalql", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "SignalQL over one dataset: read the signalql://grammar resource (or get the \
                 signalql-primer prompt) to learn the language, `describe` to discover the \
                 schema, `query` for evidence (typed result envelopes), `context` for a \
                 budgeted context bundle.",
            )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let grammar = Resource::new(grammar::GRAMMAR_URI, "grammar")
            .with_title("SignalQL reference")
            .with_description(
                "The language in brief: statements, clauses in canonical order, functions, \
                 units, the result envelope, errors and what to do, worked examples",
            )
            .with_mime_type("text/markdown");
        let describe = DESCRIBE_TARGETS.iter().map(|t| {
            Resource::new(format!("{DESCRIBE_PREFIX}{t}"), format!("describe {t}"))
                .with_description(format!(
                    "DESCRIBE {t}: the catalog records, as the envelope"
                ))
                .with_mime_type("application/json")
        });
        let all = std::iter::once(grammar).chain(describe).collect();
        Ok(ListResourcesResult::with_all_items(all))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let describe = ResourceTemplate::new(format!("{DESCRIBE_PREFIX}{{target}}"), "describe")
            .with_description(
                "DESCRIBE target: events, entities, signals, metrics, relationships or \
                 entity(TYPE)",
            )
            .with_mime_type("application/json");
        let bundle = ResourceTemplate::new("context://{id}", "bundle")
            .with_description(
                "A stored context bundle by its address (the id CONTEXT FOR answers with), \
                 shown to the caller as EXPLAIN CONTEXT shows it",
            )
            .with_mime_type("application/json");
        let watch = ResourceTemplate::new(format!("{WATCH_PREFIX}{{statement}}"), "watch")
            .with_description(
                "A WATCH (query) WHEN condition statement, percent-encoded (optionally \
                 ?interval_seconds=S, default 5): read, one poll's {polls, holds, alert}; \
                 subscribed, polled until unsubscribed, with notifications/resources/updated \
                 at each alert (docs/watch.md)",
            )
            .with_mime_type("application/json");
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            describe, bundle, watch,
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = |text: String, media: &str| {
            let text = ResourceContents::text(text, uri).with_mime_type(media);
            Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
                vec![text],
            )))
        };
        if uri == grammar::GRAMMAR_URI {
            return contents(grammar::reference(), "text/markdown");
        }
        let run = async {
            let (engine, _permit) = self.admit(&ctx)?;
            let value = if let Some(target) = uri.strip_prefix(DESCRIBE_PREFIX) {
                let request = DescribeRequest {
                    target: Some(target.to_string()),
                };
                serde_json::to_string(&request.run(&engine).await?)
            } else if uri.starts_with("context://") {
                serde_json::to_string(&engine.stored_bundle(uri).await?)
            } else if let Some(watch) = watch_resource(uri) {
                let subscribed = self.watches.lock().ok().and_then(|w| {
                    w.get(uri)
                        .and_then(|s| s.last.lock().ok().map(|l| l.clone()))
                });
                match subscribed {
                    Some(last) => Ok(last.to_string()),
                    None => {
                        let mut watcher = crate::watch::Watcher::new(watch?.0);
                        let poll = watcher.poll(&engine).await?;
                        Ok(watch_state(1, poll.holds, poll.alert.as_ref()).to_string())
                    }
                }
            } else {
                return Ok(None);
            };
            value
                .map(Some)
                .map_err(|e| Error::internal(format!("a resource did not serialise: {e}")))
        };
        let missing = |data: Option<serde_json::Value>| {
            ErrorData::resource_not_found(
                format!(
                    "no resource {uri}: signalql://grammar, signalql://describe/{{target}}, \
                     context://{{id}} and signalql://watch/{{statement}} are read"
                ),
                data,
            )
        };
        match catch_panics(run).await {
            Ok(Some(text)) => contents(text, "application/json"),
            Ok(None) => Err(missing(None)),
            Err(e) if e.code() == "unknown_context" => Err(missing(Some(e.to_json()))),
            Err(e) => Err(ErrorData::invalid_params(e.to_string(), Some(e.to_json()))),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let refused = |e: Error| ErrorData::invalid_params(e.to_string(), Some(e.to_json()));
        let uri = request.uri;
        let Some(watch) = watch_resource(&uri) else {
            return Err(ErrorData::invalid_params(
                format!("{uri} does not change: only signalql://watch/{{statement}} is subscribed"),
                None,
            ));
        };
        let (watch, pause) = watch.map_err(refused)?;
        let caller = self.caller(&ctx).map_err(refused)?;
        let last = Arc::new(std::sync::Mutex::new(watch_state(0, false, None)));
        let kept = Arc::clone(&last);
        let peer = ctx.peer.clone();
        let updated = uri.clone();
        let polls = tokio::spawn(async move {
            let mut watcher = crate::watch::Watcher::new(watch);
            loop {
                // Each poll takes a share of the caller's max_concurrent_requests; a poll
                // that finds none waits for the next.
                if let Ok(_permit) = caller.admit() {
                    let poll = catch_panics(watcher.poll(&caller.engine)).await;
                    let (state, alert) = match poll {
                        Ok(p) => (
                            watch_state(watcher.polls(), p.holds, p.alert.as_ref()),
                            p.alert.is_some(),
                        ),
                        Err(e) => (
                            serde_json::json!({ "polls": watcher.polls(), "error": e.to_json() }),
                            false,
                        ),
                    };
                    if let Ok(mut l) = kept.lock() {
                        // The last alert stays readable until the next one.
                        let mut state = state;
                        if !alert && l["alert"].is_object() {
                            state["alert"] = l["alert"].take();
                        }
                        *l = state;
                    }
                    let note = ResourceUpdatedNotificationParam::new(updated.clone());
                    if alert && peer.notify_resource_updated(note).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(pause).await;
            }
        });
        if let Ok(mut watches) = self.watches.lock() {
            // A subscription to the same URI again replaces (and so stops) the earlier one.
            watches.insert(uri, Subscription { polls, last });
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Ok(mut watches) = self.watches.lock() {
            watches.remove(&request.uri);
        }
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let question = PromptArgument::new("question")
            .with_description("What to find out from the dataset (optional)")
            .with_required(false);
        let primer = Prompt::new(
            grammar::PRIMER,
            Some(
                "Teaches SignalQL: the language reference and this dataset's catalogue, with \
                 the question when given",
            ),
            Some(vec![question]),
        );
        Ok(ListPromptsResult::with_all_items(vec![primer]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != grammar::PRIMER {
            return Err(ErrorData::invalid_params(
                format!(
                    "no prompt {:?}: signalql-primer is the one listed",
                    request.name
                ),
                None,
            ));
        }
        let question = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("question"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let run = async {
            let engine = self.caller(&ctx)?.engine.clone();
            grammar::primer(&engine, question.as_deref()).await
        };
        let text = catch_panics(run)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_json().to_string(), None))?;
        let message = PromptMessage::new_text(Role::User, text);
        Ok(GetPromptResponse::Complete(
            GetPromptResult::new(vec![message])
                .with_description("SignalQL, and the dataset it is served over"),
        ))
    }
}

/// Serve `engine` over stdin/stdout until the client closes the connection.
pub async fn serve_stdio(engine: Engine) -> crate::Result<()> {
    let io = |e: &dyn std::fmt::Display| Error::io(format!("mcp: {e}"));
    let service = SignalqlServer::new(engine)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| io(&e))?;
    service.waiting().await.map_err(|e| io(&e))?;
    Ok(())
}

//! Deterministic synthetic `events` data: users, sessions, funnels and daily seasonality.
//!
//! The same [`GenOptions`] (rows, seed, end, days) always give byte-identical Parquet files.
//! The model: users are acquired over the span (15% exist at the start); each session is a
//! burst of events of one user (or, for ~2% of sessions, an anonymous visitor) within minutes;
//! session starts follow an hourly intensity with a daily cycle, a weekday/weekend cycle and a
//! growth trend. Per user: a `plan`, an `experiment_variant` and a `country`; per session: a
//! `platform`. Users go `visit` → `signup` → `activated` (the treatment variant signs up more
//! often) and `checkout` → `purchase` with decreasing probability, in time order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use datafusion::arrow::array::{
    ArrayRef, Float64Array, Float64Builder, StringBuilder, StructArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{CatalogError, Result};
use crate::ingest::events_schema;
use crate::write::AtomicParquetWriter;

/// Rows per Arrow batch written by the generator.
pub const BATCH_ROWS: usize = 65_536;
/// Rows per generated Parquet file (32 batches).
pub const FILE_ROWS: usize = 32 * BATCH_ROWS;

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Exact number of event rows.
    pub rows: u64,
    /// Seed of the ChaCha8 generator.
    pub seed: u64,
    /// Dataset root: files go to `out/events/part-NNNNN.parquet`, config to `out/signalql.toml`.
    pub out: PathBuf,
    /// Exclusive end of the generated span (every timestamp is strictly before it).
    pub end: DateTime<Utc>,
    /// Length of the span in days (timestamps are in `[end - days, end)`).
    pub days: u32,
    /// How events are drawn: sessions of users (the default) or independent rows.
    pub shape: Shape,
    /// Number of users; `None`: one per 40 rows.
    pub users: Option<u64>,
}

/// How [`generate_events`] draws events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// Sessions: bursts of one user's events, users acquired over the span, funnels in order
    /// (the module's model).
    #[default]
    Sessions,
    /// Every row independent: a user drawn uniformly from all users (all present from the
    /// start), an event name, platform and path drawn by weight, times following the same
    /// hourly intensity. Each day sees most users, so distinct counts per group are large.
    Flat,
}

impl Shape {
    /// The name `signalql gen events --shape` takes.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Sessions => "sessions",
            Shape::Flat => "flat",
        }
    }
}

impl GenOptions {
    /// Defaults: 1 000 000 rows, seed 42, `end` = 2026-06-13T00:00:00Z, 90 days.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        GenOptions {
            rows: 1_000_000,
            seed: 42,
            out: out.into(),
            end: default_end(),
            days: 90,
            shape: Shape::Sessions,
            users: None,
        }
    }
}

/// The default end of generated data: 2026-06-13T00:00:00Z.
pub fn default_end() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 13, 0, 0, 0)
        .single()
        .unwrap_or_default()
}

/// What [`generate_events`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenSummary {
    /// Event rows written.
    pub rows: u64,
    /// Number of Parquet files written.
    pub files: usize,
    /// Distinct non-null `user_id`s in the data.
    pub users: u64,
    /// Total size of the Parquet files in bytes.
    pub bytes: u64,
    /// The files, in order.
    pub paths: Vec<PathBuf>,
    /// The `signals` table's file.
    pub signals: PathBuf,
}

/// The schema of the `signals` table (DESIGN.md §3), written by the entity generator.
pub use crate::entity_gen::signals_schema;

/// `signals/part-00000.parquet`: each user who appears in the events gets the signal
/// `experiment_variant` (the same arm as `properties.experiment_variant`, probability NULL),
/// computed at the start of the span, so `signal(experiment_variant)` joins it for any T in it.
fn write_signals(dir: &Path, users: &[User], computed_at: i64) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| CatalogError::io(dir, e))?;
    let seen: Vec<(usize, &User)> = users.iter().enumerate().filter(|(_, u)| u.seen).collect();
    let n = seen.len();
    let mut entity = StringBuilder::with_capacity(n, n * 7);
    let mut name = StringBuilder::with_capacity(n, n * 18);
    let mut value = StringBuilder::with_capacity(n, n * 9);
    for (i, u) in &seen {
        entity.append_value(format!("u{i:06}"));
        name.append_value("experiment_variant");
        value.append_value(VARIANTS[u.variant as usize]);
    }
    let schema = signals_schema();
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(entity.finish()) as ArrayRef,
            Arc::new(name.finish()),
            Arc::new(value.finish()),
            Arc::new(Float64Array::from(vec![None::<f64>; n])),
            Arc::new(TimestampMicrosecondArray::from(vec![computed_at; n]).with_timezone("UTC")),
        ],
    )?;
    let mut writer = AtomicParquetWriter::new(dir, "part-00000", schema)?;
    writer.write(&batch)?;
    writer.finish()
}

/// The `properties` struct of generated events (fields sorted by name, all nullable).
pub fn generated_properties_fields() -> Fields {
    Fields::from(vec![
        Field::new("amount", DataType::Float64, true),
        Field::new("country", DataType::Utf8, true),
        Field::new("experiment_variant", DataType::Utf8, true),
        Field::new("path", DataType::Utf8, true),
        Field::new("plan", DataType::Utf8, true),
        Field::new("platform", DataType::Utf8, true),
    ])
}

/// The schema of generated `events` files.
pub fn generated_events_schema() -> SchemaRef {
    events_schema(Some(generated_properties_fields()))
}

// ---------------------------------------------------------------------------------------------
// Vocabulary

const EVENT_NAMES: [&str; 10] = [
    "page_view",
    "session_start",
    "visit",
    "signup",
    "activated",
    "checkout",
    "purchase",
    "error",
    "click",
    "logout",
];
const PAGE_VIEW: u8 = 0;
const SESSION_START: u8 = 1;
const VISIT: u8 = 2;
const SIGNUP: u8 = 3;
const ACTIVATED: u8 = 4;
const CHECKOUT: u8 = 5;
const PURCHASE: u8 = 6;
const ERROR: u8 = 7;
const CLICK: u8 = 8;
const LOGOUT: u8 = 9;

const PLANS: [&str; 4] = ["free", "pro", "team", "enterprise"];
const PLAN_WEIGHTS: [u32; 5] = [55, 25, 12, 5, 3]; // the last one is NULL
const PLATFORMS: [&str; 3] = ["web", "ios", "android"];
const PLATFORM_WEIGHTS: [u32; 3] = [60, 25, 15];
const VARIANTS: [&str; 2] = ["control", "treatment"];
const COUNTRIES: [&str; 12] = [
    "US", "GB", "DE", "FR", "IN", "BR", "CA", "JP", "AU", "NL", "ES", "MX",
];
const COUNTRY_WEIGHTS: [u32; 12] = [34, 10, 9, 7, 9, 6, 5, 5, 4, 4, 4, 3];
/// Pages a `page_view` can have; `/signup` and `/checkout` also precede those events.
const PATHS: [&str; 14] = [
    "/",
    "/pricing",
    "/docs",
    "/docs/getting-started",
    "/docs/api",
    "/docs/funnels",
    "/blog/launch",
    "/blog/signalql-0-3",
    "/blog/context-bundles",
    "/features",
    "/account",
    "/settings",
    "/signup",
    "/checkout",
];
const PATH_WEIGHTS: [u32; 12] = [24, 12, 12, 6, 5, 3, 4, 3, 2, 6, 8, 5];
const PATH_SIGNUP: u8 = 12;
const PATH_CHECKOUT: u8 = 13;
/// Event-name weights of the flat shape, in [`EVENT_NAMES`] order.
const FLAT_KIND_WEIGHTS: [u32; 10] = [500, 120, 60, 30, 20, 20, 15, 20, 180, 35];
const NONE: u8 = u8::MAX;
const ANON: u32 = u32::MAX;

/// Events per hour of day (UTC), relative.
const HOUR_WEIGHTS: [f64; 24] = [
    3.0, 2.5, 2.0, 2.0, 2.0, 2.5, 3.5, 5.0, 7.0, 8.5, 9.5, 10.0, 10.0, 10.0, 9.5, 9.5, 9.0, 8.5,
    8.0, 7.5, 7.0, 6.0, 5.0, 4.0,
];

// ---------------------------------------------------------------------------------------------
// Model state

struct User {
    plan: u8,
    variant: u8,
    country: u8,
    will_signup: bool,
    will_activate: bool,
    seen: bool,
    signed_up: bool,
    activated: bool,
    /// The start of the user's first session (i64::MIN until seen).
    first_ts: i64,
    last_ts: i64,
}

/// One generated event, compact; strings are looked up when the batch is built.
#[derive(Clone, Copy)]
struct Row {
    ts: i64,
    session: u64,
    user: u32,
    kind: u8,
    platform: u8,
    path: u8,
    country: u8,
    /// Cents, or -1 for NULL.
    amount: i32,
}

fn pick(rng: &mut ChaCha8Rng, weights: &[u32]) -> u8 {
    let total: u32 = weights.iter().sum();
    let mut r = rng.random_range(0..total);
    for (i, w) in weights.iter().enumerate() {
        if r < *w {
            return i as u8;
        }
        r -= w;
    }
    (weights.len() - 1) as u8
}

/// Hourly intensity over the span, as a cumulative table for inverse-CDF sampling.
struct Clock {
    begin_us: i64,
    end_us: i64,
    cum: Vec<f64>,
}

impl Clock {
    fn new(end: DateTime<Utc>, days: u32) -> Self {
        let end_us = end.timestamp_micros();
        let hours = days as i64 * 24;
        let begin_us = end_us - hours * 3_600_000_000;
        let begin_s = begin_us.div_euclid(1_000_000);
        let mut cum = Vec::with_capacity(hours as usize + 1);
        let mut acc = 0.0;
        cum.push(acc);
        for h in 0..hours {
            let s = begin_s + h * 3600;
            let hour_of_day = s.div_euclid(3600).rem_euclid(24) as usize;
            let weekday = (s.div_euclid(86_400) + 3).rem_euclid(7); // 0 = Monday
            let dow = if weekday >= 5 { 0.7 } else { 1.0 };
            let trend = 1.0 + 0.5 * h as f64 / hours as f64;
            acc += HOUR_WEIGHTS[hour_of_day] * dow * trend;
            cum.push(acc);
        }
        Clock {
            begin_us,
            end_us,
            cum,
        }
    }

    /// The instant at which a fraction `u` in [0, 1) of all events has happened.
    fn at(&self, u: f64) -> i64 {
        let hours = self.cum.len() - 1;
        let total = self.cum[hours];
        let target = u.clamp(0.0, 1.0) * total;
        let h = self
            .cum
            .partition_point(|c| *c <= target)
            .saturating_sub(1)
            .min(hours - 1);
        let w = self.cum[h + 1] - self.cum[h];
        let frac = if w > 0.0 {
            ((target - self.cum[h]) / w).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let ts = self.begin_us + ((h as f64 + frac) * 3_600_000_000.0) as i64;
        ts.clamp(self.begin_us, self.end_us - 1)
    }
}

/// An approximately standard normal value (Irwin–Hall: pure arithmetic, so portable).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0
}

/// A lognormal-ish order amount in cents, 5.00 ..= 500.00, median about 40.
fn amount_cents(rng: &mut ChaCha8Rng) -> i32 {
    let v = (40.0f64.ln() + 0.85 * normal(rng)).exp();
    (v.clamp(5.0, 500.0) * 100.0).round() as i32
}

/// Microseconds between two events of a session: 0.2 s to ~2 min, mostly short.
fn gap_us(rng: &mut ChaCha8Rng) -> i64 {
    let r: f64 = rng.random();
    200_000 + (r * r * 120_000_000.0) as i64 + rng.random_range(0..1000)
}

struct Generator {
    rng: ChaCha8Rng,
    clock: Clock,
    users: Vec<User>,
    rows: u64,
    produced: u64,
    sessions: u64,
    shape: Shape,
}

impl Generator {
    fn new(opts: &GenOptions) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
        let n_users = opts
            .users
            .unwrap_or(opts.rows / 40)
            .clamp(1, u32::MAX as u64 - 1) as usize;
        let mut users = Vec::with_capacity(n_users);
        for _ in 0..n_users {
            let plan = pick(&mut rng, &PLAN_WEIGHTS);
            let variant = rng.random_range(0..2u8);
            let country = pick(&mut rng, &COUNTRY_WEIGHTS);
            let signup_p = if variant == 1 { 0.40 } else { 0.32 };
            let will_signup = rng.random::<f64>() < signup_p;
            let will_activate = rng.random::<f64>() < 0.55;
            users.push(User {
                plan: if plan as usize >= PLANS.len() {
                    NONE
                } else {
                    plan
                },
                variant,
                country,
                will_signup,
                will_activate,
                seen: false,
                signed_up: false,
                activated: false,
                first_ts: i64::MIN,
                last_ts: i64::MIN,
            });
        }
        Generator {
            rng,
            clock: Clock::new(opts.end, opts.days),
            users,
            rows: opts.rows,
            produced: 0,
            sessions: 0,
            shape: opts.shape,
        }
    }

    /// One row of the flat shape: every field drawn on its own.
    fn flat_row(&mut self) -> Row {
        self.sessions += 1;
        let u = (self.produced as f64 + self.rng.random::<f64>()) / self.rows as f64;
        let user = self.rng.random_range(0..self.users.len() as u32);
        let rng = &mut self.rng;
        let kind = pick(rng, &FLAT_KIND_WEIGHTS);
        let path = if kind == PAGE_VIEW {
            pick(rng, &PATH_WEIGHTS)
        } else {
            NONE
        };
        let amount = if kind == CHECKOUT || kind == PURCHASE {
            amount_cents(rng)
        } else {
            -1
        };
        let platform = pick(rng, &PLATFORM_WEIGHTS);
        let ts = self.clock.at(u).min(self.clock.end_us - 1);
        let p = &mut self.users[user as usize];
        p.seen = true;
        if p.first_ts == i64::MIN || ts < p.first_ts {
            p.first_ts = ts;
        }
        self.produced += 1;
        Row {
            ts,
            session: self.sessions,
            user,
            kind,
            platform,
            path,
            country: p.country,
            amount,
        }
    }

    /// Picks the user of a session starting at fraction `u` of the span, or ANON.
    fn pick_user(&mut self, u: f64) -> u32 {
        if self.rng.random::<f64>() < 0.02 {
            return ANON;
        }
        let n = self.users.len() as f64;
        // 15% of users exist at the start; the rest are acquired linearly over the span.
        let frontier = (n * (0.15 + 0.85 * u)).ceil().clamp(1.0, n);
        let r: f64 = self.rng.random();
        let x = if self.rng.random::<f64>() < 0.5 {
            r * r // loyal early users come back more often
        } else {
            1.0 - r * r // recently acquired users are active
        };
        ((x * frontier) as u32).min(frontier as u32 - 1)
    }

    /// Appends one session's events (at most `limit`) to `out`.
    fn session(&mut self, limit: u64, out: &mut Vec<Row>) {
        self.sessions += 1;
        let session = self.sessions;
        let u = self.produced as f64 / self.rows as f64;
        let user = self.pick_user(u);
        let anon = user == ANON;
        let rng = &mut self.rng;
        let platform = pick(rng, &PLATFORM_WEIGHTS);
        let country = if anon {
            pick(rng, &COUNTRY_WEIGHTS)
        } else {
            self.users[user as usize].country
        };

        // The sequence of (kind, path, amount) first, then times.
        let mut kinds: Vec<(u8, u8, i32)> = Vec::with_capacity(16);
        kinds.push((SESSION_START, NONE, -1));
        let first = !anon && !self.users[user as usize].seen;
        if first || anon || rng.random::<f64>() < 0.35 {
            kinds.push((VISIT, NONE, -1));
        }
        let mut views = 1;
        while views < 30 && rng.random::<f64>() < 0.7 {
            views += 1;
        }
        for _ in 0..views {
            kinds.push((PAGE_VIEW, pick(rng, &PATH_WEIGHTS), -1));
            if rng.random::<f64>() < 0.35 {
                kinds.push((CLICK, NONE, -1));
            }
            if rng.random::<f64>() < 0.02 {
                kinds.push((ERROR, NONE, -1));
            }
        }
        if !anon {
            let p = &mut self.users[user as usize];
            p.seen = true;
            if !p.signed_up {
                if p.will_signup && rng.random::<f64>() < 0.6 {
                    kinds.push((PAGE_VIEW, PATH_SIGNUP, -1));
                    kinds.push((SIGNUP, NONE, -1));
                    p.signed_up = true;
                    if p.will_activate && rng.random::<f64>() < 0.3 {
                        kinds.push((ACTIVATED, NONE, -1));
                        p.activated = true;
                    }
                }
            } else if !p.activated && p.will_activate && rng.random::<f64>() < 0.5 {
                kinds.push((ACTIVATED, NONE, -1));
                p.activated = true;
            }
            let checkout_p = match p.plan {
                0 => 0.06,
                1 => 0.15,
                2 => 0.20,
                3 => 0.25,
                _ => 0.08,
            };
            if p.signed_up && rng.random::<f64>() < checkout_p {
                let cents = amount_cents(rng);
                kinds.push((PAGE_VIEW, PATH_CHECKOUT, -1));
                kinds.push((CHECKOUT, NONE, cents));
                if rng.random::<f64>() < 0.6 {
                    kinds.push((PURCHASE, NONE, cents));
                }
            }
            if rng.random::<f64>() < 0.25 {
                kinds.push((LOGOUT, NONE, -1));
            }
        }
        kinds.truncate(limit.min(kinds.len() as u64) as usize);

        let mut offsets = Vec::with_capacity(kinds.len());
        let mut t = 0i64;
        for i in 0..kinds.len() {
            if i > 0 {
                t += gap_us(rng);
            }
            offsets.push(t);
        }
        let duration = t;
        let mut start = self.clock.at(u) + rng.random_range(0..1_000_000);
        if !anon {
            let last = self.users[user as usize].last_ts;
            if start <= last {
                start = last + 60_000_000 + rng.random_range(0..1_800_000_000);
            }
        }
        if start + duration >= self.clock.end_us {
            start = self.clock.end_us - 1 - duration;
        }
        start = start.max(self.clock.begin_us);
        if !anon {
            let p = &mut self.users[user as usize];
            p.last_ts = start + duration;
            if p.first_ts == i64::MIN {
                p.first_ts = start;
            }
        }
        for ((kind, path, amount), off) in kinds.into_iter().zip(offsets) {
            out.push(Row {
                ts: (start + off).min(self.clock.end_us - 1),
                session,
                user,
                kind,
                platform,
                path,
                country,
                amount,
            });
        }
        self.produced += out.len() as u64;
    }

    /// Generates the next `n` rows (fewer only at the end).
    fn next_rows(&mut self, n: usize, out: &mut Vec<Row>) {
        if self.shape == Shape::Flat {
            while out.len() < n && self.produced < self.rows {
                let row = self.flat_row();
                out.push(row);
            }
            return;
        }
        let mut session_rows = Vec::with_capacity(64);
        while out.len() < n && self.produced < self.rows {
            session_rows.clear();
            let limit = (self.rows - self.produced).min((n - out.len()) as u64);
            self.session(limit, &mut session_rows);
            out.extend_from_slice(&session_rows);
        }
    }
}

fn build_batch(schema: &SchemaRef, users: &[User], rows: &[Row]) -> Result<RecordBatch> {
    let n = rows.len();
    let mut event_name = StringBuilder::with_capacity(n, n * 9);
    let mut user_id = StringBuilder::with_capacity(n, n * 7);
    let mut session_id = StringBuilder::with_capacity(n, n * 8);
    let mut amount = Float64Builder::with_capacity(n);
    let mut country = StringBuilder::with_capacity(n, n * 2);
    let mut variant = StringBuilder::with_capacity(n, n * 8);
    let mut path = StringBuilder::with_capacity(n, n * 4);
    let mut plan = StringBuilder::with_capacity(n, n * 4);
    let mut platform = StringBuilder::with_capacity(n, n * 4);
    let mut ts = Vec::with_capacity(n);
    for r in rows {
        event_name.append_value(EVENT_NAMES[r.kind as usize]);
        session_id.append_value(format!("s{:07}", r.session));
        ts.push(r.ts);
        amount.append_option((r.amount >= 0).then(|| r.amount as f64 / 100.0));
        country.append_value(COUNTRIES[r.country as usize]);
        platform.append_value(PLATFORMS[r.platform as usize]);
        path.append_option(PATHS.get(r.path as usize));
        match users.get(r.user as usize) {
            Some(u) => {
                user_id.append_value(format!("u{:06}", r.user));
                variant.append_value(VARIANTS[u.variant as usize]);
                plan.append_option(PLANS.get(u.plan as usize));
            }
            None => {
                user_id.append_null();
                variant.append_null();
                plan.append_null();
            }
        }
    }
    let props = StructArray::try_new(
        generated_properties_fields(),
        vec![
            Arc::new(amount.finish()) as ArrayRef,
            Arc::new(country.finish()),
            Arc::new(variant.finish()),
            Arc::new(path.finish()),
            Arc::new(plan.finish()),
            Arc::new(platform.finish()),
        ],
        None,
    )?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(event_name.finish()),
        Arc::new(user_id.finish()),
        Arc::new(session_id.finish()),
        Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        Arc::new(props),
    ];
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

fn write_config(opts: &GenOptions) -> Result<()> {
    let path = opts.out.join("signalql.toml");
    if path.exists() {
        return Ok(());
    }
    // A shape or user count other than the default names itself in the header (the default
    // keeps the header of the datasets generated before shapes existed).
    let shape = if opts.shape == Shape::Sessions && opts.users.is_none() {
        String::new()
    } else {
        format!(
            ", shape = {}, users = {}",
            opts.shape.name(),
            opts.users.unwrap_or(opts.rows / 40)
        )
    };
    let text = format!(
        "# Written by `signalql gen` (rows = {}, seed = {}, days = {}{shape}).\n\
         description = \"Synthetic product-analytics events ({} rows, seed {})\"\n\
         now = \"{}\"\n\n[units]\n\"properties.amount\" = \"USD\"\n",
        opts.rows,
        opts.seed,
        opts.days,
        opts.rows,
        opts.seed,
        opts.end
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    );
    crate::write::write_new_file(&path, &text)
}

fn check_no_parts(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CatalogError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| CatalogError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("part-") && name.ends_with(".parquet") {
            return Err(CatalogError::Invalid(format!(
                "{} already holds generated data ({name}); generate into an empty dataset",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Writes a deterministic synthetic `events` table to `opts.out/events/part-NNNNN.parquet`
/// (each file sorted by timestamp, at most [`FILE_ROWS`] rows) and, if absent,
/// `opts.out/signalql.toml` with `now = <end>` and `[units] "properties.amount" = "USD"`.
///
/// Fails without writing if `opts.out/events` already holds `part-*.parquet` files. If it
/// fails midway, files already finished stay (each is complete); none is half-written.
pub fn generate_events(
    opts: &GenOptions,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<GenSummary> {
    if opts.rows == 0 {
        return Err(CatalogError::Invalid("gen: rows must be at least 1".into()));
    }
    if opts.days == 0 {
        return Err(CatalogError::Invalid("gen: days must be at least 1".into()));
    }
    let end_us = opts.end.timestamp_micros();
    if end_us
        .checked_sub(opts.days as i64 * 86_400_000_000)
        .is_none()
    {
        return Err(CatalogError::Invalid("gen: end is out of range".into()));
    }
    let dir = opts.out.join("events");
    check_no_parts(&dir)?;
    let signals_dir = opts.out.join("signals");
    for table in ["signals", "entities", "relationships"] {
        check_no_parts(&opts.out.join(table))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| CatalogError::io(&dir, e))?;
    write_config(opts)?;

    let schema = generated_events_schema();
    let mut generator = Generator::new(opts);
    let mut rows = Vec::with_capacity(FILE_ROWS.min(opts.rows as usize));
    let mut paths = Vec::new();
    let mut written = 0u64;
    while generator.produced < opts.rows {
        rows.clear();
        generator.next_rows(FILE_ROWS, &mut rows);
        if rows.is_empty() {
            break;
        }
        rows.sort_by_key(|r| r.ts); // stable: ties keep session order
        let stem = format!("part-{:05}", paths.len());
        let mut writer = AtomicParquetWriter::new(&dir, &stem, Arc::clone(&schema))?;
        for chunk in rows.chunks(BATCH_ROWS) {
            writer.write(&build_batch(&schema, &generator.users, chunk)?)?;
            written += chunk.len() as u64;
            if let Some(pb) = progress {
                pb.inc(chunk.len() as u64);
            }
        }
        paths.push(writer.finish()?);
    }
    let mut bytes = 0;
    for p in &paths {
        bytes += std::fs::metadata(p)
            .map_err(|e| CatalogError::io(p, e))?
            .len();
    }
    let signals = write_signals(
        &signals_dir,
        &generator.users,
        end_us - opts.days as i64 * 86_400_000_000,
    )?;
    let seen: Vec<crate::entity_gen::SeenUser> = generator
        .users
        .iter()
        .enumerate()
        .filter(|(_, u)| u.seen)
        .map(|(index, u)| crate::entity_gen::SeenUser {
            index,
            plan: PLANS.get(u.plan as usize).copied(),
            country: COUNTRIES[u.country as usize],
            variant: VARIANTS[u.variant as usize],
            first_ts: u.first_ts,
        })
        .collect();
    crate::entity_gen::write_graph(
        &opts.out,
        &seen,
        end_us - opts.days as i64 * 86_400_000_000,
        end_us,
        opts.seed,
    )?;
    let users = seen.len() as u64;
    Ok(GenSummary {
        rows: written,
        files: paths.len(),
        users,
        bytes,
        paths,
        signals,
    })
}

//! `funnel(ts, seq, within_seconds, mode, excluded, group, step1, step2[, … step10])`: one
//! user's progress through a funnel, computed in one pass over that user's events.
//!
//! SignalQL lowers `FUNNEL "a" -> "b" … WITHIN n unit` to `GROUP BY user_id` with this
//! aggregate, then counts users per step. From DataFusion SQL:
//!
//! ```sql
//! SELECT user_id,
//!        funnel(timestamp, file_row_index(), 604800, 'ordered', false, NULL,
//!               event_name = 'visit', event_name = 'signup') AS f
//! FROM events GROUP BY user_id
//! ```
//!
//! Arguments:
//! - `ts`: the event time (any timestamp; compared in microseconds, UTC).
//! - `seq`: an integer that orders events with equal `ts` (their position in the source);
//!   NULL counts as 0.
//! - `within_seconds`: an integer literal, the most a chain may span from its first event.
//! - `mode`: `'ordered'`, `'strict'` or `'any'` (see [`funnel_chain`](super::funnel_chain)).
//! - `excluded`: true for an event that breaks any chain spanning it (`EXCLUDING`); an
//!   excluded event matches no step.
//! - `group`: any value; the result carries the value of the reported deepest chain's first
//!   event (NULL to group nothing).
//! - `step1 … stepN`: booleans, true when the event matches that step (2 to 10 steps).
//!
//! Returns a struct: `level` (deepest step reached, 0 when none), `started_at`/`completed_at`
//! (first and last event of the chain reported for `level`), `seconds_to_step` (per step, the
//! seconds from first to last event of the chain reported for that step; NULL when not
//! reached) and `group`. Rows with a NULL `ts` are ignored.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Builder, Int32Array, Int64Array, ListArray,
    ListBuilder, RecordBatch, StructArray, TimestampMicrosecondArray, UInt16Array, new_null_array,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, Fields, Int64Type, Schema, TimeUnit, TimestampMicrosecondType,
    UInt16Type,
};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, EmitTo, Expr, GroupsAccumulator,
    Signature, Volatility, lit,
};

use super::funnel_chain::{self, Event, Mode};

pub const NAME: &str = "funnel";
/// Arguments before the step conditions.
const FIXED_ARGS: usize = 6;
pub const MAX_STEPS: usize = 10;
pub const MIN_STEPS: usize = 2;

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Funnel {
    signature: Signature,
}

impl Default for Funnel {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

static FUNNEL: LazyLock<Arc<AggregateUDF>> =
    LazyLock::new(|| Arc::new(AggregateUDF::from(Funnel::default())));

/// The singleton UDAF.
pub fn funnel_udaf() -> Arc<AggregateUDF> {
    Arc::clone(&FUNNEL)
}

/// The funnel's settings, fixed for a query.
#[derive(Debug, Clone, Copy)]
pub struct FunnelSpec {
    pub within_seconds: i64,
    pub mode: Mode,
}

/// `funnel(...)` as an [`Expr`].
pub fn funnel(
    ts: Expr,
    seq: Expr,
    spec: FunnelSpec,
    excluded: Expr,
    group: Expr,
    steps: Vec<Expr>,
) -> Expr {
    let mode = match spec.mode {
        Mode::Ordered => "ordered",
        Mode::Strict => "strict",
        Mode::Any => "any",
    };
    let mut args = vec![
        ts,
        seq,
        lit(spec.within_seconds),
        lit(mode),
        excluded,
        group,
    ];
    args.extend(steps);
    funnel_udaf().call(args)
}

fn utc_micros() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The fields of the result struct, given the group argument's type.
pub fn result_fields(group: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("level", DataType::Int32, false),
        Field::new("started_at", utc_micros(), true),
        Field::new("completed_at", utc_micros(), true),
        Field::new(
            "seconds_to_step",
            DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true))),
            false,
        ),
        Field::new("group", group.clone(), true),
    ])
}

fn list_of(dt: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(dt, true)))
}

impl AggregateUDFImpl for Funnel {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let steps = args.len().saturating_sub(FIXED_ARGS);
        if !(MIN_STEPS..=MAX_STEPS).contains(&steps) {
            return plan_err!(
                "funnel takes ts, seq, within_seconds, mode, excluded, group and {MIN_STEPS} to \
                 {MAX_STEPS} step conditions; got {} arguments",
                args.len()
            );
        }
        let boolean = |i: usize, what: &str| match &args[i] {
            DataType::Boolean | DataType::Null => Ok(DataType::Boolean),
            other => plan_err!("funnel: {what} must be a boolean, got {other}"),
        };
        let mut out = Vec::with_capacity(args.len());
        out.push(match &args[0] {
            DataType::Timestamp(_, _) => utc_micros(),
            other => return plan_err!("funnel: ts must be a timestamp, got {other}"),
        });
        out.push(match &args[1] {
            dt if dt.is_integer() || dt.is_null() => DataType::Int64,
            other => return plan_err!("funnel: seq must be an integer, got {other}"),
        });
        out.push(match &args[2] {
            dt if dt.is_integer() => DataType::Int64,
            other => return plan_err!("funnel: within_seconds must be an integer, got {other}"),
        });
        out.push(match &args[3] {
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
            other => return plan_err!("funnel: mode must be a string, got {other}"),
        });
        out.push(boolean(4, "excluded")?);
        out.push(args[5].clone());
        for i in FIXED_ARGS..args.len() {
            out.push(boolean(i, "a step condition")?);
        }
        Ok(out)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let Some(group) = args.get(5) else {
            return plan_err!("funnel takes at least {} arguments", FIXED_ARGS + MIN_STEPS);
        };
        Ok(DataType::Struct(result_fields(group)))
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let group = args
            .input_fields
            .get(5)
            .map(|f| f.data_type().clone())
            .unwrap_or(DataType::Null);
        let field = |name: &str, dt: DataType| {
            Arc::new(Field::new(
                format_state_name(args.name, name),
                list_of(dt),
                true,
            ))
        };
        Ok(vec![
            field("ts", utc_micros()),
            field("seq", DataType::Int64),
            field("steps", DataType::UInt16),
            field("group", group),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(FunnelAccumulator(groups_accumulator(&args)?)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(groups_accumulator(&args)?))
    }
}

/// A literal argument's value.
fn literal(args: &AccumulatorArgs, i: usize) -> Option<ScalarValue> {
    let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
    match args.exprs.get(i)?.evaluate(&empty) {
        Ok(ColumnarValue::Scalar(s)) => Some(s),
        _ => None,
    }
}

fn groups_accumulator(args: &AccumulatorArgs) -> Result<FunnelGroups> {
    if args.is_distinct {
        return plan_err!("funnel(DISTINCT …) is not supported");
    }
    let n_steps = args.exprs.len().saturating_sub(FIXED_ARGS);
    if !(MIN_STEPS..=MAX_STEPS).contains(&n_steps) {
        return plan_err!("funnel takes {MIN_STEPS} to {MAX_STEPS} step conditions");
    }
    let within_seconds = match literal(args, 2) {
        Some(ScalarValue::Int64(Some(w))) if w >= 0 => w,
        _ => return plan_err!("funnel: within_seconds must be a non-negative integer literal"),
    };
    let mode = match literal(args, 3) {
        Some(ScalarValue::Utf8(Some(m))) => match Mode::parse(&m) {
            Some(mode) => mode,
            None => {
                return plan_err!("funnel: mode must be 'ordered', 'strict' or 'any', got '{m}'");
            }
        },
        _ => return plan_err!("funnel: mode must be a string literal"),
    };
    let group_type = args
        .expr_fields
        .get(5)
        .map(|f| f.data_type().clone())
        .unwrap_or(DataType::Null);
    Ok(FunnelGroups::new(
        n_steps,
        within_seconds.saturating_mul(1_000_000),
        mode,
        group_type,
    ))
}

/// A group reference for an event that cannot start a chain: its group value is never read.
const NO_GROUP: u64 = u64::MAX;

/// Packs a (source array, row) reference into the group-value store.
fn pack(array: usize, row: usize) -> u64 {
    ((array as u64) << 32) | row as u64
}

fn unpack(r: u64) -> (usize, usize) {
    ((r >> 32) as usize, (r & 0xffff_ffff) as usize)
}

/// The events of one aggregation, every group's in one flat store: each kept event in arrival
/// order with its group index (and, when grouped, where its group value is stored). A
/// counting sort by group gathers each group's events when they are emitted, so a user costs
/// no allocation of its own (a list per user was most of the aggregate's time at millions of
/// events).
#[derive(Debug)]
pub struct FunnelGroups {
    n_steps: usize,
    within_us: i64,
    mode: Mode,
    grouped: bool,
    group_type: DataType,
    null_group: ArrayRef,
    /// The number of groups.
    n_groups: usize,
    events: Vec<Event>,
    /// Parallel to `events`: each event's group.
    group_of: Vec<u32>,
    /// Parallel to `events` when grouped: where each event's group value is stored.
    group_refs: Vec<u64>,
    /// Arrays holding group values (input batches' group column, merged states' lists).
    group_arrays: Vec<ArrayRef>,
    retained_bytes: usize,
}

/// The events of the groups taken from a [`FunnelGroups`], gathered by group in arrival order:
/// group `g`'s are `events[offsets[g]..offsets[g + 1]]` (and the same range of `refs` when
/// grouped).
struct Taken {
    events: Vec<Event>,
    refs: Vec<u64>,
    offsets: Vec<usize>,
}

impl Taken {
    fn groups(&self) -> usize {
        self.offsets.len() - 1
    }

    fn range(&self, g: usize) -> std::ops::Range<usize> {
        self.offsets[g]..self.offsets[g + 1]
    }

    /// Sorts each group's events (with their refs) into event order, `(ts, seq)`, keeping
    /// arrival order among equal keys.
    fn sort_each(&mut self) {
        let mut scratch: Vec<(Event, u64)> = Vec::new();
        for g in 0..self.groups() {
            let r = self.range(g);
            if self.refs.is_empty() {
                funnel_chain::sort_events(&mut self.events[r]);
                continue;
            }
            let events = &mut self.events[r.clone()];
            if events.is_sorted_by_key(|e| (e.ts, e.seq)) {
                continue;
            }
            let refs = &mut self.refs[r];
            scratch.clear();
            scratch.extend(events.iter().copied().zip(refs.iter().copied()));
            scratch.sort_by_key(|(e, _)| (e.ts, e.seq));
            for (i, (e, r)) in scratch.iter().enumerate() {
                events[i] = *e;
                refs[i] = *r;
            }
        }
    }
}

impl FunnelGroups {
    /// An empty aggregation; `group_type` is `Null` when the funnel has no GROUP BY.
    fn new(n_steps: usize, within_us: i64, mode: Mode, group_type: DataType) -> FunnelGroups {
        FunnelGroups {
            n_steps,
            within_us,
            mode,
            grouped: group_type != DataType::Null,
            null_group: new_null_array(&group_type, 1),
            group_type,
            n_groups: 0,
            events: Vec::new(),
            group_of: Vec::new(),
            group_refs: Vec::new(),
            group_arrays: Vec::new(),
            retained_bytes: 0,
        }
    }

    fn resize(&mut self, total: usize) -> Result<()> {
        if total > u32::MAX as usize + 1 {
            return exec_err!("funnel: more than 2^32 groups");
        }
        self.n_groups = self.n_groups.max(total);
        Ok(())
    }

    /// Appends one event of group `g` (already checked to fit in `u32` by `resize`).
    fn push(&mut self, g: usize, event: Event, group_ref: Option<u64>) {
        self.events.push(event);
        self.group_of.push(g as u32);
        if let Some(r) = group_ref {
            self.group_refs.push(r);
        }
    }

    /// Takes the groups selected by `emit_to`, their events gathered by group (a stable
    /// counting sort); the groups left are renumbered from 0, as `EmitTo::First` requires.
    fn take(&mut self, emit_to: EmitTo) -> Taken {
        let n = match emit_to {
            EmitTo::All => self.n_groups,
            EmitTo::First(k) => k.min(self.n_groups),
        };
        let mut offsets = vec![0usize; n + 1];
        for &g in &self.group_of {
            if (g as usize) < n {
                offsets[g as usize + 1] += 1;
            }
        }
        for g in 0..n {
            offsets[g + 1] += offsets[g];
        }
        let total = offsets[n];
        let mut order = vec![0usize; total];
        let mut next = offsets[..n].to_vec();
        for (i, &g) in self.group_of.iter().enumerate() {
            if let Some(slot) = next.get_mut(g as usize) {
                order[*slot] = i;
                *slot += 1;
            }
        }
        let events = order.iter().map(|&i| self.events[i]).collect();
        let refs = if self.grouped {
            order.iter().map(|&i| self.group_refs[i]).collect()
        } else {
            Vec::new()
        };
        if n == self.n_groups {
            self.events.clear();
            self.group_of.clear();
            self.group_refs.clear();
        } else {
            // Keep the later groups' events, renumbered.
            let mut kept = 0;
            for i in 0..self.events.len() {
                let g = self.group_of[i] as usize;
                if g >= n {
                    self.events[kept] = self.events[i];
                    self.group_of[kept] = (g - n) as u32;
                    if self.grouped {
                        self.group_refs[kept] = self.group_refs[i];
                    }
                    kept += 1;
                }
            }
            self.events.truncate(kept);
            self.group_of.truncate(kept);
            if self.grouped {
                self.group_refs.truncate(kept);
            }
        }
        self.n_groups -= n;
        Taken {
            events,
            refs,
            offsets,
        }
    }

    /// Keeps `array` for group lookups and returns its index.
    fn keep_group_array(&mut self, array: &ArrayRef) -> usize {
        self.retained_bytes += array.get_array_memory_size();
        self.group_arrays.push(Arc::clone(array));
        self.group_arrays.len() - 1
    }

    /// Whether `e` can be a chain's first event, the only event whose group value is read: a
    /// step-1 event, or any step event in the any-order mode.
    fn starts_chain(&self, e: &Event) -> bool {
        if self.mode == Mode::Any {
            e.steps != 0
        } else {
            e.steps & 1 != 0
        }
    }

    /// Whether an event with this step mask and exclusion flag is worth keeping.
    fn keeps(&self, steps: u16, excluded: bool) -> bool {
        steps != 0 || excluded || self.mode.needs_other_events()
    }

    /// The input rows worth keeping, as (row, event).
    fn decode(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<(usize, Event)>> {
        if values.len() != FIXED_ARGS + self.n_steps {
            return exec_err!("funnel: expected {} arguments", FIXED_ARGS + self.n_steps);
        }
        let ts = values[0].as_primitive::<TimestampMicrosecondType>();
        let seq = values[1].as_primitive::<Int64Type>();
        let excluded = values[4].as_boolean();
        let steps: Vec<&BooleanArray> = values[FIXED_ARGS..]
            .iter()
            .map(|a| a.as_boolean())
            .collect();
        let is_true = |a: &BooleanArray, i: usize| a.is_valid(i) && a.value(i);
        let mut out = Vec::new();
        for row in 0..ts.len() {
            if ts.is_null(row) || opt_filter.is_some_and(|f| !is_true(f, row)) {
                continue;
            }
            let excl = is_true(excluded, row);
            let mut mask = 0u16;
            if !excl {
                for (j, s) in steps.iter().enumerate() {
                    if is_true(s, row) {
                        mask |= 1 << j;
                    }
                }
            }
            if self.keeps(mask, excl) {
                let seq = if seq.is_null(row) { 0 } else { seq.value(row) };
                out.push((
                    row,
                    Event {
                        ts: ts.value(row),
                        seq,
                        steps: mask,
                        excluded: excl,
                    },
                ));
            }
        }
        Ok(out)
    }

    /// Reads a group value through `refs`, with `None` as NULL.
    fn group_values(&self, refs: &[Option<u64>]) -> Result<ArrayRef> {
        let null_source = self.group_arrays.len();
        let mut sources: Vec<&dyn Array> = self.group_arrays.iter().map(|a| a.as_ref()).collect();
        sources.push(self.null_group.as_ref());
        let indices: Vec<(usize, usize)> = refs
            .iter()
            .map(|r| match r {
                Some(r) if *r != NO_GROUP => unpack(*r),
                _ => (null_source, 0),
            })
            .collect();
        Ok(interleave(&sources, &indices)?)
    }

    fn release_if_empty(&mut self) {
        if self.events.is_empty() {
            self.group_arrays.clear();
            self.retained_bytes = 0;
        }
    }
}

impl GroupsAccumulator for FunnelGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups)?;
        let rows = self.decode(values, opt_filter)?;
        let array_id = self.grouped.then(|| self.keep_group_array(&values[5]));
        self.events.reserve(rows.len());
        self.group_of.reserve(rows.len());
        for (row, event) in rows {
            let r = array_id.map(|a| {
                if self.starts_chain(&event) {
                    pack(a, row)
                } else {
                    NO_GROUP
                }
            });
            self.push(group_indices[row], event, r);
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let mut taken = self.take(emit_to);
        taken.sort_each();
        let n = taken.groups();
        let mut level = Vec::with_capacity(n);
        let mut started = Vec::with_capacity(n);
        let mut completed = Vec::with_capacity(n);
        let mut seconds = ListBuilder::new(Float64Builder::new());
        let mut group_refs: Vec<Option<u64>> = Vec::with_capacity(n);
        for g in 0..n {
            let r = taken.range(g);
            let events = &taken.events[r.clone()];
            let refs = taken.refs.get(r).unwrap_or(&[]);
            let reach = funnel_chain::search(events, self.n_steps, self.within_us, self.mode);
            let l = funnel_chain::level(&reach);
            level.push(l as i32);
            let counted = l.checked_sub(1).and_then(|k| reach[k]);
            started.push(counted.map(|c| events[c.first].ts));
            completed.push(counted.map(|c| events[c.last].ts));
            group_refs.push(counted.and_then(|c| refs.get(c.first).copied()));
            for c in &reach {
                seconds.values().append_option(
                    c.map(|c| (events[c.last].ts - events[c.first].ts) as f64 / 1e6),
                );
            }
            seconds.append(true);
        }
        let group = if self.grouped {
            self.group_values(&group_refs)?
        } else {
            new_null_array(&self.group_type, n)
        };
        self.release_if_empty();
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(level)),
            Arc::new(TimestampMicrosecondArray::from(started).with_timezone("UTC")),
            Arc::new(TimestampMicrosecondArray::from(completed).with_timezone("UTC")),
            Arc::new(seconds.finish()),
            group,
        ];
        Ok(Arc::new(StructArray::try_new(
            result_fields(&self.group_type),
            arrays,
            None,
        )?))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let taken = self.take(emit_to);
        let offsets = OffsetBuffer::from_lengths((0..taken.groups()).map(|g| taken.range(g).len()));
        let flat: Vec<&Event> = taken.events.iter().collect();
        let group = if self.grouped {
            let all: Vec<Option<u64>> = taken.refs.iter().map(|&r| Some(r)).collect();
            self.group_values(&all)?
        } else {
            new_null_array(&self.group_type, flat.len())
        };
        self.release_if_empty();
        state_lists(&flat, group, &offsets)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups)?;
        let [ts, seq, steps, group] = values else {
            return exec_err!("funnel: the state has 4 fields, got {}", values.len());
        };
        let (ts, seq, steps, group) = (
            ts.as_list::<i32>(),
            seq.as_list::<i32>(),
            steps.as_list::<i32>(),
            group.as_list::<i32>(),
        );
        let ts_v = ts.values().as_primitive::<TimestampMicrosecondType>();
        let seq_v = seq.values().as_primitive::<Int64Type>();
        let steps_v = steps.values().as_primitive::<UInt16Type>();
        let array_id = self.grouped.then(|| self.keep_group_array(group.values()));
        let offsets = ts.value_offsets();
        for (row, &g) in group_indices.iter().enumerate() {
            if ts.is_null(row) {
                continue;
            }
            let (lo, hi) = (offsets[row] as usize, offsets[row + 1] as usize);
            for i in lo..hi {
                let raw = steps_v.value(i);
                let event = Event {
                    ts: ts_v.value(i),
                    seq: seq_v.value(i),
                    steps: raw & 0x7fff,
                    excluded: raw & (1 << 15) != 0,
                };
                let r = array_id.map(|a| {
                    if self.starts_chain(&event) {
                        pack(a, i)
                    } else {
                        NO_GROUP
                    }
                });
                self.push(g, event, r);
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = self.decode(values, opt_filter)?;
        let mut lengths = vec![0usize; values[0].len()];
        for (row, _) in &rows {
            lengths[*row] = 1;
        }
        let offsets = OffsetBuffer::from_lengths(lengths);
        let events: Vec<&Event> = rows.iter().map(|(_, e)| e).collect();
        let group = if self.grouped {
            let idx = datafusion::arrow::array::UInt32Array::from_iter_values(
                rows.iter().map(|(r, _)| *r as u32),
            );
            datafusion::arrow::compute::take(&values[5], &idx, None)?
        } else {
            new_null_array(&self.group_type, rows.len())
        };
        state_lists(&events, group, &offsets)
    }

    fn size(&self) -> usize {
        self.events.capacity() * size_of::<Event>()
            + self.group_of.capacity() * size_of::<u32>()
            + self.group_refs.capacity() * size_of::<u64>()
            + self.retained_bytes
    }
}

/// The state arrays: per group, lists of its events' ts, seq, steps (bit 15 marks an excluded
/// event; steps use at most bits 0..10) and group values.
fn state_lists(
    events: &[&Event],
    group: ArrayRef,
    offsets: &OffsetBuffer<i32>,
) -> Result<Vec<ArrayRef>> {
    let ts = TimestampMicrosecondArray::from_iter_values(events.iter().map(|e| e.ts))
        .with_timezone("UTC");
    let seq = Int64Array::from_iter_values(events.iter().map(|e| e.seq));
    let steps = UInt16Array::from_iter_values(
        events
            .iter()
            .map(|e| if e.excluded { 1 << 15 } else { e.steps }),
    );
    let list = |values: ArrayRef| -> Result<ArrayRef> {
        let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
        Ok(Arc::new(ListArray::try_new(
            field,
            offsets.clone(),
            values,
            None,
        )?))
    };
    Ok(vec![
        list(Arc::new(ts))?,
        list(Arc::new(seq))?,
        list(Arc::new(steps))?,
        list(group)?,
    ])
}

/// The one-group form, for aggregations without GROUP BY.
#[derive(Debug)]
struct FunnelAccumulator(FunnelGroups);

impl Accumulator for FunnelAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let rows = values.first().map_or(0, |a| a.len());
        self.0.update_batch(values, &vec![0; rows], None, 1)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let rows = states.first().map_or(0, |a| a.len());
        self.0.merge_batch(states, &vec![0; rows], 1)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.0.resize(1)?;
        self.0
            .state(EmitTo::All)?
            .iter()
            .map(|a| ScalarValue::try_from_array(a, 0))
            .collect()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.0.resize(1)?;
        ScalarValue::try_from_array(&self.0.evaluate(EmitTo::All)?, 0)
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.0.size()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, BooleanArray, StringArray};
    use proptest::prelude::*;

    use super::*;

    const STEPS: usize = 3;

    fn accumulator(grouped: bool, mode: Mode) -> FunnelGroups {
        let group_type = if grouped {
            DataType::Utf8
        } else {
            DataType::Null
        };
        FunnelGroups::new(STEPS, 5, mode, group_type)
    }

    /// One row: (group, ts, step mask); `seq` is the row's index in `rows`.
    type Row = (usize, i64, u16);

    /// The aggregate's argument arrays for `rows[range]`; the group value is `v<ts>`.
    fn args(rows: &[Row], range: std::ops::Range<usize>) -> Vec<ArrayRef> {
        let part = &rows[range.clone()];
        let mut v: Vec<ArrayRef> = vec![
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(part.iter().map(|r| r.1))
                    .with_timezone("UTC"),
            ),
            Arc::new(Int64Array::from_iter_values(range.map(|i| i as i64))),
            Arc::new(Int64Array::from(vec![0; part.len()])),
            Arc::new(StringArray::from(vec!["ordered"; part.len()])),
            Arc::new(BooleanArray::from(vec![false; part.len()])),
            Arc::new(StringArray::from_iter_values(
                part.iter().map(|r| format!("v{}", r.1)),
            )),
        ];
        for j in 0..STEPS {
            v.push(Arc::new(BooleanArray::from_iter(
                part.iter().map(|r| Some(r.2 & (1 << j) != 0)),
            )));
        }
        v
    }

    /// Per group: level, the counted chain's start, and its first event's group value.
    type Out = Vec<(i32, Option<i64>, Option<String>)>;

    fn read(a: &ArrayRef) -> Out {
        let s = a.as_struct();
        let level = s
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let start = s.column(1).as_primitive::<TimestampMicrosecondType>();
        let group = s.column(4);
        (0..s.len())
            .map(|i| {
                (
                    level.value(i),
                    start.is_valid(i).then(|| start.value(i)),
                    group
                        .as_string_opt::<i32>()
                        .filter(|g| g.is_valid(i))
                        .map(|g| g.value(i).to_string()),
                )
            })
            .collect()
    }

    /// Each group's events sorted by (ts, seq) and searched on their own.
    fn expected(rows: &[Row], groups: usize, grouped: bool, mode: Mode) -> Out {
        (0..groups)
            .map(|g| {
                let mut ev: Vec<Event> = rows
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.0 == g && r.2 != 0)
                    .map(|(i, r)| Event {
                        ts: r.1,
                        seq: i as i64,
                        steps: r.2,
                        excluded: false,
                    })
                    .collect();
                ev.sort_by_key(|e| (e.ts, e.seq));
                let reach = funnel_chain::search(&ev, STEPS, 5, mode);
                let l = funnel_chain::level(&reach);
                let counted = l.checked_sub(1).and_then(|k| reach[k]);
                (
                    l as i32,
                    counted.map(|c| ev[c.first].ts),
                    counted
                        .filter(|_| grouped)
                        .map(|c| format!("v{}", ev[c.first].ts)),
                )
            })
            .collect()
    }

    fn rows() -> impl Strategy<Value = (usize, Vec<Row>)> {
        (1usize..6).prop_flat_map(|groups| {
            (
                Just(groups),
                proptest::collection::vec((0..groups, 0i64..20, 0u16..8), 0..40),
            )
        })
    }

    proptest! {
        /// The flat store gives each group what searching its events alone gives: fed in two
        /// batches and emitted in two parts (`EmitTo::First`), and through two partial
        /// aggregations whose states are merged.
        #[test]
        fn groups_match_each_group_searched_alone(
            (groups, rows) in rows(),
            split in 0usize..40,
            first in 0usize..6,
            grouped in any::<bool>(),
            any_order in any::<bool>(),
        ) {
            let mode = if any_order { Mode::Any } else { Mode::Ordered };
            let split = split.min(rows.len());
            let gi: Vec<usize> = rows.iter().map(|r| r.0).collect();
            let want = expected(&rows, groups, grouped, mode);

            let mut one = accumulator(grouped, mode);
            one.update_batch(&args(&rows, 0..split), &gi[..split], None, groups).unwrap();
            one.update_batch(&args(&rows, split..rows.len()), &gi[split..], None, groups)
                .unwrap();
            let first = first.min(groups);
            let mut got = read(&one.evaluate(EmitTo::First(first)).unwrap());
            got.extend(read(&one.evaluate(EmitTo::All).unwrap()));
            prop_assert_eq!(&got, &want);

            let mut merged = accumulator(grouped, mode);
            for range in [0..split, split..rows.len()] {
                let mut part = accumulator(grouped, mode);
                part.update_batch(&args(&rows, range.clone()), &gi[range], None, groups)
                    .unwrap();
                let state = part.state(EmitTo::All).unwrap();
                let ids: Vec<usize> = (0..groups).collect();
                merged.merge_batch(&state, &ids, groups).unwrap();
            }
            prop_assert_eq!(read(&merged.evaluate(EmitTo::All).unwrap()), want);
        }
    }
}

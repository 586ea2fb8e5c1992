//! `count_distinct_text(x)`: the number of distinct non-NULL strings of `x`, per group, for
//! every Arrow string type (Utf8, LargeUtf8, Utf8View, dictionaries).
//!
//! SignalQL's `count_distinct(x)` over a text column lowers to it (DataFusion's
//! `count(DISTINCT x)` stays for other types). DataFusion 55 counts distinct strings of a
//! grouped aggregate with one set per group, each starting with an 8 KiB buffer and a
//! 128-slot table: `GROUP BY session_id` over 300 000 sessions held about 8 GB, most of it
//! outside what the memory pool saw (docs/semantics.md, "Memory"). Here one set holds the
//! `(group, value)` pairs of all groups, so memory grows with the distinct pairs, and
//! [`GroupsAccumulator::size`] reports it to the pool.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, LargeStringArray, ListArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{HashSet, Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, Expr, GroupsAccumulator, Signature,
    Volatility,
};

use super::passes;
use crate::strings::{StringColumn, is_string};

/// The name the function is registered under.
pub const NAME: &str = "count_distinct_text";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CountDistinctText {
    signature: Signature,
}

impl Default for CountDistinctText {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

static COUNT_DISTINCT_TEXT: LazyLock<Arc<AggregateUDF>> =
    LazyLock::new(|| Arc::new(AggregateUDF::from(CountDistinctText::default())));

/// The singleton UDAF.
pub fn count_distinct_text_udaf() -> Arc<AggregateUDF> {
    Arc::clone(&COUNT_DISTINCT_TEXT)
}

/// `count_distinct_text(expr)` as an [`Expr`].
pub fn count_distinct_text(expr: Expr) -> Expr {
    count_distinct_text_udaf().call(vec![expr])
}

/// The item field of the state's lists.
fn item_field() -> FieldRef {
    Arc::new(Field::new_list_field(DataType::LargeUtf8, true))
}

/// The state: each group's distinct values, as a list.
fn state_field(name: &str) -> FieldRef {
    Arc::new(Field::new(
        format_state_name(name, "values"),
        DataType::List(item_field()),
        true,
    ))
}

/// The state column: one list per group, of `lengths` values each, taken from `values` in
/// order.
fn state_lists<'a>(
    lengths: impl Iterator<Item = usize>,
    values: impl Iterator<Item = &'a str>,
) -> Result<ListArray> {
    let items = LargeStringArray::from_iter_values(values.collect::<Vec<_>>());
    Ok(ListArray::try_new(
        item_field(),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(items),
        None,
    )?)
}

impl AggregateUDFImpl for CountDistinctText {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [t] if is_string(t) || *t == DataType::Null => Ok(DataType::Int64),
            [DataType::Dictionary(_, v)] if is_string(v) => Ok(DataType::Int64),
            other => exec_err!("{NAME} takes one string argument, got {other:?}"),
        }
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn default_value(&self, _data_type: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![state_field(args.name)])
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if acc_args.is_distinct {
            return exec_err!("{NAME}(DISTINCT …) is not supported; it is distinct already");
        }
        Ok(Box::<OneGroup>::default())
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::<DistinctPairs>::default())
    }
}

/// The distinct values of each group: one set per group (an empty set allocates nothing),
/// so a group's inserts stay within its own, usually small, table. A value of at most
/// [`SHORT`] bytes is kept inline as a `u128` laid out as an Arrow string view (length, then
/// the bytes; an inline `Utf8View` value is its view), with no allocation and no hashing of
/// bytes; a longer one on the heap. Measured against one table of `(group, value)` pairs for
/// all groups and against DataFusion's `count(DISTINCT)` in benches/README.md (issue 21).
#[derive(Debug, Default)]
struct DistinctPairs {
    short: Vec<HashSet<u128>>,
    long: Vec<HashSet<Box<[u8]>>>,
    /// The slots of every group's tables (kept as they grow, so `size` is O(1)).
    short_slots: usize,
    long_slots: usize,
    /// The heap bytes of the long values, as the allocator rounds them.
    key_bytes: usize,
}

/// The longest value kept inline, as in an Arrow string view.
const SHORT: usize = 12;

/// `value` (at most [`SHORT`] bytes) as an inline Arrow string view.
fn pack(value: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&(value.len() as u32).to_le_bytes());
    b[4..4 + value.len()].copy_from_slice(value);
    u128::from_le_bytes(b)
}

/// The bytes of a packed value.
fn unpack(packed: &u128) -> ([u8; 16], usize) {
    let b = packed.to_le_bytes();
    let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    (b, len)
}

/// What the allocator takes for a key of `len` bytes (glibc: 16-byte chunks of at least 32,
/// with 8 bytes of header).
fn heap_size(len: usize) -> usize {
    (len + 8).next_multiple_of(16).max(32)
}

impl DistinctPairs {
    fn resize(&mut self, groups: usize) {
        if self.short.len() < groups {
            self.short.resize_with(groups, HashSet::default);
            self.long.resize_with(groups, HashSet::default);
        }
    }

    fn insert_short(&mut self, group: usize, packed: u128) {
        let set = &mut self.short[group];
        let before = set.capacity();
        set.insert(packed);
        self.short_slots += set.capacity() - before;
    }

    fn insert(&mut self, group: usize, value: &str) {
        if value.len() <= SHORT {
            return self.insert_short(group, pack(value.as_bytes()));
        }
        let set = &mut self.long[group];
        let (before, len) = (set.capacity(), set.len());
        set.get_or_insert_with(value.as_bytes(), |v: &[u8]| Box::from(v));
        if set.len() > len {
            self.key_bytes += heap_size(value.len());
        }
        self.long_slots += set.capacity() - before;
    }

    fn add_column(
        &mut self,
        values: &StringColumn,
        group_indices: &[usize],
        filter: Option<&BooleanArray>,
    ) {
        if let StringColumn::View(views) = values {
            // An inline view is the value itself (its unused bytes are zero).
            let raw = views.views();
            for (i, &g) in group_indices.iter().enumerate() {
                if passes(filter, i) && views.is_valid(i) {
                    let view = raw[i];
                    if (view as u32 as usize) <= SHORT {
                        self.insert_short(g, view);
                    } else {
                        self.insert(g, views.value(i));
                    }
                }
            }
            return;
        }
        for (i, &g) in group_indices.iter().enumerate() {
            if passes(filter, i)
                && let Some(v) = values.get(i)
            {
                self.insert(g, v);
            }
        }
    }

    fn count(&self, g: usize) -> i64 {
        (self.short[g].len() + self.long[g].len()) as i64
    }

    /// Takes the groups `emit_to` names out (the groups left are renumbered from 0).
    fn take(&mut self, emit_to: EmitTo) -> (Vec<ShortSet>, Vec<LongSet>) {
        let short = emit_to.take_needed(&mut self.short);
        let long = emit_to.take_needed(&mut self.long);
        self.short_slots -= short.iter().map(HashSet::capacity).sum::<usize>();
        self.long_slots -= long.iter().map(HashSet::capacity).sum::<usize>();
        self.key_bytes -= long
            .iter()
            .flatten()
            .map(|k| heap_size(k.len()))
            .sum::<usize>();
        (short, long)
    }
}

/// One group's values of up to 16 bytes, packed in a `u128`.
type ShortSet = HashSet<u128>;
/// One group's longer values.
type LongSet = HashSet<Box<[u8]>>;

/// The state column of `groups`' values.
fn state_of(short: &[ShortSet], long: &[LongSet]) -> Result<ListArray> {
    let packed: Vec<([u8; 16], usize)> = short.iter().flatten().map(unpack).collect();
    let mut p = 0;
    let mut values: Vec<&str> = Vec::with_capacity(packed.len());
    for (s, l) in short.iter().zip(long) {
        for (b, len) in &packed[p..p + s.len()] {
            // Packed from `&str` values only.
            values.push(std::str::from_utf8(&b[4..4 + len]).unwrap_or_default());
        }
        p += s.len();
        values.extend(l.iter().map(|k| std::str::from_utf8(k).unwrap_or_default()));
    }
    state_lists(
        short.iter().zip(long).map(|(s, l)| s.len() + l.len()),
        values.into_iter(),
    )
}

impl GroupsAccumulator for DistinctPairs {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let [values] = values else {
            return exec_err!("{NAME} takes one argument");
        };
        self.resize(total_num_groups);
        let values = StringColumn::try_new(values.as_ref())?;
        self.add_column(&values, group_indices, opt_filter);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (short, long) = self.take(emit_to);
        Ok(Arc::new(Int64Array::from_iter_values(
            short
                .iter()
                .zip(&long)
                .map(|(s, l)| (s.len() + l.len()) as i64),
        )))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (short, long) = self.take(emit_to);
        Ok(vec![Arc::new(state_of(&short, &long)?)])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let [lists] = values else {
            return exec_err!("{NAME}: one state column expected");
        };
        let Some(lists) = lists.as_list_opt::<i32>() else {
            return exec_err!("{NAME}: the state is not a list");
        };
        self.resize(total_num_groups);
        let items = StringColumn::try_new(lists.values().as_ref())?;
        let offsets = lists.value_offsets();
        for (i, &g) in group_indices.iter().enumerate() {
            if lists.is_null(i) {
                continue;
            }
            for j in offsets[i] as usize..offsets[i + 1] as usize {
                if let Some(v) = items.get(j) {
                    self.insert(g, v);
                }
            }
        }
        Ok(())
    }

    /// Each row as the state of a group of its one value: a list of it, or an empty list
    /// when it is NULL or filtered out.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let [values] = values else {
            return exec_err!("{NAME} takes one argument");
        };
        let column = StringColumn::try_new(values.as_ref())?;
        let kept: Vec<Option<&str>> = (0..column.len())
            .map(|i| column.get(i).filter(|_| passes(opt_filter, i)))
            .collect();
        let list = state_lists(
            kept.iter().map(|v| usize::from(v.is_some())),
            kept.iter().flatten().copied(),
        )?;
        Ok(vec![Arc::new(list)])
    }

    fn size(&self) -> usize {
        // The tables' slots (a value and a control byte each), the long values on the heap,
        // and the per-group tables themselves.
        self.short_slots * (size_of::<u128>() + 1)
            + self.long_slots * (size_of::<Box<[u8]>>() + 1)
            + self.key_bytes
            + self.short.capacity() * size_of::<HashSet<u128>>()
            + self.long.capacity() * size_of::<HashSet<Box<[u8]>>>()
            + size_of_val(self)
    }
}

/// The ungrouped form: one group.
#[derive(Debug, Default)]
struct OneGroup {
    pairs: DistinctPairs,
}

impl Accumulator for OneGroup {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let n = values.first().map_or(0, |v| v.len());
        self.pairs.update_batch(values, &vec![0; n], None, 1)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let n = states.first().map_or(0, |v| v.len());
        self.pairs.merge_batch(states, &vec![0; n], 1)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.pairs.resize(1);
        let list = state_of(&self.pairs.short, &self.pairs.long)?;
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.pairs.resize(1);
        Ok(ScalarValue::Int64(Some(self.pairs.count(0))))
    }

    fn size(&self) -> usize {
        self.pairs.size() - size_of_val(&self.pairs) + size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{DictionaryArray, StringArray, StringViewArray};
    use datafusion::arrow::datatypes::Int32Type;
    use std::collections::BTreeSet;

    /// The values and groups of a test, counted by a plain `BTreeSet` per group.
    fn expected(values: &[Option<&str>], groups: &[usize], n: usize) -> Vec<i64> {
        let mut sets = vec![BTreeSet::new(); n];
        for (v, g) in values.iter().zip(groups) {
            if let Some(v) = v {
                sets[*g].insert(*v);
            }
        }
        sets.iter().map(|s| s.len() as i64).collect()
    }

    fn counts(a: &ArrayRef) -> Vec<i64> {
        a.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn every_string_type_partial_states_and_first_n() {
        let values: Vec<Option<&str>> = (0..300)
            .map(|i| {
                [
                    "a",
                    "b",
                    "",
                    "ccc",
                    "é",
                    "b",
                    "a value longer than twelve bytes",
                    "exactly12byt",
                    "thirteen byte",
                ]
                .get(i % 10)
                .copied()
            })
            .collect();
        let groups: Vec<usize> = (0..300).map(|i| (i * 11) % 9).collect();
        assert_eq!("exactly12byt".len(), SHORT);
        let want = expected(&values, &groups, 9);
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(values.clone())),
            Arc::new(LargeStringArray::from(values.clone())),
            Arc::new(StringViewArray::from(values.clone())),
            Arc::new(
                values
                    .iter()
                    .copied()
                    .collect::<DictionaryArray<Int32Type>>(),
            ),
        ];
        for arr in arrays {
            // Two partial accumulators over halves, merged into a third.
            let (a, b) = (arr.slice(0, 170), arr.slice(170, 130));
            let mut left = DistinctPairs::default();
            let mut right = DistinctPairs::default();
            left.update_batch(&[a], &groups[..170], None, 9).unwrap();
            right.update_batch(&[b], &groups[170..], None, 9).unwrap();
            let mut merged = DistinctPairs::default();
            let all: Vec<usize> = (0..9).collect();
            // The left state in two emissions (first 4 groups, then the rest).
            let first = left.state(EmitTo::First(4)).unwrap();
            merged.merge_batch(&first, &all[..4], 9).unwrap();
            let rest = left.state(EmitTo::All).unwrap();
            merged.merge_batch(&rest, &all[4..], 9).unwrap();
            merged
                .merge_batch(&right.state(EmitTo::All).unwrap(), &all, 9)
                .unwrap();
            assert!(merged.size() > 0);
            let head = counts(&merged.evaluate(EmitTo::First(3)).unwrap());
            let tail = counts(&merged.evaluate(EmitTo::All).unwrap());
            assert_eq!([head, tail].concat(), want, "{}", arr.data_type());
        }
    }

    #[test]
    fn the_filter_and_the_ungrouped_form() {
        let values: ArrayRef = Arc::new(StringArray::from(vec![
            Some("x"),
            Some("y"),
            None,
            Some("x"),
            Some("z"),
        ]));
        let filter =
            BooleanArray::from(vec![Some(true), Some(false), Some(true), None, Some(true)]);
        let mut g = DistinctPairs::default();
        g.update_batch(&[Arc::clone(&values)], &[0, 0, 0, 0, 1], Some(&filter), 2)
            .unwrap();
        assert_eq!(counts(&g.evaluate(EmitTo::All).unwrap()), vec![1, 1]);

        let mut one = OneGroup::default();
        one.update_batch(&[Arc::clone(&values)]).unwrap();
        let state: Vec<ArrayRef> = one
            .state()
            .unwrap()
            .iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        let mut other = OneGroup::default();
        other.merge_batch(&state).unwrap();
        other
            .update_batch(&[Arc::new(StringArray::from(vec!["w", "x"])) as ArrayRef])
            .unwrap();
        assert_eq!(other.evaluate().unwrap(), ScalarValue::Int64(Some(4)));
    }
}

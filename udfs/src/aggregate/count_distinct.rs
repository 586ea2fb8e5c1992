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

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, LargeStringArray, ListArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err};
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

/// The distinct `(group, value)` pairs of all groups. A key is the group index (8 bytes,
/// little-endian) followed by the value's bytes.
#[derive(Debug, Default)]
struct DistinctPairs {
    set: HashSet<Box<[u8]>>,
    /// Distinct values per group.
    counts: Vec<i64>,
    /// The heap bytes of the keys, as the allocator rounds them.
    key_bytes: usize,
    /// A reused key buffer.
    key: Vec<u8>,
}

/// What the allocator takes for a key of `len` bytes (glibc: 16-byte chunks of at least 32,
/// with 8 bytes of header).
fn heap_size(len: usize) -> usize {
    (len + 8).next_multiple_of(16).max(32)
}

fn group_of(key: &[u8]) -> usize {
    let mut g = [0u8; 8];
    g.copy_from_slice(&key[..8]);
    u64::from_le_bytes(g) as usize
}

fn value_of(key: &[u8]) -> &str {
    // Keys are made from `&str` values only.
    std::str::from_utf8(&key[8..]).unwrap_or_default()
}

impl DistinctPairs {
    fn insert(&mut self, group: usize, value: &str) {
        self.key.clear();
        self.key.extend_from_slice(&(group as u64).to_le_bytes());
        self.key.extend_from_slice(value.as_bytes());
        if !self.set.contains(self.key.as_slice()) {
            self.key_bytes += heap_size(self.key.len());
            self.set.insert(self.key.as_slice().into());
            self.counts[group] += 1;
        }
    }

    fn add_column(
        &mut self,
        values: &StringColumn,
        group_indices: &[usize],
        filter: Option<&BooleanArray>,
    ) {
        for (i, &g) in group_indices.iter().enumerate() {
            if passes(filter, i)
                && let Some(v) = values.get(i)
            {
                self.insert(g, v);
            }
        }
    }

    /// Takes the groups `emit_to` names out: their counts, and their values (by group) when
    /// `with_values`. The groups left are renumbered from 0.
    fn take(&mut self, emit_to: EmitTo, with_values: bool) -> (Vec<i64>, Vec<Vec<Box<[u8]>>>) {
        let counts = emit_to.take_needed(&mut self.counts);
        let n = counts.len();
        let mut values: Vec<Vec<Box<[u8]>>> = if with_values {
            counts
                .iter()
                .map(|c| Vec::with_capacity(*c as usize))
                .collect()
        } else {
            Vec::new()
        };
        let all = std::mem::take(&mut self.set);
        self.key_bytes = 0;
        for key in all {
            let g = group_of(&key);
            if g < n {
                if with_values {
                    values[g].push(key);
                }
            } else {
                let mut kept = key.into_vec();
                kept[..8].copy_from_slice(&((g - n) as u64).to_le_bytes());
                self.key_bytes += heap_size(kept.len());
                self.set.insert(kept.into_boxed_slice());
            }
        }
        (counts, values)
    }
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
        self.counts.resize(total_num_groups, 0);
        let values = StringColumn::try_new(values.as_ref())?;
        self.add_column(&values, group_indices, opt_filter);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (counts, _) = self.take(emit_to, false);
        Ok(Arc::new(Int64Array::from(counts)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (_, values) = self.take(emit_to, true);
        let list = state_lists(
            values.iter().map(Vec::len),
            values.iter().flatten().map(|k| value_of(k)),
        )?;
        Ok(vec![Arc::new(list)])
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
        self.counts.resize(total_num_groups, 0);
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
        // The table's slots (a boxed slice each, and a control byte), the keys on the heap,
        // the counts and the key buffer.
        self.set.capacity() * (size_of::<Box<[u8]>>() + 1)
            + self.key_bytes
            + self.counts.capacity() * size_of::<i64>()
            + self.key.capacity()
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
        let list = state_lists(
            std::iter::once(self.pairs.set.len()),
            self.pairs.set.iter().map(|k| value_of(k)),
        )?;
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.pairs.set.len() as i64)))
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
            .map(|i| ["a", "b", "", "ccc", "é", "b"].get(i % 7).copied())
            .collect();
        let groups: Vec<usize> = (0..300).map(|i| (i * 11) % 9).collect();
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

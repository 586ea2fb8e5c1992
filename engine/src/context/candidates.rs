//! The packer's first input decoded: the candidate rows of the CONTEXT FOR plan (one per object
//! and representation) into [`Candidate`]s with their lexical-v1 scores, and the column
//! readers the context module shares.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, Int64Array, ListArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimestampMicrosecondType};
use signalql_udfs::scalar::lexical::{max_weights, score_of};
use signalql_udfs::strings::StringColumn;

use super::select::{Candidate, Rep, STORED};
use crate::error::{Error, Result};

/// The columns of one batch of [`plan`](super::load::plan)'s first input, cast once.
struct RowCols {
    ids: StringColumn,
    projects: StringColumn,
    /// The objects' kinds, read only for USING KIND.
    kinds: Option<StringColumn>,
    origins: StringColumn,
    trusts: StringColumn,
    validations: StringColumn,
    states: StringColumn,
    names: StringColumn,
    medias: StringColumn,
    hashes: StringColumn,
    estimators: StringColumn,
    refs: StringColumn,
    revs: Int64Array,
    tokens: Int64Array,
    contents: Option<StringColumn>,
    created: datafusion::arrow::array::TimestampMicrosecondArray,
    secret: BooleanArray,
    role_ex: BooleanArray,
    packable: BooleanArray,
    roles: ListStrings,
    /// Per task term, the weights the row's title and content give it (NULL out of scope).
    title_weights: ListArray,
    content_weights: ListArray,
    /// Whether the row took the scan path (its content was read and tokenised).
    scanned: BooleanArray,
}

impl RowCols {
    fn of(b: &RecordBatch) -> Result<Self> {
        let s = |name: &str| string_col(b, name);
        let bools = |name: &str| -> Result<BooleanArray> {
            b.column_by_name(name)
                .and_then(|c| c.as_boolean_opt())
                .cloned()
                .ok_or_else(|| Error::internal(format!("column {name}")))
        };
        let list = |name: &str| -> Result<ListArray> {
            b.column_by_name(name)
                .and_then(|c| c.as_list_opt::<i32>())
                .cloned()
                .ok_or_else(|| Error::internal(format!("column {name}")))
        };
        Ok(RowCols {
            ids: s("object_id")?,
            projects: s("project")?,
            kinds: b.column_by_name("kind").map(|_| s("kind")).transpose()?,
            origins: s("origin")?,
            trusts: s("trust")?,
            validations: s("validation")?,
            states: s("state")?,
            names: s("name")?,
            medias: s("media_type")?,
            hashes: s("content_hash")?,
            estimators: s("estimator")?,
            refs: s("content_ref")?,
            revs: int_col(b, "revision")?,
            tokens: int_col(b, "est_tokens")?,
            contents: match b.column_by_name("content") {
                Some(_) => Some(s("content")?),
                None => None,
            },
            created: b
                .column_by_name("rev_created_at")
                .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
                .cloned()
                .ok_or_else(|| Error::internal("rev_created_at"))?,
            secret: bools("secret")?,
            role_ex: bools("role_excluded")?,
            packable: bools("packable")?,
            roles: ListStrings::new(&list("eff_roles")?)?,
            title_weights: list("title_weights")?,
            content_weights: list("content_weights")?,
            scanned: bools("scanned")?,
        })
    }
}

/// Shares one allocation per distinct value among the many repeats of a low-cardinality
/// string (state, trust, representation name, role …).
#[derive(Default)]
struct Interner(datafusion::common::HashMap<String, Arc<str>>);

impl Interner {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.0.get(s) {
            return Arc::clone(a);
        }
        let a: Arc<str> = Arc::from(s);
        self.0.insert(s.to_string(), Arc::clone(&a));
        a
    }
}

/// The candidates from the rows of [`plan`](super::load::plan)'s first input (one per object
/// and representation), folded batch by batch as the scan streams, each with its lexical-v1
/// score and matched terms: its in-scope rows' term weights folded by maximum (0 and none
/// when no row is in scope). The order of the batches does not matter.
#[derive(Default)]
pub struct CandidateFold {
    strings: Interner,
    /// Each candidate's position in `out`, by object id.
    index: datafusion::common::HashMap<Box<str>, usize>,
    out: Vec<Candidate>,
    /// Per candidate, its term weights so far (`None`: no row in scope yet).
    weights: Vec<Option<Vec<i64>>>,
}

impl CandidateFold {
    /// Folds in one batch of rows.
    pub fn fold(&mut self, b: &RecordBatch, params: &super::PackParams) -> Result<()> {
        let c = RowCols::of(b)?;
        let max_age_from = params.min_created;
        let strings = &mut self.strings;
        let (t_values, t_offsets) = int_lists(&c.title_weights, "title_weights")?;
        let (c_values, c_offsets) = int_lists(&c.content_weights, "content_weights")?;
        for i in 0..c.ids.len() {
            let id = c.ids.value(i);
            let k = match self.index.get(id) {
                Some(&k) => k,
                None => {
                    self.out.push(Candidate {
                        id: id.to_string(),
                        revision: c.revs.value(i),
                        // In scope: USING PROJECT's project and USING KIND's kind.
                        in_project: match &params.project {
                            None => true,
                            Some(p) => !c.projects.is_null(i) && c.projects.value(i) == p,
                        } && match (&params.kind, &c.kinds) {
                            (None, _) => true,
                            (Some(k), Some(kinds)) => !kinds.is_null(i) && kinds.value(i) == k,
                            // The plan carries the column whenever the query names a kind.
                            (Some(_), None) => {
                                return Err(Error::internal("USING KIND: no kind column"));
                            }
                        },
                        within_age: max_age_from.is_none_or(|from| c.created.value(i) >= from),
                        state: strings.get(c.states.value(i)),
                        origin: strings.get(c.origins.value(i)),
                        trust: strings.get(c.trusts.value(i)),
                        validation: strings.get(c.validations.value(i)),
                        roles: Vec::new(),
                        reps: Vec::new(),
                        lexical: 0,
                        weights: Vec::new(),
                        scanned: false,
                    });
                    self.weights.push(None);
                    self.index.insert(id.into(), self.out.len() - 1);
                    self.out.len() - 1
                }
            };
            for (list, values, offsets) in [
                (&c.title_weights, t_values, t_offsets),
                (&c.content_weights, c_values, c_offsets),
            ] {
                if list.is_null(i) {
                    continue;
                }
                let part = &values.values()[offsets[i] as usize..offsets[i + 1] as usize];
                match &mut self.weights[k] {
                    Some(acc) => max_weights(acc, part),
                    slot => *slot = Some(part.to_vec()),
                }
            }
            let cand = &mut self.out[k];
            cand.scanned |= !c.names.is_null(i) && c.scanned.is_valid(i) && c.scanned.value(i);
            if c.names.is_null(i) || cand.reps.iter().any(|r| *r.name == *c.names.value(i)) {
                continue; // no representation at all, or one seen already
            }
            let tokens = &c.tokens;
            cand.reps.push(Rep {
                name: strings.get(c.names.value(i)),
                media_type: strings.get(c.medias.value(i)),
                content: c
                    .contents
                    .as_ref()
                    .and_then(|x| (!x.is_null(i)).then(|| x.value(i).to_string())),
                content_ref: (!c.refs.is_null(i)).then(|| c.refs.value(i).to_string()),
                content_hash: c.hashes.value(i).to_string(),
                tokens: if tokens.is_null(i) {
                    0
                } else {
                    tokens.value(i)
                },
                estimator: if c.estimators.value(i) == STORED {
                    STORED
                } else {
                    params.estimator.name()
                },
                roles: c.roles.get_with(i, |r| strings.get(r)),
                secret: c.secret.value(i),
                role_excluded: c.role_ex.value(i),
                // Content kept by reference and no stored estimate: no token count, not packed.
                packable: c.packable.value(i) && !tokens.is_null(i),
            });
        }
        Ok(())
    }

    /// The candidates, each with its lexical-v1 score, and the id index (dropped by the caller
    /// when it likes: freeing it is not free).
    pub fn finish(self) -> Vec<Candidate> {
        let CandidateFold {
            mut out,
            weights,
            index,
            ..
        } = self;
        super::free_in_background(index);
        for (cand, w) in out.iter_mut().zip(weights) {
            if let Some(w) = w {
                cand.lexical = score_of(&w);
                cand.weights = w;
            }
        }
        out
    }
}

/// The Int64 values and the offsets of a list column of term weights.
fn int_lists<'a>(
    list: &'a ListArray,
    name: &str,
) -> Result<(&'a datafusion::arrow::array::Int64Array, &'a [i32])> {
    let values = list
        .values()
        .as_primitive_opt::<datafusion::arrow::datatypes::Int64Type>()
        .ok_or_else(|| Error::internal(format!("{name} values")))?;
    Ok((values, list.value_offsets()))
}

pub(crate) fn string_col(b: &RecordBatch, name: &str) -> Result<StringColumn> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| Error::internal(format!("column {name} missing")))?;
    Ok(StringColumn::cast_from(c.as_ref())?)
}

pub(crate) fn int_col(b: &RecordBatch, name: &str) -> Result<Int64Array> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| Error::internal(format!("column {name} missing")))?;
    let c = cast(c, &DataType::Int64).map_err(|e| Error::internal(e.to_string()))?;
    Ok(c.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .clone())
}

/// The strings of each row of a list column (its values read in place).
struct ListStrings {
    list: ListArray,
    values: StringColumn,
}

impl ListStrings {
    fn new(list: &ListArray) -> Result<Self> {
        Ok(ListStrings {
            list: list.clone(),
            values: StringColumn::cast_from(list.values().as_ref())?,
        })
    }

    /// The non-NULL strings of row `i`, each through `f`.
    fn get_with<T>(&self, i: usize, mut f: impl FnMut(&str) -> T) -> Vec<T> {
        if self.list.is_null(i) {
            return Vec::new();
        }
        let offsets = self.list.value_offsets();
        (offsets[i] as usize..offsets[i + 1] as usize)
            .filter(|&j| !self.values.is_null(j))
            .map(|j| f(self.values.value(j)))
            .collect()
    }
}

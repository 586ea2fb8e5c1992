//! CONTEXT FOR's decisions from a resident generation (DESIGN.md §5 "Scale"; docs/index.md,
//! "CONTEXT FOR from the resident index"): the same [`Decisions`] as the packer operator
//! gives over the Parquet plan, without enumerating the candidates as rows.
//!
//! - Eligibility is set algebra over a bitmap per rejection predicate (DESIGN.md §5), made
//!   once with the facts ([`Predicates`]): in the spec's order of reasons, each reason's
//!   rejected are the objects still eligible that its bitmap holds, counted by population
//!   count; they are listed (ordinals, formatted only then) only when EXPLAIN asks.
//! - Only the eligible objects holding a task term are seeds, scored from the postings' tiers.
//! - Expansion runs over the generation's graph (built once, edges counted while the object
//!   they belong to is live at T) from those seeds only: first every node's best score
//!   ([`Graph::scores`](super::expand::Graph::scores), exact, no path), then the paths only
//!   from the seeds whose halved score, boosted by every PREFER term, reaches the threshold.
//! - Ranking computes each relevant object's boosted score, keeps those at or above the
//!   MAX OBJECTS-th score (ties included), and only those become [`Candidate`]s, ranked and
//!   packed by the code the operator uses ([`pack_ranked`]).
//!
//! A query the generation cannot answer exactly takes the Parquet plan: CONTEXT FOR
//! entity(…) (relationships between entities are not held), COMPRESS (it reads content), the
//! o200k_base estimator (its counts are not held), an EXCLUDE ROLE naming a role some
//! representation has (its scores would change), or a generation without its graph.

use std::sync::Arc;

use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::common::HashMap;
use signalql_catalog::objects::resident::{
    Generation, PACKABLE, Reps, RoaringBitmap, SECRET, ordinal_of, role_bit,
};
use signalql_udfs::scalar::lexical::{SUMMARY_WEIGHT, TEXT_WEIGHT, TITLE_WEIGHT};
use signalql_udfs::scalar::token_estimate::Estimator;
use signalql_udfs::strings::StringColumn;

use super::expand::{Expansion, Graph, Live, Pool, on_threads};
use super::pack::{Decisions, Key, PackParams, pack_ranked, satisfied};
use super::select::{CHARS_DIV_4, Candidate, RankKey, Reason, Rep, STORED, boost, rank_cmp};
use crate::error::Result;
use crate::syntax::ast::{ContextQuery, ExcludeItem};
use signalql_catalog::objects::resident::keep::{Bytes, In, Out, Words};

/// No node, or no ordinal.
const NONE: u32 = u32::MAX;

/// Per-object flags: every representation secret (and at least one); a representation
/// packable and not secret.
const ALL_SECRET: u8 = 1;
const ANY_ELIGIBLE: u8 = 2;

/// What the engine derives from a generation once (kept with it).
struct Facts {
    ids: StringColumn,
    /// In place in the generation's columns where they hold Int64 and microseconds.
    revision: ScalarBuffer<i64>,
    created: ScalarBuffer<i64>,
    /// Per object, its project's code (`NONE`: NULL) in `projects`.
    project: Words<u32>,
    projects: HashMap<String, u32>,
    /// Per object, the codes of its state, trust, origin and validation in `names`.
    codes: Words<[u32; 4]>,
    names: Vec<Arc<str>>,
    flags: Words<u8>,
    /// Every role flag some representation has.
    roles_seen: u16,
    graph: Arc<Graph>,
    /// Per graph node, the object's ordinal (`NONE`: an entity, or an object not held).
    node_ordinal: Words<u32>,
    /// Per ordinal, its graph node (`NONE`: no edges).
    ordinal_node: Words<u32>,
    predicates: Predicates,
    /// What a statement borrows of one entry per object.
    loans: Loans,
}

/// Buffers of one entry per object a statement borrows, so it does not fault in fresh pages
/// for them each time (at a million objects, tens of megabytes a statement): its sums and
/// propagated scores, its eligibility, and the lists of up to one entry per object (the
/// seeds by ordinal and by node, the scored).
#[derive(Default)]
struct Loans {
    sums: Pool<u16>,
    bits: Pool<u64>,
    eligible: Pool<bool>,
    ordinals: Pool<u32>,
    seeds: Pool<(u32, i64)>,
    levels: Pool<(u32, u8)>,
    scored: Pool<(i64, u32)>,
}

impl Loans {
    fn adopt(&self, earlier: &Loans) {
        self.sums.adopt(&earlier.sums);
        self.bits.adopt(&earlier.bits);
        self.eligible.adopt(&earlier.eligible);
        self.ordinals.adopt(&earlier.ordinals);
        self.seeds.adopt(&earlier.seeds);
        self.levels.adopt(&earlier.levels);
        self.scored.adopt(&earlier.scored);
    }
}

/// A bitmap per rejection predicate (DESIGN.md §5, "Scale"), over ordinals: those that do not
/// depend on the query's values, and what the others are decided from.
struct Predicates {
    /// Every object.
    all: RoaringBitmap,
    /// The objects with a tombstone (which of them are dead depends on T).
    tombstoned: RoaringBitmap,
    /// Per project code, its objects (USING PROJECT).
    by_project: Vec<RoaringBitmap>,
    /// The ordinals by creation time (MAX AGE rejects a prefix), sorted on first use.
    by_created: std::sync::OnceLock<Vec<u32>>,
    /// Every representation secret.
    secret: RoaringBitmap,
    /// Trust `untrusted` (EXCLUDE UNTRUSTED).
    untrusted: RoaringBitmap,
    /// State `stale` or `invalid` (EXCLUDE STALE).
    stale: RoaringBitmap,
    /// No representation packable and not secret.
    unpackable: RoaringBitmap,
}

impl Predicates {
    /// None yet ([`Facts::of`] makes them).
    fn empty() -> Predicates {
        Predicates {
            all: RoaringBitmap::new(),
            tombstoned: RoaringBitmap::new(),
            by_project: Vec::new(),
            by_created: std::sync::OnceLock::new(),
            secret: RoaringBitmap::new(),
            untrusted: RoaringBitmap::new(),
            stale: RoaringBitmap::new(),
            unpackable: RoaringBitmap::new(),
        }
    }

    fn of(g: &Generation, f: &Facts) -> Predicates {
        let n = f.revision.len() as u32;
        let mut all = RoaringBitmap::new();
        all.insert_range(0..n);
        // Which name codes a predicate holds for, decided once per name, not per object.
        let codes_where = |holds: &dyn Fn(&str) -> bool| -> Vec<bool> {
            f.names.iter().map(|name| holds(name)).collect()
        };
        let untrusted_code = codes_where(&|name| name == "untrusted");
        let stale_code = codes_where(&|name| matches!(name, "stale" | "invalid"));
        // One pass in ordinal order, each predicate's ordinals listed, then made bitmaps
        // (appending a sorted list; `push` one at a time costs ten times as much).
        let mut lists: [Vec<u32>; 5] = Default::default();
        let [tombstoned, secret, unpackable, untrusted, stale] = &mut lists;
        let mut by_project = vec![Vec::new(); f.projects.len()];
        for ((o, codes), (project, flags)) in (0..n)
            .zip(f.codes.iter())
            .zip(f.project.iter().zip(f.flags.iter()))
        {
            let code = |which: usize, of: &[bool]| of.get(codes[which] as usize) == Some(&true);
            for (holds, list) in [
                (!g.live(o, i64::MAX - 1), &mut *tombstoned),
                (flags & ALL_SECRET != 0, &mut *secret),
                (flags & ANY_ELIGIBLE == 0, &mut *unpackable),
                (code(1, &untrusted_code), &mut *untrusted),
                (code(0, &stale_code), &mut *stale),
            ] {
                if holds {
                    list.push(o);
                }
            }
            if let Some(list) = by_project.get_mut(project as usize) {
                list.push(o);
            }
        }
        // Ordinals in order, so `from_sorted_iter` cannot fail.
        let bitmap = |list: Vec<u32>| RoaringBitmap::from_sorted_iter(list).unwrap_or_default();
        let [tombstoned, secret, unpackable, untrusted, stale] = lists.map(bitmap);
        Predicates {
            all,
            tombstoned,
            by_project: by_project.into_iter().map(bitmap).collect(),
            by_created: std::sync::OnceLock::new(),
            secret,
            untrusted,
            stale,
            unpackable,
        }
    }

    /// The bitmaps in [`keep`](signalql_catalog::objects::resident::keep)'s form (roaring's
    /// portable serialization each), for [`from_kept`](Self::from_kept): deriving them is a
    /// pass over every object (21 ms at a million, the first CONTEXT FOR's after a snapshot
    /// is opened), reading them a few hundred kilobytes.
    fn keep(&self, out: &mut Out) {
        let mut each = |b: &RoaringBitmap| {
            let mut bytes = Vec::with_capacity(b.serialized_size());
            // Writing to a vector cannot fail.
            let _ = b.serialize_into(&mut bytes);
            out.bytes(&bytes);
        };
        for b in [
            &self.tombstoned,
            &self.secret,
            &self.untrusted,
            &self.stale,
            &self.unpackable,
        ] {
            each(b);
        }
        for b in &self.by_project {
            each(b);
        }
    }

    /// The bitmaps [`keep`](Self::keep) wrote for `n` objects in `projects` projects; `None`
    /// when the bytes are not that (a bitmap that does not decode, or holds an ordinal of no
    /// object).
    fn from_kept(r: &mut In<'_>, n: u32, projects: usize) -> Option<Predicates> {
        let mut each = || {
            let b = RoaringBitmap::deserialize_from(r.bytes()?).ok()?;
            b.max().is_none_or(|m| m < n).then_some(b)
        };
        let [tombstoned, secret, untrusted, stale, unpackable] =
            [each()?, each()?, each()?, each()?, each()?];
        let by_project = (0..projects).map(|_| each()).collect::<Option<Vec<_>>>()?;
        let mut all = RoaringBitmap::new();
        all.insert_range(0..n);
        Some(Predicates {
            all,
            tombstoned,
            by_project,
            by_created: std::sync::OnceLock::new(),
            secret,
            untrusted,
            stale,
            unpackable,
        })
    }

    /// The objects live at `t` and eligible under `p`, and per reason the rejected ones (the
    /// first applicable reason each, in the spec's order: select::ineligible), with how many
    /// are live at `t`.
    fn decide(
        &self,
        g: &Generation,
        f: &Facts,
        p: &PackParams,
        t: i64,
    ) -> (RoaringBitmap, Vec<(Reason, RoaringBitmap)>, u64) {
        let mut eligible = self.all.clone();
        for o in &self.tombstoned {
            if !g.live(o, t) {
                eligible.remove(o);
            }
        }
        let considered = eligible.len();
        let mut rejected = Vec::new();
        if let Some(name) = &p.project {
            let inside = f
                .projects
                .get(name)
                .and_then(|&c| self.by_project.get(c as usize));
            let out = match inside {
                Some(inside) => &eligible - inside,
                None => eligible.clone(),
            };
            eligible -= &out;
            rejected.push((Reason::OutOfScope, out));
        }
        let mut take = |reason: Reason, holds: &RoaringBitmap| {
            let hit = &eligible & holds;
            eligible -= &hit;
            rejected.push((reason, hit));
        };
        if let Some(from) = p.min_created {
            let by_created = self.by_created.get_or_init(|| {
                let mut by: Vec<u32> = (0..f.created.len() as u32).collect();
                by.sort_by_key(|&o| f.created[o as usize]);
                by
            });
            let old = by_created.partition_point(|&o| f.created[o as usize] < from);
            let old: RoaringBitmap = by_created[..old].iter().copied().collect();
            take(Reason::MaxAge, &old);
        }
        take(Reason::ExcludedSecret, &self.secret);
        if p.exclude_untrusted {
            take(Reason::ExcludedTrust, &self.untrusted);
        }
        if p.exclude_stale {
            take(Reason::ExcludedStale, &self.stale);
        }
        take(Reason::NoPackableRepresentation, &self.unpackable);
        (eligible, rejected, considered)
    }
}

impl Facts {
    /// `None` when the generation holds no graph or its columns are not read as expected.
    fn build(g: &Generation) -> Option<Facts> {
        let edges = g.edges()?;
        let (ids, revision, created) = identity(g)?;
        let n = g.objects();
        let mut projects: HashMap<String, u32> = HashMap::new();
        let project_col = StringColumn::cast_from(g.column("project")?.as_ref()).ok()?;
        let project = Words::from_values((0..n).map(|o| match project_col.get(o) {
            None => NONE,
            Some(p) => {
                let next = projects.len() as u32;
                *projects.entry(p.to_string()).or_insert(next)
            }
        }));
        let mut names: Vec<Arc<str>> = Vec::new();
        let mut index: HashMap<String, u32> = HashMap::new();
        let columns = ["state", "trust", "origin", "validation"].map(|c| {
            g.column(c)
                .and_then(|a| StringColumn::cast_from(a.as_ref()).ok())
        });
        let [Some(state), Some(trust), Some(origin), Some(validation)] = columns else {
            return None;
        };
        let mut code = |s: &str| -> u32 {
            if let Some(&c) = index.get(s) {
                return c;
            }
            names.push(Arc::from(s));
            index.insert(s.to_string(), names.len() as u32 - 1);
            names.len() as u32 - 1
        };
        let codes = Words::from_values((0..n).map(|o| {
            [&state, &trust, &origin, &validation].map(|c| code(c.get(o).unwrap_or_default()))
        }));
        let reps = g.reps()?;
        let mut roles_seen = 0u16;
        let flags: Vec<u8> = (0..n as u32)
            .map(|o| {
                let (block, range) = reps.of(o)?;
                let mut f = 0u8;
                if !range.is_empty() && range.clone().all(|r| block.flags(r) & SECRET != 0) {
                    f |= ALL_SECRET;
                }
                for r in range {
                    let x = block.flags(r);
                    roles_seen |= x;
                    if x & PACKABLE != 0 && x & SECRET == 0 {
                        f |= ANY_ELIGIBLE;
                    }
                }
                Some(f)
            })
            .collect::<Option<_>>()?;
        let graph = Arc::new(Graph::new((0..edges.len()).map(|i| {
            let (owner, a, b, rel) = edges.edge(i);
            (a, b, rel, owner)
        })));
        let node_ordinal: Vec<u32> = graph
            .names()
            .iter()
            .map(|name| {
                name.strip_prefix("object:")
                    .and_then(|id| ordinal_of(&ids, n, id))
                    .unwrap_or(NONE)
            })
            .collect();
        let mut ordinal_node = vec![NONE; n];
        for (node, &o) in node_ordinal.iter().enumerate() {
            if o != NONE {
                ordinal_node[o as usize] = node as u32;
            }
        }
        let (node_ordinal, ordinal_node) = (
            Words::from_values(node_ordinal),
            Words::from_values(ordinal_node),
        );
        Some(Facts {
            ids,
            revision,
            created,
            project,
            projects,
            codes,
            names,
            flags: Words::from_values(flags),
            roles_seen,
            graph,
            node_ordinal,
            ordinal_node,
            predicates: Predicates::empty(),
            loans: Loans::default(),
        })
    }

    /// The facts of `g`, with the bitmap per rejection predicate: read from what its
    /// snapshot file kept when it holds them (see [`keep`](Self::keep)), else built.
    fn of(g: &Generation) -> Option<Facts> {
        if let Some(f) = g.kept(FACTS).and_then(|b| Facts::from_kept(g, b)) {
            return Some(f);
        }
        let mut f = Facts::build(g)?;
        f.predicates = Predicates::of(g, &f);
        Some(f)
    }

    /// The facts in [`keep`](signalql_catalog::objects::resident::keep)'s form, kept in the generation's snapshot file.
    /// The columns the generation holds itself (ids, revisions, times) are not kept.
    fn keep(&self) -> Vec<u8> {
        let mut out = Out::default();
        out.bytes(KEPT);
        out.u32s(self.project.iter());
        let mut projects: Vec<(&str, u32)> = self
            .projects
            .iter()
            .map(|(p, &c)| (p.as_str(), c))
            .collect();
        projects.sort_unstable_by_key(|&(_, c)| c);
        out.strs(projects.iter().map(|&(p, _)| p));
        out.u32s(self.codes.iter().flatten());
        out.strs(self.names.iter().map(|n| &**n));
        out.bytes(&self.flags.iter().collect::<Vec<u8>>());
        out.u32s([u32::from(self.roles_seen)]);
        self.graph.keep(&mut out);
        out.u32s(self.node_ordinal.iter());
        out.u32s(self.ordinal_node.iter());
        self.predicates.keep(&mut out);
        out.into_bytes()
    }

    /// The facts [`keep`](Self::keep) wrote for `g`; `None` when `bytes` are not that (another
    /// version of the form, or sections whose lengths do not fit `g`). Their values are not
    /// read now (see [`Graph::from_kept`]: a kept part is read only when its checksum
    /// matches).
    fn from_kept(g: &Generation, bytes: &Bytes) -> Option<Facts> {
        let mut r = In::of(bytes);
        if r.bytes()? != KEPT {
            return None;
        }
        let (ids, revision, created) = identity(g)?;
        let n = g.objects();
        let project = r.words::<u32>()?;
        let projects = r.strs()?;
        let codes = r.words::<[u32; 4]>()?;
        let names = r.strs()?;
        let flags = r.words::<u8>()?;
        let [roles_seen] = r.u32s()?.try_into().ok()?;
        let graph = Graph::from_kept(&mut r)?;
        let node_ordinal = r.words::<u32>()?;
        let ordinal_node = r.words::<u32>()?;
        let predicates = Predicates::from_kept(&mut r, n as u32, projects.len())?;
        // Lengths only: the values are what `keep` wrote (see `Graph::from_kept`).
        let ok = r.is_empty()
            && project.len() == n
            && codes.len() == n
            && flags.len() == n
            && node_ordinal.len() == graph.names().len()
            && ordinal_node.len() == n;
        if !ok {
            return None;
        }
        Some(Facts {
            ids,
            revision,
            created,
            project,
            projects: projects
                .into_iter()
                .enumerate()
                .map(|(c, p)| (p.to_string(), c as u32))
                .collect(),
            codes,
            names: names.into_iter().map(Arc::from).collect(),
            flags,
            roles_seen: u16::try_from(roles_seen).ok()?,
            graph: Arc::new(graph),
            node_ordinal,
            ordinal_node,
            predicates,
            loans: Loans::default(),
        })
    }

    fn name(&self, o: usize, which: usize) -> &Arc<str> {
        &self.names[self.codes.get(o)[which] as usize]
    }

    /// The ordinal of the object `id`, if held.
    fn ordinal(&self, id: &str) -> Option<u32> {
        ordinal_of(&self.ids, self.revision.len(), id)
    }
}

/// The name of the facts' part of a snapshot file.
pub(crate) const FACTS: &str = "facts";

/// The form [`Facts::keep`] writes, first in its bytes (a snapshot written by another version
/// of it is derived again).
const KEPT: &[u8] = b"signalql-facts-3";

/// The lexical-v1 weight of a term in each tier of its postings (title, summary, other text).
const TIER_WEIGHTS: [i64; 3] = [TITLE_WEIGHT, SUMMARY_WEIGHT, TEXT_WEIGHT];

/// The ids, revision numbers and creation times (µs) of `g`'s objects, by ordinal.
fn identity(g: &Generation) -> Option<(StringColumn, ScalarBuffer<i64>, ScalarBuffer<i64>)> {
    let ids = StringColumn::try_new(g.column("object_id")?.as_ref()).ok()?;
    Some((
        ids,
        g.whole_numbers("revision")?,
        g.whole_numbers("created_at")?,
    ))
}

/// Derives what CONTEXT FOR reads of `g` (its facts and the bitmap per rejection predicate)
/// now, rather than in the first CONTEXT FOR's path; with `earlier`, a generation `g`
/// replaces, the buffers of one entry per object or node that `earlier`'s statements kept
/// are moved to `g`'s (at a million objects, tens of megabytes a first statement would
/// otherwise fault in). They are moved as part of the derivation, before a statement waiting
/// for the facts gets them: moved after, the statement that was waiting had already lent
/// itself new buffers (and zeroed their pages) by then.
pub(crate) fn prepare(g: &Generation, earlier: Option<&Generation>) {
    let old = earlier.and_then(|e| e.derived_made::<Option<Facts>>());
    g.derived(|g| {
        let facts = Facts::of(g);
        if let (Some(f), Some(Some(old))) = (facts.as_ref(), old.as_deref()) {
            f.loans.adopt(&old.loans);
            f.graph.adopt_buffers(&old.graph);
        }
        facts
    });
}

/// What CONTEXT FOR derives from `g`, in the form its snapshot file keeps (see
/// [`Generation::to_snapshot`]); `None` when `g` cannot answer CONTEXT FOR (no graph).
pub(crate) fn kept_facts(g: &Generation) -> Option<Vec<u8>> {
    let facts = g.derived(Facts::of)?;
    facts.as_ref().as_ref().map(Facts::keep)
}

/// The decisions of the CONTEXT FOR `q` with parameters `p` at `t` (µs) from `g`; `None` when
/// the generation cannot answer it exactly (see the module's documentation), or a task term's
/// postings do not decode. The caller has checked that `g` covers `t`. `list`: the rejected
/// are listed (EXPLAIN CONTEXT); else only counted per reason (an answer: DESIGN.md §5).
pub(crate) fn decide(
    g: &Generation,
    p: &PackParams,
    q: &ContextQuery,
    t: i64,
    list: bool,
) -> Result<Option<Decisions>> {
    // The generation holds no object kinds: USING KIND reads the Parquet plan.
    if p.subject.is_some() || p.compress || p.estimator != Estimator::CharsDiv4 || p.kind.is_some()
    {
        return Ok(None);
    }
    let Some(facts) = g.derived(Facts::of) else {
        return Ok(None);
    };
    let Some(f) = facts.as_ref() else {
        return Ok(None);
    };
    for x in &q.exclude {
        if let ExcludeItem::Role { role, .. } = x
            && role_bit(super::load::role_name(*role)).is_none_or(|b| f.roles_seen & b != 0)
        {
            return Ok(None);
        }
    }
    let n = g.objects();

    // Eligibility, in the spec's order of reasons, from the predicates' bitmaps.
    let (eligible_set, by_reason, considered) = f.predicates.decide(g, f, p, t);
    let mut rejected: Vec<(u32, Reason)> = Vec::new();
    let mut counted = [0u64; Reason::ALL.len()];
    for (reason, objects) in by_reason {
        match list {
            true => rejected.extend(objects.iter().map(|o| (o, reason))),
            false => counted[reason as usize] += objects.len(),
        }
    }
    rejected.sort_unstable_by_key(|&(o, _)| o);
    // Per ordinal. Most objects are eligible as a rule: then all are set and the few
    // rejected cleared. (Bitmaps are walked by `for_each`, whose fold runs a container at a
    // time; a `for` loop's `next` goes through every level of the bitmap per element.)
    let dense = eligible_set.len() * 2 > n as u64;
    let mut eligible = f.loans.eligible.lend(n, dense);
    if dense {
        (&f.predicates.all - &eligible_set)
            .iter()
            .for_each(|o| eligible[o as usize] = false);
    } else {
        eligible_set
            .iter()
            .for_each(|o| eligible[o as usize] = true);
    }

    // Seeds: the eligible objects holding a task term, with their lexical-v1 sums.
    // Each term's tiers, decoded once; a posting list that does not decode whole (a damaged
    // snapshot) leaves the query to the Parquet plan.
    let mut tiers = Vec::with_capacity(p.terms.len());
    for term in &p.terms {
        match g.tiers(term) {
            Ok(t) => tiers.push(t),
            Err(_) => return Ok(None),
        }
    }
    // Dense per ordinal (a common-term task makes nearly every object a seed); `held`
    // lists the ordinals with a sum, in ordinal order (expansion's frontier starts sorted).
    // 16 bits hold a sum of up to 21 845 terms (a weight is at most 3); a longer task reads
    // the Parquet plan. Rounded up to whole words of 64 objects (see below).
    if p.terms.len() > usize::from(u16::MAX) / TITLE_WEIGHT as usize {
        return Ok(None);
    }
    let words = n.div_ceil(64);
    let mut sums = f.loans.sums.lend(words * 64, 0);
    let mut held = f.loans.ordinals.lend(0, 0);
    let postings: u64 = tiers
        .iter()
        .flatten()
        .flatten()
        .map(RoaringBitmap::len)
        .sum();
    if postings > n as u64 / 16 {
        // Many postings: each tier's list is spread into a bit per ordinal from its stored
        // form (`Generation::tier_bits`), and each bitset is added with its tier's weight
        // eight objects at a time ([`add_weight`]: no test or branch per posting, whether the
        // object is eligible or was met before), a range of words per core. A few terms at a
        // time, so a long task's bitsets are not all held at once. Then one pass in ordinal
        // order lists the eligible with a sum and clears the others'.
        let parts = super::expand::parts_for(postings);
        let per_part = words.div_ceil(parts).max(1);
        let mut bits = f.loans.bits.lend(0, 0);
        let mut weights: Vec<u16> = Vec::new();
        let add = |bits: &[u64], weights: &[u16], sums: &mut [u16]| {
            on_threads(sums.chunks_mut(per_part * 64).enumerate(), |(i, part)| {
                let from = i * per_part;
                let to = (from + per_part).min(words);
                for (tier, &weight) in bits.chunks_exact(words.max(1)).zip(weights) {
                    add_weight(&tier[from..to], weight, part);
                }
            });
        };
        const BATCH: usize = 16;
        for term in &p.terms {
            let Ok(has) = g.tier_bits(term, &mut bits) else {
                return Ok(None);
            };
            weights.extend(
                has.iter()
                    .zip(TIER_WEIGHTS)
                    .map(|(&h, w)| if h { w as u16 } else { 0 }),
            );
            if weights.len() >= BATCH {
                add(&bits, &weights, &mut sums);
                bits.clear();
                weights.clear();
            }
        }
        add(&bits, &weights, &mut sums);
        drop(bits);
        for (o, (sum, &e)) in sums.iter_mut().zip(eligible.iter()).enumerate() {
            if *sum != 0 {
                match e {
                    true => held.push(o as u32),
                    false => *sum = 0,
                }
            }
        }
    } else {
        each_posting_run(&tiers, 0..u32::MAX, |from, to, w| {
            for o in from..to {
                if eligible.get(o).copied().unwrap_or(false) {
                    let sum = &mut sums[o];
                    if *sum == 0 {
                        held.push(o as u32);
                    }
                    *sum += w as u16;
                }
            }
        });
        held.sort_unstable();
    }
    let denominator = 3 * p.terms.len().max(1) as i64;
    let lexical = |sum: i64| sum * 1_000_000 / denominator;

    // Expansion from the seeds in the graph: first every node's best score (exact, without
    // the path), then, once the threshold is known, the paths from the seeds that can still
    // reach it (below).
    // The seeds by level: the sums met, ascending, a seed's level the rank of its sum there
    // from 1 (the graph's one round then moves a byte per node; with over 255 sums met,
    // the general way).
    let mut rank_of_sum: Vec<u16> = Vec::new();
    for &o in held.iter() {
        let s = sums[o as usize] as usize;
        if s >= rank_of_sum.len() {
            rank_of_sum.resize(s + 1, 0);
        }
        rank_of_sum[s] = 1;
    }
    let mut levels: Vec<i64> = Vec::new();
    for (s, r) in rank_of_sum.iter_mut().enumerate() {
        if *r != 0 {
            levels.push(lexical(s as i64));
            *r = levels.len() as u16;
        }
    }
    let by_level = levels.len() <= usize::from(u8::MAX);
    let mut graph_seeds = f.loans.seeds.lend(0, (0, 0));
    let mut level_seeds = f.loans.levels.lend(0, (0, 0));
    if p.max_depth > 0 && !f.graph.names().is_empty() {
        let nodes = held
            .iter()
            .map(|&o| (f.ordinal_node.get(o as usize), sums[o as usize]))
            .filter(|&(node, _)| node != NONE);
        match by_level {
            true => {
                level_seeds.extend(nodes.map(|(node, s)| (node, rank_of_sum[s as usize] as u8)))
            }
            false => graph_seeds.extend(nodes.map(|(node, s)| (node, lexical(i64::from(s))))),
        }
    }
    let any_seed = !graph_seeds.is_empty() || !level_seeds.is_empty();
    let passable = |node: u32| {
        let o = f.node_ordinal.get(node as usize);
        o != NONE && eligible[o as usize]
    };
    // (An edge's owner is read only when some object has a tombstone.)
    let any_tombstoned = !f.predicates.tombstoned.is_empty();
    let live = match any_tombstoned {
        true => Live::Where(|owner: u32| g.live(owner, t)),
        false => Live::Every,
    };

    // Every relevant object's rank score; those from the MAX OBJECTS-th score up are ranked.
    // The relevant are the seeds and the objects expansion reached through a hop, whose
    // score the graph's scores hold (read per object, not copied out).
    let seeds = held.len() as u64;
    let scores = any_seed.then(|| match by_level {
        true => f
            .graph
            .scores_levelled(&level_seeds, &levels, p.max_depth, &passable, &live),
        false => f.graph.scores(&graph_seeds, p.max_depth, &passable, &live),
    });
    let hops = scores.as_ref().map(|s| s.hops());
    let hop_of = |o: u32| {
        let node = f.ordinal_node.get(o as usize);
        hops.as_ref().and_then(|h| h.get(node))
    };
    // Each sum met, and 0, scored once: a division per object read was a tenth of this
    // function at a million objects.
    let lexical_of: Vec<i64> = (0..rank_of_sum.len().max(1) as i64).map(lexical).collect();
    let lex_of = |s: u16| match lexical_of.get(usize::from(s)) {
        Some(&l) => l,
        None => lexical(i64::from(s)),
    };
    let scores_of = |o: u32| (lex_of(sums[o as usize]), hop_of(o).unwrap_or(0));
    // One pass in ordinal order lists the relevant with their rank scores and counts them
    // and those a hop raised; over a large corpus, a range of ordinals per core. Unless
    // EXPLAIN lists every one, only those at or above the MAX OBJECTS-th best score the part
    // has met so far are listed ([`Floor`]): all that can rank are among them.
    let max_objects = p.max_objects as usize;
    let score_range = |range: std::ops::Range<u32>, scored: &mut Vec<(i64, u32)>| {
        // Without a branch on whether an object is relevant (nearly half are, in no order a
        // predictor learns, at a million zipf objects): each is written to a block on the
        // stack and the block's end moves on only for the relevant.
        const BLOCK: usize = 256;
        let mut block = [(0i64, 0u32); BLOCK];
        let mut k = 0usize;
        let (mut expanded, mut relevant) = (0u64, 0u64);
        let (from, to) = (range.start as usize, range.end as usize);
        let mut floor = Floor::new((!list).then_some(max_objects));
        if list {
            super::expand::reserve_huge(scored, to - from);
        }
        // PREFER terms satisfied, per (state, trust) codes met.
        let mut boosts: HashMap<(u32, u32), usize> = HashMap::new();
        let mut flush = |block: &mut [(i64, u32)], scored: &mut Vec<(i64, u32)>| {
            if !p.prefer.is_empty() {
                for (score, o) in block.iter_mut() {
                    let c = f.codes.get(*o as usize);
                    let k = *boosts.entry((c[0], c[1])).or_insert_with(|| {
                        satisfied(p, f.name(*o as usize, 0), f.name(*o as usize, 1)).len()
                    });
                    *score = boost(*score, k);
                }
            }
            floor.add(block, scored);
        };
        let nodes = f.ordinal_node.range(from..to);
        for ((o, &sum), node) in (range.start..).zip(&sums[from..to]).zip(nodes) {
            let hop = hops.as_ref().map_or(i64::MIN, |h| h.value(node));
            let (lex, prop) = (lex_of(sum), hop.max(0));
            block[k] = (lex.max(prop), o);
            k += usize::from((sum != 0) | (hop != i64::MIN));
            expanded += u64::from(prop > lex);
            if k == BLOCK {
                flush(&mut block, scored);
                relevant += k as u64;
                k = 0;
            }
        }
        flush(&mut block[..k], scored);
        (expanded, relevant + k as u64)
    };
    let parts = super::expand::parts_for(n as u64);
    let objects = n as u32;
    let chunk = (n.div_ceil(parts).max(1)) as u32;
    let mut lent: Vec<_> = (0..parts).map(|_| f.loans.scored.lend(0, (0, 0))).collect();
    let counts = on_threads(lent.iter_mut().enumerate(), |(i, out)| {
        let from = (i as u32).saturating_mul(chunk).min(objects);
        // Each part fills a vector of its own thread's stack: the lent vectors' headers lie
        // side by side, and a push to each from two cores would pass that cache line back
        // and forth.
        let mut own = std::mem::take(&mut **out);
        let counts = score_range(from..from.saturating_add(chunk).min(objects), &mut own);
        **out = own;
        counts
    });
    let expanded: u64 = counts.iter().map(|c| c.0).sum();
    let relevant: u64 = counts.iter().map(|c| c.1).sum();
    let mut lent = lent.into_iter();
    let mut scored = lent
        .next()
        .unwrap_or_else(|| f.loans.scored.lend(0, (0, 0)));
    let others: Vec<_> = lent.collect();
    super::expand::reserve_huge(&mut scored, others.iter().map(|o| o.len()).sum());
    for other in others {
        scored.extend_from_slice(&other);
    }
    let threshold = if relevant > max_objects as u64 {
        let (_, nth, _) = scored.select_nth_unstable_by(max_objects - 1, |a, b| b.0.cmp(&a.0));
        nth.0
    } else {
        i64::MIN
    };
    // Those under the threshold are listed for EXPLAIN, else only counted (and those not
    // listed at all are under it).
    let mut over: Vec<(u32, Reason)> = Vec::new();
    let mut over_count = relevant - scored.len() as u64;
    let mut ranked: Vec<u32> = Vec::new();
    for &(score, o) in scored.iter() {
        if score >= threshold {
            ranked.push(o);
        } else if list {
            over.push((o, Reason::MaxObjects));
        } else {
            over_count += 1;
        }
    }

    // The paths: from the seeds whose halved score, boosted by every PREFER term, still
    // reaches the threshold. A ranked object whose propagated score beats its lexical one
    // got it from such a seed (any other seed's propagation is below the threshold), along
    // nodes whose best values came from such seeds too, so the paths are the ones expansion
    // from every seed gives; should one's score differ, expansion runs from every seed.
    let hops_of = |e: &Expansion, o: u32| {
        let (lex, prop) = scores_of(o);
        match prop > lex {
            true => e
                .node_score_hops(f.ordinal_node.get(o as usize))
                .filter(|(score, _)| *score == prop)
                .map(|(_, hops)| hops),
            false => Some(0),
        }
    };
    let mut expansion = Expansion::default();
    if any_seed {
        // The seeds that can: those given by level are passed over a level at a time.
        let every = p.prefer.len();
        let can_reach = |score: i64| boost(score >> 1, every) >= threshold;
        let score_of = |l: u8| levels[usize::from(l) - 1];
        let (strong, of): (Vec<(u32, i64)>, usize) = match by_level {
            true => {
                let reach: Vec<bool> = levels.iter().map(|&s| can_reach(s)).collect();
                let strong = level_seeds
                    .iter()
                    .filter(|&&(_, l)| reach[usize::from(l) - 1])
                    .map(|&(node, l)| (node, score_of(l)));
                (strong.collect(), level_seeds.len())
            }
            false => {
                let strong = graph_seeds.iter().filter(|(_, s)| can_reach(*s));
                (strong.copied().collect(), graph_seeds.len())
            }
        };
        expansion = f.graph.expand_nodes(&strong, p.max_depth, &passable, &live);
        if strong.len() < of && ranked.iter().any(|&o| hops_of(&expansion, o).is_none()) {
            if by_level {
                graph_seeds.extend(level_seeds.iter().map(|&(node, l)| (node, score_of(l))));
            }
            expansion = f
                .graph
                .expand_nodes(&graph_seeds, p.max_depth, &passable, &live);
        }
    }
    // The ranked in step 6's order, from the facts alone (score, whether current, hops,
    // id: what `Key::order` compares); the ties at the threshold can be thousands of objects
    // a selective task scores alike, and only the first MAX OBJECTS become candidates.
    let mut order: Vec<(i64, bool, u32, u32)> = Vec::with_capacity(ranked.len());
    for &o in &ranked {
        let (lex, prop) = scores_of(o);
        let relevance = lex.max(prop);
        if relevance == 0 {
            continue;
        }
        let hops = match prop > lex {
            true => hops_of(&expansion, o).unwrap_or(0),
            false => 0,
        };
        let boosts = match p.prefer.is_empty() {
            true => 0,
            false => satisfied(p, f.name(o as usize, 0), f.name(o as usize, 1)).len(),
        };
        let current = &**f.name(o as usize, 0) == "current";
        order.push((boost(relevance, boosts), current, hops, o));
    }
    let rank_key = |&(score, current, hops, o): &(i64, bool, u32, u32)| RankKey {
        score,
        current,
        hops,
        id: f.ids.value(o as usize),
    };
    order.sort_by(|a, b| rank_cmp(&rank_key(a), &rank_key(b)));
    for &(_, _, _, o) in order.iter().skip(max_objects) {
        over.push((o, Reason::MaxObjects));
    }
    order.truncate(max_objects);
    // The representations are read for the candidates only: a generation just opened from
    // its snapshot file has them checked and decoded on its own thread while the steps above
    // run (`check_in_background`), so the statement waits only for what is left of that.
    let Some(reps) = g.reps() else {
        return Ok(None);
    };
    let mut candidates: Vec<Candidate> = Vec::with_capacity(order.len());
    let mut keyed: Vec<(i64, u32)> = Vec::with_capacity(order.len());
    for &(_, _, hops, o) in &order {
        let (lex, prop) = scores_of(o);
        // A damaged block of representations leaves the query to the Parquet plan.
        let Some(c) = candidate(reps, f, &tiers, o, lex) else {
            return Ok(None);
        };
        candidates.push(c);
        keyed.push((prop, hops));
    }
    let mut keys: Vec<Key> = candidates
        .iter()
        .zip(&keyed)
        .filter_map(|(c, &(prop, hops))| Key::of(p, c, prop, hops))
        .collect();
    keys.sort_by(Key::order);
    let revision_of = |id: &str| {
        f.ordinal(id)
            .filter(|&o| eligible[o as usize])
            .map(|o| f.revision[o as usize])
    };
    let packed = pack_ranked(p, keys, &expansion, &revision_of);

    if !list {
        counted[Reason::MaxObjects as usize] += over_count + over.len() as u64;
        return Ok(Some(Decisions {
            considered,
            seeds,
            expanded,
            ..packed.counted(counted)
        }));
    }
    let rejected: Vec<(&str, i64, Reason)> = rejected
        .into_iter()
        .chain(over)
        .map(|(o, r)| (f.ids.value(o as usize), f.revision[o as usize], r))
        .collect();
    Ok(Some(Decisions {
        considered,
        seeds,
        expanded,
        ..packed.decisions(rejected)
    }))
}

/// The scores a pass keeps: at or above the `keep`-th best it has been given so far (all,
/// without a `keep`). The `keep`-th best of all the parts' scores is at or above each part's
/// own `keep`-th best, which is at or above the floor when any score was given, so every
/// score from the `keep`-th best of all up (ties included) is kept, and so are the `keep`
/// best: the threshold and the ranked are those of every score.
struct Floor {
    keep: Option<usize>,
    /// The best `keep` so far, the least on top.
    best: std::collections::BinaryHeap<std::cmp::Reverse<i64>>,
    /// The least of them once there are `keep` (below it, nothing is kept).
    floor: i64,
}

impl Floor {
    fn new(keep: Option<usize>) -> Floor {
        Floor {
            keep,
            best: std::collections::BinaryHeap::new(),
            floor: i64::MIN,
        }
    }

    /// Appends the entries of `scores` that are kept to `out`.
    fn add(&mut self, scores: &[(i64, u32)], out: &mut Vec<(i64, u32)>) {
        let Some(keep) = self.keep else {
            out.extend_from_slice(scores);
            return;
        };
        for &(score, o) in scores {
            if score < self.floor {
                continue;
            }
            out.push((score, o));
            if self.best.len() < keep {
                self.best.push(std::cmp::Reverse(score));
            } else if score > self.floor
                && let Some(mut least) = self.best.peek_mut()
            {
                *least = std::cmp::Reverse(score);
            }
            if self.best.len() == keep {
                self.floor = self.best.peek().map_or(i64::MIN, |r| r.0);
            }
        }
    }
}

/// A byte of bits spread into eight 16-bit lanes: lane `i` is 1 where bit `i` is set.
const SPREAD: [[u16; 8]; 256] = {
    let mut t = [[0u16; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            t[b][i] = ((b >> i) & 1) as u16;
            i += 1;
        }
        b += 1;
    }
    t
};

/// Adds `weight` to `sums[i]` for every bit `i` set in `bits` (`sums` holds 64 per word; a
/// shorter `sums` ends the words read), a byte of bits at a time: its eight lanes looked up
/// in [`SPREAD`] and added at once, with no branch per bit. The caller keeps the sums below
/// 2^16.
fn add_weight(bits: &[u64], weight: u16, sums: &mut [u16]) {
    if weight == 0 {
        return;
    }
    for (&word, sums) in bits.iter().zip(sums.chunks_exact_mut(64)) {
        if word == 0 {
            continue;
        }
        for (k, eight) in sums.chunks_exact_mut(8).enumerate() {
            let lanes = &SPREAD[((word >> (8 * k)) & 0xFF) as usize];
            for (s, &l) in eight.iter_mut().zip(lanes) {
                *s += l * weight;
            }
        }
    }
}

/// Each posting of the task's terms within `ordinals`, term by term and tier by tier (title,
/// summary, other text, each with its weight), by runs of consecutive objects:
/// `f(from, to, weight)` for the ordinals `from..to`. A tier holding over half the ordinals of its span (a common
/// term's, where runs are long) is read a run at a time, a word of the bitmap at once; a
/// sparser one an object at a time (a run of one, whose lookup costs more than a step of
/// the iterator).
fn each_posting_run(
    tiers: &[Option<[RoaringBitmap; 3]>],
    ordinals: std::ops::Range<u32>,
    mut f: impl FnMut(usize, usize, i64),
) {
    for [title, summary, other] in tiers.iter().flatten() {
        for (tier, w) in [title, summary, other].into_iter().zip(TIER_WEIGHTS) {
            let (Some(min), Some(max)) = (tier.min(), tier.max()) else {
                continue;
            };
            if tier.len() * 2 > u64::from(max - min) + 1 {
                let mut runs = tier.range(ordinals.clone());
                while let Some(run) = runs.next_range() {
                    f(*run.start() as usize, *run.end() as usize + 1, w);
                }
            } else {
                let f = &mut f;
                tier.range(ordinals.clone())
                    .for_each(|o| f(o as usize, o as usize + 1, w));
            }
        }
    }
}

/// The candidate of the eligible object `o` with lexical-v1 score `lexical`: its term weights
/// from the postings' `tiers` and its representations (metadata only: no query this path
/// answers reads content before packing).
fn candidate(
    reps: &Reps,
    f: &Facts,
    tiers: &[Option<[RoaringBitmap; 3]>],
    o: u32,
    lexical: i64,
) -> Option<Candidate> {
    let ou = o as usize;
    let weights = tiers
        .iter()
        .map(|t| {
            // The first tier holding the object (title, summary, other text) gives its weight.
            t.iter()
                .flatten()
                .zip(TIER_WEIGHTS)
                .find(|(tier, _)| tier.contains(o))
                .map_or(0, |(_, w)| w)
        })
        .collect();
    let (block, rows) = reps.of(o)?;
    let reps = rows
        .map(|r| Rep {
            name: Arc::from(block.name(r)),
            media_type: Arc::from(block.media_type(r)),
            content: None,
            content_ref: block.content_ref(r).map(str::to_string),
            content_hash: block.content_hash(r).to_string(),
            tokens: block.tokens(r).unwrap_or(0),
            estimator: if block.stored(r) { STORED } else { CHARS_DIV_4 },
            roles: block.roles(r, |x| Arc::<str>::from(x)),
            secret: block.flags(r) & SECRET != 0,
            role_excluded: false,
            packable: block.flags(r) & PACKABLE != 0,
        })
        .collect();
    Some(Candidate {
        id: f.ids.value(ou).to_string(),
        revision: f.revision[ou],
        in_project: true,
        within_age: true,
        state: Arc::clone(f.name(ou, 0)),
        trust: Arc::clone(f.name(ou, 1)),
        origin: Arc::clone(f.name(ou, 2)),
        validation: Arc::clone(f.name(ou, 3)),
        roles: Vec::new(),
        reps,
        lexical,
        weights,
        scanned: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each posting of the task's terms one at a time: the object and its tier's weight,
    /// the formulation [`each_posting_run`] is checked against.
    fn each_posting(tiers: &[Option<[RoaringBitmap; 3]>], mut f: impl FnMut(u32, i64)) {
        let weights = TIER_WEIGHTS;
        for [title, summary, other] in tiers.iter().flatten() {
            for (tier, w) in [title, summary, other].into_iter().zip(weights) {
                tier.iter().for_each(|o| f(o, w));
            }
        }
    }

    proptest::proptest! {
        /// The bitmaps per rejection predicate a snapshot file keeps read back as they were
        /// written; bytes cut short, or a bitmap holding an ordinal of no object, are refused.
        #[test]
        fn kept_predicates_read_back_as_written(
            sets in proptest::collection::vec(proptest::collection::vec(0u32..70_000, 0..400), 7),
            cut in 1usize..64,
        ) {
            let b: Vec<RoaringBitmap> = sets.iter().map(|s| s.iter().copied().collect()).collect();
            let n = 70_000;
            let kept = Predicates {
                all: RoaringBitmap::new(),
                tombstoned: b[0].clone(),
                by_project: vec![b[5].clone(), b[6].clone()],
                by_created: std::sync::OnceLock::new(),
                secret: b[1].clone(),
                untrusted: b[2].clone(),
                stale: b[3].clone(),
                unpackable: b[4].clone(),
            };
            let mut out = Out::default();
            kept.keep(&mut out);
            let bytes = out.into_bytes();
            let back = Predicates::from_kept(&mut In::new(&bytes), n, 2).expect("read back");
            let all: RoaringBitmap = (0..n).collect();
            proptest::prop_assert_eq!(&back.all, &all);
            for (a, b) in [
                (&back.tombstoned, &b[0]),
                (&back.secret, &b[1]),
                (&back.untrusted, &b[2]),
                (&back.stale, &b[3]),
                (&back.unpackable, &b[4]),
                (&back.by_project[0], &b[5]),
                (&back.by_project[1], &b[6]),
            ] {
                proptest::prop_assert_eq!(a, b);
            }
            let cut = bytes.len().saturating_sub(cut);
            proptest::prop_assert!(Predicates::from_kept(&mut In::new(&bytes[..cut]), n, 2).is_none());
            if let Some(top) = b.iter().filter_map(RoaringBitmap::max).max() {
                proptest::prop_assert!(Predicates::from_kept(&mut In::new(&bytes), top, 2).is_none());
            }
        }

        /// Scores given to [`Floor`]s in parts (blocks of any size, as the scoring pass gives
        /// them) keep every score at or above the `keep`-th best of all, ties included, so the
        /// `keep`-th best of what is kept is that of all (found here by sorting all of them);
        /// without a `keep`, everything is kept.
        #[test]
        fn floors_keep_all_that_can_rank(
            parts in proptest::collection::vec(
                proptest::collection::vec((0i64..12, 1usize..40), 0..30), 1..4),
            keep in 1usize..20,
            list in proptest::bool::ANY,
        ) {
            let mut all: Vec<i64> = Vec::new();
            let mut kept: Vec<(i64, u32)> = Vec::new();
            for part in &parts {
                let mut floor = Floor::new((!list).then_some(keep));
                for &(score, block) in part {
                    // A block of `block` entries of one score (ties, as a common task gives).
                    let entries: Vec<(i64, u32)> =
                        (0..block).map(|i| (score, all.len() as u32 + i as u32)).collect();
                    all.extend(entries.iter().map(|e| e.0));
                    floor.add(&entries, &mut kept);
                }
            }
            if list {
                proptest::prop_assert_eq!(kept.len(), all.len());
            }
            let mut sorted = all.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            if let Some(&nth) = sorted.get(keep - 1) {
                let at_or_over = all.iter().filter(|&&s| s >= nth).count();
                let kept_over = kept.iter().filter(|e| e.0 >= nth).count();
                proptest::prop_assert_eq!(kept_over, at_or_over);
            } else {
                proptest::prop_assert_eq!(kept.len(), all.len());
            }
        }

        /// A weight added a byte of bits at a time is the weight added to each object whose
        /// bit is set, one at a time; a `sums` shorter than the words ends them.
        #[test]
        fn weights_added_by_bytes_are_added_per_bit(
            words in proptest::collection::vec(
                proptest::prop_oneof![proptest::num::u64::ANY, proptest::strategy::Just(0u64), proptest::strategy::Just(u64::MAX)],
                0..40,
            ),
            weights in proptest::collection::vec(0u16..4, 1..4),
            short in 0usize..2,
        ) {
            let objects = (words.len() * 64).saturating_sub(short * 64);
            let mut sums = vec![0u16; objects];
            let mut want = vec![0u16; objects];
            for &w in &weights {
                add_weight(&words, w, &mut sums);
                for (o, want) in want.iter_mut().enumerate() {
                    if words[o / 64] >> (o % 64) & 1 == 1 {
                        *want += w;
                    }
                }
            }
            proptest::prop_assert_eq!(sums, want);
        }

        /// The postings by runs are the postings one at a time: each (object, weight) met as
        /// often, over tiers dense (read by runs) and sparse (one at a time), empty, and at
        /// the top of the ordinals.
        #[test]
        fn postings_by_runs_are_the_postings(
            tiers in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(
                    proptest::collection::vec(
                        proptest::prop_oneof![0u32..300, (u32::MAX - 40)..=u32::MAX],
                        0..200,
                    ),
                    3,
                )),
                0..4,
            ),
            cut in proptest::prop_oneof![0u32..300, (u32::MAX - 40)..=u32::MAX],
        ) {
            let tiers: Vec<Option<[RoaringBitmap; 3]>> = tiers
                .into_iter()
                .map(|t| {
                    t.map(|t| {
                        let [a, b, c] = [&t[0], &t[1], &t[2]]
                            .map(|v| v.iter().copied().collect::<RoaringBitmap>());
                        [a, b, c]
                    })
                })
                .collect();
            let mut one = Vec::new();
            each_posting(&tiers, |o, w| one.push((u64::from(o), w)));
            // Whole, and in two ranges cut at `cut`, within which every posting is met.
            let mut runs = Vec::new();
            each_posting_run(&tiers, 0..u32::MAX, |from, to, w| {
                runs.extend((from..to).map(|o| (o as u64, w)));
            });
            let top = u64::from(u32::MAX);
            let mut cut_runs = Vec::new();
            for ordinals in [0..cut, cut..u32::MAX] {
                each_posting_run(&tiers, ordinals.clone(), |from, to, w| {
                    assert!(ordinals.contains(&(from as u32)) && to as u64 <= u64::from(ordinals.end));
                    cut_runs.extend((from..to).map(|o| (o as u64, w)));
                });
            }
            // The ordinal u32::MAX is past every range (as past every corpus).
            one.retain(|&(o, _)| o < top);
            one.sort_unstable();
            runs.sort_unstable();
            cut_runs.sort_unstable();
            proptest::prop_assert_eq!(&runs, &one);
            proptest::prop_assert_eq!(&cut_runs, &one);
        }
    }
}

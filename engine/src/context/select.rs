//! Selection and packing for `CONTEXT FOR` (lexical-v1, signalql-v0.5-context.md steps 3–8):
//! eligibility with one rejection reason per object, expansion over graph edges, preference
//! boosts, rank, MAX OBJECTS and the two packing passes. Pure functions over loaded rows; the
//! relevance scores come from the `lexical_weights` UDF in the plan (see `load.rs`).

use datafusion::common::HashMap;
use std::cmp::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The estimator of a representation without a stored token count.
pub const CHARS_DIV_4: &str = signalql_udfs::scalar::token_estimate::ESTIMATOR;
/// The estimator named for a stored token count.
pub const STORED: &str = "stored";

/// One representation of a candidate's selected revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Rep {
    pub name: Arc<str>,
    pub media_type: Arc<str>,
    /// NULL when not loaded (secret or excluded representations are never read).
    pub content: Option<String>,
    /// Where the content is kept when it is not stored inline.
    pub content_ref: Option<String>,
    pub content_hash: String,
    /// The token estimate and the estimator that produced it.
    pub tokens: i64,
    pub estimator: &'static str,
    /// Effective roles: the revision's and the representation's.
    pub roles: Vec<Arc<str>>,
    pub secret: bool,
    pub role_excluded: bool,
    pub packable: bool,
}

impl Rep {
    /// Usable for packing: packable, not secret, not excluded by role.
    pub fn eligible(&self) -> bool {
        self.packable && !self.secret && !self.role_excluded
    }
}

/// A live object at its selected revision, with what scope and EXCLUDE need.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: String,
    pub revision: i64,
    pub in_project: bool,
    pub within_age: bool,
    pub state: Arc<str>,
    pub origin: Arc<str>,
    pub trust: Arc<str>,
    pub validation: Arc<str>,
    pub roles: Vec<Arc<str>>,
    pub reps: Vec<Rep>,
    /// lexical-v1 score (0 unless eligible).
    pub lexical: i64,
    /// Per task term, its lexical-v1 weight (empty unless eligible): the matched terms are
    /// those weighing more than 0 ([`Candidate::terms`]).
    pub weights: Vec<i64>,
}

impl Candidate {
    /// The task terms the object matched, in term order.
    pub fn terms<'a>(&self, task_terms: &'a [String]) -> Vec<&'a str> {
        task_terms
            .iter()
            .zip(&self.weights)
            .filter(|(_, w)| **w > 0)
            .map(|(t, _)| t.as_str())
            .collect()
    }
}

/// Why an object was left out (signalql-v0.5-context.md, EXPLAIN CONTEXT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    OutOfScope,
    MaxAge,
    ExcludedSecret,
    ExcludedTrust,
    ExcludedStale,
    ExcludedRole,
    NoPackableRepresentation,
    MaxObjects,
    Budget,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::OutOfScope,
        Reason::MaxAge,
        Reason::ExcludedSecret,
        Reason::ExcludedTrust,
        Reason::ExcludedStale,
        Reason::ExcludedRole,
        Reason::NoPackableRepresentation,
        Reason::MaxObjects,
        Reason::Budget,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::OutOfScope => "out_of_scope",
            Reason::MaxAge => "max_age",
            Reason::ExcludedSecret => "excluded_secret",
            Reason::ExcludedTrust => "excluded_trust",
            Reason::ExcludedStale => "excluded_stale",
            Reason::ExcludedRole => "excluded_role",
            Reason::NoPackableRepresentation => "no_packable_representation",
            Reason::MaxObjects => "max_objects",
            Reason::Budget => "budget",
        }
    }
}

/// The EXCLUDE items that are object-level.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exclusions {
    pub untrusted: bool,
    pub stale: bool,
}

/// The first reason (in the spec's order) that keeps `c` out before relevance, if any.
pub fn ineligible(c: &Candidate, ex: Exclusions) -> Option<Reason> {
    if !c.in_project {
        return Some(Reason::OutOfScope);
    }
    if !c.within_age {
        return Some(Reason::MaxAge);
    }
    if !c.reps.is_empty() && c.reps.iter().all(|r| r.secret) {
        return Some(Reason::ExcludedSecret);
    }
    if ex.untrusted && &*c.trust == "untrusted" {
        return Some(Reason::ExcludedTrust);
    }
    if ex.stale && (&*c.state == "stale" || &*c.state == "invalid") {
        return Some(Reason::ExcludedStale);
    }
    let open: Vec<&Rep> = c.reps.iter().filter(|r| !r.secret).collect();
    if !open.is_empty() && open.iter().all(|r| r.role_excluded) {
        return Some(Reason::ExcludedRole);
    }
    if !c.reps.iter().any(Rep::eligible) {
        return Some(Reason::NoPackableRepresentation);
    }
    None
}

/// An undirected graph edge between two nodes (`object:<id>` or `<entity_type>:<id>`).
/// It borrows its names (from the edge batches), so reading edges allocates nothing per edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge<'a> {
    pub a: &'a str,
    pub b: &'a str,
    pub relation: &'a str,
}

/// Orders strings by UTF-16 code unit, as the spec's tie-breaks do. Code-unit order is byte
/// order except between U+E000–U+FFFF and the supplementary planes, so the bytes decide when
/// the strings first differ at ASCII bytes (the common case, with no transcoding).
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i].is_ascii() && y[i].is_ascii() => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// The node name of an object (the tests' reference expansion builds them by id).
#[cfg(test)]
pub fn object_node(id: &str) -> String {
    format!("object:{id}")
}

/// How an object's relevance was reached by expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    pub score: i64,
    pub hops: u32,
    /// The seed's object id.
    pub from: String,
    /// The relation of the last edge.
    pub via: String,
    /// Node names from the seed to the object.
    pub path: Vec<String>,
}

/// Expansion (step 4): every seed's score halves per hop over `edges`, in either direction,
/// up to `max_depth` hops, through entities and eligible objects (`passable`). Multi-source
/// propagation, one round per hop over the nodes improved in the previous round (in node name
/// order), so the cost is O(depth × edges) however many seeds there are. The best value at a
/// node is the highest score, then fewer hops, then the seed id, the edge relation (code-unit
/// order) and the previous node (name order).
///
/// Nodes and relations are interned to integers first: node ids are their ranks in name
/// order, so the rounds, the adjacency order and the last tie-break compare integers.
pub fn expand<'a>(
    seeds: &[(String, i64)],
    edges: &[Edge<'a>],
    max_depth: u32,
    passable: &dyn Fn(&str) -> bool,
) -> Expansion<'a> {
    // Node names, deduplicated, then ordered by name.
    let mut index: HashMap<&'a str, u32> = HashMap::with_capacity(edges.len());
    let mut names: Vec<&'a str> = Vec::new();
    let mut intern = |n: &'a str| -> u32 {
        *index.entry(n).or_insert_with(|| {
            names.push(n);
            (names.len() - 1) as u32
        })
    };
    let mut rel_index: HashMap<&'a str, u32> = HashMap::new();
    let mut rels: Vec<&'a str> = vec![""];
    rel_index.insert("", 0);
    let mut raw: Vec<(u32, u32, u32)> = Vec::with_capacity(edges.len());
    for e in edges {
        let (a, b) = (intern(e.a), intern(e.b));
        let r = *rel_index.entry(e.relation).or_insert_with(|| {
            rels.push(e.relation);
            (rels.len() - 1) as u32
        });
        raw.push((a, b, r));
    }
    drop(index);
    let (rank, names) = rank_by(&names, str::cmp);
    // Relations: ids are byte-order ranks (the adjacency order); `rel16` is the code-unit rank.
    let (rel_rank, rel_names) = rank_by(&rels, str::cmp);
    let (rel16, _) = rank_by(&rel_names, utf16_cmp);

    // Adjacency (both directions), each list by neighbour name then relation, deduplicated.
    let mut pairs: Vec<(u32, u32, u32)> = Vec::with_capacity(raw.len() * 2);
    for (a, b, r) in raw {
        let (a, b, r) = (rank[a as usize], rank[b as usize], rel_rank[r as usize]);
        pairs.push((a, b, r));
        pairs.push((b, a, r));
    }
    pairs.sort_unstable();
    pairs.dedup();
    let mut start = vec![0usize; names.len() + 1];
    for &(u, _, _) in &pairs {
        start[u as usize + 1] += 1;
    }
    for i in 0..names.len() {
        start[i + 1] += start[i];
    }
    let pass: Vec<bool> = names
        .iter()
        .map(|n| n.strip_prefix("object:").is_none_or(passable))
        .collect();
    let objects: HashMap<&'a str, u32> = names
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.strip_prefix("object:").map(|id| (id, i as u32)))
        .collect();

    // Seeds: a seed without edges reaches nothing and is reached by nothing.
    let mut best: Vec<Option<NodeStep>> = vec![None; names.len()];
    let mut frontier: Vec<u32> = Vec::new();
    let mut seed_nodes: Vec<(u32, &str)> = Vec::new();
    for (seed, score) in seeds {
        if let Some(&n) = objects.get(seed.as_str()) {
            best[n as usize] = Some(NodeStep {
                score: *score,
                hops: 0,
                from: n,
                via: 0,
                prev: None,
            });
            frontier.push(n);
            seed_nodes.push((n, names[n as usize]));
        }
    }
    // A seed's code-unit rank (its node name is `object:` and its id, so the order is the ids').
    let mut seed16 = vec![0u32; names.len()];
    // Node ids are byte-order ranks, and byte order is code-unit order unless a name has a
    // supplementary-plane character (a 4-byte UTF-8 sequence, lead byte 0xF0–0xF4).
    if names.iter().any(|n| n.bytes().any(|b| b >= 0xF0)) {
        seed_nodes.sort_unstable_by(|a, b| utf16_cmp(a.1, b.1));
    } else {
        seed_nodes.sort_unstable_by_key(|&(n, _)| n);
    }
    for (r, (n, _)) in seed_nodes.iter().enumerate() {
        seed16[*n as usize] = r as u32;
    }
    frontier.sort_unstable();
    frontier.dedup();
    for _ in 0..max_depth {
        let mut next: Vec<u32> = Vec::new();
        for &u in &frontier {
            let Some(su) = best[u as usize] else { continue };
            let (score, hops, from) = (su.score >> 1, su.hops + 1, su.from);
            for &(_, v, rel) in &pairs[start[u as usize]..start[u as usize + 1]] {
                if !pass[v as usize] {
                    continue;
                }
                let better = match &best[v as usize] {
                    None => true,
                    Some(old) => old
                        .score
                        .cmp(&score)
                        .then(hops.cmp(&old.hops))
                        .then(seed16[from as usize].cmp(&seed16[old.from as usize]))
                        .then(rel16[rel as usize].cmp(&rel16[old.via as usize]))
                        .then(Some(u).cmp(&old.prev))
                        .is_lt(),
                };
                if better {
                    best[v as usize] = Some(NodeStep {
                        score,
                        hops,
                        from,
                        via: rel,
                        prev: Some(u),
                    });
                    next.push(v);
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        frontier = next;
    }
    Expansion {
        names,
        rels: rel_names,
        objects,
        best,
    }
}

/// Each of the distinct `strings`' rank in the order `cmp` gives, and the strings in that
/// order.
fn rank_by<'a>(strings: &[&'a str], cmp: fn(&str, &str) -> Ordering) -> (Vec<u32>, Vec<&'a str>) {
    let mut order: Vec<u32> = (0..strings.len() as u32).collect();
    order.sort_unstable_by(|&x, &y| cmp(strings[x as usize], strings[y as usize]));
    let mut rank = vec![0u32; strings.len()];
    for (r, &id) in order.iter().enumerate() {
        rank[id as usize] = r as u32;
    }
    (rank, order.iter().map(|&id| strings[id as usize]).collect())
}

/// The best way expansion reached a node, in interned form.
#[derive(Debug, Clone, Copy)]
struct NodeStep {
    score: i64,
    hops: u32,
    /// The seed's node.
    from: u32,
    /// The relation of the last edge.
    via: u32,
    prev: Option<u32>,
}

/// The result of [`expand`].
#[derive(Debug, Clone, Default)]
pub struct Expansion<'a> {
    names: Vec<&'a str>,
    rels: Vec<&'a str>,
    /// Object nodes by object id.
    objects: HashMap<&'a str, u32>,
    best: Vec<Option<NodeStep>>,
}

impl Expansion<'_> {
    fn step(&self, id: &str) -> Option<NodeStep> {
        let n = *self.objects.get(id)?;
        self.best[n as usize].filter(|s| s.hops > 0)
    }

    /// The propagated score and hops of the object `id`, if reached through a hop.
    pub fn score_hops(&self, id: &str) -> Option<(i64, u32)> {
        self.step(id).map(|s| (s.score, s.hops))
    }

    /// How the object `id` was reached through at least one hop, if it was.
    pub fn reached(&self, id: &str) -> Option<Reached> {
        let step = self.step(id)?;
        let name = |n: u32| self.names[n as usize].to_string();
        let mut path = vec![name(self.objects[id])];
        let mut cur = step.prev;
        while let Some(p) = cur {
            cur = self.best[p as usize].and_then(|s| s.prev);
            path.push(name(p));
        }
        path.reverse();
        let from = self.names[step.from as usize];
        Some(Reached {
            score: step.score,
            hops: step.hops,
            from: from.strip_prefix("object:").unwrap_or(from).to_string(),
            via: self.rels[step.via as usize].to_string(),
            path,
        })
    }
}

/// Multiplies by 5/4, rounded down, once per satisfied PREFER term.
pub fn boost(score: i64, satisfied: usize) -> i64 {
    (0..satisfied).fold(score, |s, _| s * 5 / 4)
}

/// A ranked object: what the rank order uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankKey<'a> {
    pub score: i64,
    pub current: bool,
    pub hops: u32,
    pub id: &'a str,
}

/// Step 6's order: score descending, current first, fewer hops, object id by UTF-16 code unit.
pub fn rank_cmp(a: &RankKey, b: &RankKey) -> Ordering {
    b.score
        .cmp(&a.score)
        .then(b.current.cmp(&a.current))
        .then(a.hops.cmp(&b.hops))
        .then_with(|| utf16_cmp(a.id, b.id))
}

/// The two packing passes (steps 7–8) over objects in rank order, each with its eligible
/// representations as (name, tokens). Returns, per object, the chosen representation index
/// (None: nothing fit) and the tokens used. (The tests' view of [`pack_compressing`] without
/// compression.)
#[cfg(test)]
pub fn pack(
    objects: &[Vec<(&str, i64)>],
    budget: i64,
    preferred: Option<&str>,
) -> (Vec<Option<usize>>, i64) {
    let (choices, used) = pack_compressing(objects, budget, preferred, &mut |_, _| None);
    let chosen = choices
        .into_iter()
        .map(|c| match c {
            Choice::Whole(i) => Some(i),
            _ => None,
        })
        .collect();
    (chosen, used)
}

/// What pass 1 and 2 gave an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Nothing fit.
    Left,
    /// The representation at this index, whole.
    Whole(usize),
    /// A compressed text of this many tokens (COMPRESS), made by the caller's compressor.
    Compressed(i64),
}

/// [`pack`], where an object for which nothing fits in pass 1 is offered to `compress(object,
/// tokens left)`, which returns the tokens of the compressed text it made, if any. Compressed
/// objects are not upgraded in pass 2.
pub fn pack_compressing(
    objects: &[Vec<(&str, i64)>],
    budget: i64,
    preferred: Option<&str>,
    compress: &mut dyn FnMut(usize, i64) -> Option<i64>,
) -> (Vec<Choice>, i64) {
    let mut used = 0i64;
    let mut chosen: Vec<Choice> = Vec::with_capacity(objects.len());
    // Pass 1 (coverage): the preferred representation if named, present and fitting; else the
    // smallest that fits (ties by name).
    for (k, reps) in objects.iter().enumerate() {
        let left = budget - used;
        let pick = preferred
            .and_then(|p| reps.iter().position(|(n, t)| *n == p && *t <= left))
            .or_else(|| {
                reps.iter()
                    .enumerate()
                    .filter(|(_, (_, t))| *t <= left)
                    .min_by(|(_, a), (_, b)| a.1.cmp(&b.1).then_with(|| utf16_cmp(a.0, b.0)))
                    .map(|(i, _)| i)
            });
        match pick {
            Some(i) => {
                used += reps[i].1;
                chosen.push(Choice::Whole(i));
            }
            None => match compress(k, left) {
                Some(t) if t <= left => {
                    used += t;
                    chosen.push(Choice::Compressed(t));
                }
                _ => chosen.push(Choice::Left),
            },
        }
    }
    // Pass 2 (depth): unless a representation was preferred, upgrade each to its largest that
    // still fits (ties by name).
    if preferred.is_none() {
        for (reps, slot) in objects.iter().zip(chosen.iter_mut()) {
            let Choice::Whole(cur) = *slot else { continue };
            let left = budget - used + reps[cur].1;
            let best = reps
                .iter()
                .enumerate()
                .filter(|(_, (_, t))| *t <= left)
                .max_by(|(_, a), (_, b)| a.1.cmp(&b.1).then_with(|| utf16_cmp(b.0, a.0)))
                .map(|(i, _)| i);
            if let Some(i) = best
                && reps[i].1 > reps[cur].1
            {
                used += reps[i].1 - reps[cur].1;
                *slot = Choice::Whole(i);
            }
        }
    }
    (chosen, used)
}

/// `ceil(characters / 4)`, characters as Unicode scalar values (chars-div-4-v1): the same
/// function as the `token_estimate` UDF.
pub use signalql_udfs::scalar::token_estimate::chars_div_4;

#[cfg(test)]
mod tests {
    use super::*;

    // The first implementation of `expand`, over strings: the oracle the interned one is
    // checked against.
    /// Expansion (step 4): every seed's score halves per hop over `edges`, in either direction,
    /// up to `max_depth` hops, through entities and eligible objects (`passable`). Multi-source
    /// propagation, one round per hop over the nodes improved in the previous round, so the cost
    /// is O(depth × edges) however many seeds there are. The best value at a node is the highest
    /// score, then fewer hops, then the seed id, the edge relation and the previous node (code-unit
    /// order).
    pub(crate) fn reference_expand(
        seeds: &[(String, i64)],
        edges: &[Edge],
        max_depth: u32,
        passable: &dyn Fn(&str) -> bool,
    ) -> HashMap<String, Step> {
        let mut adj: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
        for e in edges {
            adj.entry(e.a).or_default().push((e.b, e.relation));
            adj.entry(e.b).or_default().push((e.a, e.relation));
        }
        for list in adj.values_mut() {
            list.sort();
            list.dedup();
        }
        let mut best: HashMap<String, Step> = HashMap::new();
        let mut frontier: Vec<String> = Vec::new();
        for (seed, score) in seeds {
            let node = object_node(seed);
            best.insert(
                node.clone(),
                Step {
                    score: *score,
                    hops: 0,
                    from: seed.clone(),
                    via: String::new(),
                    prev: None,
                },
            );
            frontier.push(node);
        }
        frontier.sort();
        for _ in 0..max_depth {
            let mut next: Vec<String> = Vec::new();
            for u in &frontier {
                let (score, hops, from) = {
                    let su = &best[u];
                    (su.score >> 1, su.hops + 1, su.from.clone())
                };
                for (v, rel) in adj.get(u.as_str()).into_iter().flatten() {
                    if let Some(id) = v.strip_prefix("object:")
                        && !passable(id)
                    {
                        continue;
                    }
                    // Compared before anything is allocated: most edges do not improve a node.
                    let better = best
                        .get(*v)
                        .is_none_or(|old| Step::beats(score, hops, &from, rel, u, old));
                    if better {
                        let cand = Step {
                            score,
                            hops,
                            from: from.clone(),
                            via: rel.to_string(),
                            prev: Some(u.clone()),
                        };
                        best.insert(v.to_string(), cand);
                        next.push(v.to_string());
                    }
                }
            }
            next.sort();
            next.dedup();
            frontier = next;
        }
        best
    }

    /// The best way expansion reached a node.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Step {
        score: i64,
        hops: u32,
        from: String,
        via: String,
        prev: Option<String>,
    }

    impl Step {
        /// Whether a step with these fields (and `prev` = Some(`prev`)) is better than `old`: the
        /// higher score, then fewer hops, then the seed id, the relation and the previous node.
        fn beats(score: i64, hops: u32, from: &str, via: &str, prev: &str, old: &Step) -> bool {
            let units = |a: &str, b: &str| a.encode_utf16().cmp(b.encode_utf16());
            old.score
                .cmp(&score)
                .then(hops.cmp(&old.hops))
                .then_with(|| units(from, &old.from))
                .then_with(|| units(via, &old.via))
                .then_with(|| Some(prev).cmp(&old.prev.as_deref()))
                .is_lt()
        }
    }

    #[test]
    fn packing_passes() {
        // Budget 100: pass 1 gives A its summary (10) and B its summary (30); pass 2 upgrades A
        // to text (60): 60 + 30 = 90; B's text (80) no longer fits.
        let a = vec![("summary", 10), ("text", 60)];
        let b = vec![("summary", 30), ("text", 80)];
        let (chosen, used) = pack(&[a.clone(), b.clone()], 100, None);
        assert_eq!(chosen, vec![Some(1), Some(0)]);
        assert_eq!(used, 90);
        // PREFER REPRESENTATION text: A gets text (60), B's text does not fit, its summary does;
        // no upgrade pass.
        let (chosen, used) = pack(&[a.clone(), b.clone()], 100, Some("text"));
        assert_eq!(chosen, vec![Some(1), Some(0)]);
        assert_eq!(used, 90);
        // Nothing fits: left out.
        let (chosen, used) = pack(&[vec![("text", 500)]], 100, None);
        assert_eq!(chosen, vec![None]);
        assert_eq!(used, 0);
    }

    #[test]
    fn boosts_and_estimates() {
        assert_eq!(boost(1_000_000, 1), 1_250_000);
        assert_eq!(boost(333_333, 2), 520_832); // 416666 then 520832
    }

    #[test]
    fn rank_order() {
        let k = |score, current, hops, id| RankKey {
            score,
            current,
            hops,
            id,
        };
        let mut v = [
            k(5, false, 0, "b"),
            k(5, true, 1, "c"),
            k(5, true, 0, "z"),
            k(9, false, 2, "a"),
            k(5, true, 0, "y"),
        ];
        v.sort_by(rank_cmp);
        let ids: Vec<&str> = v.iter().map(|k| k.id).collect();
        assert_eq!(ids, ["a", "y", "z", "c", "b"]);
    }

    /// What the reference expansion says of the object `id`: as [`Expansion::reached`].
    fn reference_reached(best: &HashMap<String, Step>, id: &str) -> Option<Reached> {
        let node = object_node(id);
        let step = best.get(&node)?;
        if step.hops == 0 {
            return None;
        }
        let mut path = vec![node.clone()];
        let mut cur = step.prev.clone();
        while let Some(p) = cur {
            cur = best.get(&p).and_then(|s| s.prev.clone());
            path.push(p);
        }
        path.reverse();
        Some(Reached {
            score: step.score,
            hops: step.hops,
            from: step.from.clone(),
            via: step.via.clone(),
            path,
        })
    }

    proptest::proptest! {
        /// The fast code-unit order equals transcoding both strings, on strings mixing ASCII,
        /// the BMP's private-use area and the supplementary planes.
        #[test]
        fn utf16_cmp_is_code_unit_order(
            a in "[ab\u{e9}\u{e000}\u{ffff}\u{10000}\u{1f600}]{0,6}",
            b in "[ab\u{e9}\u{e000}\u{ffff}\u{10000}\u{1f600}]{0,6}",
        ) {
            proptest::prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }

        /// The interned expansion reaches every object as the string-keyed one does: same
        /// score, hops, seed, relation and path, ties included (node names and relations
        /// chosen so byte order and code-unit order differ).
        #[test]
        fn interned_expansion_matches_the_reference(
            raw_edges in proptest::collection::vec((0usize..9, 0usize..9, 0usize..5), 0..30),
            seed_scores in proptest::collection::vec(proptest::option::of(1i64..2000), 6),
            blocked in proptest::collection::vec(proptest::bool::weighted(0.2), 6),
            depth in 0u32..4,
        ) {
            let ids = ["a", "b", "\u{e000}", "\u{10000}", "ab", "é"];
            let nodes: Vec<String> = ids
                .iter()
                .map(|i| object_node(i))
                .chain(["topic:x".to_string(), "topic:\u{ffff}".to_string(), "file:a".to_string()])
                .collect();
            let rels = ["r", "s", "", "\u{e000}", "\u{10000}"];
            let edges: Vec<Edge> = raw_edges
                .iter()
                .map(|&(a, b, r)| Edge {
                    a: &nodes[a],
                    b: &nodes[b],
                    relation: rels[r],
                })
                .collect();
            let seeds: Vec<(String, i64)> = ids
                .iter()
                .zip(&seed_scores)
                .filter_map(|(id, s)| s.map(|s| (id.to_string(), s)))
                .collect();
            let passable = |id: &str| ids.iter().position(|x| *x == id).is_none_or(|i| !blocked[i]);
            let fast = expand(&seeds, &edges, depth, &passable);
            let slow = reference_expand(&seeds, &edges, depth, &passable);
            for id in ids {
                let want = reference_reached(&slow, id);
                proptest::prop_assert_eq!(fast.score_hops(id), want.as_ref().map(|r| (r.score, r.hops)));
                proptest::prop_assert_eq!(fast.reached(id), want);
            }
        }
    }

    #[test]
    fn expansion_halves_per_hop_through_entities_and_eligible_objects() {
        let e = |a: &'static str, b: &'static str, r: &'static str| Edge { a, b, relation: r };
        let edges = vec![
            e("object:s", "entity:x", "mentions"),
            e("object:t", "entity:x", "mentions"),
            e("object:t", "object:u", "derived_from"),
            e("object:s", "object:bad", "links_to"),
            e("object:bad", "object:v", "links_to"),
        ];
        let passable = |id: &str| id != "bad";
        let r = expand(&[("s".into(), 1000)], &edges, 3, &passable);
        let t = r.reached("t").unwrap();
        assert_eq!((t.score, t.hops), (250, 2)); // s → x → t: 2 hops
        let u = r.reached("u").unwrap();
        assert_eq!(u.score, 125); // 3 hops
        assert_eq!(u.path, ["object:s", "entity:x", "object:t", "object:u"]);
        assert!(
            r.reached("bad").is_none(),
            "an ineligible object is not reached"
        );
        assert!(r.reached("v").is_none(), "nor a bridge");
        assert!(
            r.reached("s").is_none(),
            "a seed is not reached from itself"
        );
        let r = expand(&[("s".into(), 1000)], &edges, 1, &passable);
        assert!(r.reached("t").is_none(), "depth 1 reaches only the entity");
        // A stronger seed two hops away beats a weaker one next door.
        let edges = vec![
            e("object:a", "object:m", "r"),
            e("object:m", "object:b", "r"),
        ];
        let r = expand(
            &[("a".into(), 1000), ("b".into(), 100)],
            &edges,
            2,
            &|_: &str| true,
        );
        let m = r.reached("m").unwrap();
        assert_eq!((m.score, m.from.as_str()), (500, "a"));
        let b = r.reached("b").unwrap();
        assert_eq!((b.score, b.hops), (250, 2));
    }
}

/// COMPRESS (context-packets.md): `text` shrunk to its task-relevant sentences within
/// `max_tokens` (chars-div-4-v1). Sentences end at `.`, `!` or `?` followed by white space, or
/// at a line break. Each is scored by the number of task terms it holds as whole tokens; those
/// with a score are taken best first (ties by position) while they fit, and printed in their
/// original order joined by a space. Returns the text and its preservation: the fraction of the
/// task terms found in `text` that are still in it. None when no relevant sentence fits.
pub fn compress_text(text: &str, terms: &[String], max_tokens: i64) -> Option<(String, f64)> {
    use signalql_udfs::scalar::lexical::tokens;
    let mut sentences: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        let mut start = 0;
        let b = line.as_bytes();
        for i in 0..b.len() {
            let end_mark = matches!(b[i], b'.' | b'!' | b'?');
            let next_space = i + 1 >= b.len() || b[i + 1].is_ascii_whitespace();
            if end_mark && next_space {
                sentences.push(&line[start..=i]);
                start = i + 1;
            }
        }
        if start < line.len() {
            sentences.push(&line[start..]);
        }
    }
    let sentences: Vec<&str> = sentences
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let has = |s: &str| -> Vec<bool> {
        let toks = tokens(s);
        terms.iter().map(|t| toks.iter().any(|x| x == t)).collect()
    };
    let found: Vec<Vec<bool>> = sentences.iter().map(|s| has(s)).collect();
    let in_text: usize = (0..terms.len())
        .filter(|&j| found.iter().any(|f| f[j]))
        .count();
    let mut order: Vec<usize> = (0..sentences.len())
        .filter(|&i| found[i].iter().any(|&x| x))
        .collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(found[i].iter().filter(|&&x| x).count()),
            i,
        )
    });
    let mut keep: Vec<usize> = Vec::new();
    let mut chars = 0usize;
    for i in order {
        let extra = sentences[i].chars().count() + usize::from(!keep.is_empty());
        if (((chars + extra) as i64) + 3) / 4 <= max_tokens {
            chars += extra;
            keep.push(i);
        }
    }
    if keep.is_empty() {
        return None;
    }
    keep.sort();
    let out = keep
        .iter()
        .map(|&i| sentences[i])
        .collect::<Vec<_>>()
        .join(" ");
    let kept = (0..terms.len())
        .filter(|&j| keep.iter().any(|&i| found[i][j]))
        .count();
    let preservation = if in_text == 0 {
        1.0
    } else {
        kept as f64 / in_text as f64
    };
    Some((out, preservation))
}

#[cfg(test)]
mod compress_tests {
    use super::*;

    #[test]
    fn keeps_the_relevant_sentences_in_order() {
        let terms = vec!["parquet".to_string(), "budget".to_string()];
        let text =
            "Intro words here. Parquet files are columnar! Nothing else.\nThe budget is small? End";
        // Both relevant sentences fit in 20 tokens: 26 + 1 + 22 = 49 chars → 13 tokens.
        let (out, p) = compress_text(text, &terms, 20).unwrap();
        assert_eq!(out, "Parquet files are columnar! The budget is small?");
        assert_eq!(p, 1.0);
        // 7 tokens fit one (27 chars): the tie goes to the first; half the terms are kept.
        let (out, p) = compress_text(text, &terms, 7).unwrap();
        assert_eq!(out, "Parquet files are columnar!");
        assert_eq!(p, 0.5);
        assert!(compress_text(text, &terms, 2).is_none());
        assert!(compress_text("no match at all.", &terms, 100).is_none());
    }
}

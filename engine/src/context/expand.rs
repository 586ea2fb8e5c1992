//! Graph expansion for `CONTEXT FOR` (signalql-v0.5-context.md step 4): every seed's score
//! halves per hop over the graph edges, through entities and eligible objects, up to MAX DEPTH.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::common::HashMap;

use super::select::{Edge, utf16_cmp};
use signalql_catalog::objects::resident::keep::{In, Out, Strs, Words};

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

/// The name prefix of an object's node.
const OBJECT: &str = "object:";

/// The edge of no object (a relationship between entities, and every edge the caller has
/// already kept): always in the graph.
pub const NO_OWNER: u32 = u32::MAX;

/// Which edges expansion may cross: one with no owner ([`NO_OWNER`]) always; one with an
/// owner, when every edge counts (`Every`: no object has a tombstone, so no owner is read)
/// or when `Where` says the owner is live.
pub enum Live<F> {
    Every,
    Where(F),
}

/// [`Live::Every`], of a type.
#[cfg(test)]
pub const EVERY: Live<fn(u32) -> bool> = Live::Every;

impl<F: Fn(u32) -> bool> Live<F> {
    #[inline]
    fn counts(&self, owner: u32) -> bool {
        match self {
            Live::Every => true,
            Live::Where(live) => owner == NO_OWNER || live(owner),
        }
    }
}

/// The graph expansion runs over: nodes and relations interned to integers, node ids their
/// ranks in name order (so the rounds, the adjacency order and the last tie-break compare
/// integers), and the adjacency of both directions in CSR form, each list by neighbour,
/// relation and owner. Built per query from the edges the Parquet plan reads, or once per
/// resident generation (engine/src/context/resident.rs), whose edges carry the object they
/// belong to (an owner), counted only while that object is live.
#[derive(Debug, Default)]
pub struct Graph {
    /// Held in kept form ([`keep`](signalql_catalog::objects::resident::keep)), so a graph a
    /// snapshot file kept is used where it lies in the mapping.
    names: Strs,
    /// Relation names by byte-order rank, and each one's code-unit rank.
    rels: Strs,
    rel16: Words<u32>,
    /// Per node, where its adjacency starts in `neighbours` and `ways` (one more entry than
    /// nodes).
    start: Words<u64>,
    /// Per adjacency entry, its neighbour; apart from the rest of the entry (its relation
    /// and owner, `ways`), so a round that reads neighbours only (edges being counted
    /// whatever their owner: [`Live::Every`]) reads a third of the bytes.
    neighbours: Words<u32>,
    /// (relation, owner), beside `neighbours`.
    ways: Words<[u32; 2]>,
    /// Whether a node name has a supplementary-plane character (a 4-byte UTF-8 sequence,
    /// lead byte 0xF0–0xF4), where byte order and code-unit order differ.
    astral: bool,
    /// The nodes that are objects (`object:` and an id): one range, names being in order.
    objects: std::ops::Range<u32>,
    /// Per-node buffers lent to each expansion and given back after it.
    scratch: Scratch,
}

/// Buffers of one per node that a graph's expansions borrow and give back, so a statement
/// over a large graph does not map and fault in megabytes of fresh pages each time (the
/// process returns blocks over 1 MiB to the system when freed: src/main.rs). A buffer taken
/// is refilled whole; at most [`KEPT`] of each kind are kept.
#[derive(Debug, Default)]
struct Scratch {
    steps: Pool<NodeStep>,
    scores: Pool<i64>,
    ranks: Pool<u32>,
    small: Pool<i32>,
    /// A statement's first frontier (every seed).
    frontier: Pool<u32>,
    /// Levels per node ([`Graph::scores_levelled`]).
    levels: Pool<u8>,
}

impl Scratch {
    fn adopt(&self, earlier: &Scratch) {
        self.steps.adopt(&earlier.steps);
        self.scores.adopt(&earlier.scores);
        self.ranks.adopt(&earlier.ranks);
        self.small.adopt(&earlier.small);
        self.frontier.adopt(&earlier.frontier);
        self.levels.adopt(&earlier.levels);
    }
}

/// Buffers of each kind a [`Scratch`] keeps (a statement holds up to three of one kind at
/// once: a [`Scores`]' marks, then an expansion's seed ranks and marks).
const KEPT: usize = 3;

#[derive(Debug)]
pub(crate) struct Pool<T>(std::sync::Mutex<Vec<Vec<T>>>);

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool(std::sync::Mutex::new(Vec::new()))
    }
}

impl<T: Copy> Pool<T> {
    /// `len` copies of `fill`, in a buffer given back earlier when there is one.
    fn take(&self, len: usize, fill: T) -> Vec<T> {
        let kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let mut v = kept.unwrap_or_default();
        v.clear();
        reserve_huge(&mut v, len);
        v.resize(len, fill);
        v
    }

    fn give(&self, v: Vec<T>) {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() < KEPT {
            kept.push(v);
        }
    }

    /// Moves the buffers `earlier` keeps into this pool (up to [`KEPT`]).
    pub(crate) fn adopt(&self, earlier: &Pool<T>) {
        let moved = std::mem::take(
            &mut *earlier
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for v in moved {
            self.give(v);
        }
    }

    /// [`take`](Self::take), given back when the loan is dropped.
    pub(crate) fn lend(&self, len: usize, fill: T) -> Lent<'_, T> {
        Lent {
            pool: self,
            v: self.take(len, fill),
        }
    }
}

/// Makes room in `v` for `additional` more values; a new allocation of at least
/// [`HUGE`] bytes is asked to be backed by transparent huge pages (`madvise`, where the
/// system leaves it to the process: `[madvise]` in /sys/kernel/mm/transparent_hugepage).
/// A process's first statement over a large corpus otherwise faults in its per-node buffers
/// 4 KiB at a time, zeroed by the kernel: a one-shot CONTEXT FOR at a million objects took
/// ~29 000 faults, half its CPU in the kernel.
///
/// An empty buffer too small is replaced rather than grown (`realloc` would copy its old
/// capacity, which holds nothing), with an eighth more room: a buffer kept across the
/// generations of a growing store (a refresh adds a few objects) is then not replaced at
/// each (the room is address space until written).
pub(crate) fn reserve_huge<T>(v: &mut Vec<T>, additional: usize) {
    if v.capacity() - v.len() >= additional {
        return;
    }
    if v.is_empty() {
        *v = Vec::with_capacity(additional.saturating_add(additional / 8));
    } else {
        v.reserve(additional);
    }
    advise_huge(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
}

/// Buffers below this are left to the page size.
const HUGE: usize = 4 << 20;

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn advise_huge(start: *const u8, bytes: usize) {
    const PAGE: usize = 2 << 20;
    if bytes < HUGE {
        return;
    }
    // The whole huge pages within the allocation.
    let from = (start as usize).next_multiple_of(PAGE);
    let to = (start as usize + bytes) / PAGE * PAGE;
    if to > from {
        // SAFETY: advice on memory this process allocated and owns (the vector's buffer);
        // MADV_HUGEPAGE changes how its pages are backed, never what they hold, and a
        // refusal (an error) leaves them as they were.
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_start: *const u8, _bytes: usize) {}

/// A buffer lent by a [`Pool`], given back when dropped.
pub(crate) struct Lent<'a, T: Copy> {
    pool: &'a Pool<T>,
    v: Vec<T>,
}

impl<T: Copy> std::ops::Deref for Lent<'_, T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.v
    }
}

impl<T: Copy> std::ops::DerefMut for Lent<'_, T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.v
    }
}

impl<T: Copy> Drop for Lent<'_, T> {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.v));
    }
}

/// What [`Graph::scores`] found, per node: the best score ([`UNSCORED`]: not reached) and
/// whether it came through a hop. Its buffers go back to the graph when it is dropped.
pub struct Scores<'a> {
    graph: &'a Graph,
    held: Held,
}

/// A [`Scores`]' values.
enum Held {
    /// Per node, its score, and [`rounds`](Graph::rounds)'s mark: a node listed in some
    /// round's frontier was improved by a hop.
    Wide { score: Vec<i64>, marks: Vec<u32> },
    /// One round from seeds given by level ([`Graph::scores_levelled`]): per node, its own
    /// level and the highest level a neighbour offered it (0: none; [`SHUT`]: not a node
    /// expansion may step onto).
    Levelled {
        levels: Vec<i64>,
        own: Vec<u8>,
        offered: Vec<u8>,
    },
}

impl Scores<'_> {
    /// What [`hopped`](Self::hopped) lists, read a node at a time: the score a node came to
    /// through a hop, where it did.
    pub fn hops(&self) -> Hops<'_> {
        match &self.held {
            Held::Wide { score, marks } => Hops::Wide { score, marks },
            Held::Levelled {
                levels,
                own,
                offered,
            } => {
                // Per offered level, its score halved (none for 0, SHUT, or past the levels);
                // per own level, the score a hop must beat (none to beat for 0; past the
                // levels, unbeatable).
                let mut half = [i64::MIN; 256];
                let mut floor = [i64::MAX; 256];
                floor[0] = i64::MIN;
                for (l, &score) in levels.iter().enumerate().take(usize::from(SHUT) - 1) {
                    half[l + 1] = score >> 1;
                    floor[l + 1] = score;
                }
                Hops::Levelled {
                    half: Box::new(half),
                    floor: Box::new(floor),
                    own,
                    offered,
                }
            }
        }
    }

    /// Each node whose score came through a hop, with that score, in node order: the
    /// whole-graph reading the tests compare [`Hops::get`] with.
    #[cfg(test)]
    pub fn hopped(&self, mut each: impl FnMut(u32, i64)) {
        match &self.held {
            Held::Wide { score, marks } => {
                for (v, (&s, &m)) in score.iter().zip(marks).enumerate() {
                    if m & ROUND != 0 {
                        each(v as u32, s);
                    }
                }
            }
            Held::Levelled {
                levels,
                own,
                offered,
            } => {
                // Nearly every byte is 0 or SHUT: a block of 64 with nothing else is passed
                // over in a few vector instructions.
                const BLOCK: usize = 64;
                let offered_at = |x: u8| x != 0 && x != SHUT;
                for (b, block) in offered.chunks(BLOCK).enumerate() {
                    if !block.iter().fold(false, |any, &x| any | offered_at(x)) {
                        continue;
                    }
                    for (i, &x) in block.iter().enumerate() {
                        let v = b * BLOCK + i;
                        if offered_at(x) {
                            let s = levels[x as usize - 1] >> 1;
                            let o = own[v];
                            if o == 0 || s > levels[o as usize - 1] {
                                each(v as u32, s);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// [`Scores::hops`]: what it reads per node resolved once, so a pass over a million objects
/// makes two byte reads and two table reads per node of a levelled round.
pub enum Hops<'a> {
    Wide {
        score: &'a [i64],
        marks: &'a [u32],
    },
    Levelled {
        half: Box<[i64; 256]>,
        floor: Box<[i64; 256]>,
        own: &'a [u8],
        offered: &'a [u8],
    },
}

impl Hops<'_> {
    /// The score `node` came to through a hop, where it did; `None` for a node it did not,
    /// or one the graph does not have.
    pub fn get(&self, node: u32) -> Option<i64> {
        Some(self.value(node)).filter(|&v| v != i64::MIN)
    }

    /// [`get`](Self::get) with `i64::MIN` for `None` (no score reached through a hop is
    /// negative), read without a branch on the node's values.
    #[inline]
    pub fn value(&self, node: u32) -> i64 {
        let v = node as usize;
        match self {
            Hops::Wide { score, marks } => match (marks.get(v), score.get(v)) {
                (Some(&m), Some(&s)) if m & ROUND != 0 => s,
                _ => i64::MIN,
            },
            Hops::Levelled {
                half,
                floor,
                own,
                offered,
            } => {
                // A node past the graph's (NONE among them) reads as offered nothing.
                let h = half[offered.get(v).map_or(0, |&x| usize::from(x))];
                let f = floor[own.get(v).map_or(0, |&o| usize::from(o))];
                if h > f { h } else { i64::MIN }
            }
        }
    }
}

impl Drop for Scores<'_> {
    fn drop(&mut self) {
        let scratch = &self.graph.scratch;
        match &mut self.held {
            Held::Wide { score, marks } => {
                scratch.scores.give(std::mem::take(score));
                scratch.ranks.give(std::mem::take(marks));
            }
            Held::Levelled { own, offered, .. } => {
                scratch.levels.give(std::mem::take(own));
                scratch.levels.give(std::mem::take(offered));
            }
        }
    }
}

/// A node's mark in [`Graph::rounds`]: the last round that listed it in the next frontier
/// (0: none, so not improved by a hop), and whether expansion may step onto it ([`OPEN`]:
/// an entity or a passable object; [`SHUT_MARK`]: not). One word per node, so a step reads one
/// cache line of the marks, not one per array.
const ROUND: u32 = (1 << 30) - 1;
const OPEN: u32 = 1 << 30;
const SHUT_MARK: u32 = 1 << 31;

/// A node's offered level in [`Graph::scores_levelled`] when expansion may not step onto it:
/// above every level, so taking the highest offer leaves it as it is.
const SHUT: u8 = u8::MAX;

/// `f` of each of `parts`, in order: the first on this thread, each other on a thread of
/// its own (scoped: `parts` may borrow). A part's panic is resumed here.
pub(crate) fn on_threads<P: Send, R: Send>(
    parts: impl IntoIterator<Item = P>,
    f: impl Fn(P) -> R + Sync,
) -> Vec<R> {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let f = &f;
    std::thread::scope(|scope| {
        let others: Vec<_> = parts.map(|p| scope.spawn(move || f(p))).collect();
        let mut out = vec![f(first)];
        out.extend(others.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }));
        out
    })
}

/// How [`Graph::scores_levelled`]'s round is made (tests ask for each way; `None` is as its
/// cost decides): pulled or pushed, and on how many threads ([`parts_for`]).
#[derive(Debug, Clone, Copy, Default)]
struct Way {
    pull: Option<bool>,
    parts: Option<usize>,
}

/// Work (edges a round reads, objects a pass scores) below which it runs on the calling
/// thread alone: a thread started costs tens of microseconds, a million edge reads a few
/// milliseconds. A debug build (the tests') splits from 16 items, so the test suite's small
/// corpora answer through the split passes too.
const PARALLEL_WORK: u64 = if cfg!(debug_assertions) { 16 } else { 1 << 17 };

/// How many threads a pass over `work` items runs on: one below [`PARALLEL_WORK`], else
/// the machine's cores (up to 8).
pub(crate) fn parts_for(work: u64) -> usize {
    static CORES: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
    });
    match work < PARALLEL_WORK {
        true => 1,
        false => *CORES,
    }
}

impl Graph {
    /// The graph of `edges`: (a, b, relation, owner) each.
    pub fn new<'a>(edges: impl Iterator<Item = (&'a str, &'a str, &'a str, u32)>) -> Graph {
        let mut index: HashMap<&'a str, u32> = HashMap::new();
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
        let mut raw: Vec<(u32, u32, u32, u32)> = Vec::new();
        for (a, b, relation, owner) in edges {
            let (a, b) = (intern(a), intern(b));
            let r = *rel_index.entry(relation).or_insert_with(|| {
                rels.push(relation);
                (rels.len() - 1) as u32
            });
            raw.push((a, b, r, owner));
        }
        drop(index);
        let (rank, names) = rank_by(&names, str::cmp);
        let (rel_rank, rel_names) = rank_by(&rels, str::cmp);
        let (rel16, _) = rank_by(&rel_names, utf16_cmp);
        let mut pairs: Vec<(u32, u32, u32, u32)> = Vec::with_capacity(raw.len() * 2);
        for (a, b, r, owner) in raw {
            let (a, b, r) = (rank[a as usize], rank[b as usize], rel_rank[r as usize]);
            pairs.push((a, b, r, owner));
            pairs.push((b, a, r, owner));
        }
        pairs.sort_unstable();
        pairs.dedup();
        let mut start = vec![0u64; names.len() + 1];
        for &(u, ..) in &pairs {
            start[u as usize + 1] += 1;
        }
        for i in 0..names.len() {
            start[i + 1] += start[i];
        }
        let first = names.partition_point(|n| *n < OBJECT);
        let after = first + names[first..].partition_point(|n| n.starts_with(OBJECT));
        Graph {
            objects: first as u32..after as u32,
            astral: names.iter().any(|n| n.bytes().any(|b| b >= 0xF0)),
            names: Strs::from_values(names.iter().copied()),
            rels: Strs::from_values(rel_names.iter().copied()),
            rel16: Words::from_values(rel16),
            start: Words::from_values(start),
            neighbours: Words::from_values(pairs.iter().map(|&(_, v, ..)| v)),
            ways: Words::from_values(pairs.iter().map(|&(_, _, r, o)| [r, o])),
            scratch: Scratch::default(),
        }
    }

    /// The graph in [`keep`](signalql_catalog::objects::resident::keep)'s form, for [`from_kept`](Self::from_kept).
    pub(crate) fn keep(&self, out: &mut Out) {
        out.strs(self.names.iter());
        out.strs(self.rels.iter());
        out.u32s(self.rel16.iter());
        out.u64s(self.start.iter());
        out.u32s(self.neighbours.iter());
        out.u32s(self.ways.iter().flatten());
        out.u32s([self.astral as u32, self.objects.start, self.objects.end]);
    }

    /// A graph [`keep`](Self::keep) wrote; `None` when the bytes do not hold one by their
    /// lengths. What they hold is not read now: the bytes are a kept part of a snapshot
    /// file, given only when they match its checksum (docs/index.md, "Snapshot files"), so
    /// they are what `keep` wrote, and a graph of a million objects opens without a pass over
    /// its names and edges (that pass was a sixth of a one-shot CONTEXT FOR's instructions).
    /// Should a file crafted to match its checksum hold an index out of range, reading it
    /// panics (an internal error for the statement), as a slice does: nothing reads outside
    /// the graph.
    pub(crate) fn from_kept(r: &mut In<'_>) -> Option<Graph> {
        let names = r.strings()?;
        let rels = r.strings()?;
        let rel16 = r.words::<u32>()?;
        let start = r.words::<u64>()?;
        let neighbours = r.words::<u32>()?;
        let ways = r.words::<[u32; 2]>()?;
        let [astral, first, after] = r.u32s()?.try_into().ok()?;
        let nodes = names.len();
        let ok = rel16.len() == rels.len()
            && start.len() == nodes + 1
            && start.get(0) == 0
            && u64::try_from(neighbours.len()).ok() == Some(start.get(nodes))
            && ways.len() == neighbours.len()
            && first <= after
            && after as usize <= nodes
            && astral <= 1;
        ok.then_some(Graph {
            names,
            rels,
            rel16,
            start,
            neighbours,
            ways,
            astral: astral == 1,
            objects: first..after,
            scratch: Scratch::default(),
        })
    }

    /// Takes over the per-node buffers `earlier` keeps (a graph replacing it: their pages
    /// are already faulted in, and a buffer grows in place to this graph's nodes).
    pub(crate) fn adopt_buffers(&self, earlier: &Graph) {
        self.scratch.adopt(&earlier.scratch);
    }

    /// The nodes, by name.
    pub fn names(&self) -> &Strs {
        &self.names
    }

    /// The node of `name`.
    fn node(&self, name: &str) -> Option<u32> {
        self.names
            .search(|n| n.cmp(name.as_bytes()))
            .map(|i| i as u32)
    }

    /// The node of the object `id` (`object:` and the id), without building its name.
    pub fn object(&self, id: &str) -> Option<u32> {
        let want = || b"object:".iter().chain(id.as_bytes());
        self.names
            .search(|n| n.iter().cmp(want()))
            .map(|i| i as u32)
    }

    /// Expansion (step 4): every seed's score halves per hop, in either direction, up to
    /// `max_depth` hops, through entities and eligible objects (`passable`, given the node
    /// and the object id), over the edges whose owner is [`NO_OWNER`] or `live`. Seeds are
    /// node names (`object:` and the id for an object, `type:id` for an entity).
    /// Multi-source propagation, one round per hop over the nodes improved in the previous
    /// round (in any order: values are compared by a total order), so the cost is
    /// O(depth × edges reached) however many seeds there are. The best value at a node is the
    /// highest score, then fewer hops, then the seed id, the edge relation (code-unit order)
    /// and the previous node (name order).
    pub fn expand(
        self: &Arc<Self>,
        seeds: &[(String, i64)],
        max_depth: u32,
        passable: &dyn Fn(u32, &str) -> bool,
        live: &dyn Fn(u32) -> bool,
    ) -> Expansion {
        // Seeds without edges reach nothing and are reached by nothing.
        let nodes: Vec<(u32, i64)> = seeds
            .iter()
            .filter_map(|(seed, score)| {
                let node = match seed.strip_prefix("object:") {
                    Some(id) => self.object(id),
                    None => self.node(seed),
                };
                node.map(|n| (n, *score))
            })
            .collect();
        let by_node = |v: u32| {
            passable(
                v,
                self.names.get(v as usize).get(OBJECT.len()..).unwrap_or(""),
            )
        };
        self.expand_nodes(&nodes, max_depth, &by_node, &Live::Where(live))
    }

    /// The score [`expand_nodes`](Self::expand_nodes) gives each object node from the same
    /// seeds, without the tie-breaks that name the path (cheaper: a score per node, no
    /// comparison of seeds or relations): per node, its best score ([`UNSCORED`]: not
    /// reached) and whether it came through a hop. Rounds and order are those of
    /// `expand_nodes`, whose other updates (an equal score by a better path) change no score.
    /// Only object nodes are exact: the last round offers to nothing else (an entity's value
    /// then could only travel on in a round that does not come).
    pub fn scores(
        &self,
        seeds: &[(u32, i64)],
        max_depth: u32,
        passable: &impl Fn(u32) -> bool,
        live: &Live<impl Fn(u32) -> bool>,
    ) -> Scores<'_> {
        self.scores_by(seeds, max_depth, passable, live, None)
    }

    /// [`scores`](Self::scores), its last round pulled (`Some(true)`), pushed
    /// (`Some(false)`), or as its cost decides (`None`).
    fn scores_by(
        &self,
        seeds: &[(u32, i64)],
        max_depth: u32,
        passable: &impl Fn(u32) -> bool,
        live: &Live<impl Fn(u32) -> bool>,
        pull: Option<bool>,
    ) -> Scores<'_> {
        let nodes = self.names.len();
        let mut score = self.scratch.scores.take(nodes, UNSCORED);
        for &(n, s) in seeds {
            score[n as usize] = s;
        }
        let mut frontier = self.scratch.frontier.take(0, 0);
        frontier.extend(seeds.iter().map(|(n, _)| *n));
        let last = max_depth.min(ROUND);
        let (mut marks, frontier) = self.rounds(
            &mut score,
            frontier,
            last.saturating_sub(1),
            passable,
            live,
            offer_half,
        );
        if last > 0 {
            self.last_scores_round(&mut score, &mut marks, &frontier, last, live, pull);
        }
        self.scratch.frontier.give(frontier);
        Scores {
            graph: self,
            held: Held::Wide { score, marks },
        }
    }

    /// [`scores`](Self::scores) of seeds given by level: a seed's score is `levels[l - 1]`
    /// for its level `l`, `levels` ascending. At MAX DEPTH 1 (the default) the one round
    /// reads and writes a byte per node (at a million objects, 1 MiB, which stays in a
    /// core's cache, where 8-byte scores and 4-byte marks did not): the highest level each
    /// object is offered is what its score through a hop is, halved, because halving keeps
    /// the order of values. Other depths, or 255 levels or more (the byte [`SHUT`] is not a
    /// level), take the general way.
    pub fn scores_levelled(
        &self,
        seeds: &[(u32, u8)],
        levels: &[i64],
        max_depth: u32,
        passable: &impl Fn(u32) -> bool,
        live: &Live<impl Fn(u32) -> bool + Sync>,
    ) -> Scores<'_> {
        self.scores_levelled_by(seeds, levels, max_depth, passable, live, Way::default())
    }

    /// [`scores_levelled`](Self::scores_levelled), its round made the [`Way`] given.
    fn scores_levelled_by(
        &self,
        seeds: &[(u32, u8)],
        levels: &[i64],
        max_depth: u32,
        passable: &impl Fn(u32) -> bool,
        live: &Live<impl Fn(u32) -> bool + Sync>,
        way: Way,
    ) -> Scores<'_> {
        let Way { pull, parts } = way;
        // A seed whose level is not one of `levels`, or whose node is not one of the graph's,
        // is passed over.
        let nodes = self.names.len() as u32;
        let score_of = |n: u32, l: u8| {
            let level = usize::from(l).checked_sub(1)?;
            (n < nodes).then(|| levels.get(level)).flatten()
        };
        if max_depth != 1 || levels.len() >= usize::from(SHUT) {
            let wide: Vec<(u32, i64)> = seeds
                .iter()
                .filter_map(|&(n, l)| Some((n, *score_of(n, l)?)))
                .collect();
            return self.scores_by(&wide, max_depth, passable, live, pull);
        }
        let mut own = self.scratch.levels.take(nodes as usize, 0);
        for &(n, l) in seeds {
            if score_of(n, l).is_some() {
                own[n as usize] = l;
            }
        }
        // The targets are the object nodes; whether each may be stepped onto is asked in
        // order and kept in the offers themselves: every other node is SHUT, so an offer
        // (the highest level, below SHUT) changes nothing there, and a step makes one read of
        // one byte of a megabyte, not two (the offer and a bit of a separate map).
        let targets = self.objects.start.min(nodes)..self.objects.end.min(nodes);
        let mut offered = self.scratch.levels.take(nodes as usize, SHUT);
        for v in targets.clone() {
            if passable(v) {
                offered[v as usize] = 0;
            }
        }
        let sources = seeds.iter().map(|&(u, _)| u).filter(|&u| u < nodes);
        let (pulls, work) = self.pulls_costed(sources, &targets, pull);
        let parts = parts.unwrap_or_else(|| parts_for(work)).max(1);
        if pulls {
            // Each part pulls into its own range of the targets, the ranges cut where their
            // adjacency (the reads) is even, not their node counts.
            let (first, end) = (targets.start as usize, targets.end as usize);
            let (low, high) = (self.start.get(first), self.start.get(end));
            let mut cuts: Vec<usize> = (1..parts)
                .map(|i| {
                    let at = low + (high - low) * i as u64 / parts as u64;
                    self.start.partition_point(|s| s < at).clamp(first, end)
                })
                .collect();
            cuts.push(end);
            let own = &own[..];
            let mut pieces = Vec::with_capacity(cuts.len());
            let (mut rest, mut from) = (&mut offered[first..end], first);
            for cut in cuts {
                let cut = cut.max(from);
                let (part, tail) = rest.split_at_mut(cut - from);
                pieces.push((part, from));
                (rest, from) = (tail, cut);
            }
            on_threads(pieces, |(part, at)| self.pull_levels(own, part, at, live));
        } else {
            // Each part pushes its share of the seeds into a copy of the offers, and the
            // copies are merged by their highest value (SHUT, the highest, stays where it is).
            let share = seeds.len().div_ceil(parts).max(1);
            let mut copies: Vec<Vec<u8>> = (1..parts)
                .map(|_| {
                    let mut c = self.scratch.levels.take(0, 0);
                    c.extend_from_slice(&offered);
                    c
                })
                .collect();
            let own = &own[..];
            let into =
                std::iter::once(&mut offered[..]).chain(copies.iter_mut().map(|c| &mut c[..]));
            on_threads(seeds.chunks(share).zip(into), |(part, into)| {
                self.push_levels(part, own, into, live)
            });
            for copy in copies {
                for (o, &c) in offered.iter_mut().zip(&copy) {
                    *o = (*o).max(c);
                }
                self.scratch.levels.give(copy);
            }
        }
        Scores {
            graph: self,
            held: Held::Levelled {
                levels: levels.to_vec(),
                own,
                offered,
            },
        }
    }

    /// [`scores_levelled`](Self::scores_levelled)'s pull over the target nodes from
    /// `first` on that `offered` holds: each open one (not [`SHUT`]) takes the highest level
    /// `own` holds among its neighbours over edges with no owner or a `live` one.
    fn pull_levels(
        &self,
        own: &[u8],
        offered: &mut [u8],
        first: usize,
        live: &Live<impl Fn(u32) -> bool + Sync>,
    ) {
        for (i, o) in offered.iter_mut().enumerate() {
            if *o == SHUT {
                continue;
            }
            let mut best = 0u8;
            self.each_crossing((first + i) as u32, live, |u| {
                best = best.max(own[u as usize])
            });
            *o = best;
        }
    }

    /// [`scores_levelled`](Self::scores_levelled)'s push from `seeds`: each seed's level
    /// (`own`) offered to its neighbours in `offered` over edges with no owner or a `live`
    /// one, a neighbour keeping the highest.
    fn push_levels(
        &self,
        seeds: &[(u32, u8)],
        own: &[u8],
        offered: &mut [u8],
        live: &Live<impl Fn(u32) -> bool + Sync>,
    ) {
        let nodes = own.len() as u32;
        // Each seed's adjacency is somewhere else in megabytes of pairs (a miss, and at a
        // million objects also one of the page table): where it starts is fetched
        // 2 × AHEAD seeds before it is walked, and its first pairs AHEAD before.
        const AHEAD: usize = 8;
        for (i, &(u, _)) in seeds.iter().enumerate() {
            if let Some(&(w, _)) = seeds.get(i + 2 * AHEAD).filter(|(w, _)| *w < nodes) {
                self.start.prefetch(w as usize);
            }
            if let Some(&(w, _)) = seeds.get(i + AHEAD).filter(|(w, _)| *w < nodes) {
                let at = self.start.get(w as usize) as usize;
                self.neighbours.prefetch(at);
                if let Live::Where(_) = live {
                    self.ways.prefetch(at);
                }
            }
            let l = match own.get(u as usize) {
                Some(&l) if l != 0 => l,
                _ => continue,
            };
            self.each_crossing(u, live, |v| {
                if let Some(o) = offered.get_mut(v as usize) {
                    *o = (*o).max(l);
                }
            });
        }
    }

    /// [`scores`](Self::scores)' last round (`round`), onto object nodes only. From a small
    /// frontier it pushes, as [`rounds`](Self::rounds) does; when the frontier's adjacency
    /// is over half the object nodes' (a common-term task makes nearly every object a seed),
    /// each open object node pulls from its own adjacency instead: one read of a neighbour's
    /// value per edge, where a push reads and writes the target's value and reads its mark
    /// (at a million objects, random reads into megabytes either way, so half the misses).
    /// A pull offers every neighbour's value, not only the frontier's: a node off the
    /// frontier holds the value it offered in an earlier round, which cannot improve on what
    /// it gave then (values only rise), so the scores are the push's.
    fn last_scores_round(
        &self,
        score: &mut [i64],
        marks: &mut [u32],
        frontier: &[u32],
        round: u32,
        live: &Live<impl Fn(u32) -> bool>,
        pull: Option<bool>,
    ) {
        let nodes = score.len() as u32;
        let targets = self.objects.start.min(nodes)..self.objects.end.min(nodes);
        let mark = |m: &mut u32| *m = (*m & !ROUND) | round;
        if self.pulls(frontier.iter().copied(), &targets, pull) {
            // The values offered are read from a copy of the scores as the round began (a
            // target is also a neighbour, whose value then is what it offers), so each
            // improvement is written at once. The copy is in 32 bits when they fit (half the
            // pages the reads land on: at a million objects, within reach of the TLB).
            let mut small = self.scratch.small.lend(0, 0);
            small.extend(score.iter().map_while(|&s| match s {
                UNSCORED => Some(i32::MIN),
                s => i32::try_from(s).ok().filter(|&s| s != i32::MIN),
            }));
            match small.len() == score.len() {
                true => self.pull(&small, score, marks, targets, round, live),
                false => {
                    drop(small);
                    let mut wide = self.scratch.scores.lend(0, 0);
                    wide.extend_from_slice(score);
                    self.pull(&wide, score, marks, targets, round, live);
                }
            }
        } else {
            // The push of `rounds`, onto the targets only and listing no next frontier (one
            // round function shared with `rounds`, which lists it, was 41 -> 44 ms at a
            // million zipf objects).
            let at_start: Vec<i64> = frontier.iter().map(|&u| score[u as usize]).collect();
            for (&u, s) in frontier.iter().zip(at_start) {
                self.each_crossing(u, live, |v| {
                    if targets.contains(&v)
                        && marks[v as usize] & OPEN != 0
                        && offer_half(score, u, s, v, 0)
                    {
                        mark(&mut marks[v as usize]);
                    }
                });
            }
        }
    }

    /// Whether a last round from `sources` onto `targets` pulls: as `pull` says, else when
    /// the sources' adjacency is over half the targets' (the cost of [`last_scores_round`]
    /// and [`scores_levelled`]'s round alike).
    ///
    /// [`last_scores_round`]: Self::last_scores_round
    /// [`scores_levelled`]: Self::scores_levelled
    fn pulls(
        &self,
        sources: impl Iterator<Item = u32>,
        targets: &std::ops::Range<u32>,
        pull: Option<bool>,
    ) -> bool {
        self.pulls_costed(sources, targets, pull).0
    }

    /// [`pulls`](Self::pulls), and the edges the chosen way reads.
    fn pulls_costed(
        &self,
        sources: impl Iterator<Item = u32>,
        targets: &std::ops::Range<u32>,
        pull: Option<bool>,
    ) -> (bool, u64) {
        let degree = |u: u32| self.start.get(u as usize + 1) - self.start.get(u as usize);
        let pushed: u64 = sources.map(degree).sum();
        let pulled = self.start.get(targets.end as usize) - self.start.get(targets.start as usize);
        let pulls = pull.unwrap_or(pushed > pulled / 2);
        (pulls, if pulls { pulled } else { pushed })
    }

    /// [`last_scores_round`](Self::last_scores_round)'s pull: per open node of `targets`,
    /// the highest offer of its neighbours' `values` (each node's score, [`Value::NONE`]
    /// where none), halved, over edges with no owner or a `live` one, where it beats the
    /// node's `score`: written there, and the node marked with `round`.
    fn pull<V: Value>(
        &self,
        values: &[V],
        score: &mut [i64],
        marks: &mut [u32],
        targets: std::ops::Range<u32>,
        round: u32,
        live: &Live<impl Fn(u32) -> bool>,
    ) {
        for v in targets {
            if marks[v as usize] & OPEN == 0 {
                continue;
            }
            // The highest offer, without a branch on the values (an unpredictable branch
            // per edge would serialise the reads): NONE is the least value.
            let mut offered = V::NONE;
            self.each_crossing(v, live, |u| {
                let s = values[u as usize];
                offered = offered.max(if s == V::NONE { s } else { s.halve() });
            });
            if offered != V::NONE {
                let offered = offered.wide();
                let old = &mut score[v as usize];
                if *old == UNSCORED || offered > *old {
                    *old = offered;
                    let m = &mut marks[v as usize];
                    *m = (*m & !ROUND) | round;
                }
            }
        }
    }

    /// Propagation in `max_depth` rounds from `frontier`. Each round offers each frontier
    /// node's value as it was when the round began (so no value travels more than one hop a
    /// round, nor more than MAX DEPTH hops in all) to each neighbour it may cross to (by an
    /// edge with no owner or a `live` one, onto an entity or a `passable` object; `passable`
    /// is asked of every object node first): `offer(values, u, u's value, v, relation)` says
    /// whether it improved `v`, which then joins the next round's frontier, once. An `offer`
    /// keeping the best by a total order makes the frontier's order change nothing. Gives
    /// back the nodes' marks ([`ROUND`]: a node improved by a hop has a round) and the
    /// frontier a next round would start from.
    fn rounds<T: Copy>(
        &self,
        values: &mut [T],
        mut frontier: Vec<u32>,
        max_depth: u32,
        passable: &impl Fn(u32) -> bool,
        live: &Live<impl Fn(u32) -> bool>,
        mut offer: impl FnMut(&mut [T], u32, T, u32, u32) -> bool,
    ) -> (Vec<u32>, Vec<u32>) {
        let nodes = self.names.len();
        // Per node, its mark (no sort, no hash), whether it may be stepped onto set first: the
        // object nodes are one range in id order, so `passable` is asked in order, not once
        // per node as expansion first meets it (at a million objects, a cache miss each).
        let mut marks = self.scratch.ranks.take(nodes, OPEN);
        let objects = self.objects.start as usize..(self.objects.end as usize).min(nodes);
        for (m, v) in marks[objects.clone()].iter_mut().zip(objects) {
            if !passable(v as u32) {
                *m = SHUT_MARK;
            }
        }
        frontier.sort_unstable();
        frontier.dedup();
        // MAX DEPTH is far under ROUND; rounds past it would not be told apart.
        for round in 1..=max_depth.min(ROUND) {
            let at_start: Vec<T> = frontier.iter().map(|&u| values[u as usize]).collect();
            let mut next = Vec::new();
            for (&u, value) in frontier.iter().zip(at_start) {
                for [v, rel, owner] in self.adjacency(u) {
                    if live.counts(owner)
                        && marks[v as usize] & OPEN != 0
                        && offer(values, u, value, v, rel)
                    {
                        let m = &mut marks[v as usize];
                        if *m & ROUND != round {
                            *m = (*m & !ROUND) | round;
                            next.push(v);
                        }
                    }
                }
            }
            frontier = next;
        }
        (marks, frontier)
    }

    /// Where the adjacency of `u` lies in `neighbours` and `ways`.
    fn span(&self, u: u32) -> std::ops::Range<usize> {
        self.start.get(u as usize) as usize..self.start.get(u as usize + 1) as usize
    }

    /// The adjacency of `u`: (neighbour, relation, owner), by neighbour.
    fn adjacency(&self, u: u32) -> impl Iterator<Item = [u32; 3]> + '_ {
        let span = self.span(u);
        self.neighbours
            .range(span.clone())
            .zip(self.ways.range(span))
            .map(|(v, [rel, owner])| [v, rel, owner])
    }

    /// `f` of each neighbour of `u` over an edge `live` counts, by neighbour: a round that
    /// needs no relation reads the neighbours alone, and their owners only when some edge
    /// may not count.
    #[inline]
    fn each_crossing<F: Fn(u32) -> bool>(&self, u: u32, live: &Live<F>, mut f: impl FnMut(u32)) {
        let span = self.span(u);
        let neighbours = self.neighbours.range(span.clone());
        match live {
            Live::Every => neighbours.for_each(f),
            Live::Where(_) => neighbours
                .zip(self.ways.range(span))
                .filter(|&(_, [_, owner])| live.counts(owner))
                .for_each(|(v, _)| f(v)),
        }
    }

    /// [`expand`](Self::expand) from seeds given as nodes, with `passable` asked of object
    /// nodes only (given the node: no name is read, which at 100 000 objects was a cache
    /// miss per node).
    pub fn expand_nodes(
        self: &Arc<Self>,
        seeds: &[(u32, i64)],
        max_depth: u32,
        passable: &impl Fn(u32) -> bool,
        live: &Live<impl Fn(u32) -> bool>,
    ) -> Expansion {
        // Dense per node: an expansion from ~100 000 seeds meets most nodes, and a hash
        // lookup per edge was most of its time.
        let nodes = self.names.len();
        let mut best = self.scratch.steps.take(nodes, NodeStep::UNREACHED);
        let mut frontier: Vec<u32> = Vec::new();
        let mut seed_nodes: Vec<u32> = Vec::new();
        for &(n, score) in seeds {
            best[n as usize] = NodeStep {
                score,
                hops: 0,
                from: n,
                via: 0,
                prev: 0,
            };
            frontier.push(n);
            seed_nodes.push(n);
        }
        // A seed's code-unit rank (its node name is `object:` and its id, so the order is
        // the ids'): node ids are byte-order ranks, the same order unless a name is astral.
        if self.astral {
            seed_nodes.sort_unstable_by(|a, b| {
                utf16_cmp(self.names.get(*a as usize), self.names.get(*b as usize))
            });
        } else {
            seed_nodes.sort_unstable();
        }
        let mut seed16 = self.scratch.ranks.take(nodes, u32::MAX);
        for (r, n) in seed_nodes.iter().enumerate() {
            seed16[*n as usize] = r as u32;
        }
        let (marks, _) = self.rounds(
            &mut best,
            frontier,
            max_depth,
            passable,
            live,
            |best, u, su, v, rel| {
                let (score, hops, from) = (su.score >> 1, su.hops + 1, su.from);
                let old = &best[v as usize];
                let better = old.hops == UNREACHED
                    || old
                        .score
                        .cmp(&score)
                        .then(hops.cmp(&old.hops))
                        .then(seed16[from as usize].cmp(&seed16[old.from as usize]))
                        .then(
                            self.rel16
                                .get(rel as usize)
                                .cmp(&self.rel16.get(old.via as usize)),
                        )
                        .then((u + 1).cmp(&old.prev))
                        .is_lt();
                if better {
                    best[v as usize] = NodeStep {
                        score,
                        hops,
                        from,
                        via: rel,
                        prev: u + 1,
                    };
                }
                better
            },
        );
        self.scratch.ranks.give(seed16);
        self.scratch.ranks.give(marks);
        Expansion {
            graph: Arc::clone(self),
            best,
        }
    }
}

/// [`Graph::expand`] over `edges` (all counted), with `passable` given the object id.
pub fn expand(
    seeds: &[(String, i64)],
    edges: &[Edge<'_>],
    max_depth: u32,
    passable: &dyn Fn(&str) -> bool,
) -> Expansion {
    let graph = Arc::new(Graph::new(
        edges.iter().map(|e| (e.a, e.b, e.relation, NO_OWNER)),
    ));
    graph.expand(seeds, max_depth, &|_, id| passable(id), &|_| true)
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

/// The hops of a node expansion has not reached.
const UNREACHED: u32 = u32::MAX;

/// The score of a node [`Graph::scores`] has not reached.
pub const UNSCORED: i64 = i64::MIN;

/// [`Graph::scores`]' offer: half of `s` to `v`, kept when it is higher than `v`'s score (or
/// `v` has none).
fn offer_half(score: &mut [i64], _: u32, s: i64, v: u32, _: u32) -> bool {
    let (s, old) = (s >> 1, &mut score[v as usize]);
    let better = *old == UNSCORED || s > *old;
    if better {
        *old = s;
    }
    better
}

/// A score as [`Graph::pull`] reads it: in full, or in 32 bits.
trait Value: Copy + Ord {
    /// No score: the least value.
    const NONE: Self;
    fn halve(self) -> Self;
    fn wide(self) -> i64;
}

impl Value for i64 {
    const NONE: i64 = UNSCORED;
    fn halve(self) -> i64 {
        self >> 1
    }
    fn wide(self) -> i64 {
        self
    }
}

impl Value for i32 {
    const NONE: i32 = i32::MIN;
    fn halve(self) -> i32 {
        self >> 1
    }
    fn wide(self) -> i64 {
        self.into()
    }
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
    /// The previous node plus one (0: none, a seed), so it orders as `Option<u32>` would
    /// and the step takes 24 bytes, not 32.
    prev: u32,
}

const _: () = assert!(std::mem::size_of::<NodeStep>() == 24);

impl NodeStep {
    const UNREACHED: NodeStep = NodeStep {
        score: 0,
        hops: UNREACHED,
        from: 0,
        via: 0,
        prev: 0,
    };

    /// Reached through at least one hop.
    fn hopped(&self) -> bool {
        self.hops > 0 && self.hops != UNREACHED
    }
}

/// The result of [`Graph::expand`]: the nodes it reached.
#[derive(Debug, Clone, Default)]
pub struct Expansion {
    graph: Arc<Graph>,
    /// Per node of the graph, how it was best reached ([`NodeStep::UNREACHED`]: not).
    best: Vec<NodeStep>,
}

impl Drop for Expansion {
    fn drop(&mut self) {
        self.graph
            .scratch
            .steps
            .give(std::mem::take(&mut self.best));
    }
}

impl Expansion {
    fn step(&self, id: &str) -> Option<NodeStep> {
        let n = self.graph.object(id)?;
        self.best.get(n as usize).copied().filter(NodeStep::hopped)
    }

    /// The propagated score and hops of `node`, if reached through a hop.
    pub fn node_score_hops(&self, node: u32) -> Option<(i64, u32)> {
        self.best
            .get(node as usize)
            .filter(|s| s.hopped())
            .map(|s| (s.score, s.hops))
    }

    /// The propagated score and hops of the object `id`, if reached through a hop.
    pub fn score_hops(&self, id: &str) -> Option<(i64, u32)> {
        self.step(id).map(|s| (s.score, s.hops))
    }

    /// How the object `id` was reached through at least one hop, if it was.
    pub fn reached(&self, id: &str) -> Option<Reached> {
        let step = self.step(id)?;
        let names = &self.graph.names;
        let name = |n: u32| names.get(n as usize).to_string();
        let mut path = vec![name(self.graph.object(id)?)];
        let previous = |prev: u32| prev.checked_sub(1);
        let mut cur = previous(step.prev);
        while let Some(p) = cur {
            cur = self.best.get(p as usize).and_then(|s| previous(s.prev));
            path.push(name(p));
        }
        path.reverse();
        let from = names.get(step.from as usize);
        Some(Reached {
            score: step.score,
            hops: step.hops,
            from: from.strip_prefix("object:").unwrap_or(from).to_string(),
            via: self.graph.rels.get(step.via as usize).to_string(),
            path,
        })
    }
}

/// The node name of an object (the tests' reference expansion builds them by id).
#[cfg(test)]
pub fn object_node(id: &str) -> String {
    format!("object:{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool taking over another's buffers holds them (their room kept) and leaves it
    /// none; a buffer taken is refilled whole, at the length asked.
    #[test]
    fn a_pool_adopts_the_buffers_another_kept() {
        let (earlier, later) = (Pool::<u32>::default(), Pool::<u32>::default());
        let v = earlier.take(1000, 7);
        let room = v.capacity();
        earlier.give(v);
        later.adopt(&earlier);
        assert!(earlier.0.lock().unwrap().is_empty());
        let v = later.take(900, 3);
        assert_eq!((v.len(), v.capacity()), (900, room));
        assert!(v.iter().all(|&x| x == 3));
    }

    /// An empty buffer too small is replaced with an eighth more room than asked; one
    /// holding values grows keeping them.
    #[test]
    fn reserve_huge_replaces_an_empty_buffer_with_room() {
        let mut v: Vec<u64> = Vec::with_capacity(10);
        reserve_huge(&mut v, 800);
        assert!(v.capacity() >= 900);
        let mut w = vec![1u64, 2, 3];
        reserve_huge(&mut w, 1000);
        assert!(w.capacity() >= 1003);
        assert_eq!(w, [1, 2, 3]);
    }

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
            let at_start: Vec<(i64, u32, String)> = frontier
                .iter()
                .map(|u| {
                    let su = &best[u];
                    (su.score >> 1, su.hops + 1, su.from.clone())
                })
                .collect();
            let mut next: Vec<String> = Vec::new();
            for (u, (score, hops, from)) in frontier.iter().zip(at_start) {
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
            let nodes: Vec<(String, i64)> =
                seeds.iter().map(|(id, s)| (format!("object:{id}"), *s)).collect();
            let fast = expand(&nodes, &edges, depth, &passable);
            let slow = reference_expand(&seeds, &edges, depth, &passable);
            for id in ids {
                let want = reference_reached(&slow, id);
                proptest::prop_assert_eq!(fast.score_hops(id), want.as_ref().map(|r| (r.score, r.hops)));
                proptest::prop_assert_eq!(fast.reached(id), want);
            }
        }
    }

    proptest::proptest! {
        /// `Graph::scores` gives every object node the score `expand_nodes` gives it (its last
        /// round pulled or pushed, scores in 32 bits or over; objects shut, edges of dead owners,
        /// or every edge counted as `Live::Every` against a `Live::Where` that keeps all),
        /// and expansion
        /// from only the seeds whose halved score, boosted `k` times, reaches a threshold
        /// gives the same score, hops and path to every node whose propagated score beats its
        /// own seed score and, boosted `k` times, reaches the threshold (what
        /// from_index::decide relies on).
        #[test]
        fn scores_and_strong_seeds_give_the_paths_that_rank(
            raw_edges in proptest::collection::vec((0usize..9, 0usize..9, 0usize..3, 0usize..8), 0..40),
            // Some scores exact doubles of others, so that a value halved ties a seed's own.
            seed_scores in proptest::collection::vec(proptest::option::of(proptest::prop_oneof![
                1i64..4000,
                proptest::strategy::Strategy::prop_map(0u32..4, |k| 100i64 << k),
            ]), 6),
            shut in proptest::collection::vec(proptest::bool::weighted(0.2), 6),
            dead in proptest::collection::vec(proptest::bool::weighted(0.2), 6),
            all_live in proptest::bool::ANY,
            depth in 0u32..4,
            threshold in 0i64..3000,
            k in 0usize..3,
            wide in proptest::bool::ANY,
        ) {
            let ids = ["a", "b", "c", "d", "e", "f"];
            let nodes: Vec<String> = ids
                .iter()
                .map(|i| object_node(i))
                .chain(["topic:x".to_string(), "topic:y".to_string(), "file:a".to_string()])
                .collect();
            let rels = ["r", "s", "t"];
            // An edge's owner: one of the six objects, or none.
            let owner = |o: usize| if o < 6 { o as u32 } else { NO_OWNER };
            let graph = Arc::new(Graph::new(raw_edges.iter().map(|&(a, b, r, o)| {
                (nodes[a].as_str(), nodes[b].as_str(), rels[r], owner(o))
            })));
            let seeds: Vec<(u32, i64)> = ids
                .iter()
                .zip(&seed_scores)
                .filter_map(|(id, s)| Some((graph.object(id)?, (*s)? << if wide { 33 } else { 0 })))
                .collect();
            let name = |node: u32| graph.names().get(node as usize).to_string();
            let open = |node: u32| {
                let id = name(node);
                ids.iter().position(|i| id == object_node(i)).is_none_or(|i| !shut[i])
            };
            let live = Live::Where(|o: u32| all_live || !dead[o as usize]);
            let full = graph.expand_nodes(&seeds, depth, &open, &live);
            let strong: Vec<(u32, i64)> = seeds
                .iter()
                .filter(|(_, s)| crate::context::select::boost(s >> 1, k) >= threshold)
                .copied()
                .collect();
            let sub = graph.expand_nodes(&strong, depth, &open, &live);
            // The same seeds by level: each distinct score, ascending.
            let mut levels: Vec<i64> = seeds.iter().map(|(_, s)| *s).collect();
            levels.sort_unstable();
            levels.dedup();
            let levelled: Vec<(u32, u8)> = seeds
                .iter()
                .map(|(n, s)| (*n, levels.binary_search(s).unwrap() as u8 + 1))
                .collect();
            // The last round pulled, pushed, and as its cost chooses; scores kept in full
            // and by level.
            for pull in [Some(true), Some(false), None] {
              let levelled_by = |parts| match all_live {
                true => graph.scores_levelled_by(&levelled, &levels, depth, &open, &EVERY, Way { pull, parts: Some(parts) }),
                false => graph.scores_levelled_by(&levelled, &levels, depth, &open, &live, Way { pull, parts: Some(parts) }),
              };
              for scores in [
                match all_live {
                    true => graph.scores_by(&seeds, depth, &open, &EVERY, pull),
                    false => graph.scores_by(&seeds, depth, &open, &live, pull),
                },
                levelled_by(1),
                levelled_by(3),
              ] {
                let mut hopped = HashMap::new();
                scores.hopped(|node, score| {
                    hopped.insert(node, score);
                });
                let hops = scores.hops();
                for node in 0..graph.names().len() as u32 + 2 {
                    proptest::prop_assert_eq!(hops.get(node), hopped.get(&node).copied());
                }
                for node in 0..graph.names().len() as u32 {
                    let Some(id) = name(node).strip_prefix("object:").map(str::to_string) else {
                        continue;
                    };
                    let want = full.node_score_hops(node);
                    let got = hopped.get(&node).copied();
                    proptest::prop_assert_eq!(got, want.map(|(s, _)| s), "node {} pull {:?}", node, pull);
                    let own = seeds.iter().find(|(n, _)| *n == node).map_or(0, |(_, s)| *s);
                    if let Some((prop, _)) = want
                        && prop > own
                        && crate::context::select::boost(prop, k) >= threshold
                    {
                        proptest::prop_assert_eq!(sub.node_score_hops(node), want, "node {}", node);
                        proptest::prop_assert_eq!(sub.reached(&id), full.reached(&id));
                    }
                }
              }
            }
        }
    }

    /// Seeds given by a level that is not one of the levels (0, or past the last), or on a
    /// node the graph does not have, are passed over: the scores are those of the other seeds.
    #[test]
    fn a_seed_out_of_range_is_passed_over() {
        let names = ["object:a", "object:b", "object:c", "topic:t"];
        let graph = Graph::new(
            [(0, 1), (1, 2), (2, 3)]
                .into_iter()
                .map(|(a, b)| (names[a], names[b], "r", NO_OWNER)),
        );
        let node = |id: &str| graph.object(id).unwrap();
        let levels = [100, 400];
        let good = vec![(node("a"), 2u8)];
        let mut bad = good.clone();
        bad.extend([(node("b"), 0u8), (node("c"), 3), (99, 1)]);
        let hopped = |seeds: &[(u32, u8)], depth: u32, pull: Option<bool>| {
            let mut out = Vec::new();
            graph
                .scores_levelled_by(
                    seeds,
                    &levels,
                    depth,
                    &|_| true,
                    &EVERY,
                    Way { pull, parts: None },
                )
                .hopped(|n, s| out.push((n, s)));
            out
        };
        for depth in [1, 2] {
            for pull in [Some(true), Some(false)] {
                let want = hopped(&good, depth, pull);
                assert!(!want.is_empty());
                assert_eq!(
                    hopped(&bad, depth, pull),
                    want,
                    "depth {depth} pull {pull:?}"
                );
            }
        }
    }

    /// The levelled round over more nodes than one block of offers, with shut objects, and at
    /// the edge of the byte's levels (254 levels take it, 255 the general way): a path of 300
    /// objects, a seed every 7th, every 5th shut; the scores through a hop are the general
    /// way's, node by node, pushed and pulled.
    #[test]
    fn levelled_scores_over_many_blocks_and_levels_are_the_general_ones() {
        let names: Vec<String> = (0..300).map(|i| format!("object:o{i:03}")).collect();
        let graph =
            Graph::new((0..299).map(|i| (names[i].as_str(), names[i + 1].as_str(), "r", NO_OWNER)));
        let node = |i: usize| graph.object(&format!("o{i:03}")).unwrap();
        let shut: Vec<u32> = (0..300).step_by(5).map(node).collect();
        let open = |n: u32| !shut.contains(&n);
        for count in [254usize, 255] {
            let levels: Vec<i64> = (1..=count as i64).map(|l| l * 10).collect();
            let levelled: Vec<(u32, u8)> = (0..300)
                .step_by(7)
                .map(|i| (node(i), (((i * 13) % count) + 1) as u8))
                .collect();
            let wide: Vec<(u32, i64)> = levelled
                .iter()
                .map(|&(n, l)| (n, levels[usize::from(l) - 1]))
                .collect();
            for pull in [Some(true), Some(false)] {
                let mut want = Vec::new();
                graph
                    .scores_by(&wide, 1, &open, &EVERY, pull)
                    .hopped(|n, s| want.push((n, s)));
                assert!(want.len() > 64, "{}", want.len());
                // On one thread and on several (each pulling its range of the targets, or
                // pushing its share of the seeds into its own copy of the offers).
                for parts in [1, 2, 3] {
                    let mut got = Vec::new();
                    graph
                        .scores_levelled_by(
                            &levelled,
                            &levels,
                            1,
                            &open,
                            &EVERY,
                            Way {
                                pull,
                                parts: Some(parts),
                            },
                        )
                        .hopped(|n, s| got.push((n, s)));
                    assert_eq!(got, want, "{count} levels, pull {pull:?}, {parts} parts");
                }
            }
        }
    }

    /// A seed's score travels at most MAX DEPTH hops, also through another seed it improves:
    /// with MAX DEPTH 1, d (1804) improves its neighbour e (a seed of 1) to 902, but that
    /// value does not go on to a, which gets e's own 1 halved, 0, at one hop.
    #[test]
    fn a_value_travels_at_most_max_depth_hops() {
        let e = |a: &'static str, b: &'static str| Edge {
            a,
            b,
            relation: "r",
        };
        let edges = vec![e("object:a", "object:e"), e("object:e", "object:d")];
        let seeds = vec![("object:d".to_string(), 1804), ("object:e".to_string(), 1)];
        let x = expand(&seeds, &edges, 1, &|_| true);
        assert_eq!(x.score_hops("e"), Some((902, 1)));
        assert_eq!(x.score_hops("a"), Some((0, 1)));
        assert_eq!(x.reached("a").map(|r| r.from), Some("e".to_string()));
        let x = expand(&seeds, &edges, 2, &|_| true);
        assert_eq!(x.score_hops("a"), Some((451, 2)));
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
        let r = expand(&[("object:s".into(), 1000)], &edges, 3, &passable);
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
        let r = expand(&[("object:s".into(), 1000)], &edges, 1, &passable);
        assert!(r.reached("t").is_none(), "depth 1 reaches only the entity");
        // A stronger seed two hops away beats a weaker one next door.
        let edges = vec![
            e("object:a", "object:m", "r"),
            e("object:m", "object:b", "r"),
        ];
        let r = expand(
            &[("object:a".into(), 1000), ("object:b".into(), 100)],
            &edges,
            2,
            &|_: &str| true,
        );
        let m = r.reached("m").unwrap();
        assert_eq!((m.score, m.from.as_str()), (500, "a"));
        let b = r.reached("b").unwrap();
        assert_eq!((b.score, b.hops), (250, 2));
        // An entity seed (CONTEXT FOR entity(…)) reaches by hops, and is named as the source.
        let edges = vec![
            e("object:a", "user:u1", "about"),
            e("object:a", "object:b", "r"),
        ];
        let r = expand(&[("user:u1".into(), 1000)], &edges, 2, &|_: &str| true);
        let a = r.reached("a").unwrap();
        assert_eq!((a.score, a.hops, a.from.as_str()), (500, 1, "user:u1"));
        assert_eq!(r.score_hops("b"), Some((250, 2)));
        assert_eq!(
            r.reached("b").unwrap().path,
            ["user:u1", "object:a", "object:b"]
        );
    }
}

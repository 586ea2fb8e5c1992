//! The per-user chain search behind `funnel(...)`: given one user's events sorted by
//! `(timestamp, seq)`, which funnel steps the user reached and along which chain.
//!
//! Definitions (docs/funnels.md has the user-facing version):
//! - A chain for step `k` is a list of distinct events `e1 … ek` where `ej` matches step `j`,
//!   `ek.ts − e1.ts ≤ within`, and no excluded event lies strictly between its first and its
//!   last event (in `(ts, seq)` order).
//!   - `Ordered`: `e1 < e2 < … < ek` in event order (other events may lie between).
//!   - `Strict`: as `Ordered`, and `ej+1` is the event right after `ej` (nothing between).
//!   - `Any`: the events may come in any order; the chain's first event is its earliest one.
//! - The user reaches step `k` if a chain for step `k` exists. For each reached step the
//!   reported chain is the one whose last event comes earliest; among chains ending at that
//!   same event, the one whose first event comes latest (the shortest).
//!
//! Every mode runs in `O(n · steps)` for `n` events; the tests compare each with a brute-force
//! enumeration of all chains.

/// One event of a user, as the search sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Microseconds since the epoch.
    pub ts: i64,
    /// Tie-break key for events with equal `ts` (their order in the source).
    pub seq: i64,
    /// Bit `j` set when the event matches step `j` (0-based); one event may match several.
    pub steps: u16,
    /// The event is an excluded one (`EXCLUDING`); it matches no step.
    pub excluded: bool,
}

/// How the steps of a chain must be ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Ordered,
    Strict,
    Any,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s.to_ascii_lowercase().as_str() {
            "ordered" => Some(Mode::Ordered),
            "strict" => Some(Mode::Strict),
            "any" => Some(Mode::Any),
            _ => None,
        }
    }

    /// Whether events that match no step and are not excluded matter to the search.
    pub fn needs_other_events(self) -> bool {
        self == Mode::Strict
    }
}

/// A chain, by the indexes of its first and last event in the sorted slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub first: usize,
    pub last: usize,
}

/// For each step (0-based), the reported chain reaching it, or `None`.
pub type Reach = Vec<Option<Chain>>;

/// Sorts `events` into `(ts, seq)` order (stable, so equal keys keep their input order).
pub fn sort_events(events: &mut [Event]) {
    events.sort_by_key(|e| (e.ts, e.seq));
}

/// The deepest step reached (0 when none): the number of leading `Some` in `reach`.
pub fn level(reach: &Reach) -> usize {
    reach.iter().take_while(|c| c.is_some()).count()
}

/// Runs the search over `events`, which must be sorted by `(ts, seq)`.
pub fn search(events: &[Event], n_steps: usize, within_us: i64, mode: Mode) -> Reach {
    match mode {
        Mode::Ordered => ordered(events, n_steps, within_us),
        Mode::Strict => strict(events, n_steps, within_us),
        Mode::Any => any_order(events, n_steps, within_us),
    }
}

/// Keeps the chain ending earliest, then starting latest.
fn offer(slot: &mut Option<Chain>, c: Chain) {
    match slot {
        Some(old)
            if (old.last, std::cmp::Reverse(old.first)) <= (c.last, std::cmp::Reverse(c.first)) => {
        }
        _ => *slot = Some(c),
    }
}

/// Ordered mode. `latest[j]` is the latest first event among the chains for step `j` seen so
/// far: a later start leaves the most of `within` for the next step, so it dominates. An event
/// is tried against the steps from the last to the first so it is never used twice in a chain.
fn ordered(events: &[Event], n: usize, within: i64) -> Reach {
    let mut reach: Reach = vec![None; n];
    let mut latest: Vec<Option<usize>> = vec![None; n];
    for (p, e) in events.iter().enumerate() {
        if e.excluded {
            // No open chain may be extended across an excluded event.
            latest.iter_mut().for_each(|s| *s = None);
            continue;
        }
        for j in (0..n).rev() {
            if e.steps & (1 << j) == 0 {
                continue;
            }
            let first = if j == 0 {
                Some(p)
            } else {
                latest[j - 1].filter(|&s| e.ts - events[s].ts <= within)
            };
            if let Some(s) = first {
                latest[j] = Some(latest[j].map_or(s, |old| old.max(s)));
                offer(&mut reach[j], Chain { first: s, last: p });
            }
        }
    }
    reach
}

/// Strict mode: a chain for step `j` ending at `p` starts at `p − j`, so only the previous
/// event's chains can be extended.
fn strict(events: &[Event], n: usize, within: i64) -> Reach {
    let mut reach: Reach = vec![None; n];
    let mut prev: Vec<bool> = vec![false; n];
    let mut cur: Vec<bool> = vec![false; n];
    for (p, e) in events.iter().enumerate() {
        cur.iter_mut().for_each(|c| *c = false);
        if !e.excluded {
            for j in 0..n {
                if e.steps & (1 << j) == 0 || p < j {
                    continue;
                }
                let s = p - j;
                if (j == 0 || prev[j - 1]) && e.ts - events[s].ts <= within {
                    cur[j] = true;
                    offer(&mut reach[j], Chain { first: s, last: p });
                }
            }
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    reach
}

/// Any-order mode. For step `k` the window `[i, p]` must hold, for every distinct step name,
/// at least as many events as steps `0..=k` use it. The smallest such `p` never decreases as
/// `i` grows, so one sweep of two pointers per step finds it for every start `i`.
fn any_order(events: &[Event], n: usize, within: i64) -> Reach {
    let mut reach: Reach = vec![None; n];
    let len = events.len();
    if len == 0 {
        return reach;
    }
    // Steps with the same name share a class: the lowest step index with that name.
    let class_of =
        |mask: u16| -> Option<usize> { (mask != 0).then(|| mask.trailing_zeros() as usize) };
    // The first excluded event at or after each index bounds the windows starting there.
    let mut next_excluded = vec![len; len + 1];
    for i in (0..len).rev() {
        next_excluded[i] = if events[i].excluded {
            i
        } else {
            next_excluded[i + 1]
        };
    }
    // A step's class is the lowest step whose event set it shares: an event matching step j
    // matches every step with the same name, so its mask's lowest bit names the class.
    let step_class: Vec<usize> = (0..n)
        .map(|j| {
            events
                .iter()
                .find(|e| e.steps & (1 << j) != 0)
                .and_then(|e| class_of(e.steps))
                .unwrap_or(j)
        })
        .collect();
    let mut need = vec![0u32; n];
    for k in 0..n {
        need[step_class[k]] += 1;
        if events.iter().all(|e| e.steps & (1 << k) == 0) {
            break; // step k never occurs: neither it nor any later step is reachable
        }
        let mut have = vec![0u32; n];
        let mut missing: u32 = need.iter().sum();
        let add = |have: &mut Vec<u32>, missing: &mut u32, e: &Event| {
            if let Some(c) = class_of(e.steps) {
                have[c] += 1;
                if have[c] <= need[c] {
                    *missing -= 1;
                }
            }
        };
        let remove = |have: &mut Vec<u32>, missing: &mut u32, e: &Event| {
            if let Some(c) = class_of(e.steps) {
                if have[c] <= need[c] {
                    *missing += 1;
                }
                have[c] -= 1;
            }
        };
        // The window is events[i..end] (end exclusive).
        let mut end = 0usize;
        for i in 0..len {
            if end < i {
                end = i;
            }
            let limit = next_excluded[i];
            while missing > 0 && end < limit && events[end].ts - events[i].ts <= within {
                add(&mut have, &mut missing, &events[end]);
                end += 1;
            }
            if missing == 0 {
                offer(
                    &mut reach[k],
                    Chain {
                        first: i,
                        last: end - 1,
                    },
                );
            }
            if end > i {
                remove(&mut have, &mut missing, &events[i]);
            }
        }
    }
    reach
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(ts: i64, steps: u16) -> Event {
        Event {
            ts,
            seq: 0,
            steps,
            excluded: false,
        }
    }

    fn excl(ts: i64) -> Event {
        Event {
            ts,
            seq: 0,
            steps: 0,
            excluded: true,
        }
    }

    /// Every chain for step `k` by enumeration, straight from the definitions.
    fn brute(events: &[Event], n: usize, within: i64, mode: Mode) -> Reach {
        let mut reach: Reach = vec![None; n];
        let len = events.len();
        let ok_span = |idx: &[usize]| {
            let lo = *idx.iter().min().unwrap();
            let hi = *idx.iter().max().unwrap();
            events[hi].ts - events[lo].ts <= within
                && !(lo + 1..hi).any(|q| events[q].excluded)
                && idx.iter().all(|&q| !events[q].excluded)
        };
        // Enumerate assignments of distinct events to steps 0..=k.
        fn rec(
            events: &[Event],
            k: usize,
            chosen: &mut Vec<usize>,
            mode: Mode,
            out: &mut Vec<Vec<usize>>,
        ) {
            let j = chosen.len();
            if j > k {
                out.push(chosen.clone());
                return;
            }
            for q in 0..events.len() {
                if events[q].steps & (1 << j) == 0 || chosen.contains(&q) {
                    continue;
                }
                let in_order = match (mode, chosen.last()) {
                    (_, None) | (Mode::Any, _) => true,
                    (Mode::Ordered, Some(&last)) => q > last,
                    (Mode::Strict, Some(&last)) => q == last + 1,
                };
                if in_order {
                    chosen.push(q);
                    rec(events, k, chosen, mode, out);
                    chosen.pop();
                }
            }
        }
        for (k, best) in reach.iter_mut().enumerate() {
            let mut all = Vec::new();
            rec(events, k, &mut Vec::new(), mode, &mut all);
            for idx in all.iter().filter(|idx| ok_span(idx)) {
                let c = Chain {
                    first: *idx.iter().min().unwrap(),
                    last: *idx.iter().max().unwrap(),
                };
                offer(best, c);
            }
        }
        let _ = len;
        reach
    }

    #[test]
    fn ordered_hand_worked() {
        // a@0, b@5, a@6, c@20 with within 15: a@6 → b? no b after a@6; a@0→b@5→c@20 is 20 > 15.
        let e = [ev(0, 1), ev(5, 2), ev(6, 1), ev(20, 4)];
        let r = search(&e, 3, 15, Mode::Ordered);
        assert_eq!(level(&r), 2);
        assert_eq!(r[1], Some(Chain { first: 0, last: 1 }));
        // Within 20 the chain reaches c and its edge counts (20 − 0 ≤ 20).
        let r = search(&e, 3, 20, Mode::Ordered);
        assert_eq!(r[2], Some(Chain { first: 0, last: 3 }));
    }

    #[test]
    fn repeated_step_needs_two_events() {
        // "view" -> "view": one view is step 1 only.
        let e = [ev(0, 0b11)];
        assert_eq!(level(&search(&e, 2, 10, Mode::Ordered)), 1);
        let e = [ev(0, 0b11), ev(3, 0b11)];
        let r = search(&e, 2, 10, Mode::Ordered);
        assert_eq!(r[1], Some(Chain { first: 0, last: 1 }));
        assert_eq!(level(&search(&e, 2, 10, Mode::Any)), 2);
    }

    #[test]
    fn latest_start_wins_on_same_end() {
        // a@0, a@4, b@9: both starts end at b@9; the reported chain starts at a@4.
        let e = [ev(0, 1), ev(4, 1), ev(9, 2)];
        let r = search(&e, 2, 100, Mode::Ordered);
        assert_eq!(r[1], Some(Chain { first: 1, last: 2 }));
    }

    #[test]
    fn exclusion_breaks_open_chains() {
        let e = [ev(0, 1), excl(1), ev(2, 2), ev(3, 1), ev(4, 2)];
        let r = search(&e, 2, 100, Mode::Ordered);
        assert_eq!(r[1], Some(Chain { first: 3, last: 4 }));
    }

    #[test]
    fn strict_needs_adjacent_steps() {
        let other = ev(1, 0);
        let e = [ev(0, 1), other, ev(2, 2)];
        assert_eq!(level(&search(&e, 2, 100, Mode::Strict)), 1);
        assert_eq!(level(&search(&e, 2, 100, Mode::Ordered)), 2);
    }

    #[test]
    fn any_order_accepts_reversed_steps() {
        let e = [ev(0, 2), ev(5, 1)];
        let r = search(&e, 2, 5, Mode::Any);
        assert_eq!(r[0], Some(Chain { first: 1, last: 1 }));
        assert_eq!(r[1], Some(Chain { first: 0, last: 1 }));
        assert_eq!(level(&search(&e, 2, 4, Mode::Any)), 1);
        assert_eq!(level(&search(&e, 2, 100, Mode::Ordered)), 1);
    }

    fn event_strategy(n_steps: usize) -> impl Strategy<Value = Event> {
        // Steps with the same name share their bits: names 0..3 over n_steps steps.
        (0i64..12, 0usize..5).prop_map(move |(ts, name)| {
            if name == 4 {
                return Event {
                    ts,
                    seq: 0,
                    steps: 0,
                    excluded: true,
                };
            }
            let mut steps = 0u16;
            for j in 0..n_steps {
                // step j has name (j * 7 % 3) so names repeat across steps
                if (j * 7) % 3 == name {
                    steps |= 1 << j;
                }
            }
            Event {
                ts,
                seq: 0,
                steps,
                excluded: false,
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]
        #[test]
        fn every_mode_matches_brute_force(
            n_steps in 2usize..5,
            within in 0i64..8,
            raw in prop::collection::vec(event_strategy(4), 0..8),
        ) {
            let mask = (1u16 << n_steps) - 1;
            let mut events: Vec<Event> = raw
                .into_iter()
                .enumerate()
                .map(|(i, e)| Event { seq: i as i64, steps: e.steps & mask, ..e })
                .collect();
            sort_events(&mut events);
            for mode in [Mode::Ordered, Mode::Strict, Mode::Any] {
                let fast = search(&events, n_steps, within, mode);
                let slow = brute(&events, n_steps, within, mode);
                prop_assert_eq!(&fast, &slow, "mode {:?} events {:?}", mode, events);
            }
        }
    }
}

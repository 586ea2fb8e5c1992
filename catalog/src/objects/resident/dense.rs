//! FIND OBJECT ABOUT's scores counted a machine word at a time (docs/index.md, "FIND
//! scoring"): each posting list, as stored (roaring's portable form), is spread into a bit
//! per object ordinal, and the lists are added with their tiers' weights into a bit-sliced
//! counter (a 64-object word per slice), so a list costs its containers, not its objects.
//! The answer then walks the sums from the highest down, each level's objects in ordinal
//! order, until it has the rows it was asked for.

/// The portable form's cookies (RoaringFormatSpec): without run containers the count of
/// containers follows; with them it is in the cookie's high half, and a bitset of which
/// containers are runs follows.
const NO_RUNS: u32 = 12346;
const RUNS: u16 = 12347;
/// With run containers, offsets are written only from this many containers on.
const OFFSETS_FROM: usize = 4;
/// A container of more values than this is a bitset of 1 024 words.
const ARRAY_MOST: usize = 4096;
const BITSET_BYTES: usize = 8 * 1024;

/// Reads the little-endian integer of `N` bytes at `*at` and moves past it.
fn take<const N: usize>(b: &[u8], at: &mut usize) -> Result<[u8; N], &'static str> {
    let end = at.checked_add(N).ok_or("cut short")?;
    let bytes = b.get(*at..end).ok_or("cut short")?;
    *at = end;
    let mut a = [0u8; N];
    a.copy_from_slice(bytes);
    Ok(a)
}

fn u16_at(b: &[u8], at: &mut usize) -> Result<u16, &'static str> {
    take::<2>(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: &mut usize) -> Result<u32, &'static str> {
    take::<4>(b, at).map(u32::from_le_bytes)
}

/// Sets in `words` the bit of every value of the bitmap serialised in `bytes` (roaring's
/// portable form, as `RoaringBitmap::serialize_into` writes it). A value at or past
/// `objects` (which `words` must cover), an unknown cookie, keys out of order or a form cut
/// short is an error; nothing is read outside `bytes`. Whether the bitmap holds a value.
pub(super) fn set_bits(
    bytes: &[u8],
    words: &mut [u64],
    objects: usize,
) -> Result<bool, &'static str> {
    debug_assert!(words.len() * 64 >= objects);
    let mut at = 0;
    let cookie = u32_at(bytes, &mut at)?;
    let (containers, runs) = if cookie == NO_RUNS {
        (u32_at(bytes, &mut at)? as usize, None)
    } else if cookie as u16 == RUNS {
        let n = (cookie >> 16) as usize + 1;
        let flags = bytes.get(at..at + n.div_ceil(8)).ok_or("cut short")?;
        at += n.div_ceil(8);
        (n, Some(flags))
    } else {
        return Err("an unknown cookie");
    };
    if containers > 1 << 16 {
        return Err("too many containers");
    }
    let descriptions = at;
    at = at
        .checked_add(containers * 4)
        .filter(|&end| end <= bytes.len())
        .ok_or("cut short")?;
    if runs.is_none() || containers >= OFFSETS_FROM {
        at = at
            .checked_add(containers * 4)
            .filter(|&end| end <= bytes.len())
            .ok_or("cut short")?;
    }
    let mut last_key: Option<u16> = None;
    for i in 0..containers {
        let mut d = descriptions + i * 4;
        let key = u16_at(bytes, &mut d)?;
        let cardinality = u16_at(bytes, &mut d)? as usize + 1;
        if last_key.is_some_and(|k| key <= k) {
            return Err("container keys out of order");
        }
        last_key = Some(key);
        let base = (key as usize) << 16;
        // The highest value the container may hold without passing `objects`.
        let room = objects.saturating_sub(base);
        let is_run = runs.is_some_and(|f| f[i / 8] & (1 << (i % 8)) != 0);
        if is_run {
            let count = u16_at(bytes, &mut at)? as usize;
            for _ in 0..count {
                let start = u16_at(bytes, &mut at)? as usize;
                let end = start + u16_at(bytes, &mut at)? as usize;
                if end >= room {
                    return Err("a value past the objects");
                }
                set_range(words, base + start, base + end);
            }
        } else if cardinality <= ARRAY_MOST {
            let values = bytes.get(at..at + cardinality * 2).ok_or("cut short")?;
            at += cardinality * 2;
            for v in values.chunks_exact(2) {
                let v = u16::from_le_bytes([v[0], v[1]]) as usize;
                if v >= room {
                    return Err("a value past the objects");
                }
                let o = base + v;
                words[o / 64] |= 1 << (o % 64);
            }
        } else {
            let bits = bytes.get(at..at + BITSET_BYTES).ok_or("cut short")?;
            at += BITSET_BYTES;
            // The container's 1 024 words are the 64-aligned words from `base` on.
            let first = base / 64;
            for (j, w) in bits.chunks_exact(8).enumerate() {
                let mut a = [0u8; 8];
                a.copy_from_slice(w);
                let w = u64::from_le_bytes(a);
                if w == 0 {
                    continue;
                }
                let highest = j * 64 + 63 - w.leading_zeros() as usize;
                if highest >= room {
                    return Err("a value past the objects");
                }
                words[first + j] |= w;
            }
        }
    }
    // A container holds at least one value.
    Ok(containers > 0)
}

/// Sets the bits `from..=to` of `words`.
fn set_range(words: &mut [u64], from: usize, to: usize) {
    let (first, last) = (from / 64, to / 64);
    let low = u64::MAX << (from % 64);
    let high = u64::MAX >> (63 - to % 64);
    if first == last {
        words[first] |= low & high;
        return;
    }
    words[first] |= low;
    for w in &mut words[first + 1..last] {
        *w = u64::MAX;
    }
    words[last] |= high;
}

/// Per object ordinal a sum of small weights, bit-sliced: slice `s` of word `w` holds bit
/// `s` of the sums of objects `64 w .. 64 w + 63` (stored word by word, slices together).
pub(super) struct Sums {
    slices: usize,
    slab: Vec<u64>,
}

impl Sums {
    /// Zero sums for `words × 64` objects, none of which will pass `most`.
    pub(super) fn new(words: usize, most: u32) -> Sums {
        let slices = (u32::BITS - most.leading_zeros()).max(1) as usize;
        Sums {
            slices,
            slab: vec![0; words * slices],
        }
    }

    /// Adds `weight` to the sum of every object whose bit is set in `bits`. A sum past the
    /// `most` given to [`Sums::new`] wraps (the caller's weights cannot reach it).
    pub(super) fn add(&mut self, bits: &[u64], weight: u32) {
        let slices = self.slices;
        for (w, &b) in bits.iter().enumerate() {
            if b == 0 {
                continue;
            }
            let word = &mut self.slab[w * slices..(w + 1) * slices];
            for from in 0..slices {
                if weight & (1 << from) == 0 {
                    continue;
                }
                // A ripple-carry add of `b` at slice `from`.
                let mut carry = b;
                for slice in &mut word[from..] {
                    let had = *slice;
                    *slice = had ^ carry;
                    carry &= had;
                    if carry == 0 {
                        break;
                    }
                }
            }
        }
    }

    /// Calls `each` with every ordinal whose sum is `level`, in ordinal order, until it
    /// returns false; false when it was stopped.
    pub(super) fn each_at(&self, level: u32, mut each: impl FnMut(u32) -> bool) -> bool {
        let slices = self.slices;
        for (w, word) in self.slab.chunks_exact(slices).enumerate() {
            let mut equal = u64::MAX;
            for (s, &slice) in word.iter().enumerate() {
                equal &= if level & (1 << s) != 0 { slice } else { !slice };
                if equal == 0 {
                    break;
                }
            }
            while equal != 0 {
                let o = w * 64 + equal.trailing_zeros() as usize;
                if !each(o as u32) {
                    return false;
                }
                equal &= equal - 1;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use roaring::RoaringBitmap;

    fn serialised(b: &RoaringBitmap) -> Vec<u8> {
        let mut v = Vec::new();
        b.serialize_into(&mut v).unwrap();
        v
    }

    fn bitmap() -> impl Strategy<Value = (RoaringBitmap, bool)> {
        // Scattered values, dense stretches (bitset containers) and ranges (run containers
        // once optimised), over up to three 65 536-value containers.
        (
            prop::collection::vec(0u32..200_000, 0..300),
            prop::collection::vec((0u32..200_000, 0u32..9_000), 0..4),
            any::<bool>(),
        )
            .prop_map(|(values, ranges, optimise)| {
                let mut b: RoaringBitmap = values.into_iter().collect();
                for (start, len) in ranges {
                    b.insert_range(start..(start + len).min(200_000));
                }
                if optimise {
                    b.optimize();
                }
                (b, optimise)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn set_bits_gives_the_bitmaps_values((b, _) in bitmap()) {
            let objects = 200_000usize;
            let mut words = vec![0u64; objects.div_ceil(64)];
            let any = set_bits(&serialised(&b), &mut words, objects).unwrap();
            prop_assert_eq!(any, !b.is_empty());
            let got: Vec<u32> = (0..objects as u32)
                .filter(|&o| words[o as usize / 64] & (1 << (o % 64)) != 0)
                .collect();
            prop_assert_eq!(got, b.iter().collect::<Vec<_>>());
        }

        #[test]
        fn a_value_past_the_objects_or_a_cut_is_refused((b, _) in bitmap(), cut in 0usize..64) {
            let bytes = serialised(&b);
            if let Some(max) = b.max() {
                let mut words = vec![0u64; 200_000usize.div_ceil(64)];
                prop_assert!(set_bits(&bytes, &mut words, max as usize).is_err());
                prop_assert!(set_bits(&bytes, &mut words, max as usize + 1).is_ok());
            }
            let mut words = vec![0u64; 200_000usize.div_ceil(64)];
            let short = &bytes[..bytes.len().saturating_sub(cut + 1)];
            prop_assert!(set_bits(short, &mut words, 200_000).is_err());
        }

        #[test]
        fn sums_are_the_weighted_counts(
            lists in prop::collection::vec(
                (prop::collection::vec(0u32..700, 0..300), 1u32..4), 0..8),
            stop in 0usize..50,
        ) {
            let objects = 700usize;
            let most = 3 * lists.len() as u32;
            let mut sums = Sums::new(objects.div_ceil(64), most);
            let mut expected = vec![0u32; objects];
            for (values, weight) in &lists {
                let set: std::collections::BTreeSet<u32> = values.iter().copied().collect();
                let mut words = vec![0u64; objects.div_ceil(64)];
                for &o in &set {
                    words[o as usize / 64] |= 1 << (o % 64);
                    expected[o as usize] += weight;
                }
                sums.add(&words, *weight);
            }
            for level in 1..=most {
                let mut got = Vec::new();
                let all = sums.each_at(level, |o| {
                    got.push(o);
                    true
                });
                prop_assert!(all);
                let want: Vec<u32> = (0..objects as u32)
                    .filter(|&o| expected[o as usize] == level)
                    .collect();
                prop_assert_eq!(&got, &want);
                // Stopped after `stop` of them.
                let mut taken = Vec::new();
                let whole = sums.each_at(level, |o| { taken.push(o); taken.len() < stop });
                prop_assert_eq!(whole, want.is_empty() || want.len() < stop);
                prop_assert_eq!(&taken[..], &want[..want.len().min(stop.max(1))]);
            }
        }
    }

    #[test]
    fn ranges_set_whole_and_partial_words() {
        let mut w = vec![0u64; 4];
        set_range(&mut w, 3, 3);
        set_range(&mut w, 60, 130);
        let got: Vec<usize> = (0..256)
            .filter(|&o| w[o / 64] & (1 << (o % 64)) != 0)
            .collect();
        let want: Vec<usize> = std::iter::once(3).chain(60..=130).collect();
        assert_eq!(got, want);
    }
}

//! The postings of a generation (docs/index.md, "The resident context index"): per term its
//! tiers (title, summary, other) as roaring bitmaps over object ordinals, in one buffer
//! ([`Postings`]); and a refreshed generation's, an earlier generation's and a delta's
//! renumbered per term when asked for ([`Terms`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use roaring::RoaringBitmap;

use super::columns::corrupt;
use crate::error::{CatalogError, Result};

/// No position: the object is not in the refreshed generation.
pub(super) const GONE: u32 = u32::MAX;

/// `bitmap` renumbered through `map` (increasing where it is not [`GONE`], so the values
/// stay in order); values mapped to [`GONE`] are left out.
pub(super) fn renumbered(bitmap: &RoaringBitmap, map: &[u32]) -> RoaringBitmap {
    let values = bitmap
        .iter()
        .filter_map(|o| map.get(o as usize).copied().filter(|&m| m != GONE));
    // Increasing and without repeats (the map is), so `from_sorted_iter` cannot fail.
    RoaringBitmap::from_sorted_iter(values).unwrap_or_default()
}

/// A directory entry of [`Postings`]: the term's offset and length in the pool (little-endian
/// u64, u32), then per tier [`TIER`] bytes: its bitmap's offset and length in the blob and
/// the bitmap's CRC-32 (u64, u32, u32), checked when the bitmap is decoded.
const ENTRY: usize = 12 + 3 * TIER;
const TIER: usize = 16;

/// The postings of every term, serialised as one buffer: a directory of [`ENTRY`]-byte
/// entries sorted by term, the terms' bytes (the pool), and each tier's roaring bitmap in its
/// portable form (the blob). A term is found by binary search and only its bitmaps are
/// decoded, so a generation opened from a snapshot file uses the file's bytes as they are.
#[derive(Debug, Clone)]
pub(super) struct Postings {
    pub(super) bytes: bytes::Bytes,
    pub(super) count: usize,
    /// Where the pool and the blob start.
    pub(super) pool: usize,
    pub(super) blob: usize,
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

impl Postings {
    /// The postings of `terms` (any order). The buffer is allocated once at its size and
    /// each term's bitmaps are dropped once written, so a build holds the bitmaps and the
    /// buffer at most (not a growing blob and a copy of it as well).
    pub(super) fn build(mut terms: Vec<(Box<str>, [RoaringBitmap; 3])>) -> Result<Postings> {
        terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let count = terms.len();
        let pool_len: usize = terms.iter().map(|t| t.0.len()).sum();
        let blob_len: usize = terms
            .iter()
            .flat_map(|t| t.1.iter())
            .map(RoaringBitmap::serialized_size)
            .sum();
        let (pool_at, blob_at) = (count * ENTRY, count * ENTRY + pool_len);
        let mut bytes = Vec::with_capacity(blob_at + blob_len);
        bytes.resize(pool_at, 0);
        for (term, _) in &terms {
            bytes.extend_from_slice(term.as_bytes());
        }
        let mut term_at = 0usize;
        for (i, (term, tiers)) in terms.into_iter().enumerate() {
            let mut entry = [0u8; ENTRY];
            entry[..8].copy_from_slice(&(term_at as u64).to_le_bytes());
            entry[8..12].copy_from_slice(&(term.len() as u32).to_le_bytes());
            term_at += term.len();
            for (t, tier) in tiers.into_iter().enumerate() {
                let start = bytes.len();
                tier.serialize_into(&mut bytes)
                    .map_err(|e| CatalogError::Invalid(e.to_string()))?;
                let e = &mut entry[12 + t * TIER..12 + (t + 1) * TIER];
                e[..8].copy_from_slice(&((start - blob_at) as u64).to_le_bytes());
                e[8..12].copy_from_slice(&((bytes.len() - start) as u32).to_le_bytes());
                e[12..].copy_from_slice(&crc32fast::hash(&bytes[start..]).to_le_bytes());
            }
            bytes[i * ENTRY..(i + 1) * ENTRY].copy_from_slice(&entry);
        }
        Ok(Postings {
            bytes: bytes.into(),
            count,
            pool: pool_at,
            blob: blob_at,
        })
    }

    /// Postings read from `bytes` holding `count` terms: every entry's ranges are checked, so
    /// lookups cannot read outside the buffer.
    pub(super) fn open(bytes: bytes::Bytes, count: usize) -> Result<Postings> {
        let pool = count
            .checked_mul(ENTRY)
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| corrupt("its directory is cut short"))?;
        let mut pool_len = 0usize;
        for i in 0..count {
            let e = i * ENTRY;
            let end = (u64_at(&bytes, e) as usize).checked_add(u32_at(&bytes, e + 8) as usize);
            pool_len = pool_len.max(end.ok_or_else(|| corrupt("a term's range"))?);
        }
        let blob = pool
            .checked_add(pool_len)
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| corrupt("its terms are cut short"))?;
        let blob_len = bytes.len() - blob;
        for i in 0..count {
            for t in 0..3 {
                let e = i * ENTRY + 12 + t * TIER;
                let end = (u64_at(&bytes, e) as usize).checked_add(u32_at(&bytes, e + 8) as usize);
                if end.is_none_or(|end| end > blob_len) {
                    return Err(corrupt("a posting list's range"));
                }
            }
        }
        let p = Postings {
            bytes,
            count,
            pool,
            blob,
        };
        if (1..count).any(|i| p.term(i - 1) >= p.term(i)) {
            return Err(corrupt("its terms are not sorted"));
        }
        Ok(p)
    }

    /// The bytes of the `i`th term.
    pub(super) fn term(&self, i: usize) -> &[u8] {
        let e = i * ENTRY;
        let at = self.pool + u64_at(&self.bytes, e) as usize;
        &self.bytes[at..at + u32_at(&self.bytes, e + 8) as usize]
    }

    /// The entry of `term` in the directory, `None` when no object holds it.
    pub(super) fn entry(&self, term: &str) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.term(mid).cmp(term.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// The stored bytes of tier `t` of entry `i`, an error when they do not match their
    /// checksum.
    pub(super) fn stored(&self, i: usize, t: usize) -> Result<&[u8]> {
        let e = i * ENTRY + 12 + t * TIER;
        let at = self.blob + u64_at(&self.bytes, e) as usize;
        let end = at + u32_at(&self.bytes, e + 8) as usize;
        let stored = &self.bytes[at..end];
        if crc32fast::hash(stored) != u32_at(&self.bytes, e + 12) {
            return Err(corrupt("a posting list's checksum does not match"));
        }
        Ok(stored)
    }

    /// The tiers of `term`, `None` when no object holds it.
    pub(super) fn tiers(&self, term: &str) -> Result<Option<[RoaringBitmap; 3]>> {
        self.stored_tiers(term)?.map(decode).transpose()
    }

    /// The stored tiers of `term` (checked against their checksums), `None` when no object
    /// holds it.
    pub(super) fn stored_tiers(&self, term: &str) -> Result<Option<[&[u8]; 3]>> {
        self.entry(term).map(|i| self.stored_at(i)).transpose()
    }

    /// The stored tiers of entry `i`, checked against their checksums.
    fn stored_at(&self, i: usize) -> Result<[&[u8]; 3]> {
        Ok([self.stored(i, 0)?, self.stored(i, 1)?, self.stored(i, 2)?])
    }

    /// Whether the stored tiers of `term` match their checksums (true when no object holds
    /// it), without decoding them.
    pub(super) fn checked(&self, term: &str) -> bool {
        self.stored_tiers(term).is_ok()
    }
}

/// Three stored tiers, decoded.
fn decode(stored: [&[u8]; 3]) -> Result<[RoaringBitmap; 3]> {
    let mut tiers: [RoaringBitmap; 3] = Default::default();
    for (tier, stored) in tiers.iter_mut().zip(stored) {
        *tier = RoaringBitmap::deserialize_from(stored).map_err(|_| corrupt("a posting list"))?;
    }
    Ok(tiers)
}

/// A term's tiers in a refreshed generation: the earlier generation's (`old`) renumbered
/// through `old_map`, the objects taken out left out, and the delta's (`new`) through
/// `new_map`.
fn renumbered_tiers(
    old: Option<&[RoaringBitmap; 3]>,
    old_map: &[u32],
    new: Option<&[RoaringBitmap; 3]>,
    new_map: &[u32],
) -> [RoaringBitmap; 3] {
    std::array::from_fn(|t| {
        let mut tier = old.map_or_else(RoaringBitmap::new, |o| renumbered(&o[t], old_map));
        if let Some(new) = new {
            tier |= renumbered(&new[t], new_map);
        }
        tier
    })
}

/// The postings of the merged generation: per term (the union of both directories), each
/// tier's earlier objects renumbered through `old_map` (the touched ones left out) and the
/// delta's through `new_map`. A term no object holds any longer is left out.
pub(super) fn merge_postings(
    old: &Postings,
    old_map: &[u32],
    delta: &Postings,
    new_map: &[u32],
) -> Result<Postings> {
    let mut out: Vec<(Box<str>, [RoaringBitmap; 3])> = Vec::new();
    let (mut x, mut y) = (0usize, 0usize);
    while x < old.count || y < delta.count {
        let ord = match (x < old.count, y < delta.count) {
            (true, true) => old.term(x).cmp(delta.term(y)),
            (true, false) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        let (from_old, from_new) = match ord {
            std::cmp::Ordering::Less => (Some(x), None),
            std::cmp::Ordering::Greater => (None, Some(y)),
            std::cmp::Ordering::Equal => (Some(x), Some(y)),
        };
        let term = match from_old {
            Some(i) => old.term(i),
            None => delta.term(y),
        };
        let term: Box<str> = std::str::from_utf8(term)
            .map_err(|_| CatalogError::Invalid("a term is not UTF-8".into()))?
            .into();
        let from_old = from_old.map(|i| decode(old.stored_at(i)?)).transpose()?;
        let from_new = from_new.map(|i| decode(delta.stored_at(i)?)).transpose()?;
        let tiers = renumbered_tiers(from_old.as_ref(), old_map, from_new.as_ref(), new_map);
        if tiers.iter().any(|t| !t.is_empty()) {
            out.push((term, tiers));
        }
        x += usize::from(from_old.is_some());
        y += usize::from(from_new.is_some());
    }
    Postings::build(out)
}

/// A refreshed generation's postings are not renumbered whole when it is made: at a million
/// objects that was nearly all of an in-memory refresh (8 s of 8.4 for 10 000 objects
/// ingested, every posting list's every ordinal mapped and re-encoded). Each term's tiers
/// are renumbered when a statement first asks for them and kept ([`Merged`]); the whole
/// directory is made only to write a snapshot file, or when refreshes have nested
/// [`Terms::DEPTH`] deep.
#[derive(Debug)]
pub(super) enum Terms {
    Own(Postings),
    Merged(Box<Merged>),
}

/// A merged term's three tiers, each a portable roaring bitmap.
type MergedTiers = Arc<[Vec<u8>; 3]>;

/// The merged tiers of the terms asked for (`None`: no object holds it now), and their bytes.
#[derive(Debug, Default)]
struct Asked {
    tiers: HashMap<Box<str>, Option<MergedTiers>>,
    bytes: usize,
}

/// A term's three tiers as stored: slices of a [`Postings`] buffer, or a merged term's.
pub(super) enum Tiers<'a> {
    Stored([&'a [u8]; 3]),
    Merged(MergedTiers),
}

impl Tiers<'_> {
    /// Tier `t`'s portable roaring bitmap.
    pub(super) fn get(&self, t: usize) -> &[u8] {
        match self {
            Tiers::Stored(s) => s[t],
            Tiers::Merged(m) => &m[t],
        }
    }
}

/// The postings of a refreshed generation: the earlier generation's ([`Terms`], shared with
/// it) without the touched objects and renumbered through `old_map`, and the delta's
/// renumbered through `new_map` (see [`merge_postings`], which makes them whole).
#[derive(Debug)]
pub(super) struct Merged {
    old: Arc<Terms>,
    old_map: Arc<[u32]>,
    delta: Postings,
    new_map: Arc<[u32]>,
    /// Refreshes nested under this one, itself included.
    depth: usize,
    /// Whether an earlier object was taken out (`old_map` has a [`GONE`]).
    removes: bool,
    /// Per term asked for, its merged tiers (`None`: no object holds it now), and their bytes.
    asked: Mutex<Asked>,
    whole: OnceLock<std::result::Result<Postings, String>>,
    count: OnceLock<usize>,
}

/// At most this many bytes of merged tiers are kept per refreshed generation; past it the
/// kept ones are dropped (they are made again when asked).
const ASKED_BYTES: usize = 64 << 20;

impl Terms {
    /// A refresh over a generation refreshed this many times in a row makes its postings
    /// whole first, so a lookup renumbers through at most this many maps.
    const DEPTH: usize = 4;

    /// The postings of a generation refreshed from one whose postings are `old`.
    pub(super) fn merged(
        old: &Arc<Terms>,
        old_map: Arc<[u32]>,
        delta: &Terms,
        new_map: Arc<[u32]>,
    ) -> Result<Terms> {
        let depth = match old.as_ref() {
            Terms::Own(_) => 1,
            Terms::Merged(m) => m.depth + 1,
        };
        let old = if depth > Self::DEPTH {
            Arc::new(Terms::Own(old.whole()?.clone()))
        } else {
            Arc::clone(old)
        };
        Ok(Terms::Merged(Box::new(Merged {
            depth: depth.min(Self::DEPTH),
            removes: old_map.contains(&GONE),
            old,
            old_map,
            delta: delta.whole()?.clone(),
            new_map,
            asked: Mutex::default(),
            whole: OnceLock::new(),
            count: OnceLock::new(),
        })))
    }

    /// Every term's postings in one buffer (made once for a refreshed generation).
    pub(super) fn whole(&self) -> Result<&Postings> {
        match self {
            Terms::Own(p) => Ok(p),
            Terms::Merged(m) => m.whole(),
        }
    }

    /// The stored tiers of `term` (checked against their checksums), `None` when no object
    /// holds it.
    pub(super) fn stored_tiers(&self, term: &str) -> Result<Option<Tiers<'_>>> {
        match self {
            Terms::Own(p) => Ok(p.stored_tiers(term)?.map(Tiers::Stored)),
            Terms::Merged(m) => {
                if let Some(Ok(p)) = m.whole.get() {
                    return Ok(p.stored_tiers(term)?.map(Tiers::Stored));
                }
                Ok(m.tiers_of(term)?.map(Tiers::Merged))
            }
        }
    }

    /// The tiers of `term`, decoded, `None` when no object holds it.
    pub(super) fn tiers(&self, term: &str) -> Result<Option<[RoaringBitmap; 3]>> {
        let Some(stored) = self.stored_tiers(term)? else {
            return Ok(None);
        };
        decode([stored.get(0), stored.get(1), stored.get(2)]).map(Some)
    }

    /// Whether the stored tiers of `term` match their checksums (true when no object holds
    /// it), without decoding them.
    pub(super) fn checked(&self, term: &str) -> bool {
        match self {
            Terms::Own(p) => p.checked(term),
            Terms::Merged(m) => m.old.checked(term) && m.delta.checked(term),
        }
    }

    /// Whether `term` is in the directory (a refreshed generation's: in its earlier one's
    /// or its delta's; when no earlier object was taken out, some object holds it).
    fn holds(&self, term: &str) -> bool {
        match self {
            Terms::Own(p) => p.entry(term).is_some(),
            Terms::Merged(m) if m.removes => matches!(self.stored_tiers(term), Ok(Some(_))),
            Terms::Merged(m) => m.delta.entry(term).is_some() || m.old.holds(term),
        }
    }

    /// The terms some object holds.
    pub(super) fn count(&self) -> usize {
        match self {
            Terms::Own(p) => p.count,
            Terms::Merged(m) => *m.count.get_or_init(|| m.count()),
        }
    }

    /// The bytes held (a refreshed generation's include the earlier one's postings, which
    /// it shares).
    pub(super) fn memory_bytes(&self) -> usize {
        match self {
            Terms::Own(p) => p.bytes.len(),
            Terms::Merged(m) => match m.whole.get() {
                Some(Ok(p)) => p.bytes.len(),
                _ => {
                    m.old.memory_bytes()
                        + m.delta.bytes.len()
                        + (m.old_map.len() + m.new_map.len()) * 4
                        + m.asked.lock().map_or(0, |a| a.bytes)
                }
            },
        }
    }
}

impl Merged {
    /// `term`'s merged tiers, made now unless asked for before.
    fn tiers_of(&self, term: &str) -> Result<Option<MergedTiers>> {
        let lock = || self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = lock().tiers.get(term) {
            return Ok(kept.clone());
        }
        let (old, new) = (self.old.tiers(term)?, self.delta.tiers(term)?);
        let tiers = renumbered_tiers(old.as_ref(), &self.old_map, new.as_ref(), &self.new_map);
        let merged = if tiers.iter().all(RoaringBitmap::is_empty) {
            None
        } else {
            let mut bytes: [Vec<u8>; 3] = Default::default();
            for (b, tier) in bytes.iter_mut().zip(&tiers) {
                tier.serialize_into(&mut *b)
                    .map_err(|e| CatalogError::Invalid(e.to_string()))?;
            }
            Some(Arc::new(bytes))
        };
        let size = merged.as_ref().map_or(0, |b| b.iter().map(Vec::len).sum()) + term.len();
        let mut asked = lock();
        if asked.bytes + size > ASKED_BYTES {
            asked.tiers.clear();
            asked.bytes = 0;
        }
        asked.tiers.insert(term.into(), merged.clone());
        asked.bytes += size;
        Ok(merged)
    }

    /// The terms some object holds: the earlier generation's and the delta's not among them
    /// when no earlier object was taken out (a refresh that only adds objects); else counted
    /// over the whole directory.
    fn count(&self) -> usize {
        if self.removes {
            return self.whole().map_or(0, |p| p.count);
        }
        let new = (0..self.delta.count)
            .filter(|&i| std::str::from_utf8(self.delta.term(i)).is_ok_and(|t| !self.old.holds(t)))
            .count();
        self.old.count() + new
    }

    /// Every term's postings in one buffer, made once.
    fn whole(&self) -> Result<&Postings> {
        self.whole
            .get_or_init(|| {
                let old = self.old.whole().map_err(|e| e.to_string())?;
                merge_postings(old, &self.old_map, &self.delta, &self.new_map)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| CatalogError::Invalid(e.clone()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const TERMS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

    /// Postings of some of [`TERMS`] over `n` objects, from `seed`'s bits (a term no object
    /// holds is not listed, as in a built generation).
    fn postings(n: u32, seed: &[u64], terms: &[&str]) -> Postings {
        let lists = terms
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let tiers: [RoaringBitmap; 3] = std::array::from_fn(|tier| {
                    let bits = seed[(i * 3 + tier) % seed.len()].rotate_left(i as u32 * 7);
                    (0..n).filter(|o| bits >> (o % 64) & 1 == 1).collect()
                });
                (Box::from(*t), tiers)
            })
            .filter(|(_, tiers)| tiers.iter().any(|t| !t.is_empty()))
            .collect();
        Postings::build(lists).unwrap()
    }

    /// The maps of a refresh: `n` earlier objects, `removed` of them taken out, and a new
    /// one before the surviving object `p % (survivors + 1)` for each `p` of `places`.
    fn maps(n: usize, removed: &[bool], places: &[usize]) -> (Vec<u32>, Vec<u32>) {
        let survivors: Vec<usize> = (0..n).filter(|&i| !removed[i]).collect();
        // (key, earlier or new, index): a survivor k at 2k + 1, a new one before it at 2k.
        let mut items: Vec<(usize, bool, usize)> = survivors
            .iter()
            .enumerate()
            .map(|(k, &i)| (2 * k + 1, true, i))
            .collect();
        let mut before: Vec<usize> = places.iter().map(|p| p % (survivors.len() + 1)).collect();
        before.sort_unstable();
        items.extend(before.iter().enumerate().map(|(j, &k)| (2 * k, false, j)));
        items.sort_unstable();
        let (mut old_map, mut new_map) = (vec![GONE; n], vec![GONE; places.len()]);
        for (at, &(_, earlier, i)) in items.iter().enumerate() {
            if earlier {
                old_map[i] = at as u32;
            } else {
                new_map[i] = at as u32;
            }
        }
        (old_map, new_map)
    }

    fn same(lazy: &Terms, whole: &Postings) -> std::result::Result<(), TestCaseError> {
        for t in TERMS {
            let want = Terms::Own(whole.clone()).tiers(t).unwrap();
            prop_assert_eq!(lazy.tiers(t).unwrap(), want, "term {}", t);
        }
        prop_assert_eq!(lazy.count(), whole.count);
        Ok(())
    }

    proptest! {
        /// Each term's tiers, asked of a refreshed generation's postings, are the ones of
        /// its whole directory (`merge_postings`), and so is the count of terms; for a
        /// refresh of a refresh too, and after the directory was made whole.
        #[test]
        fn a_merged_term_is_the_whole_merges(
            seed in prop::collection::vec(any::<u64>(), 4..8),
            removed in prop::collection::vec(prop::bool::weighted(0.2), 40),
            places in prop::collection::vec(0usize..100, 0..12),
            places2 in prop::collection::vec(0usize..100, 0..6),
        ) {
            let n = removed.len();
            let old = postings(n as u32, &seed, &TERMS[..4]);
            let (old_map, new_map) = maps(n, &removed, &places);
            let delta = postings(new_map.len() as u32, &seed[1..], &TERMS[1..5]);
            let lazy = Terms::merged(
                &Arc::new(Terms::Own(old.clone())),
                old_map.clone().into(),
                &Terms::Own(delta.clone()),
                new_map.clone().into(),
            )
            .unwrap();
            let whole = merge_postings(&old, &old_map, &delta, &new_map).unwrap();
            same(&lazy, &whole)?;
            // A second refresh, over the first (nothing taken out: new objects only).
            let len = old_map.iter().filter(|&&o| o != GONE).count() + new_map.len();
            let (map2, new2) = maps(len, &vec![false; len], &places2);
            let delta2 = postings(new2.len() as u32, &seed[2..], &TERMS[3..]);
            let lazy = Arc::new(lazy);
            let lazy2 =
                Terms::merged(
                &lazy,
                map2.clone().into(),
                &Terms::Own(delta2.clone()),
                new2.clone().into(),
            )
                    .unwrap();
            let whole2 = merge_postings(&whole, &map2, &delta2, &new2).unwrap();
            same(&lazy2, &whole2)?;
            prop_assert_eq!(&lazy2.whole().unwrap().bytes, &whole2.bytes);
            same(&lazy2, &whole2)?;
        }
    }
}

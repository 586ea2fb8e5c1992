//! A plain byte form for what is kept with a resident generation in its snapshot file
//! (`Generation::to_snapshot`'s kept parts: the engine's facts, the locator's key hashes), so
//! that a new process reads it instead of deriving it again: a sequence of sections, each a little-endian u64 length and
//! that many bytes; integers little-endian, strings as their end offsets then their bytes.
//! Reading checks every length against the bytes (a short or malformed section is `None`);
//! the caller checks what the values mean (ranges, counts).
//!
//! A section can be read into vectors ([`In::u32s`], [`In::strs`]) or in place
//! ([`In::words`], [`In::strings`]): a [`Words`] or [`Strs`] holds the section's bytes
//! (a slice of the snapshot file's mapping when read through [`In::of`]) and decodes a
//! value when it is asked for, so a new process does not copy what it kept.

use std::marker::PhantomData;
use std::ops::Range;

pub use bytes::Bytes;

/// The bytes being written.
#[derive(Debug, Default)]
pub struct Out(Vec<u8>);

impl Out {
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(&(b.len() as u64).to_le_bytes());
        self.0.extend_from_slice(b);
    }

    /// A section of what `write` appends, its length written first.
    fn section(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let at = self.0.len();
        self.0.extend_from_slice(&[0; 8]);
        write(&mut self.0);
        let len = (self.0.len() - at - 8) as u64;
        self.0[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }

    pub fn u32s(&mut self, values: impl IntoIterator<Item = u32>) {
        self.section(|b| values.into_iter().for_each(|v| b.extend(v.to_le_bytes())));
    }

    pub fn u64s(&mut self, values: impl IntoIterator<Item = u64>) {
        self.section(|b| values.into_iter().for_each(|v| b.extend(v.to_le_bytes())));
    }

    /// Strings: their end offsets in the pool, then the pool.
    pub fn strs<'a>(&mut self, values: impl Iterator<Item = &'a str> + Clone) {
        let mut end = 0u64;
        let ends: Vec<u64> = values
            .clone()
            .map(|s| {
                end += s.len() as u64;
                end
            })
            .collect();
        self.u64s(ends);
        let mut pool = Vec::with_capacity(end as usize);
        for s in values {
            pool.extend_from_slice(s.as_bytes());
        }
        self.bytes(&pool);
    }
}

/// A value of fixed size, kept little-endian.
pub trait Word: Copy {
    const BYTES: usize;
    /// The value of `b` (`BYTES` long).
    fn read(b: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    b.get(..N).and_then(|b| b.try_into().ok()).unwrap_or([0; N])
}

impl Word for u8 {
    const BYTES: usize = 1;
    fn read(b: &[u8]) -> u8 {
        b.first().copied().unwrap_or(0)
    }
    fn write(self, out: &mut Vec<u8>) {
        out.push(self);
    }
}

impl Word for u32 {
    const BYTES: usize = 4;
    fn read(b: &[u8]) -> u32 {
        u32::from_le_bytes(array(b))
    }
    fn write(self, out: &mut Vec<u8>) {
        out.extend(self.to_le_bytes());
    }
}

impl Word for u64 {
    const BYTES: usize = 8;
    fn read(b: &[u8]) -> u64 {
        u64::from_le_bytes(array(b))
    }
    fn write(self, out: &mut Vec<u8>) {
        out.extend(self.to_le_bytes());
    }
}

impl<const K: usize> Word for [u32; K] {
    const BYTES: usize = 4 * K;
    fn read(b: &[u8]) -> [u32; K] {
        std::array::from_fn(|i| u32::read(b.get(4 * i..).unwrap_or_default()))
    }
    fn write(self, out: &mut Vec<u8>) {
        self.into_iter().for_each(|v| v.write(out));
    }
}

/// A section of [`Word`]s, read in place: each decoded when asked for.
#[derive(Debug, Clone)]
pub struct Words<T> {
    bytes: Bytes,
    _values: PhantomData<T>,
}

impl<T> Default for Words<T> {
    fn default() -> Self {
        Words {
            bytes: Bytes::new(),
            _values: PhantomData,
        }
    }
}

impl<T: Word> Words<T> {
    /// `values`, held in their kept form.
    pub fn from_values(values: impl IntoIterator<Item = T>) -> Words<T> {
        let mut out = Vec::new();
        values.into_iter().for_each(|v| v.write(&mut out));
        Words {
            bytes: Bytes::from(out),
            _values: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / T::BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The value at `i`; panics when `i` is not under [`len`](Self::len), as a slice does.
    pub fn get(&self, i: usize) -> T {
        T::read(&self.bytes[i * T::BYTES..(i + 1) * T::BYTES])
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = T> + '_ {
        self.bytes.chunks_exact(T::BYTES).map(T::read)
    }

    /// A hint that the value at `i` is read soon: its cache line is fetched while other
    /// work goes on (a walk over values at scattered places, each a miss, overlaps them so).
    /// Nothing is read, and `i` past the end is ignored.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        if let Some(value) = self.bytes.get(i.saturating_mul(T::BYTES)..) {
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: a prefetch is a hint that never faults and reads nothing into the
            // program; the pointer is within `bytes`. SSE is in every x86-64 processor.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T0>(value.as_ptr().cast());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = value;
        }
    }

    /// The first position whose value is not `below` (the values being those that are
    /// first), as a slice's `partition_point` gives it.
    pub fn partition_point(&self, below: impl Fn(T) -> bool) -> usize {
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match below(self.get(mid)) {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        lo
    }

    /// The values at `range`; panics when it is not within [`len`](Self::len).
    pub fn range(&self, range: Range<usize>) -> impl ExactSizeIterator<Item = T> + '_ {
        self.bytes[range.start * T::BYTES..range.end * T::BYTES]
            .chunks_exact(T::BYTES)
            .map(T::read)
    }

    /// The bytes it holds.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// Strings of a section written by [`Out::strs`], read in place.
#[derive(Debug, Clone, Default)]
pub struct Strs {
    ends: Words<u64>,
    pool: Bytes,
}

impl Strs {
    /// `values`, held in their kept form.
    pub fn from_values<'a>(values: impl Iterator<Item = &'a str> + Clone) -> Strs {
        let mut out = Out::default();
        out.strs(values);
        let bytes = Bytes::from(out.into_bytes());
        // Just written, so it reads back.
        In::of(&bytes).strings().unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The string at `i`; panics when `i` is not under [`len`](Self::len), as a slice does.
    /// Its bytes are checked as UTF-8 here (not at reading: see [`In::strings`]); bytes that
    /// are not, or ends out of order, give the empty string.
    pub fn get(&self, i: usize) -> &str {
        std::str::from_utf8(self.bytes_at(i)).unwrap_or_default()
    }

    /// The bytes of the string at `i`, not checked as UTF-8: strings compare as their bytes
    /// do, so an order or a search needs no [`get`](Self::get). Ends out of order give none.
    pub fn bytes_at(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.ends.get(i - 1) as usize
        };
        self.pool
            .get(start..self.ends.get(i) as usize)
            .unwrap_or_default()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The position of the string `cmp` finds (its order, by its bytes, against what is
    /// sought), the strings being in that order.
    pub fn search(&self, cmp: impl Fn(&[u8]) -> std::cmp::Ordering) -> Option<usize> {
        super::search(self.len(), |i| cmp(self.bytes_at(i)))
    }

    /// The bytes it holds.
    pub fn memory_bytes(&self) -> usize {
        self.ends.memory_bytes() + self.pool.len()
    }
}

/// The bytes being read.
#[derive(Debug)]
pub struct In<'a> {
    bytes: &'a [u8],
    /// What `bytes` lie in, when [`In::of`] made it: sections read in place point into it.
    owner: Option<&'a Bytes>,
}

impl<'a> In<'a> {
    /// Reading `bytes`: what is read in place is copied first.
    pub fn new(bytes: &'a [u8]) -> In<'a> {
        In { bytes, owner: None }
    }

    /// Reading `bytes`, in place: [`Words`] and [`Strs`] point into them.
    pub fn of(bytes: &'a Bytes) -> In<'a> {
        In {
            bytes,
            owner: Some(bytes),
        }
    }

    /// A section as bytes of its own (a slice of the owner's, or a copy).
    fn shared(&mut self) -> Option<Bytes> {
        let b = self.bytes()?;
        Some(match self.owner {
            Some(owner) => owner.slice_ref(b),
            None => Bytes::copy_from_slice(b),
        })
    }

    /// A section written by [`Out::u32s`] or [`Out::u64s`] (or of words of `K` u32s), read in
    /// place; `None` when its length is not a multiple of the word's.
    pub fn words<T: Word>(&mut self) -> Option<Words<T>> {
        let bytes = self.shared()?;
        (bytes.len() % T::BYTES == 0).then_some(Words {
            bytes,
            _values: PhantomData,
        })
    }

    /// Strings written by [`Out::strs`], read in place; `None` when the last end is not the
    /// pool's length. Nothing else is read now: each string is checked when it is read
    /// ([`Strs::get`]), so opening a snapshot's graph of a million node names touches none of
    /// them (what is kept is checksummed with its snapshot file's part, and read only when
    /// that matches: docs/index.md, "Snapshot files").
    pub fn strings(&mut self) -> Option<Strs> {
        let ends = self.words::<u64>()?;
        let pool = self.shared()?;
        let last = ends.len().checked_sub(1).map_or(0, |i| ends.get(i));
        (usize::try_from(last).ok()? == pool.len()).then_some(Strs { ends, pool })
    }

    /// Whether every section has been read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.bytes.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        if len > rest.len() {
            return None;
        }
        let (section, rest) = rest.split_at(len);
        self.bytes = rest;
        Some(section)
    }

    pub fn u32s(&mut self) -> Option<Vec<u32>> {
        self.values()
    }

    pub fn u64s(&mut self) -> Option<Vec<u64>> {
        self.values()
    }

    /// A section of words, read into a vector; `None` when its length is not a multiple of
    /// the word's.
    fn values<T: Word>(&mut self) -> Option<Vec<T>> {
        let b = self.bytes()?;
        (b.len() % T::BYTES == 0).then(|| b.chunks_exact(T::BYTES).map(T::read).collect())
    }

    /// Strings written by [`Out::strs`]; `None` when an offset is out of order or outside
    /// the pool, or a string is not UTF-8.
    pub fn strs(&mut self) -> Option<Vec<&'a str>> {
        let ends = self.u64s()?;
        let pool = std::str::from_utf8(self.bytes()?).ok()?;
        let mut start = 0usize;
        ends.into_iter()
            .map(|end| {
                let end = usize::try_from(end).ok()?;
                let s = pool.get(start..end)?;
                start = end;
                Some(s)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_order_and_search_by_their_bytes() {
        // Byte order is str order for UTF-8: "z" < "é" (0xC3) < "日" (0xE6).
        let sorted = Strs::from_values(["", "a", "ab", "z", "é", "日"].iter().copied());
        for (i, s) in sorted.iter().enumerate() {
            assert_eq!(sorted.bytes_at(i), s.as_bytes());
            assert_eq!(sorted.search(|n| n.cmp(s.as_bytes())), Some(i));
        }
        assert_eq!(sorted.search(|n| n.cmp("b".as_bytes())), None);
    }

    #[test]
    fn sections_read_back_and_bad_ones_are_none() {
        let mut out = Out::default();
        out.u32s([1u32, u32::MAX, 7]);
        out.strs(["", "añb", "c"].iter().copied());
        out.u64s([9u64]);
        out.bytes(b"xy");
        let bytes = out.into_bytes();
        let mut r = In::new(&bytes);
        assert_eq!(r.u32s(), Some(vec![1, u32::MAX, 7]));
        assert_eq!(r.strs(), Some(vec!["", "añb", "c"]));
        assert_eq!(r.u64s(), Some(vec![9]));
        assert_eq!(r.bytes(), Some(&b"xy"[..]));
        assert!(r.is_empty());
        // Cut short anywhere: the section is not read.
        for cut in 0..bytes.len() {
            let mut r = In::new(&bytes[..cut]);
            let whole = r.u32s().is_some()
                && r.strs().is_some()
                && r.u64s().is_some()
                && r.bytes().is_some();
            assert!(!whole, "cut at {cut}");
        }
        // An offset inside a character, or past the pool, or out of order: not read as a
        // whole; read in place, an end other than the pool's is not read, and strings that
        // are not UTF-8 or whose ends are out of order read as empty (never a panic).
        for ends in [vec![2u64], vec![9], vec![3, 1], vec![9, 4], vec![2, 4]] {
            let mut out = Out::default();
            out.u64s(ends.clone());
            out.bytes("añb".as_bytes());
            let bytes = Bytes::from(out.into_bytes());
            assert_eq!(In::new(&bytes).strs(), None);
            let read = In::of(&bytes).strings();
            assert_eq!(read.is_some(), ends.last() == Some(&4), "{ends:?}");
            let got: Vec<&str> = read.iter().flat_map(|s| s.iter()).collect();
            let want: &[&str] = match ends[..] {
                [_, 4] => &["", ""],
                _ => &[],
            };
            assert_eq!(got, want, "{ends:?}");
        }
    }

    #[test]
    fn sections_read_in_place_give_what_was_written() {
        let mut out = Out::default();
        out.u32s([1u32, u32::MAX, 7, 0, 5, 6]);
        out.strs(["", "añb", "c"].iter().copied());
        out.u64s([9u64, u64::MAX]);
        let bytes = Bytes::from(out.into_bytes());
        let mut r = In::of(&bytes);
        let words = r.words::<u32>().unwrap_or_default();
        assert_eq!(words.iter().collect::<Vec<_>>(), [1, u32::MAX, 7, 0, 5, 6]);
        assert_eq!((words.len(), words.get(2)), (6, 7));
        assert_eq!(words.range(1..3).collect::<Vec<_>>(), [u32::MAX, 7]);
        let sorted = Words::from_values([1u32, 3, 3, 8]);
        for x in 0..10 {
            let want = [1u32, 3, 3, 8].partition_point(|&v| v < x);
            assert_eq!(sorted.partition_point(|v| v < x), want, "{x}");
        }
        assert_eq!(Words::<u32>::default().partition_point(|_| true), 0);
        let strs = r.strings().unwrap_or_default();
        assert_eq!(strs.iter().collect::<Vec<_>>(), ["", "añb", "c"]);
        assert_eq!(r.words::<u64>().map(|w| w.get(1)), Some(u64::MAX));
        assert!(r.is_empty());
        // In place: the sections point into the bytes read.
        let inside = |p: *const u8| bytes.as_ptr_range().contains(&p);
        assert!(inside(words.bytes.as_ptr()) && inside(strs.pool.as_ptr()));
        // The same words as triples; a length that is not a multiple is not read.
        let mut r = In::of(&bytes);
        let triples = r.words::<[u32; 3]>().unwrap_or_default();
        assert_eq!(
            triples.iter().collect::<Vec<_>>(),
            [[1, u32::MAX, 7], [0, 5, 6]]
        );
        assert!(In::of(&bytes).words::<[u32; 4]>().is_none());
        // Held from values: the same as read.
        let held = Words::from_values([[1u32, 2, 3], [4, 5, 6]]);
        assert_eq!(held.iter().collect::<Vec<_>>(), [[1, 2, 3], [4, 5, 6]]);
        let held = Strs::from_values(["x", "", "ÿz"].iter().copied());
        assert_eq!(held.iter().collect::<Vec<_>>(), ["x", "", "ÿz"]);
    }
}

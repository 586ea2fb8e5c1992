//! A plain byte form for what is kept with a resident generation in its snapshot file
//! (`Generation::to_snapshot`'s kept parts: the engine's facts, the locator's key hashes), so
//! that a new process reads it instead of deriving it again: a sequence of sections, each a little-endian u64 length and
//! that many bytes; integers little-endian, strings as their end offsets then their bytes.
//! Reading checks every length against the bytes (a short or malformed section is `None`);
//! the caller checks what the values mean (ranges, counts).

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

/// The bytes being read.
#[derive(Debug)]
pub struct In<'a> {
    bytes: &'a [u8],
}

impl<'a> In<'a> {
    pub fn new(bytes: &'a [u8]) -> In<'a> {
        In { bytes }
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
        self.words(u32::from_le_bytes)
    }

    pub fn u64s(&mut self) -> Option<Vec<u64>> {
        self.words(u64::from_le_bytes)
    }

    /// A section written by [`Out::u32s`] read as triples (three words each), without first
    /// reading it into a vector of words; `None` when its length is not a multiple of 12.
    pub fn u32_triples(&mut self) -> Option<Vec<(u32, u32, u32)>> {
        self.words(|c: [u8; 12]| {
            let word = |i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
            (word(0), word(4), word(8))
        })
    }

    /// A section of little-endian words of `N` bytes; `None` when its length is not a
    /// multiple of `N`.
    fn words<const N: usize, T>(&mut self, from: fn([u8; N]) -> T) -> Option<Vec<T>> {
        let b = self.bytes()?;
        if b.len() % N != 0 {
            return None;
        }
        Some(
            b.chunks_exact(N)
                .map(|c| from(c.try_into().unwrap_or([0; N])))
                .collect(),
        )
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
        // An offset inside a character, or past the pool.
        for ends in [vec![2u64], vec![9]] {
            let mut out = Out::default();
            out.u64s(ends);
            out.bytes("añb".as_bytes());
            let bytes = out.into_bytes();
            assert_eq!(In::new(&bytes).strs(), None);
        }
    }
}

//! Checksums of the parts of a snapshot file (docs/index.md, "Snapshot files").

/// The CRC-32 of `bytes` (a part checked when a statement first reads it); from 16 MiB on,
/// its two halves on two threads, combined. A part is often checked while the other core
/// is idle (the statement waits for it), and the largest are 100–150 MB at a million
/// objects. A thread that cannot be started leaves it to this one.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    const SPLIT: usize = 16 << 20;
    if bytes.len() < SPLIT {
        return crc32fast::hash(bytes);
    }
    let (first, second) = bytes.split_at(bytes.len() / 2);
    let hasher = |part: &[u8]| {
        let mut h = crc32fast::Hasher::new();
        h.update(part);
        h
    };
    std::thread::scope(|s| {
        let other = std::thread::Builder::new().spawn_scoped(s, || hasher(second));
        let mut h = hasher(first);
        match other.map(|t| t.join()) {
            Ok(Ok(other)) => h.combine(&other),
            _ => h.update(second),
        }
        h.finalize()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC-32 of a part in two halves, combined, is the CRC-32 of the whole, on either
    /// side of the size where it splits (an odd length included).
    #[test]
    fn a_checksum_on_two_threads_is_the_checksum() {
        let bytes: Vec<u8> = (0..(16usize << 20) + 7)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 1, 1000, (16 << 20) - 1, 16 << 20, bytes.len()] {
            assert_eq!(
                crc32(&bytes[..len]),
                crc32fast::hash(&bytes[..len]),
                "{len} bytes"
            );
        }
    }
}

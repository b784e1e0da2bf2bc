//! Which partition a record goes to, as Java's producer decides: a key's murmur2 hash (the
//! same partition as Java's default partitioner and librdkafka's `murmur2_random`), and for
//! records without a key a sticky partition that changes once a batch is sent (KIP-480).

/// Java's `Utils.murmur2`: MurmurHash2, 32 bits, seed 0x9747b28c.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h: u32 = 0x9747_b28c ^ length;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `key` among `partition_count`: `toPositive(murmur2(key)) % count`.
pub fn partition_for_key(key: &[u8], partition_count: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partition_count.max(1)
}

/// A small random number generator (xorshift) for sticky partitions: no dependency, seeded
/// from the standard library's randomly keyed hasher.
#[derive(Debug)]
pub(crate) struct Random(u64);

impl Random {
    pub fn new() -> Random {
        use std::hash::{BuildHasher, RandomState};
        Random(RandomState::new().hash_one(std::time::Instant::now()) | 1)
    }

    pub fn below(&mut self, n: i32) -> i32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % n.max(1) as u64) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_java() {
        // Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
        assert!((0..10).contains(&partition_for_key(b"foobar", 10)));
    }

    #[test]
    fn random_stays_in_range() {
        let mut random = Random::new();
        assert!((0..1000).all(|_| (0..3).contains(&random.below(3))));
    }
}

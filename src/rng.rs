//! A small seedable random number generator (splitmix64) for randomized tests and the
//! load-generating CLI tools (`sluice fuzz`, `sluice perf authorizer`): no dependency, and a
//! printed seed repeats a run exactly. Not for anything that must be unpredictable.

/// splitmix64: every seed, zero included, gives a full-period sequence.
#[derive(Debug, Clone)]
pub struct SmallRng(u64);

impl SmallRng {
    pub fn new(seed: u64) -> SmallRng {
        SmallRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// An index in `0..len`; 0 when `len` is 0.
    pub fn index(&mut self, len: usize) -> usize {
        // usize is at most 64 bits on every target we build for, so both casts are lossless.
        self.below(len as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (a caller's own list of choices).
    ///
    /// # Panics
    /// When `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_sequence_and_bounds_hold() {
        let (mut a, mut b) = (SmallRng::new(0), SmallRng::new(0));
        let first: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        assert_eq!(first, (0..8).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_eq!(
            first.iter().collect::<std::collections::HashSet<_>>().len(),
            8
        );
        for n in [1, 2, 7, 100] {
            assert!((0..1000).all(|_| a.below(n) < n));
        }
        assert_eq!(a.below(0), 0);
        assert_eq!(a.index(0), 0);
        assert_eq!(*a.pick(&[7]), 7);
        let heads = (0..10_000).filter(|_| a.chance(50)).count();
        assert!((4_000..6_000).contains(&heads), "{heads} of 10,000 at 50%");
    }
}

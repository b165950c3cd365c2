//! xorshift64*: the seeded PRNG of the fuzz smoke run and the crash loop, so a failure's printed
//! seed replays it exactly (included with `#[path]` by each test crate that needs it).

/// A xorshift64* generator; the state must not be 0 (callers `| 1` their seed).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).expect("below n fits in usize")
    }
}

//! Helpers shared by the crate's integration tests.

/// A xorshift generator: deterministic sequences for tests, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A size weighted as programs allocate: 60 % up to 256 B, 30 % up to 4 KiB, 9 % up to
    /// 256 KiB, 1 % up to 4 MiB.
    #[allow(dead_code)]
    pub fn size(&mut self) -> usize {
        match self.next() % 100 {
            0..=59 => 1 + (self.next() % 256) as usize,
            60..=89 => 256 + (self.next() % 4096) as usize,
            90..=98 => 4096 + (self.next() % (256 << 10)) as usize,
            _ => (256 << 10) + (self.next() % (4 << 20)) as usize,
        }
    }
}

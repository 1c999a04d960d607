//! Fixed-size bit sets for CPUs and nodes, and the kernel's list format (`0-3,8,10-11`).
//!
//! Sized for machines far larger than glibc's default `cpu_set_t` (1024 CPUs), so affinity
//! calls never fail with `EINVAL` on a big host.

/// CPUs a set can hold. `sched_getaffinity` fails if the kernel's mask is larger than ours.
pub const MAX_CPUS: usize = 4096;
const CPU_WORDS: usize = MAX_CPUS / 64;
/// Node mask words handed to `mbind`; the kernel supports at most 1024 nodes.
pub const MAX_NODE_WORDS: usize = 16;

/// A set of CPU numbers (a `cpu_set_t` of up to 1024 CPUs), built without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct CpuSet {
    words: [u64; CPU_WORDS],
}

impl Default for CpuSet {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        CpuSet {
            words: [0; CPU_WORDS],
        }
    }

    /// Adds `cpu` (ignored past the set's capacity).
    pub fn insert(&mut self, cpu: usize) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] |= 1 << (cpu % 64);
        }
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// How many CPUs the set holds.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when the set holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut result = CpuSet::new();
        for (i, word) in result.words.iter_mut().enumerate() {
            *word = self.words[i] & other.words[i];
        }
        result
    }

    /// True when every CPU of this set is in `other`.
    pub fn is_subset_of(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .zip(other.words.iter())
            .all(|(a, b)| a & !b == 0)
    }

    /// The `n`-th CPU of the set in ascending order.
    pub fn nth(&self, n: usize) -> Option<usize> {
        self.iter().nth(n)
    }

    /// The CPUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_CPUS).filter(move |&cpu| self.contains(cpu))
    }

    /// Parses the kernel's list format; ignores trailing whitespace and entries past `MAX_CPUS`.
    pub fn parse_list(text: &[u8]) -> Option<CpuSet> {
        let mut set = CpuSet::new();
        for_each_in_list(text, |value| set.insert(value))?;
        Some(set)
    }
}

/// Calls `each` for every number of a kernel list (`0-3,8`). `None` if the text is malformed.
pub fn for_each_in_list(text: &[u8], mut each: impl FnMut(usize)) -> Option<()> {
    let text = trim(text);
    if text.is_empty() {
        return Some(());
    }
    for part in text.split(|&b| b == b',') {
        let part = trim(part);
        let mut bounds = part.splitn(2, |&b| b == b'-');
        let low = parse_decimal(bounds.next()?)?;
        let high = match bounds.next() {
            Some(high) => parse_decimal(high)?,
            None => low,
        };
        if high < low {
            return None;
        }
        for value in low..=high.min(low + MAX_CPUS) {
            each(value);
        }
    }
    Some(())
}

pub fn trim(mut text: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = text {
        if first.is_ascii_whitespace() || *first == 0 {
            text = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = text {
        if last.is_ascii_whitespace() || *last == 0 {
            text = rest;
        } else {
            break;
        }
    }
    text
}

pub fn parse_decimal(text: &[u8]) -> Option<usize> {
    let text = trim(text);
    if text.is_empty() || text.len() > 19 {
        return None;
    }
    let mut value = 0usize;
    for &digit in text {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + (digit - b'0') as usize;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_lists() {
        let set = CpuSet::parse_list(b"0-3,8,10-11\n").unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(set.count(), 7);
        assert_eq!(set.nth(4), Some(8));
        assert!(CpuSet::parse_list(b"").unwrap().is_empty());
        assert!(CpuSet::parse_list(b"3-1").is_none());
        assert!(CpuSet::parse_list(b"a-b").is_none());
    }

    #[test]
    fn intersection_and_subset() {
        let a = CpuSet::parse_list(b"0-7").unwrap();
        let b = CpuSet::parse_list(b"4-11").unwrap();
        let both = a.intersection(&b);
        assert_eq!(both.iter().collect::<Vec<_>>(), vec![4, 5, 6, 7]);
        assert!(both.is_subset_of(&a) && both.is_subset_of(&b));
        assert!(!a.is_subset_of(&b));
    }

    #[test]
    fn cpu_numbers_beyond_glibcs_1024_bit_mask_are_kept() {
        let set = CpuSet::parse_list(b"0-3,1500-1503,4095\n").unwrap();
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 1500, 1501, 1502, 1503, 4095]
        );
        assert_eq!(set.nth(8), Some(4095));
        let mut by_hand = CpuSet::new();
        for cpu in [0, 1, 2, 3, 1500, 1501, 1502, 1503, 4095] {
            by_hand.insert(cpu);
        }
        assert_eq!(set, by_hand);
        assert!(
            set.intersection(&CpuSet::parse_list(b"1024-2047").unwrap())
                .count()
                == 4
        );
        // The kernel's buffer for sched_{get,set}affinity is the whole set: 4096 bits, four
        // times glibc's cpu_set_t, so machines with up to 4096 CPUs never get EINVAL.
        assert_eq!(core::mem::size_of::<CpuSet>() * 8, MAX_CPUS);
        assert!(core::mem::size_of::<CpuSet>() > core::mem::size_of::<libc::cpu_set_t>());
    }

    #[test]
    fn cpu_numbers_past_the_set_are_dropped_and_huge_ranges_end() {
        // The fallback past MAX_CPUS: such CPUs are left out (the topology maps them to node 0).
        let set = CpuSet::parse_list(b"4094-4100,5000,9999-10002").unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![4094, 4095]);
        assert!(!set.contains(4096) && !set.contains(5000) && !set.contains(usize::MAX));
        let mut set = CpuSet::new();
        set.insert(MAX_CPUS);
        set.insert(1 << 40);
        assert!(set.is_empty());
        // A range of 10^19 CPUs is cut at MAX_CPUS past its start instead of looping for ever.
        let mut seen = 0usize;
        for_each_in_list(b"0-9999999999999999999", |_| seen += 1).unwrap();
        assert_eq!(seen, MAX_CPUS + 1);
        // More than 19 digits does not fit a usize: malformed, not wrapped.
        assert!(CpuSet::parse_list(b"0-99999999999999999999").is_none());
    }

    #[test]
    fn the_kernel_accepts_the_sets_size_for_affinity_calls() {
        let mut set = CpuSet::new();
        assert!(
            crate::os::thread_affinity(&mut set),
            "sched_getaffinity failed"
        );
        assert!(!set.is_empty());
        assert_eq!(crate::os::set_thread_affinity(&set), Ok(()));
    }

    #[test]
    fn large_cpu_numbers_fit() {
        let set = CpuSet::parse_list(b"4000-4095").unwrap();
        assert_eq!(set.count(), 96);
        assert!(set.contains(4095) && !set.contains(3999));
    }
}

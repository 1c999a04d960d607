//! A bag's free bits: which of its objects are free in it, one bit an object, in the page
//! map's free-bit array (see `pagemap`, whose [`PageMap::free_bits`] hands a bag's share out).
//!
//! Layer: part of the arena.

#[cfg(doc)]
use super::pagemap::PageMap;
use core::sync::atomic::{AtomicU64, Ordering};

/// The words that hold bits `from..to`, each with the mask of those bits in it.
fn word_masks(from: usize, to: usize) -> impl Iterator<Item = (usize, u64)> {
    let mut index = from;
    core::iter::from_fn(move || {
        if index >= to {
            return None;
        }
        let word = index / 64;
        let (low, high) = (index % 64, (to - word * 64).min(64));
        let mask = if high - low == 64 {
            !0
        } else {
            ((1u64 << (high - low)) - 1) << low
        };
        index = word * 64 + high;
        Some((word, mask))
    })
}

/// The free bits of one bag ([`PageMap::free_bits`]): bit `i` of word `i / 64` is set while the
/// bag's object `i` is free in the bag. A bag's share holds `UNIT / 8` bits for each of its
/// units, at least one for each of its objects (the smallest class is 8 bytes). Read and
/// written only under the bag's class lock, so relaxed loads and stores suffice (atomics only
/// so that the shared map may hand the words out; they compile to plain moves).
#[derive(Clone, Copy)]
pub struct FreeBits(*const AtomicU64);

impl FreeBits {
    /// The bits whose first word is at `words`.
    ///
    /// # Safety
    /// `words` is a bag's share of the page map's free bits (see [`PageMap::free_bits`]), which
    /// live as long as the arena.
    pub(super) const unsafe fn at_words(words: *const AtomicU64) -> FreeBits {
        FreeBits(words)
    }

    #[inline(always)]
    fn at(self, word: usize) -> &'static AtomicU64 {
        debug_assert!(word < crate::size_class::MAX_CAPACITY.div_ceil(64));
        // SAFETY: the caller names a word of its bag's share (`word < capacity.div_ceil(64)`),
        // inside the page map's free bits, which live as long as the arena.
        unsafe { &*self.0.add(word) }
    }

    /// Word `word` of the bag's bits.
    #[inline(always)]
    pub fn word(self, word: usize) -> u64 {
        self.at(word).load(Ordering::Relaxed)
    }

    /// Replaces word `word`.
    #[inline(always)]
    pub fn set_word(self, word: usize, value: u64) {
        self.at(word).store(value, Ordering::Relaxed)
    }

    /// True when object `index` is free in the bag.
    #[inline(always)]
    pub fn test(self, index: usize) -> bool {
        self.word(index / 64) & (1 << (index % 64)) != 0
    }

    /// Sets bit `index`; false (and nothing changed) when it was set already.
    #[inline(always)]
    pub fn set(self, index: usize) -> bool {
        let value = self.word(index / 64);
        let bit = 1 << (index % 64);
        self.set_word(index / 64, value | bit);
        value & bit == 0
    }

    /// Sets (`on`) or clears bits `from..to`; returns how many changed.
    pub fn set_range(self, from: usize, to: usize, on: bool) -> usize {
        let mut changed = 0;
        for (word, mask) in word_masks(from, to) {
            let value = self.word(word);
            let next = if on { value | mask } else { value & !mask };
            changed += (value ^ next).count_ones() as usize;
            self.set_word(word, next);
        }
        changed
    }

    /// True when every bit of `from..to` is set.
    pub fn all_set(self, from: usize, to: usize) -> bool {
        word_masks(from, to).all(|(word, mask)| self.word(word) & mask == mask)
    }

    /// Clears the first `count` bits (a bag of `count` objects leaving use).
    pub fn clear(self, count: usize) {
        for word in 0..count.div_ceil(64) {
            self.set_word(word, 0);
        }
    }
}

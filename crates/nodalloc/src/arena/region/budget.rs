//! The optional hard limit on committed bytes, shared by every region of an arena.

use core::sync::atomic::{AtomicUsize, Ordering};

/// The optional hard limit on committed bytes, shared by every region of an arena. Charging is a
/// compare-and-swap loop, so concurrent regions can never overshoot the limit together.
pub struct CommitBudget {
    /// 0: no limit.
    limit: AtomicUsize,
    charged: AtomicUsize,
    /// The most ever charged at once.
    peak: AtomicUsize,
}

impl CommitBudget {
    /// The limit in bytes, 0 for none.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Sets the limit (0: none). Charges already made stay; new ones must fit under it.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// Bytes charged now.
    pub fn charged(&self) -> usize {
        self.charged.load(Ordering::Relaxed)
    }

    /// The most bytes ever charged at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    pub fn try_charge(&self, bytes: usize) -> bool {
        let mut charged = self.charged.load(Ordering::Relaxed);
        loop {
            let limit = self.limit.load(Ordering::Relaxed);
            let Some(total) = charged.checked_add(bytes) else {
                return false;
            };
            if limit != 0 && total > limit {
                return false;
            }
            match self.charged.compare_exchange_weak(
                charged,
                total,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(total, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => charged = seen,
            }
        }
    }

    pub fn uncharge(&self, bytes: usize) {
        self.charged.fetch_sub(bytes, Ordering::Relaxed);
    }
}

//! The optional hard limit on committed bytes, shared by every region of an arena.

use core::sync::atomic::{AtomicUsize, Ordering};

/// The optional hard limit on committed bytes, shared by every region of an arena. Charging is a
/// compare-and-swap loop, so concurrent regions can never overshoot the limit together.
pub struct CommitBudget {
    /// 0: no limit.
    pub limit: AtomicUsize,
    pub charged: AtomicUsize,
    /// The most ever charged at once.
    pub peak: AtomicUsize,
}

impl CommitBudget {
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

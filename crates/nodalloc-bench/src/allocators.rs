//! The Rust contenders, each as a `static` instance that the workloads call
//! directly. None of them is the process's `#[global_allocator]`.
//!
//! Used by every in-process measurement: the Rust suite and its RSS children,
//! the fast-path counts, the `http` binary's switching allocator, the
//! criterion benches and the tests.

use std::alloc::System;
use std::fmt;

pub static NODALLOC: nodalloc::NodAlloc = nodalloc::NodAlloc::new();
pub static SYSTEM: System = System;
pub static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
pub static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
pub static SNMALLOC: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc::new();

#[cfg(feature = "numalloc")]
pub static NUMALLOC: numalloc::NumaAlloc = numalloc::NumaAlloc::new();

/// Stand-in that keeps [`with_allocator!`](crate::with_allocator) exhaustive
/// when the `numalloc` feature is off. Callers filter it out through
/// [`Allocator::is_available`]; if one does not, every allocation fails and the
/// workload's null check reports it.
#[cfg(not(feature = "numalloc"))]
pub struct NotBuilt;

#[cfg(not(feature = "numalloc"))]
// SAFETY: `alloc` always reports failure (null), which the GlobalAlloc contract
// allows, so no memory is ever handed out and `dealloc` is never legitimately
// reached.
unsafe impl std::alloc::GlobalAlloc for NotBuilt {
    unsafe fn alloc(&self, _layout: std::alloc::Layout) -> *mut u8 {
        std::ptr::null_mut()
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: std::alloc::Layout) {
        unreachable!("numalloc was not built, it cannot own memory");
    }
}

#[cfg(not(feature = "numalloc"))]
pub static NUMALLOC: NotBuilt = NotBuilt;

/// One contender. The order of [`Allocator::ALL`] is the order of the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Allocator {
    Nodalloc,
    System,
    Mimalloc,
    Jemalloc,
    Snmalloc,
    Numalloc,
}

impl Allocator {
    pub const ALL: [Allocator; 6] = [
        Allocator::Nodalloc,
        Allocator::System,
        Allocator::Mimalloc,
        Allocator::Jemalloc,
        Allocator::Snmalloc,
        Allocator::Numalloc,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Allocator::Nodalloc => "nodalloc",
            Allocator::System => "system",
            Allocator::Mimalloc => "mimalloc",
            Allocator::Jemalloc => "jemalloc",
            Allocator::Snmalloc => "snmalloc",
            Allocator::Numalloc => "numalloc",
        }
    }

    /// The name in the report, shared with the `LD_PRELOAD` suites so that one
    /// allocator is one column: the system allocator is glibc's.
    pub const fn report_name(self) -> &'static str {
        match self {
            Allocator::System => "glibc",
            other => other.name(),
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether this contender was compiled in (only NUMAlloc is optional).
    pub const fn is_available(self) -> bool {
        cfg!(feature = "numalloc") || !matches!(self, Allocator::Numalloc)
    }

    pub fn available() -> Vec<Allocator> {
        Self::ALL.into_iter().filter(|a| a.is_available()).collect()
    }
}

impl fmt::Display for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Runs `$body` with `$a` bound to the `&'static` instance of allocator
/// `$kind`. Each arm is monomorphised separately, so generic workloads are
/// compiled against the concrete allocator type with no dynamic dispatch in
/// the measured loop.
///
/// ```
/// use nodalloc_bench::{with_allocator, workloads, Allocator};
/// let ledger = with_allocator!(Allocator::System, |a| workloads::single_size(a, 64, 10));
/// assert_eq!(ledger.allocs, 10);
/// ```
#[macro_export]
macro_rules! with_allocator {
    ($kind:expr, |$a:ident| $body:expr) => {
        match $kind {
            $crate::Allocator::Nodalloc => {
                let $a = &$crate::allocators::NODALLOC;
                $body
            }
            $crate::Allocator::System => {
                let $a = &$crate::allocators::SYSTEM;
                $body
            }
            $crate::Allocator::Mimalloc => {
                let $a = &$crate::allocators::MIMALLOC;
                $body
            }
            $crate::Allocator::Jemalloc => {
                let $a = &$crate::allocators::JEMALLOC;
                $body
            }
            $crate::Allocator::Snmalloc => {
                let $a = &$crate::allocators::SNMALLOC;
                $body
            }
            $crate::Allocator::Numalloc => {
                let $a = &$crate::allocators::NUMALLOC;
                $body
            }
        }
    };
}

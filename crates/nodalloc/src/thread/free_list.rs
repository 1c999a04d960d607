//! A thread heap's list of free objects of one size class, with the bookkeeping that lets a
//! drain move the least recently used batch in one splice.
//!
//! The list is singly linked through the objects' first words, newest first. It keeps its count,
//! its tail (the least recently freed object) and an `nth` marker: when a push brings the count
//! to `behind + 1`, `nth` is set to the head, so exactly `behind` objects lie behind it — the
//! oldest ones. When the count reaches the cache limit, [`FreeList::arm_or_cut`] hands the part
//! behind `nth` to the node heap without walking the list (NUMAlloc's LRU drain), keeping the
//! newest `limit - behind` (the class's batch). A pop of `nth` itself (which brings the count
//! down to `behind`) re-arms the marker: the pop tests the object it hands out against `nth`
//! (null while unarmed, so never a match), one compare with no load of `behind`.
//!
//! The limit adapts (see [`FreeList::set_limit`], driven by the thread heap): a class whose list
//! both overflows and runs dry keeps more objects, one that only overflows keeps fewer. It
//! changes only while the marker is unarmed. A list whose count passed the arming point without
//! arming (a refill larger than `behind`, or a lowered limit) finds its `nth` by walking from
//! the head past the surplus, once, on the push that arms it.
//!
//! `threshold` folds both limits into the one compare a push makes: it is `rest` while `nth` is
//! unarmed and `limit` once it is armed. Only the owning thread touches a list. (The C face's
//! double-free *mark* is another thing: a word written into each freed block.)
//!
//! A list the thread has not refilled since its heap attached is **fresh** (`threshold` is 0,
//! which no other list has), so its first push takes the slow path: an object freed before the
//! thread took any of its class was allocated by another thread, and the thread heap puts it
//! behind a batch of its own (see `ThreadHeap::first_free`).
//!
//! The fast paths keep one statistics counter, of frees; the allocations are what the count
//! and `book` say (see `book`).

use crate::node::Batch;
use crate::node::DENSE_OBJECT_MAX;
use crate::size_class::SizeClass;
use core::ptr::null_mut;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct FreeList {
    /// The newest free object (null when empty; always null in secure mode).
    pub(super) head: *mut u8,
    tail: *mut u8,
    nth: *mut u8,
    /// The class's [`SizeClass::start_magic`], beside the head the C face's `free` pushes to,
    /// so checking that a pointer starts an object costs no load from elsewhere.
    pub(super) start_magic: u64,
    count: u32,
    /// The count at which a push must take the slow path: `rest` (arm `nth`) or the limit (0
    /// for a fresh list).
    threshold: u32,
    /// Objects behind `nth` once armed: what a cut moves (`limit` less the class's batch).
    behind: u32,
    /// The count at the last publication, plus what the slow paths moved in since, less what
    /// they moved out (wrapping): a pop lowers the count by one where it would raise an
    /// allocation counter, so the allocations since the publication are
    /// `book + frees - count`, and the pop needs no counter of its own.
    book: u32,
    /// Objects taken back since the counts were last published.
    frees: u32,
    /// `threshold` while `nth` is unarmed: `behind + 1`, or 1 for a class threads do not cache (its
    /// every free takes the slow path).
    rest: u16,
    limit: u16,
    /// Secure mode: the list's head (links encoded), while `head` stays null for the fast path.
    /// Otherwise: the object the list handed out last, so that a link found outside the heap
    /// at the next pop names the freed block that held it (see `ThreadHeap::alloc_cached`).
    pub(super) aux: *mut u8,
}

/// The most objects a thread may keep of a cached class once its limit has grown: sixteen
/// batches, at most [`MAX_GROWN_BYTES`] of them ([`MAX_GROWN_SPARSE_BYTES`] above
/// [`DENSE_OBJECT_MAX`]), and never below the base limit.
pub(crate) fn cache_limit_max(class: SizeClass) -> usize {
    let base = class.cache_limit();
    let bytes = if class.size() > DENSE_OBJECT_MAX {
        MAX_GROWN_SPARSE_BYTES
    } else {
        MAX_GROWN_BYTES
    };
    (16 * class.batch())
        .min(bytes / class.size())
        .max(base)
        .min(u16::MAX as usize)
}

/// Bytes of one class a grown limit may keep.
const MAX_GROWN_BYTES: usize = 256 << 10;

/// Bytes of one class above 4 KiB a grown limit may keep. Such a class's batch is 1 to 7
/// objects, and a list of 256 KiB held 8 to 56: a program whose big blocks churn (the latency
/// case, a quarter of its mallocs above 4 KiB) went to the bags on 1.3 % of its mallocs, each
/// a refill that walks the links of objects freed long ago (cold misses; their cuts are too big
/// for the transfer ring), which set its p99 (150 ns). With 512 KiB, p99 53–62 ns; the thread's
/// and the node's budgets for grown limits (`adapt.rs`) still bound the sum (docs/JOURNAL.md "Big
/// classes keep more").
const MAX_GROWN_SPARSE_BYTES: usize = 512 << 10;

/// The `threshold` of a fresh list (see the module's doc).
const FRESH_THRESHOLD: u32 = 0;

// One cache line per class: the fast paths touch nothing else of the list.
// A list's `ClassSlot` is its offset in the heap's array of lists.
const _: () = assert!(core::mem::size_of::<FreeList>() == crate::size_class::SLOT_BYTES);

impl FreeList {
    pub(super) const EMPTY: FreeList = FreeList {
        head: null_mut(),
        tail: null_mut(),
        nth: null_mut(),
        start_magic: 0,
        count: 0,
        threshold: 0,
        rest: 0,
        behind: 0,
        limit: 0,
        book: 0,
        frees: 0,
        aux: null_mut(),
    };

    /// Sets the class's constants and its base limit (at attach; the list keeps its objects,
    /// and the marker is left unarmed).
    pub(super) fn configure(&mut self, class: SizeClass) {
        self.start_magic = class.start_magic();
        self.unarm();
        if class.cache_limit() == 0 {
            self.limit = 0;
            self.behind = 0;
            self.rest = 1;
            self.threshold = 1;
        } else {
            self.set_limit(class, class.cache_limit());
        }
    }

    /// Makes an empty list of a cached class fresh (see the module's doc): its next push
    /// takes the slow path. A list that holds objects, or of an uncached class, is left as is.
    pub(super) fn make_fresh(&mut self) {
        if self.count == 0 && self.limit != 0 {
            self.threshold = FRESH_THRESHOLD;
        }
    }

    /// True for a fresh list (see [`FreeList::make_fresh`]). An unconfigured list's `rest` is
    /// 0, an uncached class's 1; a cached class's `rest` is `behind + 1` with `behind` at least
    /// its batch, and its `threshold` is `rest` or `limit`.
    pub(super) fn is_fresh(&self) -> bool {
        self.threshold == FRESH_THRESHOLD && self.rest > 1
    }

    /// True while `nth` is unarmed.
    fn is_unarmed(&self) -> bool {
        self.threshold == u32::from(self.rest)
    }

    /// Leaves `nth` unarmed.
    fn unarm(&mut self) {
        self.nth = null_mut();
        self.threshold = self.rest.into();
    }

    /// Sets the count to `count` for a slow path that moved objects in or out (see `book`).
    fn set_count(&mut self, count: u32) {
        self.book = self.book.wrapping_add(count).wrapping_sub(self.count);
        self.count = count;
    }

    /// Links `batch` behind the list's oldest object (the objects handed out last). Only while
    /// the marker is unarmed, which this keeps, and outside secure mode (plain links).
    pub(super) fn append(&mut self, batch: Batch) {
        debug_assert!(self.is_unarmed() || self.is_uncached());
        if batch.count == 0 {
            return;
        }
        if self.count == 0 {
            return self.install(batch, false);
        }
        // SAFETY: the tail is one of the list's free objects, linked through its first word.
        unsafe { crate::ds::set_next(self.tail, batch.head) };
        self.tail = batch.tail;
        self.set_count(self.count + batch.count as u32);
    }

    /// The objects the list may hold before a cut.
    pub(super) fn limit(&self) -> usize {
        self.limit.into()
    }

    /// Sets the limit of a cached class (at least twice its batch; see [`cache_limit_max`]).
    /// Only while the marker is unarmed: after a refill or a cut.
    pub(super) fn set_limit(&mut self, class: SizeClass, limit: usize) {
        debug_assert!(limit >= class.cache_limit() && limit <= cache_limit_max(class));
        debug_assert!(self.is_unarmed());
        self.limit = limit as u16;
        self.behind = (limit - class.batch()) as u32;
        self.rest = self.behind as u16 + 1;
        self.unarm();
    }

    /// Objects a refill from the bags should bring: half the limit (a batch at the base
    /// limit of two batches; 0 for an uncached class). A list whose limit grew is used both
    /// ways; taking one batch at a time, it went to the class lock every few operations of a
    /// class with small batches (docs/JOURNAL.md "malloc latency p99"). A refill from the ring
    /// takes the ring's batch as it is.
    pub(super) fn refill_size(&self) -> usize {
        usize::from(self.limit) / 2
    }

    /// Objects in the list.
    pub(super) fn len(&self) -> usize {
        self.count as usize
    }

    /// The least recently freed object.
    #[cfg(test)]
    pub(super) fn tail(&self) -> *mut u8 {
        self.tail
    }

    /// True for a class threads do not cache beyond one parked object.
    pub(super) fn is_uncached(&self) -> bool {
        self.limit == 0
    }

    /// Books the pop of `object`, whose successor the caller has already installed as the head.
    #[inline(always)]
    pub(super) fn popped(&mut self, object: *mut u8) {
        self.count -= 1;
        if object == self.nth {
            // The pop of `nth` (armed: exactly `behind` objects lie behind it, so the count is
            // now `behind`) re-arms the marker for the next push. Unarmed, `nth` is null. In
            // line: a call would cost the C face's `malloc` a saved register and a frame.
            debug_assert_eq!(self.count, self.behind);
            self.unarm();
        }
    }

    /// Makes `object`, already linked to the old head, the list's head. True when the count
    /// has reached `threshold`: the caller must take [`FreeList::arm_or_cut`]'s slow path.
    #[inline(always)]
    pub(super) fn push(&mut self, object: *mut u8) -> bool {
        if self.count == 0 {
            self.tail = object;
        }
        self.head = object;
        self.booked_push()
    }

    /// As [`FreeList::push`], for secure mode's encoded list.
    pub(super) fn push_secure(&mut self, object: *mut u8) -> bool {
        if self.count == 0 {
            self.tail = object;
        }
        self.aux = object;
        self.booked_push()
    }

    #[inline(always)]
    fn booked_push(&mut self) -> bool {
        self.count += 1;
        self.frees = self.frees.wrapping_add(1);
        self.count >= self.threshold
    }

    /// The slow half of a push that reached `threshold`: arms `nth` at `behind + 1`, and at the limit
    /// cuts the oldest `behind` objects off (returned). `read_link`/`write_link` read and write
    /// a link in the arena's encoding (checked in secure mode).
    pub(super) fn arm_or_cut(
        &mut self,
        secure: bool,
        read_link: impl Fn(*mut u8) -> *mut u8,
        write_link: impl FnOnce(*mut u8, *mut u8),
    ) -> Option<Batch> {
        debug_assert!(!self.is_uncached());
        let head = if secure { self.aux } else { self.head };
        let limit = u32::from(self.limit);
        // What a cut keeps: the newest `limit - behind` objects (the class's batch).
        let keep = limit - self.behind;
        if self.threshold == u32::from(self.rest) {
            // Unarmed. At `behind + 1` the head has exactly `behind` objects behind it. Past
            // that (a refill larger than `behind`, a lowered limit) the object at the head's
            // place then is found by walking the newer objects (fewer than `keep`); at or past
            // the limit, the object a cut keeps last.
            let mut nth = head;
            for _ in 1..(self.count - self.behind).min(keep) {
                nth = read_link(nth);
            }
            self.nth = nth;
            self.threshold = limit;
        }
        if self.count < limit {
            return None;
        }
        // `nth` is the cached object with `count - keep` objects behind it: `behind` when the
        // marker armed on the way (the count went up by one per push), more past the limit.
        let nth = self.nth;
        debug_assert!(!nth.is_null());
        let count = self.count - keep;
        let batch = Batch {
            head: read_link(nth),
            tail: self.tail,
            count: count as usize,
        };
        write_link(nth, null_mut());
        self.tail = nth;
        self.set_count(keep);
        self.unarm();
        Some(batch)
    }

    /// Installs a refill as the whole (empty) list: in `head`, or `aux` (the head) in secure mode.
    pub(super) fn install(&mut self, batch: Batch, secure: bool) {
        debug_assert!(self.head.is_null() && (!secure || self.aux.is_null()) && self.count == 0);
        if secure {
            self.aux = batch.head;
        } else {
            self.head = batch.head;
        }
        self.tail = batch.tail;
        self.set_count(batch.count as u32);
        self.unarm();
    }

    /// Keeps only the head (`kept`, linked first), returning the rest; for parking.
    pub(super) fn keep_only_head(&mut self, rest: *mut u8) -> Batch {
        let kept = self.head;
        let batch = Batch {
            head: rest,
            tail: self.tail,
            count: self.count as usize - 1,
        };
        self.tail = kept;
        self.set_count(1);
        batch
    }

    /// Empties the list (unarmed, as after a refill of nothing) and returns what it held:
    /// the `aux` chain in secure mode, else the `head` chain.
    pub(super) fn take_all(&mut self, secure: bool) -> Batch {
        let batch = Batch {
            head: if secure { self.aux } else { self.head },
            tail: self.tail,
            count: self.count as usize,
        };
        self.head = null_mut();
        self.aux = null_mut();
        self.tail = null_mut();
        self.set_count(0);
        self.unarm();
        batch
    }

    /// True when nothing was handed out or taken back since the last publication.
    pub(super) fn is_idle(&self) -> bool {
        self.book == self.count && self.frees == 0
    }

    /// The alloc and free counts since the last publication, reset to zero.
    pub(super) fn take_counts(&mut self) -> (u32, u32) {
        let allocs = self.book.wrapping_add(self.frees).wrapping_sub(self.count);
        let counts = (allocs, self.frees);
        self.book = self.count;
        self.frees = 0;
        counts
    }
}

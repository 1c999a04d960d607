//! The thread cache: a list of free objects per size class ([`FreeList`], with the bookkeeping
//! that lets a drain move the least recently used batch in one splice), and the hit paths over
//! the lists, which every face's fast path takes: [`ThreadHeap::alloc_cached`] and
//! [`ThreadHeap::free`] (the Rust face), [`ThreadHeap::malloc_hit`] and
//! [`ThreadHeap::free_hit`] (the C face, which applies its double-free [`Screen`]). Whatever
//! they refuse goes to a named slow path (`slow.rs`).
//!
//! The list is singly linked through the objects' first words, newest first. It keeps its count,
//! its tail (the least recently freed object) and an `nth` marker: when a push brings the count
//! to `rest` (`behind + 1`, plus a slack of half a batch: see [`arming_slack`]), `nth` is set to
//! the object with exactly `behind` objects behind it — the oldest ones — found by walking past
//! the slack's newest objects. When the count reaches the cache limit, [`FreeList::arm_or_cut`]
//! hands the part behind `nth` to the node heap without walking the rest of the list (NUMAlloc's
//! LRU drain), keeping the newest `limit - behind` (the class's batch). A pop of `nth` itself
//! (which brings the count down to `behind`) disarms the marker: the pop tests the object it
//! hands out against `nth` (null while unarmed, so never a match), one compare with no load of
//! `behind`.
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
//! Before that, a list of a new heap is **unconfigured**: all zero bits, as the heap was mapped
//! (see `ThreadHeap::init`). Its head is null, so a pop misses; its threshold is 0, so a push
//! takes the slow path; its `start_magic` is 0, so the C face's `free` hit never matches it.
//! The class's first slow path configures it ([`FreeList::configure`] at a refill,
//! [`FreeList::configure_at_push`] at a push), so a thread's heap writes the lists of the
//! classes it uses and leaves the other lists' pages untouched.
//!
//! The fast paths keep one statistics counter, of frees; the allocations are what the count
//! and `book` say (see `book`).

use super::ThreadHeap;
use crate::ds::SCREEN_WORD;
use crate::node::Batch;
use crate::node::DENSE_OBJECT_MAX;
use crate::size_class::{class_of_malloc, ClassSlot, SizeClass, SlotTables, NUM_CLASSES};
use core::ffi::c_void;
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
    /// `threshold` while `nth` is unarmed: `behind + 1` plus the [`arming_slack`], or 1 for a
    /// class threads do not cache (its every free takes the slow path).
    rest: u16,
    limit: u16,
    /// Secure mode: the list's head (links encoded), while `head` stays null for the fast path.
    /// Otherwise: the object the list handed out last, so that a link found outside the heap
    /// at the next pop names the freed block that held it (see `ThreadHeap::alloc_cached`).
    pub(super) aux: *mut u8,
}

/// The most objects a thread may keep of a cached class once its limit has grown: sixteen
/// batches, at most [`MAX_GROWN_BYTES`] of them ([`MAX_GROWN_SPARSE_BYTES`] above
/// [`DENSE_OBJECT_MAX`]), and never below the base limit. The classes above
/// [`GROWN_CLASS_MAX`] up to [`DENSE_OBJECT_MAX`] keep their base limit.
pub(crate) fn cache_limit_max(class: SizeClass) -> usize {
    let base = class.cache_limit();
    let bytes = if class.size() > DENSE_OBJECT_MAX {
        MAX_GROWN_SPARSE_BYTES
    } else if class.size() > GROWN_CLASS_MAX {
        return base;
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

/// The largest class up to [`DENSE_OBJECT_MAX`] whose limit grows. A class of 1 to 4 KiB moves
/// 8 to 28 objects a batch (32 KiB) and keeps two batches, and a cut of that fits its transfer
/// ring, so its traffic with the node heap is a compare-and-swap per batch already; grown to
/// 256 KiB, its lists held objects where the threads that wanted them could not reach them.
/// mimalloc-bench's rptestN, whose threads free each other's blocks of 8 B to 16 KiB, held
/// 6.3 MiB of these classes in threads' lists and rings beside 0.9 MiB of them live at its peak;
/// without their growth, over 28 runs, its mean peak fell from 24.5 to 22.0 MiB and its highest
/// from 37.2 to 30.7, and the showdown's xthread from 20 to 16 MiB, with no time measured lost.
/// At 512 B the bound cost larsonN (blocks of 8 B to 1 KiB) a fifth of its speed
/// (docs/JOURNAL.md, "Thirtieth round").
pub(super) const GROWN_CLASS_MAX: usize = 1 << 10;

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

/// How far past `behind + 1` a list's count goes before the marker arms: half the class's batch
/// (at most `limit - behind - 1`, so a list still arms by its limit). The marker disarms when
/// its object is popped, at a count of `behind`; a list whose count wanders up and down around
/// one point (a thread that frees and allocates a class in random order) would otherwise arm and
/// disarm again every few operations, each time through the slow path, and with two branches
/// (the push's threshold, the pop's `nth`) that the processor cannot predict. The slack costs
/// the arming a walk over that many of the newest objects.
fn arming_slack(class: SizeClass) -> usize {
    class.batch() / 2
}

// One cache line per class: the fast paths touch nothing else of the list.
// A list's `ClassSlot` is its offset in the heap's array of lists.
const _: () = assert!(core::mem::size_of::<FreeList>() == crate::size_class::SLOT_BYTES);

impl FreeList {
    /// A list with nothing in it, unconfigured: every field zero, so a fresh heap writes its
    /// lists as zero bits (`ThreadHeap::with_attach_hook`), and the tests hold the two equal.
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

    /// True when every field is [`FreeList::EMPTY`]'s (a fresh heap's lists are written as
    /// zero bits instead; the destructuring makes a new field fail to compile here).
    pub(super) fn is_empty_list(&self) -> bool {
        let FreeList {
            head,
            tail,
            nth,
            start_magic,
            count,
            threshold,
            rest,
            behind,
            limit,
            book,
            frees,
            aux,
        } = FreeList::EMPTY;
        self.head == head
            && self.tail == tail
            && self.nth == nth
            && self.start_magic == start_magic
            && self.count == count
            && self.threshold == threshold
            && self.rest == rest
            && self.behind == behind
            && self.limit == limit
            && self.book == book
            && self.frees == frees
            && self.aux == aux
    }

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

    /// True once the list was configured (see the module's doc): an unconfigured list's `rest`
    /// is 0, a configured one's at least 1.
    pub(super) fn is_configured(&self) -> bool {
        self.rest != 0
    }

    /// Configures an unconfigured list that a push just reached (its zero threshold sent the
    /// push to the slow path; `count` includes the pushed objects): fresh, like a list the
    /// thread has not refilled, outside secure mode. True when the push still needs the slow
    /// path of a list that reached its threshold (an uncached class's park, a fresh list's
    /// first free); false when it is done (secure mode's list, below its threshold).
    pub(super) fn configure_at_push(&mut self, class: SizeClass, secure: bool) -> bool {
        debug_assert!(!self.is_configured());
        self.configure(class);
        if !secure && self.limit != 0 {
            self.threshold = FRESH_THRESHOLD;
        }
        self.count >= self.threshold
    }

    /// True for a fresh list (see [`FreeList::make_fresh`]). An unconfigured list's `rest` is
    /// 0, an uncached class's 1; a cached class's `rest` is past `behind + 1` with `behind` at
    /// least its batch, and its `threshold` is `rest` or `limit`.
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
        self.rest = (self.behind as usize + 1 + arming_slack(class)) as u16;
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
            // now `behind`) disarms the marker until a push reaches `rest` again. Unarmed,
            // `nth` is null. In line: a call would cost the C face's `malloc` a saved register
            // and a frame.
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

    /// Frees pushed since the counts were last taken (wrapping).
    #[inline(always)]
    pub(super) fn frees_since_publish(&self) -> u32 {
        self.frees
    }

    #[inline(always)]
    fn booked_push(&mut self) -> bool {
        self.count += 1;
        self.frees = self.frees.wrapping_add(1);
        self.count >= self.threshold
    }

    /// The slow half of a push that reached `threshold`: arms `nth` at `rest`, and at the limit
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
            // Unarmed. At `behind + 1` the head would have exactly `behind` objects behind it;
            // at `rest` (the slack past it) or beyond (a refill larger than `behind`, a lowered
            // limit) the object at the head's place then is found by walking the newer objects
            // (fewer than `keep`); at or past the limit, the object a cut keeps last.
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

    /// Counts an object of the class handed out without passing through the list (a run's,
    /// see `ThreadHeap::take_from_run`) as one of its pops.
    pub(super) fn count_handed_out(&mut self) {
        self.book = self.book.wrapping_add(1);
    }

    /// Objects popped from the list since the counts were last published (wrapping): what the
    /// heap profile's lean mode reads to count the fast paths' allocations.
    pub(super) fn pops_since_publish(&self) -> u32 {
        self.book.wrapping_add(self.frees).wrapping_sub(self.count)
    }

    /// [`Self::pops_since_publish`] plus the objects the list holds (wrapping), in one add.
    #[inline(always)]
    pub(super) fn pops_and_len(&self) -> u32 {
        self.book.wrapping_add(self.frees)
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

/// The C face's double-free screen, as the hit paths apply it. `free` cannot be told a size, so
/// a second `free` of a block still in the cache would link it in twice: every block the face
/// frees into the cache carries `mark` in its second word (every block of that face is at least
/// 16 bytes), a free that finds it there suspects a double free and hands the block to
/// `on_marked` (the face confirms or clears the suspicion: the mark alone may be program data),
/// and every pop of the face clears the word on the way out ([`ThreadHeap::malloc_hit`]). The
/// face owns the screen's judgement; the core only applies it, so a hit crosses into the core
/// once.
#[derive(Clone, Copy)]
pub struct Screen {
    /// The mark; best sign-extended from 32 bits, so the compare and the store take it as an
    /// immediate.
    pub mark: usize,
    /// Where a free of a marked block goes, the block first (in the register it arrived in at
    /// `free`) and the heap second: a tail call, so the hit keeps no stack frame.
    pub on_marked: unsafe extern "C" fn(*mut u8, &mut ThreadHeap),
}

impl Screen {
    /// Clears the screen word of a block being handed out, so freeing it once more is no
    /// suspicion.
    ///
    /// # Safety
    /// `block` is a block of the C face (at least 16 bytes, 8-aligned) that the caller owns.
    #[inline(always)]
    pub unsafe fn clear(block: *mut u8) {
        // SAFETY: contract above.
        unsafe { (block.add(SCREEN_WORD) as *mut usize).write(0) };
    }

    /// Marks a block being freed: true when it is marked now, false when it carried the mark
    /// already (a suspected double free; nothing is written).
    ///
    /// # Safety
    /// As for [`Screen::clear`]; the caller gives the block up.
    #[inline(always)]
    pub unsafe fn mark(&self, block: *mut u8) -> bool {
        let word = block.wrapping_add(SCREEN_WORD) as *mut usize;
        // SAFETY: contract above.
        if unsafe { *word } == self.mark {
            return false;
        }
        // SAFETY: as above.
        unsafe { *word = self.mark };
        true
    }
}

/// Where [`ThreadHeap::malloc_hit`] sends what the cache cannot serve: the size and the
/// heap, as the hit was given them (the heap untyped: the face's miss stub is declared in an
/// `extern` block, where only C types belong).
pub type MallocMiss = unsafe extern "C" fn(usize, *mut c_void) -> *mut u8;

/// The hit paths: the pops and pushes of every face's fast path, and the C face's forms of
/// them, which apply its [`Screen`]. Everything they refuse goes to a named slow path.
impl ThreadHeap {
    /// The tables of the one-load class lookups (sizes up to 1 KiB), at the heap's address.
    #[inline(always)]
    pub fn slots(&self) -> &SlotTables {
        &self.slots
    }

    /// The class's free list, without a bounds check or a shift on the fast paths.
    #[inline(always)]
    fn list(&mut self, class: impl Into<ClassSlot>) -> &mut FreeList {
        let slot = class.into();
        debug_assert!(slot.class().index() < NUM_CLASSES);
        // SAFETY: a slot's offset is its class's index (below NUM_CLASSES, the array's length)
        // times SLOT_BYTES, the size of a FreeList: the start of one of the lists.
        unsafe { &mut *self.lists.as_mut_ptr().byte_add(slot.offset()) }
    }

    /// [`Self::list`], to read.
    #[inline(always)]
    pub(super) fn list_ref(&self, class: impl Into<ClassSlot>) -> &FreeList {
        let slot = class.into();
        debug_assert!(slot.class().index() < NUM_CLASSES);
        // SAFETY: as in `list`.
        unsafe { &*self.lists.as_ptr().byte_add(slot.offset()) }
    }

    /// Pops a cached object, or null when the list is empty or the thread moved to another
    /// CPU since the heap last looked (then call [`Self::alloc_slow`], which follows the move
    /// first: a thread that now runs on another node never hands out its old node's objects).
    #[inline(always)]
    pub fn alloc_cached(&mut self, class: impl Into<ClassSlot>) -> *mut u8 {
        let class = class.into();
        // The move is checked after the head: a heap not attached has an empty range (and no
        // CPU word yet).
        if !self.head_is_object(class) || self.moved() {
            return null_mut();
        }
        // SAFETY: the list's head, an object of the arena (checked above).
        unsafe { self.pop_head(class) }
    }

    /// True when the class's list holds an object: its head is in the arena and 8-aligned.
    /// One compare for both an empty list (null is outside the arena) and a head that is no
    /// object of the arena (outside it, or not 8-aligned: a link some write replaced).
    #[inline(always)]
    fn head_is_object(&self, class: ClassSlot) -> bool {
        let head = self.list_ref(class).head;
        (head as usize)
            .wrapping_sub(self.arena_base)
            .rotate_right(3)
            < self.arena_words
    }

    /// [`Self::alloc_cached`] for a slow path that already followed any move: pops the head if
    /// the list holds an object.
    pub(super) fn pop_if_any(&mut self, class: SizeClass) -> *mut u8 {
        if !self.head_is_object(class.slot()) {
            return null_mut();
        }
        // SAFETY: the list's head, an object of the arena (checked above).
        unsafe { self.pop_head(class.slot()) }
    }

    /// Pops the head of the class's list.
    ///
    /// # Safety
    /// The list's head is an object of the arena (so the list is not empty).
    #[inline(always)]
    unsafe fn pop_head(&mut self, class: ClassSlot) -> *mut u8 {
        let key = self.link_key;
        let list = self.list(class);
        let object = list.head;
        // SAFETY: cached objects are free, ours, and linked through their first word (stored
        // as `next_of` reads them: XOR the key).
        list.head = (unsafe { *(object as *const usize) } ^ key) as *mut u8;
        list.aux = object;
        list.popped(object);
        object
    }

    /// [`Self::alloc_cached`] through a pointer that may be a shared [`Self::detached`] heap:
    /// that heap's lists are empty, so it is only read, and null comes back.
    ///
    /// # Safety
    /// `heap` points to the calling thread's own heap, or to a detached heap that nothing
    /// writes.
    #[inline(always)]
    pub unsafe fn pop_cached(heap: *mut ThreadHeap, class: ClassSlot) -> *mut u8 {
        // SAFETY: a read of either kind of heap (contract above): nothing writes it meanwhile.
        // The detached heap's range is empty, so the move is never checked on it.
        if unsafe { !(*heap).head_is_object(class) || (*heap).moved() } {
            return null_mut();
        }
        // SAFETY: a detached heap's lists are empty, so this is the thread's own heap, and its
        // list's head is an object of the arena (checked above).
        unsafe { (*heap).pop_head(class) }
    }

    /// Pushes an object of `class` freed by this thread. Objects of other nodes (and anything
    /// outside the home region) take the slow path. A thread that moved to another node still
    /// caches objects of its old home here: its next allocation follows the move and sends
    /// them home before it hands anything out.
    ///
    /// # Safety
    /// `object` must be a live object of `class` that the caller gives up.
    #[inline(always)]
    pub unsafe fn free(&mut self, object: *mut u8, class: impl Into<ClassSlot>) {
        let class = class.into();
        if (object as usize).wrapping_sub(self.home.region_base) >= self.home.region_bytes {
            // SAFETY: forwarded contract.
            return unsafe { self.free_slow(object, class.class()) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.free_local(object, class) }
    }

    /// True when the thread runs on another CPU than the heap last saw (see `cpu_word`): then
    /// an allocation must take the slow path, whose [`Self::follow_move`] re-homes the heap if
    /// need be. Only for an attached heap (whose list held an object).
    #[inline(always)]
    pub fn moved(&self) -> bool {
        // SAFETY: an attached heap's word is the thread's rseq `cpu_id` (live while the thread
        // runs, which it does: this is its heap) or NO_CPU; volatile, as the kernel writes it.
        unsafe { self.cpu_word.read_volatile() != self.cpu_seen }
    }

    /// The class of `object` if it is a small object of this thread's node at an object
    /// boundary, found through the page map; `None`, touching nothing, for anything else
    /// (other nodes, large objects, foreign or invalid pointers, a heap not attached, secure
    /// mode), which the caller's slow path sorts out. Two loads besides the heap's own fields:
    /// the unit's tag and the class's magic in the line of its list.
    #[inline(always)]
    pub fn home_class_of(&self, object: *const u8) -> Option<ClassSlot> {
        self.home
            .bag_object(object, |class| {
                // The list's copy of the class's magic: the line the push will write anyway.
                self.list_ref(class).start_magic
            })
            .map(|(class, _)| class.slot())
    }

    /// Pushes an object of this thread's node onto its class's list.
    ///
    /// # Safety
    /// `object` is a live object of `class` that the caller gives up, and of this heap's node
    /// ([`Self::home_class_of`] found it, or [`Self::caches_node`] holds for its origin).
    #[inline(always)]
    pub unsafe fn free_local(&mut self, object: *mut u8, class: impl Into<ClassSlot>) {
        let key = self.link_key;
        let list = self.list(class);
        // SAFETY: the object is ours now and at least 8 bytes (every class is); its link is
        // stored as `set_next` stores it (XOR the key).
        unsafe { *(object as *mut usize) = list.head as usize ^ key };
        if list.push(object) {
            // The list, not the class, goes to the slow path: the class is then dead after the
            // list's address is known, which keeps a register free on the C face's `free`.
            let list: *const FreeList = list;
            Self::free_threshold_of(list, self);
        }
    }

    /// [`Self::free_threshold`] for the class whose list is `list` (one of `heap`'s lists).
    /// `extern "C"`: it cannot unwind, so the C face's `free` (which must not unwind either)
    /// needs no landing pad around the call and keeps no stack frame. The list comes first:
    /// `free` then keeps the block in the first argument's register, where it arrived, and
    /// the heap in the second's.
    #[cold]
    #[inline(never)]
    extern "C" fn free_threshold_of(list: *const FreeList, heap: &mut ThreadHeap) {
        // SAFETY: `list` points into `heap.lists` (the caller took it from there).
        let index = unsafe { list.offset_from(heap.lists.as_ptr()) } as usize;
        heap.free_threshold(SizeClass(index as u8));
    }

    /// C's `malloc` from the cache: a block for `size` (up to the largest class) with its
    /// screen word cleared; anything the cache cannot serve goes to `miss` (`size` and `heap`
    /// passed on, by a tail call: a miss stub that reads the return address still finds
    /// `malloc`'s caller): an empty list, a moved thread, a size above the classes, a detached
    /// heap, secure mode and call-site partitions, whose lists stay empty. Sizes up to 1 KiB
    /// take one load of the heap's table; larger ones the same pop out of line.
    ///
    /// # Safety
    /// `heap` points to the calling thread's own heap, or to a detached heap that nothing
    /// writes; `miss` is safe to call with them.
    #[inline(always)]
    pub unsafe fn malloc_hit(heap: *mut ThreadHeap, size: usize, miss: MallocMiss) -> *mut u8 {
        // SAFETY: either kind of heap may be read; the reference ends with the lookup.
        let Some(slot) = (unsafe { &*heap }).slots.slot_of_small_malloc(size) else {
            // SAFETY: forwarded contract.
            return unsafe { Self::malloc_hit_medium(size, heap, miss) };
        };
        // SAFETY: forwarded contract.
        let object = unsafe { Self::pop_unmarked(heap, slot) };
        if object.is_null() {
            // SAFETY: forwarded contract.
            return unsafe { miss(size, heap as *mut c_void) };
        }
        object
    }

    /// [`Self::malloc_hit`] for sizes above the one-load table, out of line so the small
    /// sizes' path has no branch to join. `extern "C"`, the size first: the hit jumps here
    /// with its arguments where `miss` takes them.
    ///
    /// # Safety
    /// As for [`Self::malloc_hit`].
    #[inline(never)]
    unsafe extern "C" fn malloc_hit_medium(
        size: usize,
        heap: *mut ThreadHeap,
        miss: MallocMiss,
    ) -> *mut u8 {
        if let Some(class) = class_of_malloc(size) {
            // SAFETY: forwarded contract.
            let object = unsafe { Self::pop_unmarked(heap, class.slot()) };
            if !object.is_null() {
                return object;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { miss(size, heap as *mut c_void) }
    }

    /// [`Self::malloc_hit`] for sizes up to 1 KiB only (null above): the hit of the C face's
    /// other entries that allocate at the default alignment (`calloc`, the aligned ones at 16
    /// or less, C++'s plain `new`).
    ///
    /// # Safety
    /// As for [`Self::malloc_hit`].
    #[inline(always)]
    pub unsafe fn small_hit(heap: *mut ThreadHeap, size: usize) -> *mut u8 {
        // SAFETY: as in `malloc_hit`.
        match unsafe { &*heap }.slots.slot_of_small_malloc(size) {
            // SAFETY: forwarded contract.
            Some(slot) => unsafe { Self::pop_unmarked(heap, slot) },
            None => null_mut(),
        }
    }

    /// A block of `class` from the cache with its screen word cleared, or null (a miss): the
    /// hit of the C face's `realloc`, which has the class already.
    ///
    /// # Safety
    /// As for [`Self::malloc_hit`].
    #[inline(always)]
    pub unsafe fn class_hit(heap: *mut ThreadHeap, class: ClassSlot) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { Self::pop_unmarked(heap, class) }
    }

    /// [`Self::pop_cached`] with the screen word of the block cleared.
    ///
    /// # Safety
    /// As for [`Self::pop_cached`].
    #[inline(always)]
    unsafe fn pop_unmarked(heap: *mut ThreadHeap, class: ClassSlot) -> *mut u8 {
        // SAFETY: forwarded contract.
        let object = unsafe { Self::pop_cached(heap, class) };
        if !object.is_null() {
            // SAFETY: a cached block of the C face, handed out.
            unsafe { Screen::clear(object) };
        }
        object
    }

    /// C's `free` into the cache: a small block of the thread's node is screened and pushed
    /// (true); anything else is refused, touching nothing (false: null, other nodes, large
    /// blocks, foreign or invalid pointers, a detached heap, secure mode, call-site
    /// partitions), for the face's slow path.
    ///
    /// # Safety
    /// `heap` is the calling thread's own heap or a detached one (which matches no block). If
    /// `ptr` is a small block of this thread's node, the caller owns it and gives it up.
    #[inline(always)]
    pub unsafe fn free_hit(heap: *mut ThreadHeap, ptr: *mut u8, screen: Screen) -> bool {
        // SAFETY: forwarded contract.
        unsafe { Self::free_hit_checked(heap, ptr, screen, |_| {}) }
    }

    /// [`Self::free_hit`], with `check` run on the block's class first (a sized `delete`
    /// checks its size there, with the class the hit finds anyway, as the slot a lookup by
    /// size returns).
    ///
    /// # Safety
    /// As for [`Self::free_hit`].
    #[inline(always)]
    pub unsafe fn free_hit_checked(
        heap: *mut ThreadHeap,
        ptr: *mut u8,
        screen: Screen,
        check: impl FnOnce(ClassSlot),
    ) -> bool {
        // SAFETY: either kind of heap may be read (contract above).
        let Some(class) = unsafe { &*heap }.home_class_of(ptr) else {
            return false;
        };
        check(class);
        // A thread that moved to another node still caches its old home's objects here: its
        // next allocation follows the move and sends them home first (`alloc_cached`).
        // SAFETY: the block matched the heap's home region, so the heap is the thread's own
        // (the detached heap matches nothing); a small block of this node at an object
        // boundary, given up by the caller.
        unsafe { (*heap).free_screened(ptr, class, screen) };
        true
    }

    /// Screens a small block of this heap's node and pushes it onto its class's list (or hands
    /// a marked block to the screen's `on_marked`).
    ///
    /// # Safety
    /// As for [`Self::free_local`], and the block is one of the C face's (at least 16 bytes).
    #[inline(always)]
    pub unsafe fn free_screened(&mut self, ptr: *mut u8, class: ClassSlot, screen: Screen) {
        // SAFETY: a block of the C face, which the caller gives up.
        if !unsafe { screen.mark(ptr) } {
            // SAFETY: forwarded contract (a tail call: the hit keeps no registers).
            return unsafe { (screen.on_marked)(ptr, self) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.free_local(ptr, class) };
    }
}

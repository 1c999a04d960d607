//! The front: a **thread heap** per thread, touched by its thread only, so its fast paths use no
//! atomic and no lock.
//!
//! Per size class a [`FreeList`]; the lists and the fast paths over them are in `cache.rs`
//! ([`ThreadHeap::alloc_cached`] pops, [`ThreadHeap::free`] pushes an object of the home node,
//! [`ThreadHeap::malloc_hit`] and [`ThreadHeap::free_hit`] are the C face's, which find the
//! class of an unsized pointer of the home node through the page map and apply the face's
//! double-free screen). Everything else is a named slow path:
//! `slow.rs` (refills, drains, parking, remote frees through the per-node [`Outbox`]es),
//! `secure.rs` (secure mode), `partition.rs` (call-site partitions: lists per (partition,
//! class)), `adapt.rs` (limits that follow the traffic), `upkeep.rs` (the periodic pass,
//! re-homing, flush and retirement).
//!
//! **Secure mode** keeps the fast paths out of play rather than slowing them: the list heads they
//! read stay null and the home view never matches, so every call reaches a slow path, which
//! keeps the objects in chains (the lists' `aux`) whose links are encoded and checked, marks each
//! object in the allocation bitmap when it is handed out, and refuses a free whose bit is clear
//! (a double free). With secure mode off, nothing on a fast path changes.
//!
//! Frees of another node's objects go to that node's outbox and travel to its inbox as one
//! chain. At thread exit everything cached goes home; afterwards the heap is *retired* and serves
//! any late call (from other thread-local destructors) directly from the node heaps.
//!
//! Layer: calls `node` only (through its facade); used by the process-wide instance and the
//! faces.

mod adapt;
mod cache;
mod large;
mod outbox;
mod partition;
pub(crate) mod pool;
mod profile;
mod secure;
mod slow;
mod tier;
mod upkeep;

#[cfg(test)]
mod adapt_tests;
#[cfg(test)]
mod free_list_tests;
#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod large_tests;
#[cfg(test)]
mod lazy_tests;
#[cfg(test)]
mod partition_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upkeep_tests;

use crate::bind::BindBase;
use crate::ds::next_of;
use crate::node::{HomeView, Misuse, NodeHeaps, NodeId, Partition, PartitionView};
use crate::os;
use crate::os::cpuset::CpuSet;
use crate::os::topology::MAX_NODES;
use crate::profile::Sampler;
use crate::size_class::{SizeClass, SlotTables, NUM_CLASSES};
use cache::FreeList;
pub use cache::{MallocMiss, Screen};
use core::ptr::null_mut;
use outbox::Outbox;
use partition::PartitionCache;
pub use profile::Caller;
use profile::SampleState;

/// Where a thread heap is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum HeapState {
    /// No allocation yet: the first slow path binds the thread and attaches the heap.
    Fresh,
    /// Attached to a node: caches in use.
    Active,
    /// Flushed at thread exit; late calls bypass the caches.
    Retired,
}

/// Frees of a held class (objects of 256 KiB: see `park`) a thread sends to the region's hold
/// per upkeep period. The hold costs a trip to the bags and the span lock each way (about
/// 300 ns a pair against 25 parked); this bounds that to a few hundred a second per thread in
/// a loop, while a program that frees such blocks now and then has every one held. The hold's
/// own burst: more would go to the region only to be refused.
const HOLDS_PER_UPKEEP: u16 = crate::node::GUARD_BURST as u16;

/// A thread's heap: per-class caches of free objects, outboxes for other nodes' objects, and
/// what the free fast path needs to recognise objects of the home node. Its thread alone uses
/// it; faces reach it through a thread-local pointer.
///
/// Laid out in declaration order (`repr(C)`): the fields a fresh heap must write, the class
/// tables, then the per-class arrays whose fresh value is zero bits (the lists first). A heap
/// on fresh memory writes only what comes before the lists (`ThreadHeap::init`), and a list
/// is configured at its class's first slow path, so a thread's heap costs the pages of the
/// classes it uses, not all of its 15 KiB.
#[repr(C)]
pub struct ThreadHeap {
    /// The home region and, for `free` without a size, the page map (see [`HomeView`]). Never
    /// matching until the heap is attached, once retired, and in secure mode.
    home: HomeView,
    state: HeapState,
    /// Secure mode (the arena's): every call takes the slow paths, which check everything.
    secure: bool,
    node: NodeId,
    heaps: *const NodeHeaps,
    /// The arena's range, `(p - arena_base) < 8 * arena_words` (empty until attached), and every
    /// object is 8-aligned: a pop finding its list's head outside the range or misaligned has
    /// found a link overwritten after free (or by an overflow), and refuses to hand it out.
    /// Both in one compare: `(p - arena_base).rotate_right(3) < arena_words`.
    arena_base: usize,
    arena_words: usize,
    /// [`crate::ds::LINK_KEY`], read from here by the fast paths: an operand in memory beside
    /// the range, it holds no register across the loops they are inlined into.
    link_key: usize,
    /// Per class, the cuts since its last refill (up to `adapt::CUTS_TO_SHRINK`) and whether
    /// the list was cut since its limit was reset (`adapt.rs`).
    cuts: [u8; NUM_CLASSES],
    /// Bytes the grown limits add to the base limits (bounded by `THREAD_GROWN_BYTES`).
    grown_bytes: usize,
    outbox_mask: u32,
    /// The one object of a class above `MAX_CACHED` this thread keeps (the last it freed, if
    /// not handed out again since), and its class: such classes are not cached beyond it.
    parked: *mut u8,
    parked_class: SizeClass,
    /// Frees of a class whose spans the region holds at their free (256 KiB) this thread may
    /// still send there before its next upkeep pass; past them, such objects are parked like
    /// the other big classes (see `park`).
    holds_left: u16,
    /// Monotonic ns of the next upkeep pass (idle classes flushed, node upkeep); see `upkeep`.
    next_upkeep: u64,
    /// Bit `c`: class `c`'s counts were published (it was used) since the last upkeep pass,
    /// which must not take its list for idle: publication makes the counts look idle.
    published: u128,
    /// Input to the attach hook: what the thread's binding starts from (its current mask, the
    /// process's start-up mask when the thread is known to have inherited nodalloc's own, or
    /// none when the program chose the thread's mask).
    bind_base: BindBase,
    /// The affinity nodalloc set on this thread, if it set one (output of the attach hook).
    bound_mask: Option<CpuSet>,
    /// Taken from the pool of a face that keeps its own thread-local pointer (the C library);
    /// such heaps are retired by that face, not by the crate's exit key.
    pooled: bool,
    /// Link in the pool of free heaps.
    pool_next: *mut ThreadHeap,
    /// Monotonic ns when a thread that exited left its caches in this pooled heap for the next
    /// thread (see `pool.rs`); 0 when it holds none.
    kept_since: u64,
    /// Several nodes: slow paths sample the CPU and the heap re-homes when the thread runs on
    /// another node (unbound and moved by the scheduler, or re-pinned by the program).
    follow_cpu: bool,
    /// With `follow_cpu`, where glibc registered an rseq area: the word in which the kernel
    /// keeps the thread's current CPU, and the CPU seen there when the heap last looked. An
    /// allocation fast path that finds another CPU there takes the slow path, which re-homes
    /// the heap if that CPU is on another node: a thread moved (by the scheduler, `taskset`, or
    /// itself) returns the objects it cached to their node before it hands out anything, and
    /// allocates from its new node from then on (a free that leaves the home region re-homes
    /// too). Otherwise a word that never changes ([`NO_CPU`]). Set when attached (null before,
    /// when the fast paths never get this far: the lists are empty).
    cpu_word: *const u32,
    cpu_seen: u32,
    /// Called on the first slow path of a fresh heap to attach it (the instance binds the
    /// thread and homes the heap); returns false when no heap can be had.
    attach_hook: Option<fn(&mut ThreadHeap) -> bool>,
    /// Call-site partitions (`partition.rs`): P (0: off, as the instance has it), the call
    /// site of the current allocation (the C face; 0 for none), the scope set by the Rust
    /// face (used when there is no call site), and the lists per (partition, class).
    partitions: usize,
    call_site: usize,
    scope: usize,
    /// The scope's partition (`scope` modulo P, kept so the pop needs no division).
    scope_part: Partition,
    parts: *mut PartitionCache,
    /// The partition lists' fast paths are open (attached, partitions on, not secure), and
    /// the view their frees use.
    part_fast: bool,
    part_view: PartitionView,
    /// Some list may hold objects a refill stole from another node (the home region was
    /// exhausted): what the heap gives back is sorted by origin until its next flush.
    foreign: bool,
    /// The node heaps' pressure epoch this heap last gave its caches back for (see
    /// [`Self::refill_duties`]).
    pressure_seen: u64,
    /// The last [`Self::alloc_slow`] handed out an object of the sparse pool that nothing had
    /// touched yet, from memory that reads as zero (see `refill_sparse`): a face that writes
    /// into the objects it hands out
    /// (the C face's double-free mark) asks with [`Self::took_untouched`] and leaves it alone.
    untouched: bool,
    /// The far node every allocation of the thread goes to while it is in a far scope (see
    /// `tier.rs`); `None` outside one.
    far: Option<NodeId>,
    /// The heap profile's countdown (`crate::profile`), and the frame pointer of the current
    /// allocation's caller (the C face's, with `call_site`; 0 for none).
    pub(crate) sampler: Sampler,
    sample_state: SampleState,
    caller: Caller,
    /// The thread's stack mapping, for the profile's stack walks (empty until read).
    stack: (usize, usize),
    /// Heap profiling through the class lists (profiling on, call-site partitions off; see
    /// `profile.rs`): the fast paths pop, frees take the slow path, and each class's list holds
    /// fewer objects than its next sample is allocations away.
    lean: bool,
    /// In lean mode while attached, the home view the free fast path would use (its own is
    /// empty, so that frees come to the slow path); `NONE` otherwise.
    lean_home: HomeView,
    /// The last large objects the thread freed, for its next large allocations (`large.rs`).
    kept_large: large::KeptLarge,
    /// The class lookups' tables, a copy in every heap: the faces' fast paths look a size up
    /// at the heap's address, which they have, with no load of a table's address first.
    slots: SlotTables,
    /// Per class, the list of free objects; zero bits (unconfigured: see `cache.rs`) until the
    /// class's first slow path.
    lists: [FreeList; NUM_CLASSES],
    /// Per class, in lean mode: allocations left up to and including the next sampled one.
    budget: [u32; NUM_CLASSES],
    /// Per class, in lean mode: the list's pops since publication when last counted.
    seen: [u32; NUM_CLASSES],
    /// Per class, in lean mode: objects the budget kept off the list (newest first), which the
    /// class's next miss takes back before it asks the node heap (see `profile.rs`).
    stash: [crate::node::Batch; NUM_CLASSES],
    /// Per class of the sparse pool: the untouched objects the last refill took from a bag,
    /// handed out before the next refill (`refill_sparse`), given back by the flush.
    runs: [crate::node::Run; NUM_CLASSES],
    /// Per node, the frees of that node's objects on their way to its inbox (several nodes).
    outboxes: [Outbox; MAX_NODES],
}

/// A fresh heap's fields, written once for both ways of making one: [`ThreadHeap::with_attach_hook`]
/// (a value: `literal`) and [`ThreadHeap::init`] (in place on memory that reads as zero bits:
/// `in_place`). The fields before the lists get their values; the per-class arrays after them
/// (listed last) are zero bits, which is their empty value: the unconfigured list (a test holds
/// it equal to `FreeList::EMPTY`), `Batch::EMPTY`, `Run::EMPTY`, no budget, empty outboxes. The
/// literal names every field, so a field added to the heap fails to compile until it is listed
/// here, with a value or among the zero arrays.
macro_rules! fresh_heap {
    ($how:ident, $($target:expr),+) => {
        fresh_heap!(@$how [$($target),+]
            home: HomeView::NONE,
            state: HeapState::Fresh,
            secure: false,
            node: NodeId(0),
            heaps: core::ptr::null(),
            arena_base: 0,
            arena_words: 0,
            link_key: crate::ds::LINK_KEY,
            cuts: [0; NUM_CLASSES],
            grown_bytes: 0,
            outbox_mask: 0,
            parked: null_mut(),
            parked_class: SizeClass(0),
            holds_left: HOLDS_PER_UPKEEP,
            next_upkeep: 0,
            published: 0,
            bind_base: BindBase::Current,
            bound_mask: None,
            pooled: false,
            pool_next: null_mut(),
            kept_since: 0,
            follow_cpu: false,
            cpu_word: core::ptr::null(),
            cpu_seen: 0,
            partitions: 0,
            call_site: 0,
            scope: 0,
            scope_part: Partition::DEFAULT,
            parts: null_mut(),
            part_fast: false,
            part_view: PartitionView::NONE,
            foreign: false,
            pressure_seen: 0,
            untouched: false,
            far: None,
            sampler: Sampler::OFF,
            sample_state: SampleState::Idle,
            caller: Caller {
                ret: 0,
                frame: 0,
                size: 0,
            },
            stack: (0, 0),
            lean: false,
            lean_home: HomeView::NONE,
            kept_large: large::KeptLarge::EMPTY,
            slots: SlotTables::TABLES;
            lists, budget, seen, stash, runs, outboxes)
    };
    (@literal [$hook:expr] $($field:ident: $value:expr),+; $($zero:ident),+) => {
        ThreadHeap {
            attach_hook: $hook,
            $($field: $value,)+
            // SAFETY: the zero arrays' elements are raw pointers, integers and booleans, for
            // which zero bits are a value (their empty one).
            $($zero: unsafe { core::mem::zeroed() },)+
        }
    };
    (@reset [$heap:expr, $hook:expr] $($field:ident: $value:expr),+; $($zero:ident),+) => {{
        let heap: *mut ThreadHeap = $heap;
        // SAFETY: the caller's contract: `heap` is a valid heap that nothing else uses. Zero
        // bits are each zero array element's fresh value (see above).
        unsafe {
            $(for element in (*heap).$zero.iter_mut() {
                if !FreshValue::is_fresh_value(element) {
                    core::ptr::write_bytes(element, 0, 1);
                }
            })+
        }
        // The zero arrays now read as zero bits, as the in-place write requires.
        fresh_heap!(in_place, heap, $hook)
    }};
    (@in_place [$heap:expr, $hook:expr] $($field:ident: $value:expr),+; $($zero:ident),+) => {{
        let heap: *mut ThreadHeap = $heap;
        // SAFETY: the caller's contract: `heap` is valid for writes and the zero arrays read as
        // zero bits already.
        unsafe {
            core::ptr::addr_of_mut!((*heap).attach_hook).write($hook);
            $(core::ptr::addr_of_mut!((*heap).$field).write($value);)+
        }
    }};
}

/// An element of a heap's per-class arrays (see `fresh_heap!`), whose fresh value is zero bits:
/// [`ThreadHeap::reset`] asks each whether it still holds it, and clears only those that do not.
trait FreshValue {
    /// True when the element holds its fresh (zero-bits) value, compared field by field.
    fn is_fresh_value(&self) -> bool;
}

impl FreshValue for FreeList {
    fn is_fresh_value(&self) -> bool {
        self.is_empty_list()
    }
}

impl FreshValue for u32 {
    fn is_fresh_value(&self) -> bool {
        *self == 0
    }
}

impl FreshValue for crate::node::Batch {
    fn is_fresh_value(&self) -> bool {
        self.head.is_null() && self.tail.is_null() && self.count == 0
    }
}

impl FreshValue for crate::node::Run {
    fn is_fresh_value(&self) -> bool {
        self.next.is_null() && self.left == 0 && !self.zeroed
    }
}

impl FreshValue for Outbox {
    fn is_fresh_value(&self) -> bool {
        self.is_empty_value()
    }
}

/// The CPU word of a heap that does not follow its thread's CPU: it never changes.
static NO_CPU: u32 = 0;

/// Reports a list whose head [`ThreadHeap::alloc_cached`] refused: not null (then the list is
/// empty) but outside the arena, a link some write after free replaced. The pops return null
/// for both and the refill path tells them apart (a call on the fast path would cost it a
/// stack frame). `block` held the word that decoded to `head`.
#[cold]
#[inline(never)]
pub(crate) fn corrupted_list(heap: &ThreadHeap, block: *mut u8, head: *mut u8) -> ! {
    let stored = crate::ds::stored_link(head);
    match heap.heaps() {
        Some(heaps) => heaps.report_damaged_link(block, stored),
        None => crate::os::fatal(|w| {
            w.str("corrupted free list: freed block ")
                .hex(block as usize)
                .str(" held ")
                .hex(stored);
        }),
    }
}

impl ThreadHeap {
    /// A fresh heap that attaches through `attach_hook` on its first slow path.
    pub(crate) const fn with_attach_hook(
        attach_hook: Option<fn(&mut ThreadHeap) -> bool>,
    ) -> ThreadHeap {
        fresh_heap!(literal, attach_hook)
    }

    /// Writes a fresh heap that attaches through `attach_hook` at `heap`, in place: every field
    /// before the lists. The lists and the per-class arrays after them are left as they are:
    /// their fresh value is zero bits (empty lists, batches and outboxes, no run, no budget),
    /// so on fresh memory (a new mapping) their pages stay untouched until a class is used.
    ///
    /// # Safety
    /// `heap` is valid for writes of a `ThreadHeap`, aligned, used by nothing else, and its
    /// memory from the lists on reads as zero bits.
    pub(crate) unsafe fn init(
        heap: *mut ThreadHeap,
        attach_hook: Option<fn(&mut ThreadHeap) -> bool>,
    ) {
        fresh_heap!(in_place, heap, attach_hook)
    }

    /// Writes a fresh heap that attaches through `attach_hook` over a used one at `heap`, in
    /// place: each element of the per-class arrays that no longer holds its fresh value (zero
    /// bits) is cleared, then [`Self::init`] writes the rest. Elements that were never written
    /// are only read, so the pages of the classes the heap's last thread never used stay
    /// untouched: a recycled heap costs its next thread what a new one does (cleared whole, it
    /// cost all four of its pages).
    ///
    /// # Safety
    /// `heap` is a valid heap (initialised, aligned) that nothing else uses.
    pub(crate) unsafe fn reset(
        heap: *mut ThreadHeap,
        attach_hook: Option<fn(&mut ThreadHeap) -> bool>,
    ) {
        fresh_heap!(reset, heap, attach_hook)
    }

    /// A heap that never attaches: empty caches, a home region no address matches. A face may
    /// keep one, never written, as the heap of threads that have none, so that its fast paths
    /// miss on it instead of testing for "no heap" first (see [`ThreadHeap::pop_cached`]).
    pub const fn detached() -> ThreadHeap {
        ThreadHeap::with_attach_hook(None)
    }

    /// Runs the attach hook once; true if the heap is attached afterwards.
    pub fn run_attach_hook(&mut self) -> bool {
        if self.state != HeapState::Fresh {
            return self.state == HeapState::Active;
        }
        match self.attach_hook {
            Some(hook) => hook(self) && self.state == HeapState::Active,
            None => false,
        }
    }

    /// Attaches the heap to an allocator instance, homed on `node`. Caches an exited thread
    /// left in the heap (see `pool.rs`) are the new thread's if it is homed on their node, and
    /// go back to their node first otherwise.
    pub(crate) fn attach(&mut self, heaps: &'static NodeHeaps, node: NodeId) {
        // A thread's start; a re-homing moves an active heap and is not counted.
        if self.state == HeapState::Fresh {
            heaps.count_heap_attached(node);
        }
        let keep = self.kept_since != 0 && node == self.node && core::ptr::eq(self.heaps, heaps);
        if keep {
            self.kept_since = 0;
            pool::release_kept();
        } else {
            self.drop_kept_caches();
        }
        self.heaps = heaps;
        self.cpu_word = &NO_CPU;
        self.cpu_seen = 0;
        self.arena_base = heaps.arena_range().0;
        self.node = node;
        self.home = heaps.home_view(node);
        self.secure = heaps.is_secure();
        // With heap profiling on, calls with call-site partitions take the partition lists,
        // where the sampler counts them; without, the class lists in lean mode (`profile.rs`):
        // allocations pop them, frees take the slow path, where the lists are kept shorter
        // than each class's next sample.
        let profiling = crate::profile::rate() != 0 && !self.secure;
        self.partitions = heaps.partitions();
        self.lean = profiling && self.partitions == 0;
        if profiling && !self.sampler.is_started() {
            self.sampler.start(
                crate::profile::rate(),
                self as *const Self as u64 ^ os::monotonic_ns(),
            );
        }
        self.lean_home = HomeView::NONE;
        if self.lean {
            self.lean_home = self.home;
        }
        if self.partitions != 0 || self.lean {
            // Frees go to the partition lists, or through the lean mode's slow path: the class
            // lists' free fast paths never match.
            self.home = HomeView::NONE;
        }
        if self.lean {
            self.start_lean();
        }
        self.scope_part = partition::scope_partition(self.scope, self.partitions);
        self.part_view = heaps.partition_view(node, self.partitions);
        self.state = HeapState::Active;
        self.set_fast_paths();
        if keep {
            // The lists, their limits and what they grew by stay as the last thread left them.
            return;
        }
        // The lists an earlier thread (or the home this heap left) used are set up again; the
        // others stay unconfigured until their class's first slow path (`configure_list`), so
        // a new heap's lists are not written, nor their pages touched, at its thread's start.
        for index in 0..NUM_CLASSES {
            if self.lists[index].is_configured() {
                self.configure_list(SizeClass(index as u8));
            }
        }
        self.cuts = [0; NUM_CLASSES];
        self.grown_bytes = 0;
    }

    /// Sets up `class`'s list for this heap (its constants and base limit, fresh: see
    /// `cache.rs`), keeping what it holds: at attach for a list already in use, and at the
    /// class's first refill for one still unconfigured (zero bits, which sends its pops and
    /// pushes to the slow paths).
    pub(super) fn configure_list(&mut self, class: SizeClass) {
        let list = &mut self.lists[class.index()];
        list.configure(class);
        // Secure mode's lists keep their own order (encoded links, the bitmap's checks).
        if !self.secure {
            list.make_fresh();
        }
    }

    /// True once the heap is attached to a node (and until it is retired).
    pub fn is_attached(&self) -> bool {
        self.state == HeapState::Active
    }

    /// The home node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    pub(crate) fn state(&self) -> HeapState {
        self.state
    }

    /// True once the heap was retired (its thread exited): calls bypass its caches.
    pub fn is_retired(&self) -> bool {
        self.state == HeapState::Retired
    }

    pub(crate) fn heaps(&self) -> Option<&'static NodeHeaps> {
        // SAFETY: `heaps` is null or points to a leaked ('static) NodeHeaps set by `attach`.
        unsafe { self.heaps.as_ref() }
    }

    /// After [`Self::moved`]: notes the CPU and re-homes the heap if the thread's node changed.
    #[cold]
    #[inline(never)]
    pub fn follow_move(&mut self) {
        // SAFETY: as in `moved`.
        self.cpu_seen = unsafe { self.cpu_word.read_volatile() };
        self.check_home();
    }

    /// For a slow path: [`Self::follow_move`] if the heap is attached and its thread moved.
    pub fn check_moved(&mut self) {
        if self.state == HeapState::Active && self.moved() {
            self.follow_move();
        }
    }

    /// Points `cpu_word` at the calling thread's rseq CPU when the heap follows its CPU.
    pub(super) fn watch_cpu(&mut self) {
        self.cpu_word = match crate::os::rseq::cpu_id_word() {
            Some(word) if self.follow_cpu => word,
            _ => &NO_CPU,
        };
        // SAFETY: as in `moved`.
        self.cpu_seen = unsafe { self.cpu_word.read_volatile() };
    }

    /// True when the object the last [`Self::alloc_slow`] returned was carved for the first
    /// time and handed out untouched from memory that reads as zero (a class of the sparse
    /// pool; see `refill_sparse`): a write into it would fault its first page in inside the
    /// allocation, for a page the program touches when it uses the object anyway, and it holds
    /// no leftover bytes to clear. Resets the answer.
    pub fn took_untouched(&mut self) -> bool {
        core::mem::replace(&mut self.untouched, false)
    }

    /// True when a small object of `origin` freed now would go to this heap's cache (attached,
    /// not secure, homed on `origin`): what [`Self::free_local`] requires besides ownership.
    pub fn caches_node(&self, origin: NodeId) -> bool {
        self.state == HeapState::Active
            && !self.secure
            && self.partitions == 0
            && origin == self.node
    }

    /// True when a small object of `origin` freed now would go to one of this heap's partition
    /// lists (attached, not secure, partitions on, homed on `origin`): the C face screens it
    /// for a double free first, as it does for [`Self::caches_node`].
    pub fn partitions_node(&self, origin: NodeId) -> bool {
        self.state == HeapState::Active
            && !self.secure
            && self.partitions != 0
            && origin == self.node
    }

    /// True when `object` is in this thread's cache of `class` (a bounded walk: two batches);
    /// how a face confirms a suspected double free.
    #[cold]
    pub fn holds(&self, class: SizeClass, object: *mut u8) -> bool {
        if self.partitions != 0 {
            return self.partition_holds(class, object);
        }
        for mut cursor in [
            self.lists[class.index()].head,
            self.stash[class.index()].head,
        ] {
            while !cursor.is_null() {
                if cursor == object {
                    return true;
                }
                // SAFETY: walking our own free list (or stash, null-terminated as well).
                cursor = unsafe { next_of(cursor) };
            }
        }
        false
    }

    /// The misuse a free of `object` (a small object of `class` from this heap's node) would be
    /// where this thread can tell: a double free when it is in this thread's cache (or one an
    /// exited thread left in the pool: see `pool::kept_holds`), or free in
    /// its node heap (the ring or its bag; see `NodeHeaps::find_freed`), an invalid pointer when
    /// its bag never carved it. How a face confirms a suspected double free; slow, for
    /// suspicions only.
    #[cold]
    pub fn find_freed(&self, class: SizeClass, object: *mut u8) -> Option<Misuse> {
        if self.holds(class, object) || pool::kept_holds(class, object) {
            return Some(Misuse::DoubleFree);
        }
        self.heaps()?.find_freed(self.node, class, object)
    }

    #[cfg(test)]
    /// Objects currently cached, per class (for tests and diagnostics).
    pub(crate) fn cached(&self, class: SizeClass) -> usize {
        self.lists[class.index()].len()
    }

    /// Tells the attach hook what the thread's binding starts from (see [`BindBase`]).
    pub fn set_bind_base(&mut self, base: BindBase) {
        self.bind_base = base;
    }

    pub(crate) fn bind_base(&self) -> BindBase {
        self.bind_base
    }

    /// The affinity nodalloc set on this thread when it bound it, if it did.
    pub fn bound_mask(&self) -> Option<&CpuSet> {
        self.bound_mask.as_ref()
    }

    /// Records the binding the attach hook made, and whether the heap follows the thread's CPU.
    pub(crate) fn set_binding(&mut self, mask: Option<CpuSet>, follow_cpu: bool) {
        self.bound_mask = mask;
        self.follow_cpu = follow_cpu;
        self.watch_cpu();
    }

    /// True for a heap of a face's pool (retired by that face).
    pub(crate) fn is_pooled(&self) -> bool {
        self.pooled
    }
}

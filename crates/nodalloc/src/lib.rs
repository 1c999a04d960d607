//! # nodalloc
//!
//! A NUMA-aware memory allocator for Linux, after NUMAlloc (Yang et al., ISMM 2023): one reserved
//! heap split into a region per NUMA node, threads bound to nodes, freed objects always returned
//! to the node they came from, and small objects carved from huge pages shared by all threads of
//! a node.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: nodalloc::NodAlloc = nodalloc::NodAlloc::new();
//! ```
//!
//! Besides the allocator: [`stats`] (a snapshot: allocated, active, committed and mapped bytes,
//! per node and per size class, remote frees, steals), [`node_of`], [`current_node`],
//! [`NodAlloc::alloc_on_node`], [`topology`] (what the allocator saw), [`purge`] and
//! [`options`] (every `NODALLOC_*` environment option with its default).
//!
//! Where your data lives, and what the allocator holds:
//!
//! ```
//! let data = vec![0u64; 1 << 16];
//! // The node whose memory holds it (Some for anything nodalloc handed out).
//! let node = nodalloc::node_of(data.as_ptr() as *const u8);
//! let stats = nodalloc::stats();
//! println!("data on node {node:?}; {} bytes live", stats.allocated);
//! ```
//!
//! Configuration is by environment (`NODALLOC_BIND`, `NODALLOC_LIMIT`, `NODALLOC_STATS`, …),
//! read once at the first allocation; [`options`] lists every one. The same allocator serves
//! any C program as `libnodalloc.so` (the `nodalloc-ffi` crate).
//!
//! Inside, layers bottom up (see `docs/DESIGN.md`), all private: `os` (syscalls, `/sys`,
//! options) → `arena` (regions, spans, page map) → `node` (node heaps) → `thread` (thread
//! heaps) → `instance` (the process-wide allocator) → the faces (this file's `GlobalAlloc`;
//! [`raw`] for the C library).
#![deny(missing_docs)]
#![cfg_attr(feature = "nightly", feature(allocator_api))]
// Without the `std` feature: the allocator's core alone, as libnodalloc.so links it.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
// The parts only the crate face calls (first-class heaps' caches) are then unused.
#![cfg_attr(not(feature = "std"), allow(dead_code, unused_imports))]

#[cfg(not(loom))]
mod arena;
#[cfg(not(loom))]
mod bind;
#[cfg(loom)]
#[doc(hidden)]
pub mod ds;
#[cfg(not(loom))]
mod ds;
#[cfg(all(not(loom), feature = "std"))]
pub mod heap;
#[cfg(not(loom))]
mod instance;
#[cfg(not(loom))]
mod node;
#[cfg(not(loom))]
mod os;
#[cfg(not(loom))]
pub mod profile;
#[cfg(not(loom))]
#[doc(hidden)]
pub mod raw;
#[cfg(not(loom))]
mod size_class;
#[cfg(not(loom))]
mod stats;
mod sync;
#[cfg(not(loom))]
mod thread;

#[cfg(not(loom))]
pub use face::*;
#[cfg(all(not(loom), feature = "std"))]
pub use heap::{heap_of, Heap, HeapBuilder, HeapError, HeapId, HeapStats, LocalHeap};

#[cfg(not(loom))]
mod face {
    use crate::instance::Instance;
    use crate::node::NodeId;
    use crate::size_class::class_of;
    use core::alloc::Layout;
    use core::ptr::null_mut;
    #[cfg(feature = "std")]
    use {crate::instance::with_heap, crate::size_class::ClassSlot, core::alloc::GlobalAlloc};

    pub use crate::os::options::{OptionSpec, OPTIONS};
    pub use crate::os::topology::{NodeInfo, OvercommitMode, ThpMode, TierSource, Topology};
    pub use crate::stats::{
        ClassStats, HeapLine, NodeStats, PartitionStats, SharedOpCounts, Stats, TOP_HEAPS,
        TOP_PARTITIONS,
    };

    /// The allocator. Zero-sized and `const`: all state is process-wide, created at the first
    /// allocation.
    pub struct NodAlloc;

    impl NodAlloc {
        /// The allocator handle; `const`, so it can initialise a `static`.
        pub const fn new() -> Self {
            NodAlloc
        }

        /// Allocates one block on `node` (an index into [`topology`]'s usable nodes), whatever
        /// the calling thread's node. To place a whole structure on a node (CPU-less nodes
        /// included), use a [`Heap`](crate::Heap) built with [`HeapBuilder::node`](crate::HeapBuilder::node):
        /// its collections then live there, within a limit if it has one. When the node's
        /// region is full the block comes from the nearest node's, as any allocation does (but
        /// not when a node bound with `NODALLOC_POLICY=bind` runs out of memory). Null when the
        /// node does not exist or no memory is left. Free it like any other allocation.
        ///
        /// ```
        /// use std::alloc::{GlobalAlloc, Layout};
        /// let allocator = nodalloc::NodAlloc::new();
        /// let layout = Layout::from_size_align(4096, 64).unwrap();
        /// let block = allocator.alloc_on_node(layout, 0);
        /// assert_eq!(nodalloc::node_of(block), Some(0));
        /// // SAFETY: allocated above with this layout, freed once.
        /// unsafe { allocator.dealloc(block, layout) };
        /// ```
        pub fn alloc_on_node(&self, layout: Layout, node: usize) -> *mut u8 {
            let Some(instance) = Instance::get() else {
                return null_mut();
            };
            if node >= instance.node_count() {
                return null_mut();
            }
            match class_of(layout.size(), layout.align()) {
                Some(class) => instance.alloc_single(Some(NodeId(node)), class),
                None => instance.alloc_large_on(NodeId(node), layout.size(), layout.align()),
            }
        }
    }

    #[cfg(feature = "std")]
    impl NodAlloc {
        /// Allocates in memory tier `tier`: [`Tier::Near`] as any allocation, [`Tier::Far`] on
        /// the far node of the calling thread's node (see [`far_node`]; served near on a machine
        /// without far memory). Far blocks come from the far node's own bags and spans, so
        /// [`node_of`] names the far node, and they go back there when freed, through any
        /// path. Cold data (rarely read caches, history, logs) belongs there. Free it like any
        /// other allocation.
        ///
        /// ```
        /// use std::alloc::{GlobalAlloc, Layout};
        /// let allocator = nodalloc::NodAlloc::new();
        /// let layout = Layout::from_size_align(256, 8).unwrap();
        /// let block = allocator.alloc_in_tier(layout, nodalloc::Tier::Far);
        /// assert!(!block.is_null());
        /// // On a machine without far memory the block is near.
        /// assert_eq!(nodalloc::far_node().is_some(), nodalloc::far_node() == nodalloc::node_of(block));
        /// // SAFETY: allocated above with this layout, freed once.
        /// unsafe { allocator.dealloc(block, layout) };
        /// ```
        pub fn alloc_in_tier(&self, layout: Layout, tier: Tier) -> *mut u8 {
            let far = match tier {
                Tier::Far => far_node(),
                Tier::Near => None,
            };
            match far {
                Some(node) => self.alloc_on_node(layout, node),
                // SAFETY: `alloc` requires a non-zero size; a zero-size layout gets a one-byte
                // block instead (as `alloc_on_node` gives one).
                None => unsafe {
                    self.alloc(Layout::from_size_align_unchecked(
                        layout.size().max(1),
                        layout.align(),
                    ))
                },
            }
        }
    }

    /// A memory tier (see [`NodAlloc::alloc_in_tier`] and the README's "Memory tiers").
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Tier {
        /// The memory of the calling thread's node (as every allocation).
        Near,
        /// Far memory (CXL, a memory-only node): the far node of the calling thread's node.
        Far,
    }

    /// Sends every allocation the calling thread makes to memory tier `tier` until the
    /// returned scope ends (scopes nest; the inner one wins): with [`Tier::Far`], boxes,
    /// vectors and everything else the thread allocates come from the far node of its node
    /// (near on a machine without far memory), as [`NodAlloc::alloc_in_tier`] places one block.
    /// Frees are not affected (a block goes back to its own node). Inside the scope the thread
    /// allocates without its caches, so keep far scopes around the building of cold data.
    ///
    /// ```
    /// #[global_allocator]
    /// static GLOBAL: nodalloc::NodAlloc = nodalloc::NodAlloc::new();
    ///
    /// fn main() {
    ///     let history: Vec<u64> = {
    ///         let _far = nodalloc::tier(nodalloc::Tier::Far);
    ///         (0..1000).collect()
    ///     };
    ///     // On a machine without far memory, far requests are served near, at home.
    ///     let home = nodalloc::node_of(&*Box::new(0u8));
    ///     assert_eq!(
    ///         nodalloc::node_of(history.as_ptr() as *const u8),
    ///         nodalloc::far_node().or(home)
    ///     );
    /// }
    /// ```
    #[cfg(feature = "std")]
    pub fn tier(tier: Tier) -> TierScope {
        let previous = Instance::get().map(|instance| {
            with_heap(|heap| {
                let far = match tier {
                    Tier::Far => instance.far_node_for(Some(heap)),
                    Tier::Near => None,
                };
                heap.enter_far(far)
            })
        });
        TierScope {
            previous,
            _thread: core::marker::PhantomData,
        }
    }

    /// A scope of [`tier`]; not `Send`, as it belongs to the thread that made it.
    #[cfg(feature = "std")]
    #[must_use = "the tier applies only while the scope lives"]
    pub struct TierScope {
        /// The far node before the scope (`None` when the allocator could not start).
        previous: Option<Option<NodeId>>,
        _thread: core::marker::PhantomData<*const ()>,
    }

    #[cfg(feature = "std")]
    impl Drop for TierScope {
        fn drop(&mut self) {
            if let Some(previous) = self.previous {
                with_heap(|heap| heap.enter_far(previous));
            }
        }
    }

    /// The node (an index into [`topology`]'s usable nodes) that far-memory requests of the
    /// calling thread go to: the nearest far node of its node; `None` on a machine without
    /// far memory, where they are served near.
    #[cfg(feature = "std")]
    pub fn far_node() -> Option<usize> {
        let instance = Instance::get()?;
        with_heap(|heap| instance.far_node_for(Some(heap))).map(|node| node.index())
    }

    impl Default for NodAlloc {
        fn default() -> Self {
            Self::new()
        }
    }

    #[cfg(feature = "std")]
    #[cold]
    #[inline(never)]
    fn alloc_large(layout: Layout) -> *mut u8 {
        let Some(instance) = Instance::get() else {
            return null_mut();
        };
        with_heap(|heap| instance.alloc_large(Some(heap), layout.size(), layout.align()))
    }

    #[cfg(feature = "std")]
    #[cold]
    #[inline(never)]
    fn free_large(ptr: *mut u8) {
        match Instance::existing() {
            Some(instance) => with_heap(|heap| instance.free_large(Some(heap), ptr)),
            None => crate::instance::report_misuse(ptr, crate::node::Misuse::InvalidPointer),
        }
    }

    /// The slot of a size up to 1 KiB at an alignment up to 16, from the thread heap's tables
    /// (one load at the heap's address); `None` for the rest.
    #[cfg(feature = "std")]
    #[inline(always)]
    fn small_slot(layout: Layout) -> Option<ClassSlot> {
        with_heap(|heap| heap.slots().slot_of_small(layout.size(), layout.align()))
    }

    /// A block of `class` for a request of `size` bytes (the miss path tells the heap
    /// profile the size asked for).
    #[cfg(feature = "std")]
    #[inline(always)]
    fn alloc_small(class: ClassSlot, size: usize) -> *mut u8 {
        with_heap(|heap| {
            let object = heap.alloc_cached(class);
            if !object.is_null() {
                object
            } else {
                heap.alloc_slow_asked(class.class(), size)
            }
        })
    }

    // SAFETY: `alloc` returns null or a block of at least `layout.size()` bytes aligned to
    // `layout.align()` that no other live allocation overlaps; `dealloc` accepts exactly such
    // blocks (with the same layout) and never touches other memory.
    #[cfg(feature = "std")]
    unsafe impl GlobalAlloc for NodAlloc {
        // Two inline copies of the cache operation, one per kind of class lookup: the one-load
        // lookup (sizes up to 1 KiB) and the arithmetic one above it. A constant layout keeps
        // one of them; a variable one gets a small case with no branch to join. Always inlined:
        // LLVM's estimate of the two copies is near its threshold, and a call (a frame, saved
        // registers) costs more than the copies (`single_size` 1.13–1.27× when it fell out of
        // line).
        #[inline(always)]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if let Some(class) = small_slot(layout) {
                return alloc_small(class, layout.size());
            }
            match class_of(layout.size(), layout.align()) {
                Some(class) => alloc_small(class.slot(), layout.size()),
                None => alloc_large(layout),
            }
        }

        #[inline(always)]
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            if let Some(class) = small_slot(layout) {
                // SAFETY: `ptr` was returned by `alloc` with this layout, hence of this class.
                return with_heap(|heap| unsafe { heap.free(ptr, class) });
            }
            match class_of(layout.size(), layout.align()) {
                // SAFETY: as above.
                Some(class) => with_heap(|heap| unsafe { heap.free(ptr, class) }),
                None => free_large(ptr),
            }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if let Some(class) = class_of(layout.size(), layout.align()) {
                return with_heap(|heap| heap.alloc_zeroed(class, layout.size()));
            }
            // SAFETY: forwarded contract.
            let ptr = unsafe { self.alloc(layout) };
            let fresh = class_of(layout.size(), layout.align()).is_none()
                && !ptr.is_null()
                // SAFETY: `ptr` is a large object we just allocated.
                && Instance::existing().is_some_and(|instance| unsafe { instance.large_is_zeroed(ptr as usize) });
            if !ptr.is_null() && !fresh {
                // SAFETY: `ptr` holds at least `layout.size()` writable bytes.
                unsafe { ptr.write_bytes(0, layout.size()) };
            }
            ptr
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let old_class = class_of(layout.size(), layout.align());
            let new_class = class_of(new_size, layout.align());
            match (old_class, new_class) {
                (Some(old), Some(new)) if old == new => return ptr,
                (None, None) => {
                    if let Some(instance) = Instance::existing() {
                        let resized = with_heap(|heap| {
                            instance.resize_large_in_place(Some(heap), ptr, new_size)
                        });
                        if resized {
                            return ptr;
                        }
                    }
                }
                _ => {}
            }
            // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: forwarded contract.
            let new_ptr = unsafe { self.alloc(new_layout) };
            if !new_ptr.is_null() {
                // SAFETY: both blocks are live, distinct, and hold at least the copied length.
                unsafe {
                    core::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
            }
            new_ptr
        }
    }

    /// A snapshot of the allocator's statistics (empty before the first allocation). Publishes
    /// the calling thread's counters and remote frees first; other running threads lag by at most
    /// one batch per class (and their remote frees by one outbox per node).
    pub fn stats() -> Stats {
        match Instance::existing() {
            Some(instance) => instance.stats(),
            None => Stats::empty(),
        }
    }

    /// Prints [`stats`] to stderr without allocating.
    pub fn print_stats() {
        stats().write_to(2);
    }

    /// The node whose memory holds `ptr`, if nodalloc handed it out (with automatic tiering,
    /// the far node for a block whose bag was moved there).
    pub fn node_of(ptr: *const u8) -> Option<usize> {
        Instance::existing()?
            .node_of(ptr as usize)
            .map(NodeId::index)
    }

    /// The calling thread's home node (binding it first if it has not allocated yet).
    #[cfg(feature = "std")]
    pub fn current_node() -> usize {
        with_heap(|heap| {
            heap.run_attach_hook();
            heap.node().index()
        })
    }

    /// The machine as the allocator sees it (creating the allocator if needed).
    pub fn topology() -> Option<&'static Topology> {
        Instance::get().map(|instance| instance.topology())
    }

    /// Returns every cached free object to its bags and every free page to the OS now, whole
    /// free pages inside bags still in use included, without waiting for the decommit delay
    /// (like glibc's `malloc_trim(0)`). Other threads' caches are left alone.
    #[cfg(feature = "std")]
    pub fn purge() {
        if let Some(instance) = Instance::existing() {
            with_heap(|heap| instance.purge(Some(heap)));
        }
    }

    /// Sets a hard limit on committed heap bytes (0 removes it). Allocations that would pass it
    /// return null; frees make room again. Fails only when the heap cannot be created.
    ///
    /// ```
    /// assert!(nodalloc::set_limit(1 << 30)); // at most 1 GiB committed from now on
    /// assert_eq!(nodalloc::stats().limit, 1 << 30);
    /// nodalloc::set_limit(0); // no limit
    /// ```
    pub fn set_limit(bytes: usize) -> bool {
        match Instance::get() {
            Some(instance) => {
                instance.set_limit(bytes);
                true
            }
            None => false,
        }
    }

    /// Sets a hard limit on the heap bytes committed in memory tier `tier` (0 removes it), as
    /// `NODALLOC_NEAR_LIMIT` and `NODALLOC_FAR_LIMIT` do; the limit of [`set_limit`] still
    /// holds over both tiers. Past it a request of that tier is served from the other tier, or
    /// fails with `NODALLOC_TIER_FULL=fail`; frees make room again. Fails only when the heap
    /// cannot be created.
    ///
    /// ```
    /// use nodalloc::Tier;
    /// assert!(nodalloc::set_tier_limit(Tier::Near, 8 << 30));
    /// assert_eq!(nodalloc::stats().near_limit, 8 << 30);
    /// nodalloc::set_tier_limit(Tier::Near, 0); // no limit
    /// ```
    pub fn set_tier_limit(tier: Tier, bytes: usize) -> bool {
        match Instance::get() {
            Some(instance) => {
                instance.set_tier_limit(tier == Tier::Far, bytes);
                true
            }
            None => false,
        }
    }

    /// Every `NODALLOC_*` option: name, default and meaning.
    ///
    /// ```
    /// assert!(nodalloc::options().iter().any(|option| option.name == "NODALLOC_LIMIT"));
    /// ```
    pub fn options() -> &'static [OptionSpec] {
        OPTIONS
    }

    /// Starts the maintenance thread unless `NODALLOC_BACKGROUND=0` or one runs already (the
    /// default, `release`, makes upkeep passes only; `1` the full thread); true when one runs
    /// afterwards. Call it from ordinary code (not from inside an
    /// allocation): it creates a thread. See the option's documentation.
    pub fn start_background() -> bool {
        Instance::get().is_some() && crate::instance::background::start(libc::pthread_create)
    }

    /// The calling thread's allocations go to call-site partition `id` (modulo
    /// `NODALLOC_CALLSITE`) while the returned scope lives; dropping it restores the partition
    /// before. Without the mode (`NODALLOC_CALLSITE` unset or 0) a scope changes nothing.
    ///
    /// Rust's allocator interface does not know who calls it, so the Rust face partitions by
    /// explicit scopes: give each kind of work whose objects die together its own id, e.g. a
    /// request handler `let _scope = nodalloc::partition(REQUESTS);` and a cache that outlives
    /// requests `let _scope = nodalloc::partition(CACHE);` around its insertions. Frees need
    /// no scope: an object returns to its own partition's bags wherever it is freed.
    #[cfg(feature = "std")]
    pub fn partition(id: usize) -> PartitionScope {
        let previous = with_heap(|heap| heap.enter_scope(id));
        PartitionScope {
            previous,
            _thread: core::marker::PhantomData,
        }
    }

    /// A scope of [`partition`]; not `Send`, as it belongs to the thread that made it.
    #[cfg(feature = "std")]
    #[must_use = "the partition applies only while the scope lives"]
    pub struct PartitionScope {
        previous: usize,
        _thread: core::marker::PhantomData<*const ()>,
    }

    #[cfg(feature = "std")]
    impl Drop for PartitionScope {
        fn drop(&mut self) {
            with_heap(|heap| heap.enter_scope(self.previous));
        }
    }

    /// One allocation in call-site partition `id` (see [`partition`]); null when no memory is
    /// left. Free it as any allocation of `layout` (`dealloc`).
    #[cfg(feature = "std")]
    pub fn alloc_in(id: usize, layout: Layout) -> *mut u8 {
        let _scope = partition(id);
        // SAFETY: GlobalAlloc's contract asks for a non-zero size; NodAlloc's `alloc` also
        // takes a zero-size layout (it gets an object of the smallest class).
        unsafe { NodAlloc.alloc(layout) }
    }

    /// The call-site partition of the small object at `ptr`; `None` with partitions off or for
    /// anything but a small object nodalloc handed out.
    pub fn partition_of(ptr: *const u8) -> Option<usize> {
        Instance::existing()?.partition_of(ptr)
    }
}

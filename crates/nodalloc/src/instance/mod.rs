//! The process-wide instance: one arena, its node heaps, the thread heaps' attach hook, and the
//! process hooks (thread exit, `fork`, the exit report). Created lazily at the first
//! allocation, without allocating, and never torn down.
//!
//! [`Instance`] is the one door the faces use: the crate's `GlobalAlloc`, [`crate::raw`] (for
//! the C library) and the statistics call its operations and never reach into a lower layer.
//! Large objects take one path for every face ([`Instance::alloc_large`],
//! [`Instance::free_large`]): the caller's thread heap, if it has one, runs its upkeep there.
//!
//! Start-up reads the options and the topology, reserves the arena, builds the node heaps,
//! registers a `pthread` key whose destructor flushes a thread's caches when it exits, the
//! `pthread_atfork` handlers that hold every allocator lock across `fork`, and (with
//! `NODALLOC_STATS=1`) an `atexit` report. The crate's own thread heaps live in a
//! `const`-initialised thread-local without a destructor, so reaching one is one TLS-relative
//! address; only the crate face refers to it, so the C library, whose heaps come from the pool,
//! does not carry it in every thread's TLS block.

pub(crate) mod background;
mod start;

use crate::node::{report, Misuse, NodeHeaps, NodeId};
use crate::os::topology::Topology;
use crate::size_class::{SizeClass, UNIT};
use crate::stats::Stats;
use crate::thread::ThreadHeap;
#[cfg(feature = "std")]
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};

pub(crate) use start::{attach_current_thread, callsite_depth};

static INSTANCE: AtomicPtr<NodeHeaps> = AtomicPtr::new(core::ptr::null_mut());

/// Threads whose heap is attached and not yet retired.
static THREADS_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Where the exit report goes: fd 2 unless a face saved a duplicate (a program may close
/// stderr in its own exit handlers before ours runs).
static STATS_FD: AtomicI32 = AtomicI32::new(2);

/// A face that keeps thread heaps of its own (the C library) names the calling thread's heap
/// here, so a statistics snapshot can publish that thread's counters first.
static CURRENT_HEAP_HOOK: AtomicUsize = AtomicUsize::new(0);

#[cfg(feature = "std")]
thread_local! {
    static HEAP: UnsafeCell<ThreadHeap> =
        const { UnsafeCell::new(ThreadHeap::with_attach_hook(Some(attach_crate_face_thread))) };
}

/// How a statistics snapshot reaches the calling thread's heap of the crate face: set by the
/// first attach of such a heap. Nothing the C library links refers to [`HEAP`] then, so the
/// heap's 8 KiB initial image stays out of the library's TLS block, which glibc copies into
/// every thread the program creates (two page faults and 8 KiB of stores per thread).
static CRATE_FACE_HEAP: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's heap of the crate face.
#[cfg(feature = "std")]
fn crate_face_heap() -> *mut ThreadHeap {
    HEAP.with(|heap| heap.get())
}

/// The attach hook of the crate face's heaps: records how to find them, then attaches.
#[cfg(feature = "std")]
fn attach_crate_face_thread(heap: &mut ThreadHeap) -> bool {
    let find: fn() -> *mut ThreadHeap = crate_face_heap;
    CRATE_FACE_HEAP.store(find as usize, Ordering::Release);
    attach_current_thread(heap)
}

/// Runs `f` on the calling thread's heap (the crate face's thread-local one).
#[cfg(feature = "std")]
#[inline(always)]
pub(crate) fn with_heap<R>(f: impl FnOnce(&mut ThreadHeap) -> R) -> R {
    // SAFETY: the heap is only ever touched by its own thread, and nothing `f` calls re-enters
    // the allocator (no internal path allocates), so this is the only live reference.
    HEAP.with(|heap| f(unsafe { &mut *heap.get() }))
}

/// What a pointer is, for `free` and `malloc_usable_size` without a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pointer {
    /// A small object (at an object boundary) of `origin`'s region.
    Small {
        /// Its size class.
        class: SizeClass,
        /// The node whose region holds it.
        origin: NodeId,
    },
    /// A large object of `bytes` usable bytes.
    Large {
        /// Bytes the program may use.
        bytes: usize,
    },
    /// A block of a first-class heap (`nodalloc::Heap`, `nodalloc_heap_new`): freed back to
    /// its heap through `Instance::free_owned`, never into a thread's cache.
    Owned {
        /// Bytes the program may use.
        bytes: usize,
        /// A large block (whole pages of a span of its own) rather than a class's object.
        large: bool,
    },
    /// Not in nodalloc's heap at all (or nodalloc has not started).
    Foreign,
}

/// The process's allocator: a handle on its node heaps (and through them its arena).
#[derive(Clone, Copy)]
pub(crate) struct Instance {
    heaps: &'static NodeHeaps,
}

impl Instance {
    /// The instance, creating it on first use. `None` if the arena cannot be reserved at all.
    #[inline]
    pub(crate) fn get() -> Option<Instance> {
        match Instance::existing() {
            Some(instance) => Some(instance),
            None => start::create().map(|heaps| Instance { heaps }),
        }
    }

    /// The instance if it exists, without creating it.
    #[inline]
    pub(crate) fn existing() -> Option<Instance> {
        // SAFETY: INSTANCE only ever holds a leaked, fully built NodeHeaps.
        unsafe { INSTANCE.load(Ordering::Acquire).as_ref() }.map(|heaps| Instance { heaps })
    }

    /// Usable nodes.
    pub(crate) fn node_count(self) -> usize {
        self.heaps.node_count()
    }

    /// The machine as the allocator saw it at start-up.
    pub(crate) fn topology(self) -> &'static Topology {
        self.heaps.topology()
    }

    /// The call-site partition of the small object at `ptr`; `None` with partitions off or for
    /// anything but a small object nodalloc handed out.
    pub(crate) fn partition_of(self, ptr: *const u8) -> Option<usize> {
        if self.heaps.partitions() == 0 {
            return None;
        }
        match self.classify(ptr) {
            Ok(Pointer::Small { .. }) => Some(self.heaps.partition_of(ptr as usize).index()),
            _ => None,
        }
    }

    /// The first call site recorded for `partition` (0: none, or no such partition).
    pub(crate) fn partition_site(self, partition: usize) -> usize {
        if partition >= self.heaps.partitions() {
            return 0;
        }
        self.heaps
            .partition_info(crate::node::Partition(partition as u16))
            .map_or(0, |info| info.site.load(Ordering::Relaxed))
    }

    /// The node whose region holds `address`, if nodalloc's heap holds it.
    pub(crate) fn origin_of(self, address: usize) -> Option<NodeId> {
        self.heaps.origin_of(address)
    }

    /// The node whose memory holds `address`: its region's, or the far node's when automatic
    /// tiering moved its bag there.
    pub(crate) fn node_of(self, address: usize) -> Option<NodeId> {
        let origin = self.heaps.origin_of(address)?;
        Some(self.heaps.placed_node(origin, address))
    }

    /// The node of the CPU the caller runs on (node 0 when it cannot be read): the home of a
    /// call without a thread heap.
    fn current_node(self) -> NodeId {
        crate::os::current_cpu()
            .map(|cpu| self.heaps.node_of_cpu(cpu))
            .unwrap_or_default()
    }

    /// Where a far-memory request of the thread owning `heap` goes: the far node of its home
    /// node (of the node it runs on without an attached heap); `None` without far memory.
    pub(crate) fn far_node_for(self, heap: Option<&ThreadHeap>) -> Option<NodeId> {
        let node = match heap {
            Some(heap) if heap.is_attached() => heap.node(),
            _ => self.current_node(),
        };
        self.topology().far_node_of(node.index()).map(NodeId)
    }

    /// A small object straight from `node`'s bags, bypassing every cache (a thread without a
    /// heap, or an allocation on a chosen node). Null when no memory is left.
    pub(crate) fn alloc_single(self, node: Option<NodeId>, class: SizeClass) -> *mut u8 {
        let node = node.unwrap_or_else(|| self.current_node());
        self.heaps
            .alloc_single(node, crate::node::Partition::DEFAULT, class)
    }

    /// Takes back a small object of `class` from `origin` without a thread cache.
    ///
    /// # Safety
    /// `object` is a live object of `class` from `origin`'s region that the caller gives up.
    pub(crate) unsafe fn free_single(self, origin: NodeId, class: SizeClass, object: *mut u8) {
        // SAFETY: forwarded contract.
        unsafe { self.heaps.free_single(origin, class, object) }
    }

    /// A large object of `size` bytes at `align`, on the home node of `heap` (after its
    /// slow-path upkeep) or, for a thread without a usable heap, on the node it runs on. Null
    /// when no memory is left.
    pub(crate) fn alloc_large(
        self,
        heap: Option<&mut ThreadHeap>,
        size: usize,
        align: usize,
    ) -> *mut u8 {
        let mut heap = heap.filter(|heap| !heap.is_retired());
        let (node, mut block, sampled) = match heap.as_deref_mut() {
            Some(heap) => {
                heap.run_attach_hook();
                heap.check_home();
                heap.upkeep();
                let node = heap.allocation_node();
                let units = size.max(1).div_ceil(UNIT);
                let kept = heap.take_kept_large(node, units, (align / UNIT).max(1));
                if kept.is_null() {
                    // None fits: what the thread keeps goes back first, so that the region can
                    // serve this request over memory already committed (and never fails it
                    // while memory waits here).
                    heap.release_kept_large();
                }
                (node, kept, heap.sample_large(size))
            }
            None => (self.current_node(), core::ptr::null_mut(), false),
        };
        if block.is_null() {
            block = self.heaps.alloc_large(node, size, align);
        }
        if let Some(heap) = heap {
            if sampled && !block.is_null() {
                heap.record_sample(block, size, size);
            }
        }
        block
    }

    /// A large object on `node` (which must exist), whatever the caller's node.
    pub(crate) fn alloc_large_on(self, node: NodeId, size: usize, align: usize) -> *mut u8 {
        self.heaps.alloc_large(node, size, align)
    }

    /// Frees a large object (aborting, naming it, if it is not a live one), then lets `heap`
    /// run its upkeep.
    pub(crate) fn free_large(self, heap: Option<&mut ThreadHeap>, object: *mut u8) {
        match heap {
            Some(heap) => {
                if !heap.keep_large(object) {
                    self.heaps.free_large(object as usize);
                }
                heap.upkeep();
            }
            None => self.heaps.free_large(object as usize),
        }
    }

    /// True when a large object just returned by [`Self::alloc_large`] reads as zero.
    ///
    /// # Safety
    /// `object` is a large object the caller has just received.
    pub(crate) unsafe fn large_is_zeroed(self, address: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.heaps.large_is_zeroed(address) }
    }

    /// Resizes a large object in place; false (nothing changed) if it cannot. To the heap
    /// profile the resized block is a new allocation of `new_size` (as `realloc` is to
    /// jemalloc's and tcmalloc's): a sample of the old block is forgotten, and the new size is
    /// counted on `heap` and may be sampled (the caller's stack: a C caller entered in `heap`).
    pub(crate) fn resize_large_in_place(
        self,
        heap: Option<&mut ThreadHeap>,
        object: *mut u8,
        new_size: usize,
    ) -> bool {
        if !self.heaps.resize_large_in_place(object as usize, new_size) {
            return false;
        }
        if crate::profile::is_on() {
            self.heaps.forget_sample(object as usize);
            if let Some(heap) = heap.filter(|heap| !heap.is_retired()) {
                if heap.sample_large(new_size) {
                    heap.record_sample(object, new_size, new_size);
                }
            }
        }
        true
    }

    /// Classifies `ptr`, or names the misuse (inside the heap but not a live object's start).
    pub(crate) fn classify(self, ptr: *const u8) -> Result<Pointer, Misuse> {
        let address = ptr as usize;
        let Some(origin) = self.heaps.origin_of(address) else {
            return Ok(Pointer::Foreign);
        };
        if self.heaps.is_owned(address) {
            return Ok(match self.heaps.small_class_at(address)? {
                Some(class) => Pointer::Owned {
                    bytes: class.size(),
                    large: false,
                },
                None => Pointer::Owned {
                    bytes: self.heaps.large_usable(address)?,
                    large: true,
                },
            });
        }
        if let Some(class) = self.heaps.small_class_at(address)? {
            return Ok(Pointer::Small { class, origin });
        }
        self.heaps
            .large_usable(address)
            .map(|bytes| Pointer::Large { bytes })
    }

    /// Frees a block of a first-class heap back to its heap, or reports the misuse.
    pub(crate) fn free_owned(self, ptr: *mut u8) {
        let address = ptr as usize;
        // A heap-profile sample that stayed in its bag.
        crate::profile::in_bag::forget(address);
        let Some(origin) = self.heaps.origin_of(address) else {
            report_misuse(ptr, Misuse::InvalidPointer);
        };
        match self.heaps.small_class_at(address) {
            // SAFETY: a live object of `class` (checked again under its class lock) that the
            // caller gives up.
            Ok(Some(class)) => unsafe { self.heaps.owned_free_small(origin, class, ptr) },
            Ok(None) => self.heaps.free_large(address),
            Err(misuse) => report_misuse(ptr, misuse),
        }
    }

    /// The node layer, for the first-class heaps' face (`heap/`).
    pub(crate) fn owned(self) -> &'static NodeHeaps {
        self.heaps
    }

    /// See [`crate::raw::block_containing`].
    pub(crate) fn block_containing(self, address: usize) -> Option<crate::node::BlockAt> {
        self.heaps.block_containing(address)
    }

    /// See [`crate::raw::object_before`].
    pub(crate) fn object_before(self, address: usize) -> Option<*mut u8> {
        self.heaps.object_before(address)
    }

    /// Sets the hard limit on committed bytes (0: none).
    pub(crate) fn set_limit(self, bytes: usize) {
        self.heaps.set_limit(bytes);
    }

    /// Sets the hard limit on bytes committed in tier `far` (false: near; 0: none).
    pub(crate) fn set_tier_limit(self, far: bool, bytes: usize) {
        self.heaps.set_tier_limit(far, bytes);
    }

    /// True when requests never leave their tier (`NODALLOC_TIER_FULL=fail`).
    pub(crate) fn tier_bound(self) -> bool {
        self.heaps.tier_bound()
    }

    /// Returns every cached object (the caller's thread's, every ring and inbox) to its bags and
    /// every free page to the OS now.
    pub(crate) fn purge(self, heap: Option<&mut ThreadHeap>) {
        if let Some(heap) = heap {
            heap.flush();
        }
        crate::thread::pool::drop_stale(u64::MAX);
        self.heaps.flush_all();
        self.heaps.purge();
    }

    /// A statistics snapshot, after publishing the calling thread's counters and sorting every
    /// node's inbox (remote frees are counted there).
    pub(crate) fn stats(self) -> Stats {
        publish_current_thread();
        for node in self.heaps.nodes() {
            self.heaps.drain_inbox(node);
        }
        // Read before the arena's counters, with Acquire: every decommit the thread counted
        // in it is then in the snapshot's `decommitted` too, so that one never falls below it.
        let released = background::RELEASED.load(Ordering::Acquire);
        let mut stats = self
            .heaps
            .collect_stats(THREADS_LIVE.load(Ordering::Relaxed));
        stats.background_passes = background::PASSES.load(Ordering::Relaxed);
        stats.background_cpu_ns = background::CPU_NS.load(Ordering::Relaxed);
        stats.background_prepared = self.heaps.prepared_chunks();
        stats.background_bags = self.heaps.bags_prepared();
        stats.background_decommitted = released;
        stats
    }
}

/// Publishes the calling thread's counters, wherever its heap lives.
fn publish_current_thread() {
    let hook = CURRENT_HEAP_HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `set_current_heap_hook` stores here, always a fn of this type.
        let hook: fn() -> *mut ThreadHeap = unsafe { core::mem::transmute(hook) };
        // SAFETY: the hook returns null or the calling thread's own heap.
        if let Some(heap) = unsafe { hook().as_mut() } {
            heap.publish_all();
        }
        return;
    }
    // A crate-face heap that never attached has nothing to publish.
    let crate_face = CRATE_FACE_HEAP.load(Ordering::Acquire);
    if crate_face != 0 {
        // SAFETY: only `attach_crate_face_thread` stores here, always a fn of this type.
        let heap: fn() -> *mut ThreadHeap = unsafe { core::mem::transmute(crate_face) };
        // SAFETY: the calling thread's own heap; as in `with_heap`, nothing else references it
        // while a snapshot is taken.
        unsafe { &mut *heap() }.publish_all();
    }
}

/// Tells snapshots how to find the calling thread's heap in a face that keeps its own.
pub(crate) fn set_current_heap_hook(hook: fn() -> *mut ThreadHeap) {
    CURRENT_HEAP_HOOK.store(hook as usize, Ordering::Release);
}

/// Sends the `NODALLOC_STATS=1` exit report to `fd` instead of 2.
pub(crate) fn set_stats_fd(fd: i32) {
    STATS_FD.store(fd, Ordering::Relaxed);
}

/// A fresh pooled thread heap for a face with its own thread-local pointer.
pub(crate) fn take_pooled_heap() -> Option<&'static mut ThreadHeap> {
    crate::thread::pool::take(attach_current_thread)
}

/// Retires a pooled heap and returns it to the pool; its thread must not use it again.
pub(crate) fn recycle_heap(heap: &'static mut ThreadHeap) {
    if crate::thread::pool::recycle(heap, attach_current_thread) {
        THREADS_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reports a misuse the faces found: aborts naming the pointer.
pub(crate) fn report_misuse(ptr: *const u8, misuse: Misuse) -> ! {
    report(ptr as *mut u8, misuse)
}

//! First-class heaps: a heap per subsystem, on a chosen node, with its own limit, dropped whole.
//!
//! A [`Heap`] owns its memory: its blocks come from bags and spans of its own, on one node
//! (the creating thread's, or the one [`HeapBuilder::node`] names, CPU-less nodes included),
//! within its own limit if it has one, and the process-wide limit still holds over all heaps.
//! Dropping the heap (or [`Heap::reset`]) gives every block it still holds back at once, bag by
//! bag, in time proportional to its bags, never its objects.
//!
//! `&Heap` is an [`allocator_api2::alloc::Allocator`], so the collections that take one
//! (`allocator_api2::vec::Vec`, `hashbrown::HashMap`, …) live in a heap, and the borrow
//! checker keeps them from outliving it:
//!
//! ```
//! use allocator_api2::vec::Vec;
//!
//! let heap = nodalloc::Heap::builder().name("frame").limit(64 << 20).build().unwrap();
//! let mut scratch: Vec<u64, &nodalloc::Heap> = Vec::new_in(&heap);
//! scratch.extend(0..1000);
//! assert_eq!(nodalloc::heap_of(scratch.as_ptr() as *const u8), Some(heap.id()));
//! assert!(heap.stats().live >= 8000);
//! drop(scratch);
//! drop(heap); // whatever the heap still held goes back here
//! ```
//!
//! With the `nightly` feature (nightly Rust), `&Heap` is also a `core::alloc::Allocator`, so
//! std's `Vec::new_in(&heap)` and `Box::new_in(value, &heap)` take it too.
//!
//! A heap is `Send + Sync`: a thread pool may share one. A [`LocalHeap`] is one thread's: the
//! same heap with a cache of free objects that only its thread touches, without a lock
//! (see its docs and the measurements below).
//!
//! Blocks of either may be freed through any path (the heap's `deallocate`,
//! `GlobalAlloc::dealloc` of [`crate::NodAlloc`], C's `free`, another thread): the block's bag
//! knows its heap. A `Heap`'s blocks are never cached by threads: each allocation and free
//! takes a lock of the heap's (one per size class, in front of a short list of free objects).

use crate::instance::Instance;
use crate::node::{OwnedId, OwnedRefusal, OwnedStats, NAME_BYTES};

mod local;
use crate::size_class::SizeClass;
use core::alloc::Layout;
use core::ptr::NonNull;
pub use local::LocalHeap;

/// A first-class heap (see the [module docs](self)).
pub struct Heap {
    id: OwnedId,
    instance: Instance,
}

/// Names a heap: what [`heap_of`] answers, equal to [`Heap::id`] of the heap holding a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeapId(OwnedId);

impl HeapId {
    /// The heap's slot (reused by a later heap once it is dropped).
    ///
    /// ```
    /// let a = nodalloc::Heap::new();
    /// let b = nodalloc::Heap::new();
    /// assert_ne!(a.id().index(), b.id().index()); // two live heaps, two slots
    /// ```
    pub fn index(self) -> usize {
        self.0.index()
    }

    /// The slot's generation when the heap was created: with [`HeapId::index`], unique over
    /// the process's heaps (until a slot is reused 2^32 times).
    ///
    /// ```
    /// let first = nodalloc::Heap::new().id(); // dropped at once: its slot is free again
    /// let second = nodalloc::Heap::new().id();
    /// assert_ne!(first, second);
    /// ```
    pub fn generation(self) -> u32 {
        self.0.generation()
    }
}

/// Why a heap could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapError {
    /// The node index is not one of [`crate::topology`]'s usable nodes.
    NoSuchNode(usize),
    /// A limit below 32 KiB (one bag): nothing could ever be allocated in the heap.
    LimitTooSmall(usize),
    /// 1024 heaps are alive already.
    TooManyHeaps,
    /// The allocator could not start, or its table of heaps could not be mapped.
    NoMemory,
}

impl core::fmt::Display for HeapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HeapError::NoSuchNode(node) => write!(f, "no usable node {node}"),
            HeapError::LimitTooSmall(bytes) => {
                write!(f, "a heap limit of {bytes} bytes is below one bag (32 KiB)")
            }
            HeapError::TooManyHeaps => write!(f, "1024 heaps are alive already"),
            HeapError::NoMemory => write!(f, "no memory for the heap"),
        }
    }
}

impl std::error::Error for HeapError {}

/// What a heap holds (see [`Heap::stats`]): node, limit, committed and peak bytes, live bytes
/// and blocks, bags, large blocks, allocations and frees since it was created or reset.
pub type HeapStats = OwnedStats;

/// Options of a heap to build (see [`Heap::builder`]).
#[derive(Clone, Debug)]
pub struct HeapBuilder {
    node: Option<usize>,
    far: bool,
    limit: usize,
    name: [u8; NAME_BYTES],
    name_len: usize,
}

impl HeapBuilder {
    /// Places the heap on `node` (an index into [`crate::topology`]'s usable nodes, CPU-less
    /// memory nodes included). Default: the node of the thread that builds it.
    ///
    /// ```
    /// let last = nodalloc::topology().unwrap().node_count() - 1;
    /// let heap = nodalloc::Heap::builder().node(last).build().unwrap();
    /// let block = heap.alloc(std::alloc::Layout::new::<[u8; 64]>());
    /// assert_eq!(nodalloc::node_of(block), Some(last));
    /// ```
    pub fn node(mut self, node: usize) -> HeapBuilder {
        self.node = Some(node);
        self
    }

    /// Places the heap on far memory: the far node of the building thread's node (see
    /// [`crate::far_node`]); near, at home, on a machine without far memory. A
    /// [`HeapBuilder::node`] wins over it.
    ///
    /// ```
    /// let cold = nodalloc::Heap::builder().far().name("history").build().unwrap();
    /// // On a machine without far memory, the heap is on the building thread's node.
    /// let expected = nodalloc::far_node().unwrap_or_else(nodalloc::current_node);
    /// assert_eq!(cold.node(), expected);
    /// ```
    pub fn far(mut self) -> HeapBuilder {
        self.far = true;
        self
    }

    /// Caps the bytes the heap may hold (its bags and large blocks) at `bytes`; 0, the
    /// default, for no cap. Past it, allocations fail (`AllocError`, null); freeing the heap's
    /// blocks makes room again.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let heap = nodalloc::Heap::builder().limit(1 << 20).build().unwrap();
    /// // A block larger than the limit is refused; one within it is served.
    /// assert!(heap.alloc(Layout::from_size_align(2 << 20, 8).unwrap()).is_null());
    /// assert!(!heap.alloc(Layout::from_size_align(512 << 10, 8).unwrap()).is_null());
    /// assert!(heap.stats().peak <= 1 << 20);
    /// ```
    pub fn limit(mut self, bytes: usize) -> HeapBuilder {
        self.limit = bytes;
        self
    }

    /// Names the heap (the first 40 bytes are kept) for the statistics.
    ///
    /// ```
    /// let heap = nodalloc::Heap::builder().name("request 42").build().unwrap();
    /// assert_eq!(heap.name(), "request 42");
    /// ```
    pub fn name(mut self, name: &str) -> HeapBuilder {
        let bytes = name.as_bytes();
        self.name_len = bytes.len().min(NAME_BYTES);
        self.name[..self.name_len].copy_from_slice(&bytes[..self.name_len]);
        self
    }

    /// Builds the heap.
    ///
    /// ```
    /// let err = nodalloc::Heap::builder().node(4096).build().err();
    /// assert_eq!(err, Some(nodalloc::HeapError::NoSuchNode(4096)));
    /// let heap = nodalloc::Heap::builder().node(0).limit(1 << 20).build().unwrap();
    /// assert_eq!(heap.stats().limit, 1 << 20);
    /// ```
    pub fn build(self) -> Result<Heap, HeapError> {
        let instance = Instance::get().ok_or(HeapError::NoMemory)?;
        let node = match (self.node, self.far) {
            (Some(node), _) => node,
            (None, true) => crate::far_node().unwrap_or_else(crate::current_node),
            (None, false) => crate::current_node(),
        };
        let id = instance
            .owned()
            .owned_create(
                crate::node::NodeId(node),
                self.limit,
                &self.name[..self.name_len],
            )
            .map_err(|refusal| match refusal {
                OwnedRefusal::NoSuchNode => HeapError::NoSuchNode(node),
                OwnedRefusal::LimitTooSmall => HeapError::LimitTooSmall(self.limit),
                OwnedRefusal::TooMany => HeapError::TooManyHeaps,
                OwnedRefusal::NoMemory => HeapError::NoMemory,
            })?;
        Ok(Heap { id, instance })
    }
}

impl Heap {
    /// A heap on the calling thread's node, without a limit.
    ///
    /// # Panics
    /// When 1024 heaps are alive already, or the allocator cannot start (use
    /// [`Heap::builder`] to get those as errors).
    ///
    /// ```
    /// let heap = nodalloc::Heap::new();
    /// assert_eq!(heap.stats().node, nodalloc::current_node());
    /// ```
    pub fn new() -> Heap {
        match Heap::builder().build() {
            Ok(heap) => heap,
            Err(error) => panic!("nodalloc::Heap::new: {error}"),
        }
    }

    /// Options for a heap: node, limit, name.
    ///
    /// ```
    /// let heap = nodalloc::Heap::builder().name("index").limit(256 << 20).build()?;
    /// assert_eq!(heap.name(), "index");
    /// # Ok::<(), nodalloc::HeapError>(())
    /// ```
    pub fn builder() -> HeapBuilder {
        HeapBuilder {
            node: None,
            far: false,
            limit: 0,
            name: [0; NAME_BYTES],
            name_len: 0,
        }
    }

    /// The heap's identity, as [`heap_of`] reports it for its blocks.
    ///
    /// ```
    /// let heap = nodalloc::Heap::new();
    /// let block = heap.alloc(std::alloc::Layout::new::<u32>());
    /// assert_eq!(nodalloc::heap_of(block), Some(heap.id()));
    /// ```
    pub fn id(&self) -> HeapId {
        HeapId(self.id)
    }

    /// Its node (an index into [`crate::topology`]'s usable nodes).
    ///
    /// ```
    /// let heap = nodalloc::Heap::builder().node(0).build().unwrap();
    /// assert_eq!(heap.node(), 0);
    /// ```
    pub fn node(&self) -> usize {
        self.instance.owned().owned_node(self.id)
    }

    /// Its name, as given to [`HeapBuilder::name`] (cut to 40 bytes at a character boundary).
    ///
    /// ```
    /// let heap = nodalloc::Heap::builder().name("a name longer than forty bytes, cut").build().unwrap();
    /// assert_eq!(heap.name(), "a name longer than forty bytes, cut");
    /// assert_eq!(nodalloc::Heap::new().name(), "");
    /// ```
    pub fn name(&self) -> String {
        let mut name = [0u8; NAME_BYTES];
        let len = self.instance.owned().owned_name(self.id, &mut name);
        match core::str::from_utf8(&name[..len]) {
            Ok(text) => text.to_owned(),
            Err(error) => String::from_utf8_lossy(&name[..error.valid_up_to()]).into_owned(),
        }
    }

    /// A block for `layout` from this heap, or null when the heap's limit, the process's, or
    /// its node's memory for heaps has no room. Free it with [`Heap::dealloc`], or through
    /// any other path.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let heap = nodalloc::Heap::new();
    /// let layout = Layout::new::<[u64; 4]>();
    /// let block = heap.alloc(layout);
    /// assert!(!block.is_null());
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { heap.dealloc(block, layout) };
    /// ```
    pub fn alloc(&self, layout: Layout) -> *mut u8 {
        let block =
            self.instance
                .owned()
                .owned_alloc(self.id, layout.size(), layout.align(), false);
        sample(block, layout, false, self.id)
    }

    /// [`Heap::alloc`], the block reading as zero.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let heap = nodalloc::Heap::new();
    /// let layout = Layout::array::<u8>(1000).unwrap();
    /// let block = heap.alloc_zeroed(layout);
    /// // SAFETY: 1000 readable bytes.
    /// assert!(unsafe { std::slice::from_raw_parts(block, 1000) }.iter().all(|&b| b == 0));
    /// ```
    pub fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let block = self
            .instance
            .owned()
            .owned_alloc(self.id, layout.size(), layout.align(), true);
        sample(block, layout, true, self.id)
    }

    /// Frees a block of this heap (any heap's block, or any block of nodalloc's, is accepted:
    /// it goes back where it came from).
    ///
    /// # Safety
    /// `ptr` is a live block nodalloc handed out, which the caller gives up.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let heap = nodalloc::Heap::new();
    /// let layout = Layout::from_size_align(1 << 20, 4096).unwrap();
    /// let block = heap.alloc(layout);
    /// assert_eq!(heap.stats().large_blocks, 1);
    /// // SAFETY: allocated just above.
    /// unsafe { heap.dealloc(block, layout) };
    /// assert_eq!(heap.stats().large_blocks, 0);
    /// ```
    pub unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { crate::raw::free_any(ptr) };
    }

    /// What the heap holds now.
    ///
    /// ```
    /// let heap = nodalloc::Heap::new();
    /// let block = heap.alloc(std::alloc::Layout::new::<[u8; 100]>());
    /// let stats = heap.stats();
    /// assert_eq!(stats.blocks, 1);
    /// assert!(stats.live >= 100); // the size class of 100 bytes
    /// assert!(stats.committed >= 32 << 10);
    /// # unsafe { heap.dealloc(block, std::alloc::Layout::new::<[u8; 100]>()) };
    /// ```
    pub fn stats(&self) -> HeapStats {
        self.instance.owned().owned_stats(self.id)
    }

    /// True when `ptr` is a live block of this heap.
    ///
    /// ```
    /// let (a, b) = (nodalloc::Heap::new(), nodalloc::Heap::new());
    /// let block = a.alloc(std::alloc::Layout::new::<u64>());
    /// assert!(a.contains(block) && !b.contains(block));
    /// ```
    pub fn contains(&self, ptr: *const u8) -> bool {
        heap_of(ptr) == Some(self.id())
    }

    /// Gives every block the heap holds back at once and keeps the heap: `&mut self`, so no
    /// collection borrowing the heap is alive.
    ///
    /// ```
    /// let mut heap = nodalloc::Heap::new();
    /// for _ in 0..1000 {
    ///     heap.alloc(std::alloc::Layout::new::<[u8; 48]>());
    /// }
    /// heap.reset();
    /// assert_eq!((heap.stats().blocks, heap.stats().committed), (0, 0));
    /// ```
    pub fn reset(&mut self) {
        self.instance.owned().owned_reset(self.id);
    }
}

impl Default for Heap {
    fn default() -> Heap {
        Heap::new()
    }
}

impl core::fmt::Debug for Heap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Heap")
            .field("id", &self.id)
            .field("name", &self.name())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for Heap {
    /// Gives every block the heap still holds back to its node's region (and, after the
    /// decommit delay, to the OS).
    fn drop(&mut self) {
        self.instance.owned().owned_drop(self.id);
    }
}

/// The heap that holds `ptr`, a live block nodalloc handed out; `None` for a block of the
/// global heap (or anything else).
///
/// ```
/// let heap = nodalloc::Heap::new();
/// let block = heap.alloc(std::alloc::Layout::new::<u64>());
/// assert_eq!(nodalloc::heap_of(block), Some(heap.id()));
/// assert_eq!(nodalloc::heap_of(Box::into_raw(Box::new(7u64)) as *const u8), None);
/// ```
pub fn heap_of(ptr: *const u8) -> Option<HeapId> {
    Instance::existing()?
        .owned()
        .owned_of(ptr as usize)
        .map(HeapId)
}

// SAFETY: a heap is a handle on process-wide state, every operation of which takes the heap's
// locks: any thread may use it, and several at once.
unsafe impl Send for Heap {}
// SAFETY: as for Send.
unsafe impl Sync for Heap {}

/// The `Allocator` traits (allocator-api2's, and core's with the `nightly` feature) for a
/// shared reference to `$heap`, through its `alloc`, `alloc_zeroed` and `dealloc`.
macro_rules! heap_allocators {
    ($heap:ty) => {
        // SAFETY: blocks come from the heap's `alloc`, stay valid until deallocated or the heap
        // is dropped (which the borrow in the reference forbids while they are used), and any
        // block may be freed through the heap; a copy of the reference is the same allocator.
        unsafe impl allocator_api2::alloc::Allocator for &$heap {
            fn allocate(
                &self,
                layout: Layout,
            ) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                block_for(self.alloc(layout), layout, false)
                    .ok_or(allocator_api2::alloc::AllocError)
            }

            fn allocate_zeroed(
                &self,
                layout: Layout,
            ) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                block_for(self.alloc_zeroed(layout), layout, true)
                    .ok_or(allocator_api2::alloc::AllocError)
            }

            unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                // SAFETY: forwarded contract.
                unsafe { <$heap>::dealloc(self, ptr.as_ptr(), layout) };
            }
        }

        // SAFETY: as for allocator-api2's trait above, which this one mirrors.
        #[cfg(feature = "nightly")]
        unsafe impl core::alloc::Allocator for &$heap {
            fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                block_for(self.alloc(layout), layout, false).ok_or(core::alloc::AllocError)
            }

            fn allocate_zeroed(
                &self,
                layout: Layout,
            ) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                block_for(self.alloc_zeroed(layout), layout, true).ok_or(core::alloc::AllocError)
            }

            unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                // SAFETY: forwarded contract.
                unsafe { <$heap>::dealloc(self, ptr.as_ptr(), layout) };
            }
        }
    };
}

heap_allocators!(Heap);
heap_allocators!(LocalHeap);

/// The block `ptr` for `layout` as the `Allocator` traits return it: with the bytes it may
/// use (its class's size; for a zeroed block, the bytes zeroed). `None` for null.
fn block_for(ptr: *mut u8, layout: Layout, zeroed: bool) -> Option<NonNull<[u8]>> {
    let len = if zeroed {
        layout.size()
    } else {
        usable(layout)
    };
    NonNull::new(ptr).map(|ptr| NonNull::slice_from_raw_parts(ptr, len))
}

/// Bytes a block for `layout` may use: its class's size, or the size asked for a large block.
fn usable(layout: Layout) -> usize {
    match crate::size_class::class_of(layout.size(), layout.align()) {
        Some(class) => SizeClass::size(class),
        None => layout.size(),
    }
}

/// The heap profile's count of a block heap `id` handed out for `layout` (`zero`: read as
/// zero), on the calling thread's sampler (`ThreadHeap::sample_owned`): the block to hand
/// out. One flag test with profiling off.
#[inline]
pub(crate) fn sample(block: *mut u8, layout: Layout, zero: bool, id: OwnedId) -> *mut u8 {
    if !crate::profile::is_on() {
        return block;
    }
    crate::instance::with_heap(|heap| {
        heap.sample_owned(block, layout.size(), layout.align(), zero, id)
    })
}

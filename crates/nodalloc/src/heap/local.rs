//! A heap for one thread: [`LocalHeap`].

use super::{Heap, HeapBuilder, HeapError, HeapId, HeapStats};
use crate::node::OwnedCache;
use core::alloc::Layout;
use core::cell::UnsafeCell;

impl HeapBuilder {
    /// Builds the heap as a [`LocalHeap`] (the calling thread's alone).
    ///
    /// ```
    /// let local = nodalloc::Heap::builder().name("parser").build_local().unwrap();
    /// assert_eq!(local.name(), "parser");
    /// ```
    pub fn build_local(self) -> Result<LocalHeap, HeapError> {
        Ok(LocalHeap {
            heap: self.build()?,
            cache: UnsafeCell::new(OwnedCache::new()),
        })
    }
}

/// A heap for one thread: a [`Heap`] with a cache of free objects that only the thread that
/// made it touches, without a lock. Not `Send`, not `Sync`. Its blocks, like any heap's, may
/// still be freed through any path and by any thread (those frees take the heap's lock); the
/// ones freed through the `LocalHeap` itself (its `dealloc`, or its `Allocator`, as its
/// collections do) go to its cache. Dropped (or [`LocalHeap::reset`]), it gives everything back
/// as a `Heap` does.
///
/// ```
/// use allocator_api2::vec::Vec;
///
/// let local = nodalloc::LocalHeap::new();
/// let mut words: Vec<u32, &nodalloc::LocalHeap> = Vec::new_in(&local);
/// words.extend(0..100);
/// assert!(local.contains(words.as_ptr() as *const u8));
/// ```
pub struct LocalHeap {
    heap: Heap,
    cache: UnsafeCell<OwnedCache>,
}

impl LocalHeap {
    /// A local heap on the calling thread's node, without a limit (see [`Heap::new`]; options
    /// through [`HeapBuilder::build_local`]).
    ///
    /// # Panics
    /// As [`Heap::new`].
    pub fn new() -> LocalHeap {
        match Heap::builder().build_local() {
            Ok(heap) => heap,
            Err(error) => panic!("nodalloc::LocalHeap::new: {error}"),
        }
    }

    #[allow(clippy::mut_from_ref)]
    fn cache(&self) -> &mut OwnedCache {
        // SAFETY: the heap is neither Send nor Sync, and no method of it calls another while
        // it holds the cache: this is the only reference, for the length of one call.
        unsafe { &mut *self.cache.get() }
    }

    /// A block for `layout` from the heap's cache (see [`Heap::alloc`]).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let local = nodalloc::LocalHeap::new();
    /// let block = local.alloc(Layout::new::<[u8; 24]>());
    /// assert!(!block.is_null());
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { local.dealloc(block, Layout::new::<[u8; 24]>()) };
    /// ```
    pub fn alloc(&self, layout: Layout) -> *mut u8 {
        let block = self.heap.instance.owned().cached_alloc(
            self.cache(),
            self.heap.id,
            layout.size(),
            layout.align(),
        );
        super::sample(block, layout, false, self.heap.id)
    }

    /// [`LocalHeap::alloc`], the block reading as zero.
    ///
    /// ```
    /// let local = nodalloc::LocalHeap::new();
    /// let block = local.alloc_zeroed(std::alloc::Layout::new::<[u64; 8]>());
    /// // SAFETY: 64 readable bytes.
    /// assert!(unsafe { std::slice::from_raw_parts(block, 64) }.iter().all(|&b| b == 0));
    /// ```
    pub fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let block = self.alloc(layout);
        if !block.is_null() {
            // SAFETY: at least `layout.size()` writable bytes.
            unsafe { block.write_bytes(0, layout.size()) };
        }
        block
    }

    /// Frees a block this heap handed out for `layout`: into the heap's cache.
    ///
    /// # Safety
    /// `ptr` is a live block of this heap allocated for `layout` (or a layout of the same size
    /// class), which the caller gives up.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let local = nodalloc::LocalHeap::new();
    /// let layout = Layout::new::<[u8; 100]>();
    /// let block = local.alloc(layout);
    /// // SAFETY: allocated just above with this layout.
    /// unsafe { local.dealloc(block, layout) };
    /// assert_eq!(local.stats().blocks, 0);
    /// ```
    pub unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // A heap-profile sample that stayed in its bag (one load with profiling off).
        crate::profile::in_bag::forget(ptr as usize);
        if crate::profile::is_on() && self.heap.instance.owned().large_units(ptr as usize).is_ok() {
            // A sample served as a large block of its own (`ThreadHeap::sample_owned`).
            // SAFETY: forwarded contract.
            return unsafe { crate::raw::free_any(ptr) };
        }
        match crate::size_class::class_of(layout.size(), layout.align()) {
            // SAFETY: forwarded contract: a live object of this class of this heap.
            Some(class) => unsafe {
                self.heap
                    .instance
                    .owned()
                    .cached_free(self.cache(), self.heap.id, class, ptr)
            },
            // SAFETY: forwarded contract.
            None => unsafe { crate::raw::free_any(ptr) },
        }
    }

    /// What the heap holds, its cached free objects not counted as the program's.
    ///
    /// ```
    /// let local = nodalloc::LocalHeap::new();
    /// let block = local.alloc(std::alloc::Layout::new::<[u8; 48]>());
    /// assert_eq!(local.stats().blocks, 1);
    /// # unsafe { local.dealloc(block, std::alloc::Layout::new::<[u8; 48]>()) };
    /// ```
    pub fn stats(&self) -> HeapStats {
        let mut stats = self.heap.stats();
        let (count, bytes) = self.cache().cached();
        stats.blocks -= count.min(stats.blocks);
        stats.live -= bytes.min(stats.live);
        stats.allocs -= (count as u64).min(stats.allocs);
        stats
    }

    /// Gives every block back at once and keeps the heap (see [`Heap::reset`]).
    ///
    /// ```
    /// let mut local = nodalloc::LocalHeap::new();
    /// local.alloc(std::alloc::Layout::new::<[u8; 48]>());
    /// local.reset();
    /// assert_eq!(local.stats().blocks, 0);
    /// ```
    pub fn reset(&mut self) {
        *self.cache.get_mut() = OwnedCache::new();
        self.heap.reset();
    }

    /// See [`Heap::id`].
    ///
    /// ```
    /// let local = nodalloc::LocalHeap::new();
    /// let block = local.alloc(std::alloc::Layout::new::<u16>());
    /// assert_eq!(nodalloc::heap_of(block), Some(local.id()));
    /// ```
    pub fn id(&self) -> HeapId {
        self.heap.id()
    }

    /// See [`Heap::name`].
    ///
    /// ```
    /// let local = nodalloc::Heap::builder().name("scratch").build_local().unwrap();
    /// assert_eq!(local.name(), "scratch");
    /// ```
    pub fn name(&self) -> String {
        self.heap.name()
    }

    /// See [`Heap::node`].
    ///
    /// ```
    /// let local = nodalloc::Heap::builder().node(0).build_local().unwrap();
    /// assert_eq!(local.node(), 0);
    /// ```
    pub fn node(&self) -> usize {
        self.heap.node()
    }

    /// See [`Heap::contains`].
    ///
    /// ```
    /// let local = nodalloc::LocalHeap::new();
    /// let block = local.alloc(std::alloc::Layout::new::<u64>());
    /// assert!(local.contains(block));
    /// assert!(!local.contains(Box::into_raw(Box::new(1u64)) as *const u8));
    /// ```
    pub fn contains(&self, ptr: *const u8) -> bool {
        self.heap.contains(ptr)
    }
}

impl Default for LocalHeap {
    fn default() -> LocalHeap {
        LocalHeap::new()
    }
}

impl core::fmt::Debug for LocalHeap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalHeap")
            .field("id", &self.heap.id)
            .field("stats", &self.stats())
            .finish()
    }
}

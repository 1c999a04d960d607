//! The process-wide instance behind [`crate::NodAlloc`]: created lazily at the first
//! allocation, without allocating, and never torn down.
//!
//! Start-up reads the options and the topology, reserves the arena, builds the node heaps,
//! registers a `pthread` key whose destructor flushes a thread's caches when it exits, the
//! `pthread_atfork` handlers that hold every allocator lock across `fork`, and (with
//! `NODALLOC_STATS=1`) an `atexit` report. Each thread's heap lives in a `const`-initialised
//! thread-local without a destructor, so reaching it is one TLS-relative address.

use crate::arena::{region::Decay, Arena, ArenaConfig};
use crate::bind;
use crate::bind::BindBase;
use crate::ds::spinlock::SpinLock;
use crate::node::NodeHeaps;
use crate::os;
use crate::os::options::Options;
use crate::os::topology::{OvercommitMode, Topology};
use crate::thread::{HeapState, ThreadHeap};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

static INSTANCE: AtomicPtr<NodeHeaps> = AtomicPtr::new(core::ptr::null_mut());
static INIT_LOCK: SpinLock = SpinLock::new();
/// Set while the instance is being built: a nested call (there should be none) fails cleanly.
static INITIALISING: AtomicUsize = AtomicUsize::new(0);
static THREADS_STARTED: AtomicUsize = AtomicUsize::new(0);
static THREADS_LIVE: AtomicUsize = AtomicUsize::new(0);
static EXIT_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

struct OptionsCell(UnsafeCell<Option<Options>>);
// SAFETY: written once under INIT_LOCK before INSTANCE is published (release), read only after
// INSTANCE is seen (acquire).
unsafe impl Sync for OptionsCell {}
static OPTIONS: OptionsCell = OptionsCell(UnsafeCell::new(None));

thread_local! {
    static HEAP: UnsafeCell<ThreadHeap> =
        const { UnsafeCell::new(ThreadHeap::with_attach_hook(Some(attach_current_thread))) };
}

/// Runs `f` on the calling thread's heap.
#[inline(always)]
pub(crate) fn with_heap<R>(f: impl FnOnce(&mut ThreadHeap) -> R) -> R {
    // SAFETY: the heap is only ever touched by its own thread, and nothing `f` calls re-enters
    // the allocator (no internal path allocates), so this is the only live reference.
    HEAP.with(|heap| f(unsafe { &mut *heap.get() }))
}

/// The instance, creating it on first use. `None` if the arena cannot be reserved at all.
#[inline]
pub(crate) fn instance() -> Option<&'static NodeHeaps> {
    let heaps = INSTANCE.load(Ordering::Acquire);
    if !heaps.is_null() {
        // SAFETY: INSTANCE only ever holds a leaked, fully built NodeHeaps.
        return Some(unsafe { &*heaps });
    }
    create_instance()
}

/// The instance if it exists, without creating it.
pub(crate) fn existing_instance() -> Option<&'static NodeHeaps> {
    // SAFETY: as in `instance`.
    unsafe { INSTANCE.load(Ordering::Acquire).as_ref() }
}

pub(crate) fn options() -> Option<&'static Options> {
    existing_instance()?;
    // SAFETY: OPTIONS was written before INSTANCE was published (see OptionsCell).
    unsafe { (*OPTIONS.0.get()).as_ref() }
}

#[cold]
#[inline(never)]
fn create_instance() -> Option<&'static NodeHeaps> {
    let _guard = INIT_LOCK.lock();
    let heaps = INSTANCE.load(Ordering::Acquire);
    if !heaps.is_null() {
        // SAFETY: as in `instance`.
        return Some(unsafe { &*heaps });
    }
    if INITIALISING.swap(1, Ordering::Relaxed) != 0 {
        return None;
    }
    let options = Options::from_env();
    // The topology is built in a scratch mapping: it is too big for an arbitrary thread's stack.
    let scratch = os::reserve(core::mem::size_of::<Topology>())? as *mut Topology;
    // SAFETY: a fresh zeroed mapping of the right size, ours alone; all-zero bytes are a valid
    // Topology (integers, bools, `None`, and enums whose first variant is 0).
    let topology = unsafe { &mut *scratch };
    topology.detect_into(options.simulate_nodes);
    let config = ArenaConfig {
        region_bytes: options.region_bytes,
        strict_binding: options.strict_binding,
        thp: options.thp,
        commit_on_demand: options
            .commit_on_demand
            .unwrap_or(topology.overcommit_mode() == OvercommitMode::Never),
        decay: Decay {
            delay_ns: options.decommit_delay_ns,
            retain_bytes: options.retain_bytes as usize,
        },
        secure: options.secure,
    };
    let arena = Arena::create(topology, &config);
    // SAFETY: the scratch mapping is ours and the arena copied the topology.
    unsafe { os::unmap(scratch as *mut u8, core::mem::size_of::<Topology>()) };
    let Some(arena) = arena else {
        os::warn(|w| {
            w.str("cannot reserve address space for the heap; allocations will fail");
        });
        return None;
    };
    arena
        .budget
        .limit
        .store(options.limit_bytes as usize, Ordering::Relaxed);
    let heaps = NodeHeaps::create(arena)?;
    // SAFETY: we hold INIT_LOCK and INSTANCE is still null, so nobody reads OPTIONS yet.
    unsafe { *OPTIONS.0.get() = Some(options) };
    INSTANCE.store(
        heaps as *const NodeHeaps as *mut NodeHeaps,
        Ordering::Release,
    );
    // After publishing: registering the hooks may call malloc (glibc's atfork and atexit lists
    // grow with malloc), and under LD_PRELOAD that malloc is ours; it must find the instance.
    register_process_hooks(options.stats_at_exit);
    Some(heaps)
}

fn register_process_hooks(stats_at_exit: bool) {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: pthread_key_create writes the new key; the destructor is an extern "C" fn that
    // lives for the whole process.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
        EXIT_KEY.store(key as usize, Ordering::Release);
    }
    // SAFETY: the three handlers are extern "C" fns with no arguments, valid for the process.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    if stats_at_exit {
        // SAFETY: an extern "C" fn with no arguments, valid for the process.
        unsafe { libc::atexit(print_stats_at_exit) };
    }
}

/// The attach hook of every thread heap: binds the thread and homes its heap.
fn attach_current_thread(heap: &mut ThreadHeap) -> bool {
    let Some(heaps) = instance() else {
        return false;
    };
    let Some(options) = options() else {
        return false;
    };
    let index = THREADS_STARTED.fetch_add(1, Ordering::Relaxed);
    let base = if heap.bind_from_process_mask {
        BindBase::Process
    } else {
        BindBase::Current
    };
    let binding = bind::bind_current_thread(&heaps.arena.topology, options, index, base);
    heap.attach(heaps, binding.node);
    heap.bound_mask = binding.mask;
    // On several nodes the home follows the thread: a thread that runs outside its home node
    // (never bound, or re-pinned by the program) re-homes on its next slow path.
    heap.follow_cpu = heaps.arena.node_count() > 1;
    THREADS_LIVE.fetch_add(1, Ordering::Relaxed);
    let key = EXIT_KEY.load(Ordering::Acquire);
    if key != usize::MAX && !heap.pooled {
        // SAFETY: `key` is a live pthread key; the value is this thread's heap, which stays
        // valid until the thread's TLS is torn down, after the key destructors ran.
        unsafe {
            libc::pthread_setspecific(
                key as libc::pthread_key_t,
                heap as *mut ThreadHeap as *const libc::c_void,
            )
        };
    }
    true
}

extern "C" fn thread_exit(heap: *mut libc::c_void) {
    // SAFETY: the value was set by `attach_current_thread` to this thread's heap, which is alive
    // while key destructors run.
    let heap = unsafe { &mut *(heap as *mut ThreadHeap) };
    if heap.state == HeapState::Active {
        heap.retire();
        THREADS_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

extern "C" fn fork_prepare() {
    INIT_LOCK.acquire();
    POOL_LOCK.acquire();
    if let Some(heaps) = existing_instance() {
        heaps.lock_all();
    }
}

extern "C" fn fork_parent() {
    if let Some(heaps) = existing_instance() {
        heaps.unlock_all();
    }
    POOL_LOCK.release();
    INIT_LOCK.release();
}

extern "C" fn fork_child() {
    // Only the forking thread exists in the child; the locks it took in `prepare` are its own.
    if let Some(heaps) = existing_instance() {
        heaps.unlock_all();
    }
    POOL_LOCK.release();
    INIT_LOCK.release();
    THREADS_LIVE.store(1, Ordering::Relaxed);
}

/// Where the exit report goes: fd 2 unless a face saved a duplicate (a program may close
/// stderr in its own exit handlers before ours runs).
pub(crate) static STATS_FD: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(2);

/// A face that keeps thread heaps of its own (the C library) names the calling thread's heap
/// here, so `stats()` can publish that thread's counters first.
pub(crate) static CURRENT_HEAP_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Publishes the calling thread's counters, wherever its heap lives.
pub(crate) fn publish_current_thread() {
    let hook = CURRENT_HEAP_HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `raw::set_current_heap_hook` stores here, always a fn of this type.
        let hook: fn() -> *mut ThreadHeap = unsafe { core::mem::transmute(hook) };
        // SAFETY: the hook returns null or the calling thread's own heap.
        if let Some(heap) = unsafe { hook().as_mut() } {
            heap.publish_all();
        }
    } else {
        with_heap(|heap| heap.publish_all());
    }
}

extern "C" fn print_stats_at_exit() {
    crate::stats().write_to(STATS_FD.load(Ordering::Relaxed));
}

/// Thread heaps of faces that keep their own thread-local pointer: the free ones, linked by
/// `pool_next`, and the newest mapping's heaps not yet handed out, which stay untouched (no
/// resident page) until a thread needs one.
struct PoolState {
    free: *mut ThreadHeap,
    fresh: *mut ThreadHeap,
    fresh_left: usize,
}
struct Pool(UnsafeCell<PoolState>);
// SAFETY: the state is only touched with POOL_LOCK held.
unsafe impl Sync for Pool {}
static POOL: Pool = Pool(UnsafeCell::new(PoolState {
    free: core::ptr::null_mut(),
    fresh: core::ptr::null_mut(),
    fresh_left: 0,
}));
static POOL_LOCK: SpinLock = SpinLock::new();
/// Heaps mapped at once when the pool is empty (a 7.9 KiB heap each).
const HEAPS_PER_MAPPING: usize = 16;

/// A fresh thread heap from the pool, for a face with its own thread-local pointer. It attaches
/// (and binds its thread) on its first slow path. `None` if no memory can be mapped.
pub(crate) fn take_pooled_heap() -> Option<&'static mut ThreadHeap> {
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held.
    let pool = unsafe { &mut *POOL.0.get() };
    let heap = if !pool.free.is_null() {
        let heap = pool.free;
        // SAFETY: `heap` is a pooled, initialised heap that no thread uses.
        pool.free = unsafe { (*heap).pool_next };
        heap
    } else {
        if pool.fresh_left == 0 {
            let bytes = HEAPS_PER_MAPPING * core::mem::size_of::<ThreadHeap>();
            pool.fresh = os::reserve(bytes)? as *mut ThreadHeap;
            pool.fresh_left = HEAPS_PER_MAPPING;
        }
        let heap = pool.fresh;
        // SAFETY: `fresh_left` heaps remain in the mapping from `fresh` on; this one is written
        // before anyone sees it.
        unsafe {
            pool.fresh = heap.add(1);
            heap.write(ThreadHeap::with_attach_hook(Some(attach_current_thread)));
        }
        pool.fresh_left -= 1;
        heap
    };
    // SAFETY: `heap` is initialised and no thread uses it.
    unsafe {
        (*heap).pool_next = core::ptr::null_mut();
        (*heap).pooled = true;
        Some(&mut *heap)
    }
}

/// Retires a pooled heap (its caches go home) and returns it to the pool. The caller's thread
/// must never touch it again.
pub(crate) fn recycle_heap(heap: &'static mut ThreadHeap) {
    if heap.state == HeapState::Active {
        heap.retire();
        THREADS_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
    let heap: *mut ThreadHeap = heap;
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held; the heap is empty (retired) and no longer used by its thread.
    unsafe {
        heap.write(ThreadHeap::with_attach_hook(Some(attach_current_thread)));
        let pool = &mut *POOL.0.get();
        (*heap).pool_next = pool.free;
        pool.free = heap;
    }
}

pub(crate) fn live_threads() -> usize {
    THREADS_LIVE.load(Ordering::Relaxed)
}

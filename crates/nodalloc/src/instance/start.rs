//! Start-up of the instance and the process hooks it registers: thread exit, `fork`, the exit
//! report, and the attach hook that binds each thread and homes its heap.

use super::{INSTANCE, STATS_FD, THREADS_LIVE};
use crate::bind;
use crate::ds::spinlock::SpinLock;
use crate::node::{ArenaConfig, DecommitPolicy, NodeHeaps, NodeId};
use crate::os;
use crate::os::options::Options;
use crate::os::topology::{OvercommitMode, Topology};
use crate::thread::{HeapState, ThreadHeap};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

static INIT_LOCK: SpinLock = SpinLock::new();
/// Set while the instance is being built: a nested call (there should be none) fails cleanly.
static INITIALISING: AtomicUsize = AtomicUsize::new(0);
static THREADS_STARTED: AtomicUsize = AtomicUsize::new(0);
static EXIT_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

struct OptionsCell(UnsafeCell<Option<Options>>);

// SAFETY: written once under INIT_LOCK before INSTANCE is published (release), read only after
// INSTANCE is seen (acquire).
unsafe impl Sync for OptionsCell {}

static OPTIONS: OptionsCell = OptionsCell(UnsafeCell::new(None));

/// `NODALLOC_CALLSITE_DEPTH` (1 before the instance exists).
pub(crate) fn callsite_depth() -> usize {
    options().map_or(1, |options| options.callsite_depth)
}

pub(super) fn options() -> Option<&'static Options> {
    super::Instance::existing()?;
    // SAFETY: OPTIONS was written before INSTANCE was published (see OptionsCell).
    unsafe { (*OPTIONS.0.get()).as_ref() }
}

#[cold]
#[inline(never)]
pub(super) fn create() -> Option<&'static NodeHeaps> {
    let _guard = INIT_LOCK.lock();
    let heaps = INSTANCE.load(Ordering::Acquire);
    if !heaps.is_null() {
        // SAFETY: INSTANCE only ever holds a leaked, fully built NodeHeaps.
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
    topology.detect_for_heap(options.simulate_nodes);
    if options.tiers_far.is_some() {
        topology.choose_far_nodes(options.tiers_far);
    }
    let config = ArenaConfig {
        region_bytes: options.region_bytes,
        strict_binding: options.strict_binding,
        thp: options.thp,
        commit_on_demand: options
            .commit_on_demand
            .unwrap_or(topology.overcommit_mode() == OvercommitMode::Never),
        decommit: DecommitPolicy {
            delay_ns: options.decommit_delay_ns,
            retain_bytes: options.retain_bytes as usize,
            spare_bytes: options.spare_bytes as usize,
        },
        secure: options.secure,
        interleave: options.interleave,
    };
    let heaps = NodeHeaps::start(
        topology,
        &config,
        options.callsite_partitions,
        options.ring_shards,
    );
    // SAFETY: the scratch mapping is ours and the arena copied the topology.
    unsafe { os::unmap(scratch as *mut u8, core::mem::size_of::<Topology>()) };
    let Some(heaps) = heaps else {
        os::warn(|w| {
            w.str("cannot reserve address space for the heap; allocations will fail");
        });
        return None;
    };
    heaps.set_limit(options.limit_bytes as usize);
    heaps.set_tier_limit(false, options.near_limit_bytes as usize);
    heaps.set_tier_limit(true, options.far_limit_bytes as usize);
    heaps.set_tier_bound(options.tier_bound);
    if options.tiering && !heaps.set_tiering(options.cooling_ns) && heaps.partitions() == 0 {
        os::warn(|w| {
            w.str("NODALLOC_TIERING=auto needs call-site partitions (NODALLOC_CALLSITE=P); ")
                .str("automatic tiering is off");
        });
    }
    if options.profile {
        if options.secure {
            os::warn(|w| {
                w.str("NODALLOC_PROFILE is not available in secure mode; profiling is off");
            });
        } else {
            crate::profile::set_rate(options.profile_rate);
        }
    }
    // SAFETY: we hold INIT_LOCK and INSTANCE is still null, so nobody reads OPTIONS yet.
    unsafe { *OPTIONS.0.get() = Some(options) };
    INSTANCE.store(
        heaps as *const NodeHeaps as *mut NodeHeaps,
        Ordering::Release,
    );
    // After publishing: registering the hooks may call malloc (glibc's atfork and atexit lists
    // grow with malloc), and under LD_PRELOAD that malloc is ours; it must find the instance.
    let profiling = crate::profile::rate() != 0;
    register_process_hooks(
        options.stats_at_exit,
        profiling && (options.profile_out.len != 0 || options.profile_leaks),
    );
    Some(heaps)
}

fn register_process_hooks(stats_at_exit: bool, profile_at_exit: bool) {
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
    if profile_at_exit {
        // SAFETY: as above.
        unsafe { libc::atexit(write_profile_at_exit) };
    }
}

extern "C" fn write_profile_at_exit() {
    if let Some(options) = options() {
        if options.profile_out.len != 0 {
            crate::profile::dump_at_exit(options.profile_out.as_bytes());
        }
        if options.profile_leaks {
            crate::profile::report_leaks(STATS_FD.load(Ordering::Relaxed));
        }
    }
}

/// The attach hook of every thread heap: binds the thread and homes its heap.
pub(crate) fn attach_current_thread(heap: &mut ThreadHeap) -> bool {
    let Some(instance) = super::Instance::get() else {
        return false;
    };
    let Some(options) = options() else {
        return false;
    };
    let heaps = instance.heaps;
    let index = THREADS_STARTED.fetch_add(1, Ordering::Relaxed);
    let binding = bind::bind_current_thread(heaps.topology(), options, index, heap.bind_base());
    heap.attach(heaps, NodeId(binding.node));
    // On several nodes the home follows the thread: a thread that runs outside its home node
    // (never bound, or re-pinned by the program) re-homes on its next slow path.
    heap.set_binding(binding.mask, heaps.node_count() > 1);
    THREADS_LIVE.fetch_add(1, Ordering::Relaxed);
    let key = EXIT_KEY.load(Ordering::Acquire);
    if key != usize::MAX && !heap.is_pooled() {
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
    if heap.state() == HeapState::Active {
        heap.retire();
        THREADS_LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

extern "C" fn fork_prepare() {
    INIT_LOCK.acquire();
    crate::thread::pool::lock();
    if let Some(instance) = super::Instance::existing() {
        instance.heaps.lock_all();
    }
}

extern "C" fn fork_parent() {
    if let Some(instance) = super::Instance::existing() {
        instance.heaps.unlock_all();
    }
    crate::thread::pool::unlock();
    INIT_LOCK.release();
}

extern "C" fn fork_child() {
    // Only the forking thread exists in the child; the locks it took in `prepare` are its own.
    if let Some(instance) = super::Instance::existing() {
        instance.heaps.unlock_all();
    }
    crate::thread::pool::unlock();
    INIT_LOCK.release();
    THREADS_LIVE.store(1, Ordering::Relaxed);
    super::background::forget_after_fork();
}

extern "C" fn print_stats_at_exit() {
    crate::stats().write_to(STATS_FD.load(Ordering::Relaxed));
}

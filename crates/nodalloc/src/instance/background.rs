//! The maintenance thread (`NODALLOC_BACKGROUND`): one per process, running every node's
//! upkeep once per upkeep period — rings nobody touched go back to their bags, the sweep gives
//! back the free pages of quiet bags, and free spans whose decommit delay has passed go back to
//! the OS. Without it that work runs only on the slow paths of threads that allocate, so memory
//! a program freed before going quiet stays committed (up to its recent peak of use, which the
//! decommit rule lets wait out the delay). That much is the default (`release`); with `1` it
//! also makes the releases frees leave to it and prepares chunks and bags ahead of a growing
//! heap.
//!
//! It is started at a safe point, never from inside an allocation: the C library starts it
//! when the program creates its first thread (its `pthread_create`, outside any allocator
//! call), the Rust face on `nodalloc::start_background()`. A program that does neither never
//! has it. It allocates nothing, blocks every signal, and takes the same locks a thread's
//! upkeep does, so `fork`'s `prepare` simply waits for it; in the child it is gone, and the
//! child's first thread starts a new one. At exit it is left running, as any thread is, until
//! the process ends (it holds nothing the exit path needs for longer than one upkeep step).

use super::Instance;
use crate::os;
use crate::os::options::Background;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// 0: no maintenance thread; 1: one is starting or running.
static RUNNING: AtomicU32 = AtomicU32::new(0);
/// Upkeep passes it made over every node.
pub(super) static PASSES: AtomicU64 = AtomicU64::new(0);
/// Its CPU time in ns, as of its last pass or step that prepared something.
pub(super) static CPU_NS: AtomicU64 = AtomicU64::new(0);
/// Free spans it decommitted, in bytes.
pub(super) static RELEASED: AtomicU64 = AtomicU64::new(0);

/// What the options ask of the maintenance thread.
fn mode() -> Background {
    super::start::options().map_or(Background::Off, |options| options.background)
}

/// True when the options ask for the maintenance thread and none runs.
fn wanted() -> bool {
    RUNNING.load(Ordering::Relaxed) == 0 && mode() != Background::Off
}

/// True while a maintenance thread runs (or is being started).
fn running() -> bool {
    RUNNING.load(Ordering::Relaxed) != 0
}

/// Takes the start for the caller (who then creates the thread with [`body`], or gives the
/// start back with [`unclaim`]); false if another caller has it.
fn claim() -> bool {
    RUNNING
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}

/// The thread could not be created: a later safe point may try again.
fn unclaim() {
    RUNNING.store(0, Ordering::Release);
}

/// In a forked child: the parent's maintenance thread does not exist there, so the child's
/// threads make their own releases until its first thread starts a new one.
pub(super) fn forget_after_fork() {
    RUNNING.store(0, Ordering::Relaxed);
    if let Some(instance) = Instance::existing() {
        instance.heaps.recover_after_fork();
    }
}

/// The maintenance thread's start routine.
extern "C" fn body(_: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: a full signal set is a valid argument; blocking signals in this thread only
    // keeps the program's handlers on its own threads.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, core::ptr::null_mut());
    }
    let full = mode() == Background::Full;
    let mut next_upkeep = 0;
    let mut wait = PREPARE_TICK_NS;
    loop {
        let Some(instance) = Instance::existing() else {
            os::sleep_ns(100_000_000);
            continue;
        };
        if !full {
            release_pass(instance);
            continue;
        }
        let heaps = instance.heaps;
        heaps.defer_releases(true);
        let now = os::monotonic_ns();
        let decommitted = heaps.decommitted_total();
        let prepared_before = prepared_so_far(instance);
        let wanted = heaps.prepare_memory(now);
        let worked = prepared_so_far(instance) != prepared_before;
        let pass = now >= next_upkeep;
        if pass {
            upkeep_pass(instance, now);
            next_upkeep = now + instance.heaps.upkeep_period();
        } else {
            // The decommits a free would have made at once (free memory past the share of use
            // the policy lets wait out the delay) are made on every step, not only at passes:
            // a program that churns keeps its RSS as close to its use as without the thread.
            heaps.purge_due();
        }
        count_released(instance, decommitted);
        if pass || worked {
            // After each pass and each step that prepared something (its clock is a system
            // call: not on the steps that only looked).
            CPU_NS.store(os::thread_cpu_ns(), Ordering::Relaxed);
        }
        // A step that prepared something comes back after a tick: the heap grows. One that
        // found nothing to do while demand lasts waits twice as long as the last, up to
        // DEMAND_WAIT_NS (a burst is still caught within milliseconds; a steady program
        // whose reserve is full is not preempted thousands of times a second); with no
        // demand the wait doubles up to the next upkeep pass, so a program that stays quiet
        // wakes the thread once per upkeep period.
        wait = if worked {
            PREPARE_TICK_NS
        } else if wanted {
            wait.saturating_mul(2).min(DEMAND_WAIT_NS)
        } else {
            wait.saturating_mul(2)
        };
        let wake = now.saturating_add(wait).min(next_upkeep);
        os::sleep_ns(wake.saturating_sub(os::monotonic_ns()).max(1));
    }
}

/// The default mode's step: one upkeep pass over every node, then a sleep of one upkeep
/// period. Frees make their own releases, as without the thread; the pass returns what fell due
/// while the program was quiet.
fn release_pass(instance: Instance) {
    let decommitted = instance.heaps.decommitted_total();
    upkeep_pass(instance, os::monotonic_ns());
    count_released(instance, decommitted);
    CPU_NS.store(os::thread_cpu_ns(), Ordering::Relaxed);
    os::sleep_ns(instance.heaps.upkeep_period());
}

/// One upkeep pass, in either mode: caches exited threads left and no thread took for a period
/// go home, then every node's upkeep runs.
fn upkeep_pass(instance: Instance, now: u64) {
    crate::thread::pool::drop_stale(now.saturating_sub(instance.heaps.upkeep_period()));
    instance.heaps.upkeep_all(now);
    PASSES.fetch_add(1, Ordering::Relaxed);
}

/// Adds to [`RELEASED`] what the arena decommitted since it had `before` bytes decommitted.
fn count_released(instance: Instance, before: usize) {
    // Release: a snapshot that sees this count sees the decommits it counts (see
    // `Instance::stats`).
    RELEASED.fetch_add(
        instance.heaps.decommitted_total().saturating_sub(before) as u64,
        Ordering::Release,
    );
}

/// How often preparation looks at the pools and bags while they grow: a heap that fills at a
/// few million objects a second takes a class's waiting bags in about a millisecond.
const PREPARE_TICK_NS: u64 = 250_000;

/// The longest wait between two looks while some pool or class had demand in the window.
const DEMAND_WAIT_NS: u64 = 4_000_000;

/// Chunks and bags prepared so far: a step that changes it did some work.
fn prepared_so_far(instance: Instance) -> u64 {
    instance.heaps.prepared_chunks() as u64 + instance.heaps.bags_prepared()
}

/// `pthread_create`'s signature: the faces pass libc's (the C library its wrapped function's
/// target, so the maintenance thread is neither bound nor given a heap).
pub type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    *mut libc::c_void,
) -> libc::c_int;

/// Starts the maintenance thread with `create` (detached) if the options ask for one and none
/// runs; true when one runs (or is being started) afterwards. The caller is at a safe point:
/// outside any allocator call.
pub(crate) fn start(create: PthreadCreate) -> bool {
    if !wanted() {
        return running();
    }
    if !claim() {
        // Another thread is starting it.
        return true;
    }
    // SAFETY: plain pthread calls on an attribute object we own; the start routine runs for
    // the whole process and needs no argument.
    let created = unsafe {
        let mut attributes: libc::pthread_attr_t = core::mem::zeroed();
        let mut thread: libc::pthread_t = 0;
        libc::pthread_attr_init(&mut attributes);
        libc::pthread_attr_setdetachstate(&mut attributes, libc::PTHREAD_CREATE_DETACHED);
        let result = create(&mut thread, &attributes, body, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attributes);
        result == 0
    };
    if created && mode() == Background::Full {
        // Frees leave their releases to the thread from the moment it exists, not from its
        // first pass (it says so again on each pass).
        if let Some(instance) = Instance::existing() {
            instance.heaps.defer_releases(true);
        }
    } else if !created {
        unclaim();
    }
    created
}

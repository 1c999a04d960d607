//! `pthread_create`, wrapped so a new thread gets its heap (and is bound to its node by the
//! `NODALLOC_BIND` policy) before the first line of user code runs, rather than at its first
//! allocation: a thread that touches memory before it allocates still lands on its node.
//!
//! The real function is found once with `dlsym(RTLD_NEXT, …)`. The start routine and its
//! argument travel to the new thread in a start block: one of a few static slots ([`StartSlots`]),
//! or a block from our own `malloc` when every slot is taken.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use nodalloc_core::raw::{self, BindBase, CpuSet, PthreadCreate};

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

static REAL: AtomicUsize = AtomicUsize::new(0);

struct Start {
    routine: StartRoutine,
    argument: *mut c_void,
    /// What the new thread's binding starts from (see [`binding_base`]).
    base: BindBase,
}

/// Start blocks for threads being created: the creator claims a slot, the new thread reads its
/// block as it starts and frees the slot. A block from `malloc` instead cost the new thread a
/// free of another thread's object as its first call: a refill of its own, its first page of
/// 32-byte objects and a trip to the node heap's class lock, in every thread, idle or not
/// (journal, "Thirty-fifth round"). Slots are claimed and freed with one atomic operation on a
/// bit set, safe in a signal handler and across `fork` (a child keeps the slots of threads
/// that never start in it, and uses `malloc` once all are gone).
struct StartSlots {
    /// Bit `i`: slot `i` is claimed. Claiming acquires the release of the thread that read the
    /// slot last; a thread releases its slot after it read the block.
    taken: AtomicU32,
    slots: [UnsafeCell<MaybeUninit<Start>>; START_SLOTS],
}

/// Threads that may be between their creation and their start at once before creation falls
/// back on `malloc`: a program's burst of creations on a few CPUs; a slot is held for the
/// microseconds until its thread runs.
const START_SLOTS: usize = 32;

// SAFETY: slot `i` is written only by the thread that claimed bit `i`, and read only by the
// thread it was handed to, before it clears the bit (see `claim` and `release`).
unsafe impl Sync for StartSlots {}

static START_SLOTS_POOL: StartSlots = StartSlots {
    taken: AtomicU32::new(0),
    slots: [const { UnsafeCell::new(MaybeUninit::uninit()) }; START_SLOTS],
};

impl StartSlots {
    /// A free slot, now the caller's, or `None` if every slot is taken.
    fn claim(&self) -> Option<*mut Start> {
        let mut taken = self.taken.load(Ordering::Relaxed);
        loop {
            let free = !taken;
            if free == 0 {
                return None;
            }
            let index = free.trailing_zeros();
            // Acquire: the thread that released this slot had read its block.
            match self.taken.compare_exchange_weak(
                taken,
                taken | (1 << index),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(self.slots[index as usize].get() as *mut Start),
                Err(now) => taken = now,
            }
        }
    }

    /// Frees `block` if it is one of the slots, and says whether it was. The caller has read
    /// the block and never touches it again.
    fn release(&self, block: *mut Start) -> bool {
        let first = self.slots.as_ptr() as usize;
        let offset = (block as usize).wrapping_sub(first);
        if offset >= core::mem::size_of_val(&self.slots) {
            return false;
        }
        let index = offset / core::mem::size_of::<UnsafeCell<MaybeUninit<Start>>>();
        // Release: the read of the block comes before the next claim's write.
        self.taken.fetch_and(!(1 << index), Ordering::Release);
        true
    }
}

/// A start block: a slot, or a block from `malloc` when none is free; null when neither.
fn claim_start() -> *mut Start {
    match START_SLOTS_POOL.claim() {
        Some(slot) => slot,
        // SAFETY: plain malloc of a small block.
        None => unsafe { crate::malloc(core::mem::size_of::<Start>()) as *mut Start },
    }
}

/// Frees a start block from [`claim_start`] that no thread was given.
fn release_start(block: *mut Start) {
    if !START_SLOTS_POOL.release(block) {
        // SAFETY: not a slot, so the block came from our malloc, and it is no longer used.
        unsafe { crate::free(block as *mut c_void) };
    }
}

/// What the binding of a thread created now with `attributes` starts from: none
/// ([`BindBase::Kept`]) when the attributes carry an affinity of their own (the program chose
/// the thread's mask; glibc reports "none" as every bit set); the process's start-up mask when
/// the thread inherits exactly the mask nodalloc gave the calling thread (the caller still has
/// it); else the mask the thread starts with.
fn binding_base(attributes: *const libc::pthread_attr_t) -> BindBase {
    if !attributes.is_null() {
        let mut requested = [0u8; core::mem::size_of::<CpuSet>()];
        // SAFETY: `attributes` is the caller's initialised attribute object; glibc writes at
        // most `requested.len()` bytes.
        let result = unsafe {
            libc::pthread_attr_getaffinity_np(
                attributes,
                requested.len(),
                requested.as_mut_ptr() as *mut libc::cpu_set_t,
            )
        };
        if result != 0 || !requested.iter().all(|&byte| byte == 0xff) {
            return BindBase::Kept;
        }
    }
    let Some(mask) = crate::plain::heap().and_then(|heap| heap.bound_mask().copied()) else {
        return BindBase::Current;
    };
    let mut current = CpuSet::new();
    if nodalloc_core::raw::thread_affinity(&mut current) && current == mask {
        BindBase::Process
    } else {
        BindBase::Current
    }
}

fn real_pthread_create() -> Option<PthreadCreate> {
    let mut address = REAL.load(Ordering::Acquire);
    if address == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other precondition.
        address = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
        if address == 0 {
            return None;
        }
        REAL.store(address, Ordering::Release);
    }
    // SAFETY: the symbol is libc's pthread_create, whose signature this is.
    Some(unsafe { core::mem::transmute::<usize, PthreadCreate>(address) })
}

extern "C" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `start` is the block `pthread_create` below filled for this thread alone.
    let Start {
        routine,
        argument,
        base,
    } = unsafe { (start as *mut Start).read() };
    let slot = START_SLOTS_POOL.release(start as *mut Start);
    // The heap first: a free of the block would otherwise create it, binding from the wrong
    // base.
    crate::plain::heap_or_create_with(base);
    if !slot {
        // SAFETY: not a slot, so the block came from our malloc, and it is no longer used.
        unsafe { crate::free(start) };
    }
    routine(argument)
}

/// # Safety
/// POSIX `pthread_create`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attributes: *const libc::pthread_attr_t,
    routine: StartRoutine,
    argument: *mut c_void,
) -> c_int {
    let Some(real) = real_pthread_create() else {
        return libc::EAGAIN;
    };
    // The caller's heap (and binding), as its first allocation would make them: the new
    // thread's binding starts from the caller's (`binding_base`).
    crate::plain::heap_or_create();
    let start = claim_start();
    // The program's first thread: a safe point (outside any allocator call) to start the
    // maintenance thread, if the options ask for it.
    raw::start_background(real);
    if start.is_null() {
        // Out of memory: start the thread unwrapped; it binds at its first allocation.
        // SAFETY: forwarded arguments.
        return unsafe { real(thread, attributes, routine, argument) };
    }
    let base = binding_base(attributes);
    // SAFETY: `start` holds room for one Start.
    unsafe {
        start.write(Start {
            routine,
            argument,
            base,
        })
    };
    // SAFETY: forwarded arguments; the trampoline takes ownership of `start`.
    let result = unsafe { real(thread, attributes, trampoline, start as *mut c_void) };
    if result != 0 {
        // The thread was not created, so the block is still ours.
        release_start(start);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn nothing(argument: *mut c_void) -> *mut c_void {
        argument
    }

    fn empty_slots() -> StartSlots {
        StartSlots {
            taken: AtomicU32::new(0),
            slots: [const { UnsafeCell::new(MaybeUninit::uninit()) }; START_SLOTS],
        }
    }

    /// Every slot once, then none; a released slot is claimed again; a block that is not a slot
    /// is not released (it goes to `free`).
    #[test]
    fn slots_are_claimed_once_each_until_released() {
        let slots = empty_slots();
        let mut claimed = [core::ptr::null_mut::<Start>(); START_SLOTS];
        for block in claimed.iter_mut() {
            *block = slots.claim().expect("a free slot");
        }
        for (index, block) in claimed.iter().enumerate() {
            assert!(!claimed[..index].contains(block), "slot handed out twice");
        }
        assert!(slots.claim().is_none(), "all taken");
        assert!(slots.release(claimed[7]));
        assert_eq!(slots.claim(), Some(claimed[7]));
        let mut outside = MaybeUninit::<Start>::uninit();
        assert!(!slots.release(outside.as_mut_ptr()));
        let past_end = claimed[0].wrapping_add(START_SLOTS);
        assert!(!slots.release(past_end), "the address just past the slots");
        for block in claimed {
            assert!(slots.release(block));
        }
        assert_eq!(slots.taken.load(Ordering::Relaxed), 0);
    }

    /// More threads than slots claim, write, check and release blocks: no slot is ever held by
    /// two at once (each finds its own values when it reads), and all are free at the end.
    #[test]
    fn slots_stay_exclusive_under_contention() {
        let slots = empty_slots();
        std::thread::scope(|scope| {
            for thread in 0..START_SLOTS + 8 {
                let slots = &slots;
                scope.spawn(move || {
                    for round in 0..2_000usize {
                        let Some(block) = slots.claim() else {
                            std::thread::yield_now();
                            continue;
                        };
                        let mine = (thread << 20 | round) as *mut c_void;
                        // SAFETY: the slot is this thread's until it releases it.
                        unsafe {
                            block.write(Start {
                                routine: nothing,
                                argument: mine,
                                base: BindBase::Kept,
                            });
                            std::thread::yield_now();
                            assert_eq!((*block).argument, mine, "slot shared");
                        }
                        assert!(slots.release(block));
                    }
                });
            }
        });
        assert_eq!(slots.taken.load(Ordering::Relaxed), 0);
    }
}

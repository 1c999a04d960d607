//! `pthread_create`, wrapped so a new thread gets its heap (and is bound to its node by the
//! `NODALLOC_BIND` policy) before the first line of user code runs, rather than at its first
//! allocation: a thread that touches memory before it allocates still lands on its node.
//!
//! The real function is found once with `dlsym(RTLD_NEXT, …)`. The start routine and its
//! argument travel to the new thread in a small block from our own `malloc`.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use nodalloc_core::raw::{self, BindBase, CpuSet, PthreadCreate};

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

static REAL: AtomicUsize = AtomicUsize::new(0);

struct Start {
    routine: StartRoutine,
    argument: *mut c_void,
    /// What the new thread's binding starts from (see [`binding_base`]).
    base: BindBase,
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
    // The heap first: the free below would otherwise create it, binding from the wrong base.
    crate::plain::heap_or_create_with(base);
    // SAFETY: the block came from our malloc and is no longer used.
    unsafe { crate::free(start) };
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
    // SAFETY: plain malloc of a small block.
    let start = unsafe { crate::malloc(core::mem::size_of::<Start>()) } as *mut Start;
    // The program's first thread: a safe point (outside any allocator call) to start the
    // maintenance thread, if the options ask for it (after the malloc above, which starts the
    // allocator).
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
        // SAFETY: the thread was not created, so the block is still ours.
        unsafe { crate::free(start as *mut c_void) };
    }
    result
}

//! The platform layer: every syscall, every read of `/sys` or `/proc`, the environment and the
//! clock. Nothing here allocates: files are read into caller buffers with `open`/`read`,
//! messages are formatted into a stack buffer and written to fd 2, the environment is read with
//! `getenv`. Everything above this module is plain Rust over the types it exports.

pub mod cpuset;
mod files;
mod futex;
mod memory;
mod message;
pub mod options;
pub(crate) mod proc;
mod random;
pub mod rseq;
mod symbol;
pub mod topology;

use core::ffi::CStr;

pub use files::*;
pub use futex::{futex_wait, futex_wake};
pub use memory::*;
pub use message::*;
pub use proc::{for_each_huge_mapping, mapping_of};
pub use random::*;
pub use symbol::symbolize;

pub const PAGE_SIZE: usize = 4096;

/// The CPU this thread runs on now: the rseq area's `cpu_id` where glibc registered one (one
/// load), else `sched_getcpu` (the vDSO; no syscall on modern kernels).
pub fn current_cpu() -> Option<usize> {
    if let Some(word) = rseq::cpu_id_word() {
        // SAFETY: the calling thread's rseq area, live while it runs; the kernel writes it.
        let cpu = unsafe { word.read_volatile() };
        // Negative values (as i32) mean "not registered" or "registration failed".
        if (cpu as i32) >= 0 {
            return Some(cpu as usize);
        }
    }
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        None
    } else {
        Some(cpu as usize)
    }
}

/// The calling thread's CPU affinity.
pub fn thread_affinity(set: &mut cpuset::CpuSet) -> bool {
    // SAFETY: the kernel writes at most `size_of::<CpuSet>()` bytes into `set`.
    unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            0 as libc::c_long,
            core::mem::size_of::<cpuset::CpuSet>(),
            set as *mut cpuset::CpuSet as *mut u8,
        ) > 0
    }
}

/// Restricts the calling thread to `set`. Returns the errno on failure.
pub fn set_thread_affinity(set: &cpuset::CpuSet) -> Result<(), i32> {
    // SAFETY: the kernel reads `size_of::<CpuSet>()` bytes from `set`.
    let result = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            0 as libc::c_long,
            core::mem::size_of::<cpuset::CpuSet>(),
            set as *const cpuset::CpuSet as *const u8,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

pub fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// The calling thread's CPU time in ns (0 if the clock cannot be read).
pub fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return 0;
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Sleeps for `ns` nanoseconds (less if a signal interrupts).
pub fn sleep_ns(ns: u64) {
    let time = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: nanosleep reads one timespec we own; the remainder is not wanted.
    unsafe { libc::nanosleep(&time, core::ptr::null_mut()) };
}

/// Monotonic time in nanoseconds (the coarse clock: a vDSO read, a few ns, ms resolution).
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The soft `RLIMIT_AS`, if one is set.
pub fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(limit.rlim_cur)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn huge_mappings_are_found_where_the_kernel_reports_them() {
        const SIZE: usize = 4 << 20;
        if nodalloc_testkit::skipped_without_thp() {
            return;
        }
        let memory = reserve_aligned(SIZE, 2 << 20).expect("a 4 MiB mapping") as usize;
        assert!(advise(memory as *mut u8, SIZE, libc::MADV_HUGEPAGE));
        // SAFETY: the mapping is ours, readable and writable.
        unsafe { (memory as *mut u8).write_bytes(1, SIZE) };
        let mut ours = 0;
        assert!(for_each_huge_mapping(|start, bytes| {
            if (memory..memory + SIZE).contains(&start) {
                ours += bytes;
            }
        }));
        // The kernel may lack free huge pages; a hit proves the parse, a miss is reported.
        if ours == 0 {
            eprintln!("the kernel backed no huge page here; parse checked on its own");
        } else {
            assert!((2 << 20..=SIZE).contains(&ours), "{ours} bytes");
        }
        // SAFETY: unmapping what we mapped; nothing refers to it.
        unsafe { unmap(memory as *mut u8, SIZE) };
    }

    use super::*;

    /// `pages_off_node` counts the resident pages that are not on the node asked about, in
    /// calls of 64 pages: on this machine's one node, none are off node 0 and every resident one
    /// is off node 1; pages never touched are not counted.
    #[test]
    fn pages_off_a_node_are_counted_resident_ones_only() {
        const PAGES: usize = 150;
        let size = PAGES * PAGE_SIZE;
        let memory = reserve(size).expect("a mapping");
        assert!(commit(memory, size));
        // Every other page touched: 75 resident, over three calls' worth of pages.
        for page in (0..PAGES).step_by(2) {
            // SAFETY: inside the mapping, committed above.
            unsafe { memory.add(page * PAGE_SIZE).write(1) };
        }
        // The node the pages were faulted on: this thread's (the default policy's local node).
        let (mut cpu, mut node) = (0u32, 0u32);
        // SAFETY: getcpu writes one unsigned int to each pointer; the cache argument is unused.
        unsafe { libc::syscall(libc::SYS_getcpu, &mut cpu, &mut node, 0usize) };
        let node = node as usize;
        match pages_off_node(memory, size, node) {
            Ok(off) => assert_eq!(off, 0),
            Err(errno) => {
                // A kernel without NUMA support answers ENOSYS, a sandbox that forbids the
                // call EPERM: nothing to check there.
                assert!(
                    errno == libc::ENOSYS || errno == libc::EPERM,
                    "errno {errno}"
                );
                // SAFETY: unmapping what we mapped; nothing refers to it.
                unsafe { unmap(memory, size) };
                return;
            }
        }
        assert_eq!(pages_off_node(memory, size, node + 1), Ok(PAGES / 2));
        // A range that starts inside a page counts that page.
        // SAFETY: an address inside the mapping.
        let inner = unsafe { memory.add(PAGE_SIZE / 2) };
        assert_eq!(pages_off_node(inner, PAGE_SIZE, node + 1), Ok(1));
        // SAFETY: unmapping what we mapped; nothing refers to it.
        unsafe { unmap(memory, size) };
    }

    #[test]
    fn writer_formats_numbers_and_sizes_without_allocating() {
        let mut w = Writer::new();
        w.str("x=")
            .decimal(0)
            .str(" y=")
            .decimal(18_446_744_073_709_551_615)
            .str(" p=")
            .hex(0xdead0);
        assert_eq!(w.as_bytes(), b"x=0 y=18446744073709551615 p=0xdead0");
        w.clear();
        w.size(512).str(",").size(1536).str(",").size(3 << 30);
        assert_eq!(w.as_bytes(), b"512 B,1.5 KiB,3.0 GiB");
    }

    #[test]
    fn writer_truncates_instead_of_overflowing() {
        let mut w = Writer::new();
        for _ in 0..100 {
            w.str("0123456789");
        }
        assert_eq!(w.as_bytes().len(), 512);
    }

    #[test]
    fn read_file_reads_proc_and_reports_missing_files() {
        let mut buffer = [0u8; 256];
        let text = read_file(c"/proc/self/stat", &mut buffer).expect("procfs is mounted");
        assert!(!text.is_empty());
        assert!(read_file(c"/nonexistent/nodalloc", &mut buffer).is_none());
    }

    #[test]
    fn the_task_memory_policy_is_readable() {
        let mut mask = [0u64; cpuset::MAX_NODE_WORDS];
        let mode = task_memory_policy(&mut mask).expect("get_mempolicy works");
        // MPOL_DEFAULT (0) unless the test runs under numactl.
        assert!((0..=6).contains(&mode), "mode {mode}");
    }

    #[test]
    fn path_buffer_builds_numbered_paths() {
        let path = PathBuffer::numbered(b"/sys/devices/system/node/node", 12, b"/cpulist");
        assert_eq!(
            path.as_cstr().to_bytes(),
            b"/sys/devices/system/node/node12/cpulist"
        );
    }

    #[test]
    fn reserve_aligned_returns_aligned_usable_memory() {
        let p = reserve_aligned(1 << 20, 1 << 21).unwrap();
        assert_eq!(p as usize % (1 << 21), 0);
        // SAFETY: the mapping is ours, 1 MiB long.
        unsafe {
            p.write_bytes(0xAB, 1 << 20);
            assert_eq!(*p.add((1 << 20) - 1), 0xAB);
            unmap(p, 1 << 20);
        }
    }
}

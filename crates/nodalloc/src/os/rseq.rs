//! The CPU a thread runs on, read from its restartable-sequences area: glibc (2.35 and later)
//! registers one per thread with the kernel, which writes the thread's current CPU into its
//! `cpu_id` field before the thread runs again after each migration. Reading it is one load,
//! cheap enough for a fast path to notice that its thread moved.
//!
//! glibc publishes where the area is: `__rseq_offset` (from the thread pointer) and
//! `__rseq_size` (0 when the registration failed or was turned off with the
//! `glibc.pthread.rseq` tunable). Both are referenced weakly, so an older C library (without
//! them) leaves their addresses null and [`cpu_id_word`] answers `None`.

/// Where the kernel keeps the calling thread's current CPU (the `cpu_id` field of its rseq
/// area), if glibc registered one. The address is the thread's own: valid while it lives.
pub fn cpu_id_word() -> Option<*const u32> {
    imp::cpu_id_word()
}

#[cfg(target_arch = "x86_64")]
mod imp {
    // Weak references: a C library without the symbols resolves them to address 0.
    core::arch::global_asm!(".weak __rseq_offset", ".weak __rseq_size");

    /// Offset of `cpu_id` in `struct rseq` (after the 32-bit `cpu_id_start`).
    const CPU_ID_OFFSET: usize = 4;

    pub fn cpu_id_word() -> Option<*const u32> {
        let (offset, size): (*const isize, *const u32);
        // SAFETY: reads the GOT entries the linker made for the two weak symbols (their
        // addresses, or 0 when undefined), and the thread pointer; nothing is written.
        unsafe {
            core::arch::asm!(
                "mov {0}, qword ptr [rip + __rseq_offset@GOTPCREL]",
                "mov {1}, qword ptr [rip + __rseq_size@GOTPCREL]",
                out(reg) offset,
                out(reg) size,
                options(pure, readonly, nostack, preserves_flags)
            );
        }
        if offset.is_null() || size.is_null() {
            return None;
        }
        // SAFETY: both are glibc's variables (non-null addresses above), set before any thread
        // of the program runs and never changed afterwards.
        let (offset, size) = unsafe { (*offset, *size) };
        // The registered size (glibc reports the area's used part, 20 bytes or more; 0 when
        // nothing is registered) must cover `cpu_id`.
        if (size as usize) < CPU_ID_OFFSET + 4 {
            return None;
        }
        let thread_pointer: usize;
        // SAFETY: on x86-64 Linux the thread pointer's first word is the pointer itself (the
        // TCB's `self` field, as the ABI requires).
        unsafe {
            core::arch::asm!(
                "mov {0}, qword ptr fs:[0]",
                out(reg) thread_pointer,
                options(pure, readonly, nostack, preserves_flags)
            );
        }
        Some(
            thread_pointer
                .wrapping_add_signed(offset)
                .wrapping_add(CPU_ID_OFFSET) as *const u32,
        )
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    pub fn cpu_id_word() -> Option<*const u32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where glibc registered an area (this machine's does), its CPU is the one `sched_getcpu`
    /// reports (the thread is pinned meanwhile so neither can change).
    #[test]
    fn the_rseq_cpu_is_the_scheduler_cpu() {
        // SAFETY: returns a static NUL-terminated string.
        let version = unsafe { core::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        let (major, minor) = version
            .to_str()
            .ok()
            .and_then(|v| v.split_once('.'))
            .map(|(a, b)| (a.parse::<u32>().unwrap_or(0), b.parse::<u32>().unwrap_or(0)))
            .unwrap_or((0, 0));
        let tuned_off = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("rseq"));
        let Some(word) = cpu_id_word() else {
            assert!(
                (major, minor) < (2, 35) || tuned_off,
                "glibc {major}.{minor} registers an rseq area, but none was found"
            );
            return;
        };
        let mut set = crate::os::cpuset::CpuSet::new();
        assert!(crate::os::thread_affinity(&mut set));
        let cpu = set.iter().next().unwrap();
        let mut one = crate::os::cpuset::CpuSet::new();
        one.insert(cpu);
        assert!(crate::os::set_thread_affinity(&one).is_ok());
        // SAFETY: the calling thread's rseq area, live while it runs.
        let seen = unsafe { word.read_volatile() };
        assert_eq!(seen as usize, cpu);
        assert_eq!(crate::os::current_cpu(), Some(cpu));
        assert!(crate::os::set_thread_affinity(&set).is_ok());
    }
}

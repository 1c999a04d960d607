//! The platform layer: every syscall, every read of `/sys` or `/proc`, the environment and the
//! clock. Nothing here allocates: files are read into caller buffers with `open`/`read`,
//! messages are formatted into a stack buffer and written to fd 2, the environment is read with
//! `getenv`. Everything above this module is plain Rust over the types it exports.

pub mod cpuset;
mod futex;
pub mod options;
pub(crate) mod proc;
pub mod rseq;
mod symbol;
pub mod topology;

use core::ffi::CStr;

pub use futex::{futex_wait, futex_wake};
pub use proc::{for_each_huge_mapping, mapping_of};
pub use symbol::symbolize;

pub const PAGE_SIZE: usize = 4096;

/// Reserves `size` bytes of address space, readable and writable, not charged to the commit
/// limit (`MAP_NORESERVE`); pages are materialised on first touch. `None` on failure.
pub fn reserve(size: usize) -> Option<*mut u8> {
    map_anonymous(size, libc::PROT_READ | libc::PROT_WRITE)
}

/// Reserves `size` bytes of inaccessible address space (`PROT_NONE`): not charged to the commit
/// limit even under `vm.overcommit_memory=2`; [`commit`] makes parts of it usable.
pub fn reserve_inaccessible(size: usize) -> Option<*mut u8> {
    map_anonymous(size, libc::PROT_NONE)
}

fn map_anonymous(size: usize, protection: libc::c_int) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing has no
    // preconditions and cannot alias memory we own.
    let address = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            size,
            protection,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if address == libc::MAP_FAILED {
        None
    } else {
        Some(address as *mut u8)
    }
}

/// Makes a page-aligned range of a reservation readable and writable (charging it to the commit
/// limit). False when the kernel refuses (the commit limit is reached).
pub fn commit(address: *mut u8, size: usize) -> bool {
    // SAFETY: changing protection of our own reserved range has no effect on other memory.
    unsafe {
        libc::mprotect(
            address as *mut libc::c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
        ) == 0
    }
}

/// Makes a page-aligned range of our own reserved (`PROT_NONE`) mapping readable: its pages
/// read as zero until [`commit`] makes them writable. Not charged to the commit limit (the
/// kernel charges only writable private memory). False when the kernel refuses.
pub fn make_readable(address: *mut u8, size: usize) -> bool {
    // SAFETY: changing protection of our own reserved range has no effect on other memory.
    unsafe { libc::mprotect(address as *mut libc::c_void, size, libc::PROT_READ) == 0 }
}

/// Makes a page-aligned range of our own mapping inaccessible (`PROT_NONE`): a guard page. The
/// commit charge is unchanged (the kernel keeps the range accounted), so [`commit`] undoes it
/// without charging again. False when the kernel refuses (e.g. `vm.max_map_count` reached).
pub fn protect(address: *mut u8, size: usize) -> bool {
    // SAFETY: changing protection of our own range has no effect on other memory; the caller
    // makes sure nothing live is in it.
    unsafe { libc::mprotect(address as *mut libc::c_void, size, libc::PROT_NONE) == 0 }
}

/// SplitMix64's finaliser: a bijection of `u64` that spreads every input bit over the output.
/// The library's one mixer (secure mode's keys and carving order, the C face's trailers).
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

static PROCESS_SECRET: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The process's secret: 64 unpredictable bits (getrandom, else `AT_RANDOM`) mixed, odd
/// (never 0), the same for every caller for the process's life. Computed at the first call;
/// a race computes it twice and keeps one.
pub fn process_secret() -> u64 {
    use core::sync::atomic::Ordering;
    let secret = PROCESS_SECRET.load(Ordering::Relaxed);
    if secret != 0 {
        return secret;
    }
    let fresh = mix(random_seed() ^ 0x6e6f_6461_6c6c_6f63) | 1;
    match PROCESS_SECRET.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => fresh,
        Err(first) => first,
    }
}

/// 64 unpredictable bits for keys and seeds: `getrandom` (non-blocking), else the 16 bytes the
/// kernel gave the process at `exec` (`AT_RANDOM`), else the clock and a stack address. No
/// allocation, no file.
pub fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: the kernel writes at most 8 bytes into `bytes`.
    let got = unsafe {
        libc::syscall(
            libc::SYS_getrandom,
            bytes.as_mut_ptr(),
            bytes.len(),
            libc::GRND_NONBLOCK,
        )
    };
    if got == bytes.len() as libc::c_long {
        return u64::from_ne_bytes(bytes);
    }
    // SAFETY: getauxval has no preconditions; AT_RANDOM, when present, points to 16 bytes the
    // kernel placed on the initial stack, valid for the whole process.
    let auxiliary = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const u64;
    let mut seed = if auxiliary.is_null() {
        0
    } else {
        // SAFETY: as above; read unaligned in case the kernel did not align them.
        unsafe { auxiliary.read_unaligned() ^ auxiliary.add(1).read_unaligned() }
    };
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    seed ^= (now.tv_nsec as u64) << 32 ^ now.tv_sec as u64 ^ (&now as *const _ as u64);
    seed
}

/// Reserves `size` bytes aligned to `alignment` (a power of two), trimming the excess;
/// inaccessible (`PROT_NONE`) when `inaccessible`.
pub fn reserve_aligned_with(size: usize, alignment: usize, inaccessible: bool) -> Option<*mut u8> {
    let padded = size.checked_add(alignment)?;
    let raw = if inaccessible {
        reserve_inaccessible(padded)?
    } else {
        reserve(padded)?
    } as usize;
    let aligned = (raw + alignment - 1) & !(alignment - 1);
    let head = aligned - raw;
    let tail = padded - head - size;
    // SAFETY: both trimmed ranges lie inside the mapping we just made and nobody uses them.
    unsafe {
        if head > 0 {
            unmap(raw as *mut u8, head);
        }
        if tail > 0 {
            unmap((aligned + size) as *mut u8, tail);
        }
    }
    Some(aligned as *mut u8)
}

#[cfg(test)]
/// Reserves `size` bytes aligned to `alignment` (a power of two), trimming the excess.
pub fn reserve_aligned(size: usize, alignment: usize) -> Option<*mut u8> {
    reserve_aligned_with(size, alignment, false)
}

/// # Safety
/// The range must be a mapping (or part of one) that no live object uses.
pub unsafe fn unmap(address: *mut u8, size: usize) {
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::munmap(address as *mut libc::c_void, size) };
}

/// Gives the pages of a range back to the kernel; they read as zeroes when touched again.
///
/// # Safety
/// The range must be page aligned, inside our reservation, and hold no live object.
pub unsafe fn decommit(address: *mut u8, size: usize) {
    // SAFETY: the caller guarantees the range is ours and holds nothing live.
    unsafe { libc::madvise(address as *mut libc::c_void, size, libc::MADV_DONTNEED) };
}

/// Fills `len` bytes at `ptr` with `byte` without calling the `memset` symbol: the C face
/// exports its own, checked in secure mode, and those checks are for the program's writes, not
/// the allocator's (a bag zeroed before its objects are handed out, a block cleared for
/// `calloc`). On x86_64 one `rep stosb`; elsewhere no checked symbol is exported.
///
/// # Safety
/// `[ptr, ptr + len)` must be writable memory the caller owns.
#[inline]
pub unsafe fn fill_unchecked(ptr: *mut u8, byte: u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rep stosb` writes `len` bytes forwards from `ptr` (the ABI keeps the direction
    // flag clear at calls), which the caller owns; it touches no stack.
    unsafe {
        core::arch::asm!(
            "rep stosb",
            inout("rdi") ptr => _,
            inout("rcx") len => _,
            in("al") byte,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded contract.
    unsafe {
        ptr.write_bytes(byte, len)
    };
}

/// Copies `len` bytes from `src` to `dst` (which do not overlap) without calling the `memcpy`
/// symbol, for the reason [`fill_unchecked`] gives. On x86_64 one `rep movsb`.
///
/// # Safety
/// `[src, src + len)` readable, `[dst, dst + len)` writable and the caller's, not overlapping.
#[inline]
pub unsafe fn copy_unchecked(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rep movsb` copies `len` bytes forwards (direction flag clear at calls) between
    // the caller's ranges; it touches no stack.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rdi") dst => _,
            inout("rsi") src => _,
            inout("rcx") len => _,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded contract.
    unsafe {
        core::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// `MADV_POPULATE_WRITE` (Linux 5.14), not in every libc's headers.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Faults in every page of a committed range as writable, so touching it later costs no page
/// fault (the kernel clears the pages now, in the calling thread). Where the kernel lacks
/// `MADV_POPULATE_WRITE`, one byte of each page is written with zero instead.
///
/// # Safety
/// The range must be page aligned, committed, inside our reservation, and hold no live object
/// (the fallback writes into it; it reads as zeroes either way when it was clean).
pub unsafe fn populate(address: *mut u8, size: usize) {
    // SAFETY: the advice faults pages in without changing their contents.
    if unsafe { libc::madvise(address as *mut libc::c_void, size, MADV_POPULATE_WRITE) } == 0 {
        return;
    }
    let mut offset = 0;
    while offset < size {
        // SAFETY: inside the caller's committed range, which holds nothing live; writing the
        // zero it reads as changes nothing.
        unsafe {
            let byte = address.add(offset);
            let value = core::ptr::read_volatile(byte);
            core::ptr::write_volatile(byte, value);
        }
        offset += PAGE_SIZE;
    }
}

/// Advice that has no effect on contents (`MADV_HUGEPAGE`, `MADV_NOHUGEPAGE`).
pub fn advise(address: *mut u8, size: usize, advice: libc::c_int) -> bool {
    // SAFETY: these advices only change kernel policy for the range, never its contents.
    unsafe { libc::madvise(address as *mut libc::c_void, size, advice) == 0 }
}

pub const MPOL_PREFERRED: libc::c_int = 1;
pub const MPOL_BIND: libc::c_int = 2;
pub const MPOL_INTERLEAVE: libc::c_int = 3;
/// Interleave by the weights in `/sys/kernel/mm/mempolicy/weighted_interleave` (Linux 6.9).
pub const MPOL_WEIGHTED_INTERLEAVE: libc::c_int = 6;

/// Binds a range to one node with `mbind(2)`. Returns the errno on failure.
pub fn bind_memory(
    address: *mut u8,
    size: usize,
    mode: libc::c_int,
    node: usize,
) -> Result<(), i32> {
    bind_memory_to(address, size, mode, &[node])
}

/// Moves the resident pages of a range to `node` (the kernel's number): `mbind(2)` with
/// `MPOL_BIND` and `MPOL_MF_MOVE`, which migrates the pages mapped by this process alone (a
/// transparent huge page the range cuts through is split first). The range keeps that policy:
/// the caller gives it its own back. Returns the errno on failure.
pub fn move_memory(address: *mut u8, size: usize, node: usize) -> Result<(), i32> {
    bind_with_flags(address, size, MPOL_BIND, &[node], MPOL_MF_MOVE)
}

/// `mbind(2)`'s flag that moves pages already resident to the policy's nodes.
const MPOL_MF_MOVE: libc::c_ulong = 1 << 1;

/// Binds a range to a set of nodes (the kernel's numbers) with `mbind(2)`, as `mode` places
/// pages over them. Returns the errno on failure.
pub fn bind_memory_to(
    address: *mut u8,
    size: usize,
    mode: libc::c_int,
    nodes: &[usize],
) -> Result<(), i32> {
    bind_with_flags(address, size, mode, nodes, 0)
}

/// [`bind_memory_to`] with `mbind(2)`'s `flags`.
fn bind_with_flags(
    address: *mut u8,
    size: usize,
    mode: libc::c_int,
    nodes: &[usize],
    flags: libc::c_ulong,
) -> Result<(), i32> {
    let mut mask = [0u64; cpuset::MAX_NODE_WORDS];
    for &node in nodes {
        if node >= cpuset::MAX_NODE_WORDS * 64 {
            return Err(libc::EINVAL);
        }
        mask[node / 64] |= 1 << (node % 64);
    }
    // SAFETY: mbind reads `maxnode` bits from `mask`, which holds MAX_NODE_WORDS words; the range
    // is a mapping of ours.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            address as usize,
            size,
            mode as libc::c_long,
            mask.as_ptr(),
            (cpuset::MAX_NODE_WORDS * 64) as libc::c_ulong,
            flags,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// The calling thread's memory policy (`get_mempolicy(2)`): its mode and node mask, e.g.
/// `MPOL_BIND` with the nodes `numactl --membind` allowed.
pub fn task_memory_policy(mask: &mut [u64; cpuset::MAX_NODE_WORDS]) -> Option<libc::c_int> {
    let mut mode: libc::c_int = 0;
    // SAFETY: the kernel writes the mode and at most `maxnode` bits into `mask`, which holds
    // MAX_NODE_WORDS words; a null address with no flags asks for the task policy.
    let result = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (cpuset::MAX_NODE_WORDS * 64) as libc::c_ulong,
            0usize,
            0 as libc::c_ulong,
        )
    };
    if result == 0 {
        Some(mode)
    } else {
        None
    }
}

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

/// Reads a whole small file into `buffer`, returning the bytes read. No allocation.
pub fn read_file<'a>(path: &CStr, buffer: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: `path` is NUL-terminated; flags ask for a read-only descriptor.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut filled = 0;
    while filled < buffer.len() {
        // SAFETY: we read into the unfilled tail of `buffer`, which we own.
        let n = unsafe {
            libc::read(
                fd,
                buffer[filled..].as_mut_ptr() as *mut libc::c_void,
                buffer.len() - filled,
            )
        };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            break;
        }
        if n == 0 {
            break;
        }
        filled += n as usize;
    }
    // SAFETY: `fd` is the descriptor we opened above.
    unsafe { libc::close(fd) };
    Some(&buffer[..filled])
}

/// Calls `entry` with the name of every entry of the directory at `path` (`.` and `..` left
/// out), read with `getdents64` into a stack buffer: no allocation (`opendir` allocates).
/// Returns false when the directory cannot be opened.
pub fn for_each_dir_entry(path: &CStr, mut entry: impl FnMut(&[u8])) -> bool {
    // SAFETY: `path` is NUL-terminated; flags ask for a read-only directory descriptor.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    let mut buffer = [0u64; 512];
    loop {
        // SAFETY: the kernel writes at most `size_of_val(&buffer)` bytes of records into our
        // buffer.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                buffer.as_mut_ptr(),
                core::mem::size_of_val(&buffer),
            )
        };
        if n <= 0 {
            break;
        }
        // SAFETY: the buffer holds `n` initialised bytes, read as bytes.
        let bytes =
            unsafe { core::slice::from_raw_parts(buffer.as_ptr() as *const u8, n as usize) };
        // Each record: inode (8), offset (8), length (2), type (1), NUL-terminated name.
        let mut at = 0;
        while at + 19 < bytes.len() {
            let length = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            if length < 20 || at + length > bytes.len() {
                break;
            }
            let name = &bytes[at + 19..at + length];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                entry(name);
            }
            at += length;
        }
    }
    // SAFETY: `fd` is the descriptor we opened above.
    unsafe { libc::close(fd) };
    true
}

/// A file path built in a stack buffer: `prefix` + decimal `number` + `suffix`, NUL-terminated.
pub struct PathBuffer {
    bytes: [u8; 128],
}

impl PathBuffer {
    pub fn numbered(prefix: &[u8], number: usize, suffix: &[u8]) -> Self {
        let mut path = PathBuffer { bytes: [0; 128] };
        let mut writer = Writer::new();
        writer.bytes(prefix).decimal(number as u64).bytes(suffix);
        let text = writer.as_bytes();
        let n = text.len().min(127);
        path.bytes[..n].copy_from_slice(&text[..n]);
        path
    }

    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.bytes).expect("PathBuffer always holds a NUL")
    }
}

/// The value of an environment variable, without allocating.
pub fn env(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv returns null or a pointer into the environment block, which lives as long
    // as the process unless someone calls setenv; options are read once, at start-up.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        None
    } else {
        // SAFETY: a non-null getenv result is a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(value) }.to_bytes())
    }
}

/// Monotonic time in nanoseconds (the coarse clock: a vDSO read, a few ns, ms resolution).
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

/// A fixed-size message buffer: the only way this crate formats text on internal paths.
pub struct Writer {
    buffer: [u8; 512],
    length: usize,
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Writer {
    pub const fn new() -> Self {
        Writer {
            buffer: [0; 512],
            length: 0,
        }
    }

    pub fn bytes(&mut self, text: &[u8]) -> &mut Self {
        let n = text.len().min(self.buffer.len() - self.length);
        self.buffer[self.length..self.length + n].copy_from_slice(&text[..n]);
        self.length += n;
        self
    }

    pub fn str(&mut self, text: &str) -> &mut Self {
        self.bytes(text.as_bytes())
    }

    pub fn decimal(&mut self, mut value: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.bytes(&digits[i..])
    }

    pub fn hex(&mut self, value: usize) -> &mut Self {
        let mut digits = [0u8; 16];
        let mut i = digits.len();
        let mut rest = value;
        loop {
            i -= 1;
            digits[i] = b"0123456789abcdef"[rest & 15];
            rest >>= 4;
            if rest == 0 {
                break;
            }
        }
        self.bytes(b"0x").bytes(&digits[i..])
    }

    /// Bytes with a binary unit (`12.5 MiB`), one decimal.
    pub fn size(&mut self, bytes: u64) -> &mut Self {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut unit = 0;
        let mut scaled = bytes as f64;
        while scaled >= 1024.0 && unit + 1 < UNITS.len() {
            scaled /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            return self.decimal(bytes).str(" B");
        }
        let tenths = (scaled * 10.0 + 0.5) as u64;
        self.decimal(tenths / 10)
            .str(".")
            .decimal(tenths % 10)
            .str(" ")
            .str(UNITS[unit])
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer[..self.length]
    }

    pub fn clear(&mut self) {
        self.length = 0;
    }

    /// Writes the buffer to a file descriptor, retrying short writes.
    pub fn write_to(&self, fd: i32) {
        let mut written = 0;
        while written < self.length {
            // SAFETY: we pass a slice of our own buffer and its length.
            let n = unsafe {
                libc::write(
                    fd,
                    self.buffer[written..self.length].as_ptr() as *const libc::c_void,
                    self.length - written,
                )
            };
            if n <= 0 {
                if n < 0 && errno() == libc::EINTR {
                    continue;
                }
                return;
            }
            written += n as usize;
        }
    }
}

/// Prints `nodalloc: warning: …` on one line to stderr.
pub fn warn(build: impl FnOnce(&mut Writer)) {
    let mut writer = Writer::new();
    writer.str("nodalloc: warning: ");
    build(&mut writer);
    writer.str("\n");
    writer.write_to(2);
}

/// Prints `nodalloc: …` on one line to stderr and aborts the process. Used for heap misuse that
/// would otherwise corrupt memory (an invalid or double free).
#[cold]
pub fn fatal(build: impl FnOnce(&mut Writer)) -> ! {
    let mut writer = Writer::new();
    writer.str("nodalloc: ");
    build(&mut writer);
    writer.str("\n");
    writer.write_to(2);
    // SAFETY: abort has no preconditions and does not return.
    unsafe { libc::abort() }
}

/// Checks an invariant the allocator's memory safety relies on; when it does not hold, reports
/// `nodalloc: internal error: <what>` and aborts. The allocator's own fatal report, never a
/// panic: a panic formats its message, which allocates, inside the allocator.
#[inline(always)]
pub fn invariant(holds: bool, what: &str) {
    if !holds {
        invariant_failed(what);
    }
}

#[cold]
#[inline(never)]
fn invariant_failed(what: &str) -> ! {
    fatal(|w| {
        w.str("internal error: ").str(what);
    })
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

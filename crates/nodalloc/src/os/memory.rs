//! Address space and pages: reserving, committing, protecting and giving back memory, the
//! allocator's own fills and copies, advice, and NUMA placement (`mbind`, `get_mempolicy`).

use super::*;

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

/// Resident pages of a range that are not on `node` (the kernel's number), by `move_pages(2)`
/// asked for each page's node only. The kernel leaves some pages where they are when asked to
/// move them, silently: a page a forked child still shares (without `MPOL_MF_MOVE_ALL`), a page
/// busy at that moment. Pages never touched are not counted. `Err` with the errno when the
/// kernel does not answer (then nothing is known).
pub fn pages_off_node(address: *mut u8, size: usize, node: usize) -> Result<usize, i32> {
    /// Pages asked per call: the arrays live on the caller's stack.
    const CHUNK: usize = 64;
    let mut pages = [core::ptr::null_mut::<libc::c_void>(); CHUNK];
    let mut status = [0 as libc::c_int; CHUNK];
    let first = address as usize & !(super::PAGE_SIZE - 1);
    let end = address as usize + size;
    let mut off = 0;
    let mut page = first;
    while page < end {
        let mut count = 0;
        while count < CHUNK && page < end {
            pages[count] = page as *mut libc::c_void;
            count += 1;
            page += super::PAGE_SIZE;
        }
        // SAFETY: `pages` and `status` hold `count` entries; a null node list asks only where
        // each page is (nothing moves); pid 0 is this process.
        let result = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0 as libc::c_int,
                count as libc::c_ulong,
                pages.as_mut_ptr(),
                core::ptr::null::<libc::c_int>(),
                status.as_mut_ptr(),
                0 as libc::c_int,
            )
        };
        if result != 0 {
            return Err(errno());
        }
        // A page's node, or a negative errno (-ENOENT: not resident).
        off += status[..count]
            .iter()
            .filter(|&&at| at >= 0 && at as usize != node)
            .count();
    }
    Ok(off)
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
    get_mempolicy(mask, cpuset::MAX_NODE_WORDS * 64, 0)
}

/// The nodes the calling thread's cpuset lets it allocate on (`get_mempolicy(2)` with
/// `MPOL_F_MEMS_ALLOWED`: what `/proc/self/status` shows as `Mems_allowed`, without reading a
/// file). False when the kernel refuses the call.
pub fn allowed_memory_nodes(mask: &mut [u64; cpuset::MAX_NODE_WORDS]) -> bool {
    const MPOL_F_MEMS_ALLOWED: libc::c_ulong = 1 << 2;
    get_mempolicy(mask, cpuset::MAX_NODE_WORDS * 64, MPOL_F_MEMS_ALLOWED).is_some()
}

/// True when the kernel knows at most one possible NUMA node (`nr_node_ids`): it refuses
/// `get_mempolicy(2)` a node mask of fewer bits than that ([`accepts_node_mask_of`]), so a mask
/// of one bit is accepted on such a machine only (a kernel that checks against its
/// compile-time maximum refuses it everywhere: false, the safe answer). A one-node machine then
/// needs none of the files of `/sys/devices/system/node`, which cost a fresh process tens of
/// microseconds.
pub fn single_possible_node() -> bool {
    accepts_node_mask_of(1)
}

/// True when the kernel accepts a `get_mempolicy(2)` node mask of `bits` bits (at most 64) for
/// the task policy: it refuses one shorter than its count of possible nodes.
pub fn accepts_node_mask_of(bits: usize) -> bool {
    let mut mask = [0u64; 1];
    get_mempolicy(&mut mask, bits.min(64), 0).is_some()
}

/// `get_mempolicy(2)` with no address and `flags`, offering a node mask of `bits` bits (at most
/// `mask`'s): the mode, and the node mask in `mask`.
fn get_mempolicy(mask: &mut [u64], bits: usize, flags: libc::c_ulong) -> Option<libc::c_int> {
    let bits = bits.min(mask.len() * 64);
    let mut mode: libc::c_int = 0;
    // SAFETY: the kernel writes the mode and at most `bits` bits into `mask`, which holds that
    // many; a null address asks for the task policy (or, with `MPOL_F_MEMS_ALLOWED`, the
    // cpuset's nodes).
    let result = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            bits as libc::c_ulong,
            0usize,
            flags,
        )
    };
    (result == 0).then_some(mode)
}

/// RAM and swap, and RAM alone, in bytes (`sysinfo(2)`: `/proc/meminfo`'s `MemTotal` and
/// `SwapTotal` without reading a file); `None` when the kernel refuses the call.
pub fn memory_sizes() -> Option<(u64, u64)> {
    // SAFETY: an all-zero `sysinfo` is a valid value for the kernel to overwrite.
    let mut info: libc::sysinfo = unsafe { core::mem::zeroed() };
    // SAFETY: the kernel writes one `struct sysinfo` into `info`.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    let unit = u64::from(info.mem_unit.max(1));
    let ram = info.totalram as u64 * unit;
    Some((ram + info.totalswap as u64 * unit, ram))
}

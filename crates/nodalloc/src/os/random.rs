//! Unpredictable bits for secure mode's keys and the C face's trailers, and the one mixer.

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

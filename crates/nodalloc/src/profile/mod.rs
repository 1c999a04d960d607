//! Heap profiles (`NODALLOC_PROFILE`): allocations sampled by the bytes they ask for, each
//! sample's call stack and placement kept in the site table (`sites.rs`), written out in
//! pprof's `profile.proto` format (`pprof.rs`).
//!
//! **Sampling.** Each thread counts down the bytes its allocations ask for; the allocation that
//! takes the count below zero is sampled and the next count is drawn from an exponential
//! distribution of mean `NODALLOC_PROFILE_RATE` (a Poisson process over the bytes allocated,
//! as tcmalloc and jemalloc sample). An allocation of `s` bytes is then sampled with
//! probability `p = 1 − e^(−s/R)` whatever came before it, and a sample stands for `1/p`
//! objects and `s/p` bytes: the estimates are unbiased for every size.
//!
//! **Where the count is kept.** The fast paths are not touched. With call-site partitions off
//! (lean mode, `thread/profile.rs`) the class lists count their pops for the statistics anyway,
//! and each class is sampled on its own budget of allocations, enforced from the slow paths;
//! with partitions on, the partition lists' slow entries count the bytes. A large allocation
//! counts its own. With profiling off, nothing of this runs and no fast path has an
//! instruction more.
//!
//! **A sampled block** of a small class stays in its bag in lean mode, its record in a word
//! per 32 KiB unit beside the page map (`in_bag.rs`); otherwise (a second sample in the same
//! unit, or partitions on) it is served as a large block of its own, whose descriptor names its
//! site and what it stands for, as a sampled large block's does. Frees find either and take the
//! block's share off its site's live counts.

pub(crate) mod code;
pub(crate) mod gzip;
pub(crate) mod in_bag;
pub(crate) mod pprof;
pub(crate) mod proto;
pub(crate) mod sites;

use core::sync::atomic::{AtomicU64, Ordering};
use sites::{Key, MAX_DEPTH};

/// The mean bytes between samples, 0 with profiling off. Set once when the allocator starts.
static RATE: AtomicU64 = AtomicU64::new(0);

/// Turns sampling on at `rate` mean bytes between samples (0: off).
pub(crate) fn set_rate(rate: u64) {
    RATE.store(rate, Ordering::Relaxed);
}

/// The mean bytes between samples, 0 when profiling is off.
pub(crate) fn rate() -> u64 {
    RATE.load(Ordering::Relaxed)
}

/// True when heap profiling is on (`NODALLOC_PROFILE=1` when the allocator started).
///
/// ```
/// // Off unless the environment asked for it.
/// if !nodalloc::profile::is_on() {
///     assert!(nodalloc::profile::pprof().is_none());
/// }
/// ```
pub fn is_on() -> bool {
    rate() != 0
}

/// The heap profile in pprof's `profile.proto` format, in a gzip stream as pprof files are
/// (stored blocks: not compressed, see `gzip.rs`), for a service to serve on an endpoint as
/// `jemalloc_pprof` users do; `None` with profiling off. The bytes are allocated through the
/// global allocator, outside the allocator's own paths.
///
/// ```no_run
/// // NODALLOC_PROFILE=1 ./service; then, on a request:
/// if let Some(bytes) = nodalloc::profile::pprof() {
///     std::fs::write("/tmp/heap.pb", bytes).unwrap();
/// }
/// ```
#[cfg(feature = "std")]
pub fn pprof() -> Option<Vec<u8>> {
    if !is_on() {
        return None;
    }
    let mut out = gzip::Gzip::new(Vec::new());
    let written = pprof::write(&mut out, rate(), wall_clock_ns());
    written.then(|| out.finish())
}

/// Writes the heap profile (pprof's `profile.proto`) to the file at `path`, replacing it
/// whole once written. Fails with profiling off (`ErrorKind::Unsupported`) or when the file
/// cannot be written.
///
/// ```no_run
/// nodalloc::profile::dump("/tmp/heap.pb").unwrap();
/// ```
#[cfg(feature = "std")]
pub fn dump(path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if !is_on() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "heap profiling is off (NODALLOC_PROFILE=1 turns it on)",
        ));
    }
    let path = std::ffi::CString::new(path.as_ref().as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    dump_to(&path).map_err(std::io::Error::from_raw_os_error)
}

/// A thread's countdown to its next sample.
#[derive(Clone, Copy)]
pub(crate) struct Sampler {
    /// Bytes left before the next sample; never below zero for long (a sample redraws it).
    left: i64,
    /// The state of its random numbers (xorshift64*); 0 before the first draw.
    state: u64,
    /// The mean bytes between samples it draws.
    rate: u64,
}

impl Sampler {
    /// A sampler that never samples (profiling off).
    pub const OFF: Sampler = Sampler {
        left: i64::MAX,
        state: 0,
        rate: 1,
    };

    /// Starts counting down at `rate` (once profiling is on), seeded from `seed`.
    pub fn start(&mut self, rate: u64, seed: u64) {
        self.state = crate::os::mix(seed) | 1;
        self.rate = rate.max(1);
        self.left = self.draw();
    }

    /// True once [`Sampler::start`] ran.
    pub fn is_started(&self) -> bool {
        self.state != 0
    }

    /// Counts `bytes` down; true when this allocation is to be sampled (the countdown is then
    /// drawn again).
    #[inline(always)]
    pub fn take(&mut self, bytes: usize) -> bool {
        self.left -= bytes as i64;
        if self.left >= 0 {
            return false;
        }
        self.redraw();
        true
    }

    #[cold]
    fn redraw(&mut self) {
        self.left = self.draw();
    }

    /// The number of allocations of `size` bytes up to and including the next one to sample,
    /// when allocations of that size are counted apart: a geometric variate of parameter
    /// `1 − e^(−size/rate)` (each allocation sampled with the probability [`Sampler::take`]
    /// gives it), drawn as ⌈E/size⌉ with E exponential of mean `rate`. At least 1.
    pub fn draw_objects(&mut self, size: usize) -> u32 {
        let bytes = self.draw() as u64;
        bytes
            .div_ceil(size.max(1) as u64)
            .clamp(1, u64::from(u32::MAX)) as u32
    }

    /// An exponential variate of mean `rate`, in bytes (at least 1).
    fn draw(&mut self) -> i64 {
        let rate = self.rate;
        // xorshift64*: 53 good bits make a uniform in (0, 1].
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        let uniform = (bits as f64 + 1.0) / (1u64 << 53) as f64;
        let bytes = -ln(uniform) * rate as f64;
        (bytes as i64).clamp(1, i64::MAX / 2)
    }
}

/// `1 − e^(−x)` for `x ≥ 0`, to about 1e-15 relative, without libm (`-(-x).exp_m1()`).
///
/// Written here, as [`ln`] is, because libm's `log` and `expm1` were the only libm symbols
/// the library used: every program that loads `libnodalloc.so` mapped libm for them and ran
/// its IFUNC resolvers at start, 300 KiB of resident memory. Below ½ the alternating series
/// `x − x²/2! + x³/3! − …` (to x¹⁸, no cancellation); above, `e^(−x) = 2^(−n)·e^(−r)` with
/// `r = x − n·ln 2` in [0, ln 2), `e^(−r)` by its Taylor series.
pub(crate) fn one_minus_exp_neg(x: f64) -> f64 {
    debug_assert!(x >= 0.0);
    if x < 0.5 {
        // x·(1 − x/2·(1 − x/3·(1 − …·(1 − x/18)))).
        let mut inner = 1.0;
        for k in (2..=18).rev() {
            inner = 1.0 - x / k as f64 * inner;
        }
        return x * inner;
    }
    // x ≥ 0.5, so the truncation is the floor (and saturates: `n` is then past 1022).
    let n = (x / core::f64::consts::LN_2) as u64 as f64;
    if n >= 1022.0 {
        return 1.0;
    }
    let r = x - n * core::f64::consts::LN_2;
    let mut term = 1.0;
    let mut exp_neg_r = 1.0;
    for k in 1..=20 {
        term *= -r / k as f64;
        exp_neg_r += term;
    }
    let scale = f64::from_bits(((1023 - n as i64) as u64) << 52);
    1.0 - exp_neg_r * scale
}

/// The natural logarithm of a positive, finite `x`, to about 1e-12 relative, without libm
/// (see [`one_minus_exp_neg`]). `x = m·2^e` with `m` in [√½, √2), then `ln m = 2·atanh(s)` with
/// `s = (m − 1)/(m + 1)`, |s| < 0.172, by its series to s¹⁵.
pub(crate) fn ln(x: f64) -> f64 {
    debug_assert!(x > 0.0 && x.is_finite());
    let bits = x.to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut mantissa = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if exponent == -1023 {
        // Subnormal: scale into the normal range first.
        return ln(x * (1u64 << 54) as f64) - 54.0 * core::f64::consts::LN_2;
    }
    if mantissa > core::f64::consts::SQRT_2 {
        mantissa /= 2.0;
        exponent += 1;
    }
    let s = (mantissa - 1.0) / (mantissa + 1.0);
    let s2 = s * s;
    let mut series = 1.0 / 15.0;
    for odd in [13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0] {
        series = series * s2 + 1.0 / odd;
    }
    exponent as f64 * core::f64::consts::LN_2 + 2.0 * s * series
}

/// Fixed-point objects: a sample's objects are kept in 1/2^16ths, so that sums of samples are
/// not biased by rounding each to a whole number (a 1 KiB block at a rate of 8 KiB stands for
/// 8.5 objects: rounded to 9, every site of it read 6 % high).
pub(crate) const OBJECT_SHIFT: u32 = 16;

/// What a sample of a block of `bytes` (the size its probability was counted by), asked for as
/// `asked` bytes, stands for at `rate`: `(objects << OBJECT_SHIFT, bytes asked)`, rounded.
pub(crate) fn weights(bytes: usize, asked: usize, rate: u64) -> (u64, u64) {
    let size = bytes.max(1) as f64;
    let p = one_minus_exp_neg(size / rate.max(1) as f64);
    let p = p.clamp(f64::MIN_POSITIVE, 1.0);
    (
        round(f64::from(1u32 << OBJECT_SHIFT) / p),
        round(asked as f64 / p),
    )
}

/// `x` rounded to the nearest whole number (halves up), for `x ≥ 0`; saturates as `as` does.
/// Without libm (see [`one_minus_exp_neg`]).
fn round(x: f64) -> u64 {
    debug_assert!(x >= 0.0);
    (x + 0.5) as u64
}

/// The call stack of an allocation entered with return address `site` and the caller's frame
/// pointer `frame` (0 for none known: the stack is then the return address alone), up to
/// [`MAX_DEPTH`] frames, into `key`. Every frame is checked before it is read, as the call-site
/// walk checks it: 8-aligned, above the one before, inside `[stack_low, stack_high)` (the
/// thread's stack). A program built without frame pointers keeps anything in `rbp`: its walk
/// stops at the first frame that fails, shallow, never wrong or faulting.
pub(crate) fn capture(site: usize, frame: usize, stack: (usize, usize), key: &mut Key) {
    let (low, high) = stack;
    let mut depth = 0;
    if site != 0 {
        key.frames[0] = site;
        depth = 1;
    }
    let mut frame = frame;
    let mut floor = low;
    while depth < MAX_DEPTH {
        if frame % 8 != 0 || frame < floor || frame.saturating_add(16) > high {
            break;
        }
        // SAFETY: `frame` and `frame + 8` lie inside the thread's stack mapping, mapped and
        // readable.
        let (next, return_address) = unsafe {
            (
                (frame as *const usize).read(),
                ((frame + 8) as *const usize).read(),
            )
        };
        if return_address == 0 || !code::is_code(return_address) {
            // The end of the chain, or a word that is no frame (a function built without
            // frame pointers left something else in `rbp`): the stack ends here.
            break;
        }
        key.frames[depth] = return_address;
        depth += 1;
        floor = frame + 16;
        frame = next;
    }
    key.depth = depth as u8;
}

/// The stack mapping that holds `address` (the calling thread's stack pointer), from
/// `/proc/self/maps`; empty when it cannot be read.
pub(crate) fn stack_of(address: usize) -> (usize, usize) {
    crate::os::proc::mapping_of(address).unwrap_or((0, 0))
}

/// Writes the profile to the file at `path` (created or truncated, mode 0644); `Err(errno)`
/// when it cannot be opened or written (nothing is left half-written under the name: the
/// profile goes to `path.tmp` first and is renamed). No allocation.
pub(crate) fn dump_to(path: &core::ffi::CStr) -> Result<(), i32> {
    let mut temporary = [0u8; 1100];
    let bytes = path.to_bytes();
    if bytes.len() + 5 > temporary.len() {
        return Err(libc::ENAMETOOLONG);
    }
    temporary[..bytes.len()].copy_from_slice(bytes);
    temporary[bytes.len()..bytes.len() + 4].copy_from_slice(b".tmp");
    let temporary = core::ffi::CStr::from_bytes_until_nul(&temporary).map_err(|_| libc::EINVAL)?;
    // SAFETY: a NUL-terminated path; the flags and mode are plain values.
    let fd = unsafe {
        libc::open(
            temporary.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return Err(crate::os::errno());
    }
    let mut out = gzip::Gzip::new(pprof::FdSink::new(fd));
    let written = pprof::write(&mut out, rate(), wall_clock_ns()) && out.finish().flush();
    let error = crate::os::errno();
    // SAFETY: our own descriptor; the paths are NUL-terminated.
    unsafe {
        libc::close(fd);
        if !written {
            libc::unlink(temporary.as_ptr());
            return Err(if error == 0 { libc::EIO } else { error });
        }
        if libc::rename(temporary.as_ptr(), path.as_ptr()) != 0 {
            let error = crate::os::errno();
            libc::unlink(temporary.as_ptr());
            return Err(error);
        }
    }
    Ok(())
}

/// The wall clock in ns since the epoch (the profile's time).
fn wall_clock_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// `NODALLOC_PROFILE_OUT` with `%p` replaced by the process id, NUL-terminated in `buffer`;
/// `None` when it does not fit.
pub(crate) fn expand_out_path<'a>(
    path: &[u8],
    buffer: &'a mut [u8; 1100],
) -> Option<&'a core::ffi::CStr> {
    let mut text = crate::os::Writer::new();
    // SAFETY: getpid has no preconditions.
    text.decimal(unsafe { libc::getpid() } as u64);
    let pid = text.as_bytes();
    let mut len = 0;
    let mut i = 0;
    while i < path.len() {
        let piece: &[u8] = if path[i] == b'%' && path.get(i + 1) == Some(&b'p') {
            i += 2;
            pid
        } else {
            i += 1;
            &path[i - 1..i]
        };
        if len + piece.len() + 1 > buffer.len() {
            return None;
        }
        buffer[len..len + piece.len()].copy_from_slice(piece);
        len += piece.len();
    }
    buffer[len] = 0;
    core::ffi::CStr::from_bytes_until_nul(&buffer[..=len]).ok()
}

/// The exit hook with `NODALLOC_PROFILE_OUT`: writes the profile, or one warning line.
pub(crate) fn dump_at_exit(path: &[u8]) {
    let mut buffer = [0u8; 1100];
    let result = match expand_out_path(path, &mut buffer) {
        Some(path) => dump_to(path),
        None => Err(libc::ENAMETOOLONG),
    };
    if let Err(error) = result {
        crate::os::warn(|w| {
            w.str("cannot write the heap profile to ")
                .bytes(path)
                .str(" (errno ")
                .decimal(error as u64)
                .str(")");
        });
    }
}

/// Sites a leak report names.
const LEAK_SITES: usize = 8;

/// Frames a leak report prints per site.
const LEAK_FRAMES: usize = 4;

/// Writes to `fd` what the samples say is still live: one summary line, then the sites holding
/// the most live bytes, each with its first frames as `file+offset` (what `addr2line -e FILE
/// OFFSET` resolves). Without allocating: an exit hook's report.
pub(crate) fn report_leaks(fd: i32) {
    let mut top: [(u64, u64, usize); LEAK_SITES] = [(0, 0, 0); LEAK_SITES];
    let mut top_len = 0;
    let (mut bytes, mut objects, mut sites_live) = (0u64, 0u64, 0u64);
    sites::for_each(|site| {
        let live = site.inuse_bytes.load(core::sync::atomic::Ordering::Relaxed);
        if live == 0 {
            return;
        }
        let count = site
            .inuse_objects
            .load(core::sync::atomic::Ordering::Relaxed);
        bytes += live;
        objects += count;
        sites_live += 1;
        let index = sites::index_of(site);
        crate::stats::offer_top(&mut top, &mut top_len, (live, count, index), |entry| {
            entry.0 as usize
        });
    });
    let mut w = crate::os::Writer::new();
    w.str("nodalloc: heap profile at exit: ~")
        .size(bytes)
        .str(" in ~")
        .decimal(objects >> OBJECT_SHIFT)
        .str(" objects still live, at ")
        .decimal(sites_live)
        .str(" sampled sites\n");
    w.write_to(fd);
    for &(live, count, index) in &top[..top_len] {
        let Some(site) = sites::site_at(index) else {
            continue;
        };
        let mut w = crate::os::Writer::new();
        w.str("  ~")
            .size(live)
            .str(" in ~")
            .decimal(count >> OBJECT_SHIFT)
            .str(" objects:");
        for &frame in site.key().stack().iter().take(LEAK_FRAMES) {
            w.str(" ");
            write_frame(&mut w, frame);
        }
        w.str("\n");
        w.write_to(fd);
    }
}

/// `frame` as the file that holds it and the offset in it (`dladdr`), or the bare address.
fn write_frame(w: &mut crate::os::Writer, frame: usize) {
    // SAFETY: an all-zero Dl_info is a valid value to be written over.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr reads the loader's tables and writes `info`; it does not allocate.
    let found = unsafe { libc::dladdr(frame as *const libc::c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        w.hex(frame);
        return;
    }
    // SAFETY: dladdr set a NUL-terminated file name that lives as long as the mapping.
    let file = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    let file = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
    w.bytes(file)
        .str("+")
        .hex(frame.wrapping_sub(1).wrapping_sub(info.dli_fbase as usize));
}

#[cfg(test)]
mod tests {
    /// `1 − e^(−x)` agrees with libm's `expm1` from the smallest sizes over the rate to the
    /// largest.
    #[test]
    fn one_minus_exp_neg_matches_libms() {
        let mut x = 1e-12;
        while x < 2000.0 {
            for nudge in [1.0, 1.05, 1.3, 1.7] {
                let y = x * nudge;
                let (ours, libm) = (super::one_minus_exp_neg(y), -(-y).exp_m1());
                assert!(
                    (ours - libm).abs() <= 2e-15 * libm,
                    "1 - e^-{y:e} = {ours}, libm {libm}"
                );
            }
            x *= 1.9;
        }
        assert_eq!(super::one_minus_exp_neg(0.0), 0.0);
        assert_eq!(super::one_minus_exp_neg(1e6), 1.0);
    }

    /// The hand-written logarithm agrees with libm's over the uniforms the sampler draws and
    /// far beyond them.
    #[test]
    fn the_logarithm_matches_libms() {
        let mut x = f64::MIN_POSITIVE / 1e10;
        while x < 1e300 {
            let sqrt2 = core::f64::consts::SQRT_2;
            for nudge in [
                1.0,
                1.0 + 1e-9,
                1.37,
                sqrt2 * (1.0 - 1e-12),
                sqrt2 * (1.0 + 1e-12),
                1.9999,
            ] {
                let y = x * nudge;
                let (ours, libm) = (super::ln(y), y.ln());
                assert!(
                    (ours - libm).abs() <= 1e-12 * libm.abs().max(1.0),
                    "ln({y:e}) = {ours}, libm {libm}"
                );
            }
            x *= 3.7;
        }
        assert_eq!(super::ln(1.0), 0.0);
        let uniform_min = 1.0 / (1u64 << 53) as f64;
        assert!((super::ln(uniform_min) - uniform_min.ln()).abs() < 1e-12 * 37.0);
    }

    use super::*;

    #[test]
    fn the_countdown_samples_about_once_per_rate_bytes() {
        let rate = 64 << 10;
        let mut sampler = Sampler::OFF;
        sampler.start(rate, 7);
        let (mut samples, size, calls) = (0u64, 100usize, 2_000_000u64);
        for _ in 0..calls {
            if sampler.take(size) {
                samples += 1;
            }
        }
        let expected = calls as f64 * size as f64 / rate as f64;
        let error = (samples as f64 - expected).abs() / expected;
        assert!(error < 0.05, "{samples} samples, {expected} expected");
    }

    #[test]
    fn weights_undo_the_sampling_probability() {
        let rate = 512 << 10;
        // Small blocks stand for about rate / size objects; blocks far above the rate for one.
        let (objects, bytes) = weights(64, 64, rate);
        let objects = objects as f64 / f64::from(1u32 << OBJECT_SHIFT);
        assert!((objects - (rate / 64) as f64).abs() < 1.0, "{objects}");
        assert!((bytes as f64 - rate as f64).abs() < 100.0, "{bytes}");
        assert_eq!(
            weights(64 << 20, 64 << 20, rate),
            (1 << OBJECT_SHIFT, 64 << 20)
        );
        // Fractions are kept: a 1 KiB block at 8 KiB stands for 8.51 objects, not 9.
        let (objects, bytes) = weights(1024, 1000, 8 << 10);
        let expected = 1.0 / (1.0 - (-1024.0f64 / 8192.0).exp());
        let objects = objects as f64 / f64::from(1u32 << OBJECT_SHIFT);
        assert!((objects - expected).abs() < 1e-3, "{objects} {expected}");
        assert!((bytes as f64 - 1000.0 * expected).abs() < 1.0, "{bytes}");
    }

    #[test]
    fn a_walk_stops_at_the_first_frame_outside_the_stack() {
        // A fake stack: three frames chained upwards, the third pointing outside, their return
        // addresses in this crate's code.
        let code = [
            capture as *const () as usize,
            stack_of as *const () as usize,
            weights as *const () as usize,
        ];
        let mut stack = [0usize; 16];
        let base = stack.as_ptr() as usize;
        stack[0] = base + 4 * 8; // frame 0 -> frame at index 4
        stack[1] = code[0];
        stack[4] = base + 8 * 8; // -> index 8
        stack[5] = code[1];
        stack[8] = 0x10; // -> outside
        stack[9] = code[2];
        std::hint::black_box(&stack);
        let mut key = Key::EMPTY;
        capture(0x0abc, base, (base, base + 16 * 8), &mut key);
        assert_eq!(key.stack(), [0x0abc, code[0], code[1], code[2]]);
        // A frame pointer that is no frame: the site alone.
        capture(0x0abc, 0x7, (base, base + 16 * 8), &mut key);
        assert_eq!(key.stack(), [0x0abc]);
        // A "return address" that is no code (a word of data where a function built without
        // frame pointers left `rbp`): the walk ends before it.
        stack[5] = base;
        std::hint::black_box(&stack);
        capture(0x0abc, base, (base, base + 16 * 8), &mut key);
        assert_eq!(key.stack(), [0x0abc, code[0]]);
    }
}

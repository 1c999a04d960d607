//! Messages without allocation: a fixed-size buffer that formats text and numbers, written to
//! stderr as a warning, a fatal report, or a broken invariant.

use super::*;

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

/// What a build without std must define itself (libnodalloc.so on x86_64, where the library
/// links no standard library): the panic handler and the personality routine.
#[cfg(all(
    feature = "panic-handler",
    not(feature = "std"),
    not(test),
    target_arch = "x86_64"
))]
mod no_std_runtime {
    use super::{fatal, Writer};

    /// Formatting into the buffer (for the panic handler): what does not fit is dropped.
    impl core::fmt::Write for Writer {
        fn write_str(&mut self, text: &str) -> core::fmt::Result {
            self.str(text);
            Ok(())
        }
    }

    /// `nodalloc: panicked at …` on stderr, then abort. A panic is a broken invariant here (a
    /// debug assertion, an index out of bounds); formatting its message into the fixed buffer
    /// allocates nothing.
    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo) -> ! {
        fatal(|w| {
            let _ = core::fmt::write(w, format_args!("{info}"));
        })
    }

    // The personality routine the precompiled `core` refers to (it is built to unwind).
    // Nothing of nodalloc unwinds (a panic aborts), but a C++ exception may pass through its
    // frames: `operator new` calls the C++ runtime's own to throw `std::bad_alloc`
    // (`nodalloc-ffi`'s `cxx.rs`). No nodalloc frame has anything to clean up or catch, so
    // every frame answers "continue unwinding" (`_URC_CONTINUE_UNWIND`, 8) and the exception
    // reaches the program's handler. Defined in assembly so that it can be hidden: the
    // library's own references bind to it, but it is not exported, so under `LD_PRELOAD` it
    // never takes the place of the real one in a program that links Rust's standard library
    // dynamically.
    core::arch::global_asm!(
        ".pushsection .text.rust_eh_personality,\"ax\",@progbits",
        ".globl rust_eh_personality",
        ".hidden rust_eh_personality",
        ".type rust_eh_personality, @function",
        "rust_eh_personality:",
        "mov eax, 8",
        "ret",
        ".size rust_eh_personality, . - rust_eh_personality",
        ".popsection",
    );
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

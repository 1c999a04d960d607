//! Files and the environment without allocation: whole small files and directory listings
//! read into caller buffers, paths built on the stack, variables read with `getenv`.

use super::*;

/// Reads a whole small file into `buffer`, returning the bytes read. No allocation.
pub fn read_file<'a>(path: &CStr, buffer: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: initialised bytes are valid `MaybeUninit` bytes, and the function writes only
    // initialised bytes into them.
    let buffer = unsafe { &mut *(buffer as *mut [u8] as *mut [core::mem::MaybeUninit<u8>]) };
    read_file_uninit(path, buffer)
}

/// [`read_file`] into a buffer nobody cleared: a big buffer costs only the pages the file's
/// bytes reach (and no `memset`), for a file that may be long but usually is short.
pub fn read_file_uninit<'a>(
    path: &CStr,
    buffer: &'a mut [core::mem::MaybeUninit<u8>],
) -> Option<&'a [u8]> {
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
    // SAFETY: the kernel wrote the first `filled` bytes.
    Some(unsafe { &*(&buffer[..filled] as *const [core::mem::MaybeUninit<u8>] as *const [u8]) })
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

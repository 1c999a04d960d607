//! Reading `/proc` without allocating: lines streamed through a stack buffer, the mappings
//! that hold huge pages (`/proc/self/smaps`) and the mapping that holds an address
//! (`/proc/self/maps`).

use super::errno;
use core::ffi::CStr;

/// Calls `visit(start, huge_bytes)` for every mapping of this process that holds transparent
/// huge pages (`AnonHugePages` of `/proc/self/smaps`, in bytes). False when the file cannot be
/// read (no /proc). No allocation.
pub fn for_each_huge_mapping(mut visit: impl FnMut(usize, usize)) -> bool {
    let mut mapping_start = 0;
    for_each_line(c"/proc/self/smaps", |line| {
        if let Some(kib) = line.strip_prefix(b"AnonHugePages:") {
            let kib = parse_decimal(kib);
            if kib > 0 {
                visit(mapping_start, kib << 10);
            }
        } else if let Some((start, _)) = parse_mapping_range(line) {
            mapping_start = start;
        }
        true
    })
}

/// The `[start, end)` of this process's mapping that holds `address`, from `/proc/self/maps`;
/// `None` when there is none or the file cannot be read. No allocation.
pub fn mapping_of(address: usize) -> Option<(usize, usize)> {
    let mut found = None;
    for_each_line(c"/proc/self/maps", |line| match parse_mapping_range(line) {
        Some((start, end)) if (start..end).contains(&address) => {
            found = Some((start, end));
            false
        }
        _ => true,
    });
    found
}

/// Calls `visit(start, end)` for every executable mapping of this process (`x` in its
/// permissions in `/proc/self/maps`), in address order, until it returns false. False when the
/// file cannot be read. No allocation.
pub fn for_each_code_mapping(mut visit: impl FnMut(usize, usize) -> bool) -> bool {
    for_each_line(c"/proc/self/maps", |line| {
        let Some((start, end)) = parse_mapping_range(line) else {
            return true;
        };
        let permissions = line.split(|&b| b == b' ').nth(1).unwrap_or(b"");
        if permissions.get(2) == Some(&b'x') {
            return visit(start, end);
        }
        true
    })
}

/// Calls `visit` with every line of the file at `path` (without its newline) until it returns
/// false, streaming the file through a stack buffer; a line longer than the buffer (a long path
/// name) is skipped. False when the file cannot be opened. No allocation.
pub fn for_each_line(path: &CStr, mut visit: impl FnMut(&[u8]) -> bool) -> bool {
    // SAFETY: the path is NUL-terminated; flags ask for a read-only descriptor.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buffer = [0u8; 4096];
    let mut filled = 0usize;
    'read: loop {
        // SAFETY: we read into the unfilled tail of `buffer`, which we own.
        let n = unsafe {
            libc::read(
                fd,
                buffer[filled..].as_mut_ptr() as *mut libc::c_void,
                buffer.len() - filled,
            )
        };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        filled += n as usize;
        // Every complete line; a partial one moves to the front for the next read.
        let mut line_start = 0;
        while let Some(length) = buffer[line_start..filled].iter().position(|&b| b == b'\n') {
            if !visit(&buffer[line_start..line_start + length]) {
                break 'read;
            }
            line_start += length + 1;
        }
        if line_start == 0 && filled == buffer.len() {
            filled = 0;
        } else {
            buffer.copy_within(line_start..filled, 0);
            filled -= line_start;
        }
    }
    // SAFETY: `fd` is the descriptor we opened above.
    unsafe { libc::close(fd) };
    true
}

/// The first decimal number in `text` (0 if none).
fn parse_decimal(text: &[u8]) -> usize {
    text.iter()
        .skip_while(|b| !b.is_ascii_digit())
        .take_while(|b| b.is_ascii_digit())
        .fold(0usize, |value, b| {
            value.saturating_mul(10).saturating_add((b - b'0') as usize)
        })
}

/// The `[start, end)` of a maps or smaps mapping header (`7f12a000-7f12b000 rw-p ...`), `None`
/// for any other line.
fn parse_mapping_range(line: &[u8]) -> Option<(usize, usize)> {
    let range = line.split(|&b| b == b' ').next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    Some((parse_hex(&range[..dash])?, parse_hex(&range[dash + 1..])?))
}

fn parse_hex(text: &[u8]) -> Option<usize> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0usize, |value, &b| {
        let digit = (b as char).to_digit(16)? as usize;
        value.checked_mul(16)?.checked_add(digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_lines_parse_into_mapping_starts_and_sizes() {
        let header = b"7f12a000-7f12b000 rw-p 00000000 00:00 0 ";
        assert_eq!(
            parse_mapping_range(header),
            Some((0x7f12_a000, 0x7f12_b000))
        );
        assert_eq!(parse_mapping_range(b"Rss:                 12 kB"), None);
        assert_eq!(parse_mapping_range(b"VmFlags: rd wr mr mw me ac"), None);
        assert_eq!(parse_mapping_range(b"zz-7f10 rw-p"), None);
        let here = 0u8;
        let address = &here as *const u8 as usize;
        let (start, end) = mapping_of(address).expect("the stack's mapping");
        assert!(start <= address && address < end);
        assert_eq!(parse_decimal(b"         2048 kB"), 2048);
        assert_eq!(parse_decimal(b" kB"), 0);
    }
}

//! The profile in pprof's format (`profile.proto`, uncompressed: pprof and the tools that read
//! its format take the protocol buffer as it is or gzipped), written without allocating.
//!
//! Sample types, in this order: `alloc_objects`/`count`, `alloc_space`/`bytes`,
//! `inuse_objects`/`count`, `inuse_space`/`bytes` (Go's heap profiles' order; the default is
//! `inuse_space`). One sample per site of the table, labelled `node` (its number), `tier` (`near`
//! or `far`) and `partition` (its number), with one location per frame (its return address less
//! one, so the symbolizer finds the call). Mappings: the process's executable file mappings
//! from `/proc/self/maps`, each with its file's GNU build ID (read from the loaded ELF image's
//! notes) so that pprof can symbolize offline.

use super::proto::{self, Chunks, Message, Sink};
use super::sites;
use super::OBJECT_SHIFT;
use core::sync::atomic::Ordering;

/// The string table's fixed part, by index.
const STRINGS: [&str; 14] = [
    "",
    "alloc_objects",
    "count",
    "alloc_space",
    "bytes",
    "inuse_objects",
    "inuse_space",
    "space",
    "node",
    "tier",
    "partition",
    "near",
    "far",
    "os_node",
];
const S_ALLOC_OBJECTS: u64 = 1;
const S_COUNT: u64 = 2;
const S_ALLOC_SPACE: u64 = 3;
const S_BYTES: u64 = 4;
const S_INUSE_OBJECTS: u64 = 5;
const S_INUSE_SPACE: u64 = 6;
const S_SPACE: u64 = 7;
const S_NODE: u64 = 8;
const S_TIER: u64 = 9;
const S_PARTITION: u64 = 10;
const S_NEAR: u64 = 11;
const S_FAR: u64 = 12;
const S_OS_NODE: u64 = 13;

/// The mappings a profile can name.
const MAX_MAPPINGS: usize = 512;
const MAX_PATH: usize = 240;
const MAX_BUILD_ID: usize = 64;

/// An executable mapping of a file.
#[derive(Clone, Copy)]
struct Mapping {
    start: usize,
    end: usize,
    offset: usize,
    path: [u8; MAX_PATH],
    path_len: u16,
    build_id: [u8; MAX_BUILD_ID],
    build_id_len: u8,
}

/// The mappings, in a scratch mapping of their own (a dump may run on a small thread stack).
struct Mappings {
    list: *mut Mapping,
    count: usize,
}

impl Mappings {
    const BYTES: usize = MAX_MAPPINGS * core::mem::size_of::<Mapping>();

    /// The process's executable file mappings, with build IDs; `None` without memory.
    fn read() -> Option<Mappings> {
        let list = crate::os::reserve(Self::BYTES)? as *mut Mapping;
        let mut mappings = Mappings { list, count: 0 };
        // The build ID of the file last seen at offset 0: its header is mapped there.
        let mut last_header: (usize, usize, [u8; MAX_PATH], usize) = (0, 0, [0; MAX_PATH], 0);
        crate::os::proc::for_each_line(c"/proc/self/maps", |line| {
            let Some(entry) = parse_line(line) else {
                return true;
            };
            // Only a readable mapping's header is read (a file mapped PROT_NONE at offset 0
            // would fault).
            if entry.offset == 0 && entry.readable {
                last_header = (entry.start, entry.end, [0; MAX_PATH], entry.path.len());
                last_header.2[..entry.path.len()].copy_from_slice(entry.path);
            }
            if !entry.executable || mappings.count == MAX_MAPPINGS {
                return true;
            }
            let mut mapping = Mapping {
                start: entry.start,
                end: entry.end,
                offset: entry.offset,
                path: [0; MAX_PATH],
                path_len: entry.path.len() as u16,
                build_id: [0; MAX_BUILD_ID],
                build_id_len: 0,
            };
            mapping.path[..entry.path.len()].copy_from_slice(entry.path);
            let (start, end, ref path, len) = last_header;
            if &path[..len] == entry.path {
                if let Some((id, len)) = build_id(start, end) {
                    mapping.build_id = id;
                    mapping.build_id_len = len;
                }
            }
            // SAFETY: `count` is below MAX_MAPPINGS, the scratch mapping's length.
            unsafe { mappings.list.add(mappings.count).write(mapping) };
            mappings.count += 1;
            true
        });
        Some(mappings)
    }

    fn as_slice(&self) -> &[Mapping] {
        // SAFETY: `count` mappings were written.
        unsafe { core::slice::from_raw_parts(self.list, self.count) }
    }

    /// The id (1-based) of the mapping holding `address`, 0 for none.
    fn id_of(&self, address: usize) -> u64 {
        self.as_slice()
            .iter()
            .position(|m| (m.start..m.end).contains(&address))
            .map_or(0, |index| index as u64 + 1)
    }
}

impl Drop for Mappings {
    fn drop(&mut self) {
        // SAFETY: our own scratch mapping.
        unsafe { libc::munmap(self.list as *mut libc::c_void, Self::BYTES) };
    }
}

/// A line of `/proc/self/maps` naming a file.
struct Entry<'a> {
    start: usize,
    end: usize,
    offset: usize,
    executable: bool,
    readable: bool,
    path: &'a [u8],
}

fn parse_line(line: &[u8]) -> Option<Entry<'_>> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _device = fields.next()?;
    let _inode = fields.next()?;
    let path_start = fields.next()?.as_ptr() as usize - line.as_ptr() as usize;
    let path = &line[path_start..];
    if !path.starts_with(b"/") || path.len() > MAX_PATH {
        return None;
    }
    let dash = range.iter().position(|&b| b == b'-')?;
    Some(Entry {
        start: hex(&range[..dash])?,
        end: hex(&range[dash + 1..])?,
        offset: hex(offset)?,
        executable: perms.get(2) == Some(&b'x'),
        readable: perms.first() == Some(&b'r'),
        path,
    })
}

fn hex(text: &[u8]) -> Option<usize> {
    let mut value = 0usize;
    for &b in text {
        let digit = (b as char).to_digit(16)?;
        value = value.checked_mul(16)?.checked_add(digit as usize)?;
    }
    Some(value)
}

/// The GNU build ID of the ELF file whose first page is mapped at `[start, end)`, read from its
/// program headers and notes where they lie inside that mapping.
fn build_id(start: usize, end: usize) -> Option<([u8; MAX_BUILD_ID], u8)> {
    let read = |offset: usize, len: usize| -> Option<&[u8]> {
        let from = start.checked_add(offset)?;
        if from.checked_add(len)? > end {
            return None;
        }
        // SAFETY: inside the readable mapping `[start, end)` of an ELF file's first segment.
        Some(unsafe { core::slice::from_raw_parts(from as *const u8, len) })
    };
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let header = read(0, 64)?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 {
        return None;
    }
    let (phoff, phentsize, phnum) = (
        u64_at(header, 0x20) as usize,
        u16_at(header, 0x36),
        u16_at(header, 0x38),
    );
    if phentsize < 0x38 {
        return None;
    }
    for index in 0..phnum {
        let ph = read(phoff + index * phentsize, 0x38)?;
        if u32_at(ph, 0) != libc::PT_NOTE {
            continue;
        }
        let (offset, size) = (u64_at(ph, 8) as usize, u64_at(ph, 0x20) as usize);
        let Some(notes) = read(offset, size) else {
            continue;
        };
        let mut at = 0;
        while at + 12 <= notes.len() {
            let (namesz, descsz, kind) = (
                u32_at(notes, at) as usize,
                u32_at(notes, at + 4) as usize,
                u32_at(notes, at + 8),
            );
            let name = at + 12;
            let desc = name + namesz.next_multiple_of(4);
            let next = desc + descsz.next_multiple_of(4);
            if next > notes.len() {
                break;
            }
            if kind == 3 && &notes[name..name + namesz] == b"GNU\0" && descsz <= MAX_BUILD_ID / 2 {
                let mut id = [0u8; MAX_BUILD_ID];
                for (i, byte) in notes[desc..desc + descsz].iter().enumerate() {
                    id[2 * i] = b"0123456789abcdef"[usize::from(byte >> 4)];
                    id[2 * i + 1] = b"0123456789abcdef"[usize::from(byte & 15)];
                }
                return Some((id, (2 * descsz) as u8));
            }
            at = next;
        }
    }
    None
}

/// Writes a `ValueType { type, unit }` as field `field`.
fn value_type(sink: &mut impl Sink, field: u32, kind: u64, unit: u64) {
    let mut message = Message::<16>::new();
    proto::uint(&mut message, 1, kind);
    proto::uint(&mut message, 2, unit);
    proto::bytes(sink, field, message.as_bytes());
}

/// Writes a `Label` into a sample.
fn label(sink: &mut impl Sink, key: u64, string: u64, number: u64) {
    let mut message = Message::<32>::new();
    proto::uint(&mut message, 1, key);
    proto::uint(&mut message, 2, string);
    proto::uint(&mut message, 3, number);
    proto::bytes(sink, 3, message.as_bytes());
}

/// Writes the whole profile (sampled at `rate` mean bytes) to `sink`; false when its scratch
/// memory could not be had (nothing was written then).
pub fn write(sink: &mut impl Sink, rate: u64, time_ns: u64) -> bool {
    let Some(mappings) = Mappings::read() else {
        return false;
    };
    value_type(sink, 1, S_ALLOC_OBJECTS, S_COUNT);
    value_type(sink, 1, S_ALLOC_SPACE, S_BYTES);
    value_type(sink, 1, S_INUSE_OBJECTS, S_COUNT);
    value_type(sink, 1, S_INUSE_SPACE, S_BYTES);
    let mut next_location = 1u64;
    // Numbers as labels' strings ("0", "1", …) follow the mappings' strings in the table, up to
    // the largest label number written.
    let numbers = STRINGS.len() as u64 + 2 * mappings.as_slice().len() as u64;
    let mut largest = 0u64;
    // The `node` label is nodalloc's node index (as its statistics and `nodalloc topology`
    // number nodes); `os_node` is the kernel's number for it (numactl's, /sys's).
    let topology = crate::instance::Instance::existing().map(|instance| instance.topology());
    sites::for_each(|site| {
        let key = site.key();
        let objects = |counter: &core::sync::atomic::AtomicU64| {
            (counter.load(Ordering::Relaxed) + (1 << (OBJECT_SHIFT - 1))) >> OBJECT_SHIFT
        };
        let values = [
            objects(&site.alloc_objects),
            site.alloc_bytes.load(Ordering::Relaxed),
            objects(&site.inuse_objects),
            site.inuse_bytes.load(Ordering::Relaxed),
        ];
        if values[1] == 0 {
            return;
        }
        let depth = key.stack().len() as u64;
        let first = next_location;
        next_location += depth;
        let mut sample = Message::<1024>::new();
        proto::packed(&mut sample, 1, first..first + depth);
        proto::packed(&mut sample, 2, values.iter().copied());
        label(&mut sample, S_NODE, numbers + u64::from(key.node), 0);
        label(&mut sample, S_TIER, if key.far { S_FAR } else { S_NEAR }, 0);
        label(
            &mut sample,
            S_PARTITION,
            numbers + u64::from(key.partition),
            0,
        );
        let os_node = topology.map_or(u64::from(key.node), |topology| {
            topology.node(usize::from(key.node)).os_id as u64
        });
        label(&mut sample, S_OS_NODE, numbers + os_node, 0);
        largest = largest
            .max(u64::from(key.node).max(u64::from(key.partition)))
            .max(os_node);
        debug_assert!(!sample.overflowed());
        proto::bytes(sink, 2, sample.as_bytes());
        for (index, &frame) in key.stack().iter().enumerate() {
            let address = frame.saturating_sub(1);
            let mut location = Message::<40>::new();
            proto::uint(&mut location, 1, first + index as u64);
            proto::uint(&mut location, 2, mappings.id_of(address));
            proto::uint(&mut location, 3, address as u64);
            proto::bytes(sink, 4, location.as_bytes());
        }
    });
    let fixed = STRINGS.len() as u64;
    for (index, mapping) in mappings.as_slice().iter().enumerate() {
        let mut message = Message::<96>::new();
        proto::uint(&mut message, 1, index as u64 + 1);
        proto::uint(&mut message, 2, mapping.start as u64);
        proto::uint(&mut message, 3, mapping.end as u64);
        proto::uint(&mut message, 4, mapping.offset as u64);
        proto::uint(&mut message, 5, fixed + 2 * index as u64);
        proto::uint(&mut message, 6, fixed + 2 * index as u64 + 1);
        proto::bytes(sink, 3, message.as_bytes());
    }
    for string in STRINGS {
        proto::bytes(sink, 6, string.as_bytes());
    }
    for mapping in mappings.as_slice() {
        proto::bytes(sink, 6, &mapping.path[..usize::from(mapping.path_len)]);
        proto::bytes(
            sink,
            6,
            &mapping.build_id[..usize::from(mapping.build_id_len)],
        );
    }
    for number in 0..=largest {
        let mut text = crate::os::Writer::new();
        text.decimal(number);
        proto::bytes(sink, 6, text.as_bytes());
    }
    proto::uint(sink, 9, time_ns);
    value_type(sink, 11, S_SPACE, S_BYTES);
    proto::uint(sink, 12, rate);
    proto::uint(sink, 14, S_INUSE_SPACE);
    true
}

/// A sink that writes to a file descriptor through a buffer of its own; errors are remembered
/// and stop the writes.
pub struct FdSink {
    fd: i32,
    buffer: Chunks<4096>,
    pub failed: bool,
}

impl FdSink {
    pub fn new(fd: i32) -> Self {
        FdSink {
            fd,
            buffer: Chunks::new(),
            failed: false,
        }
    }

    /// Writes what the buffer holds; false on an error (now or before).
    pub fn flush(&mut self) -> bool {
        let written = write_all(self.fd, self.buffer.filled(), &mut self.failed);
        self.buffer.clear();
        written
    }
}

/// Writes `bytes` whole to `fd` unless `failed`, which an error sets; false when it is set.
fn write_all(fd: i32, bytes: &[u8], failed: &mut bool) -> bool {
    let mut done = 0;
    while done < bytes.len() && !*failed {
        // SAFETY: writing the caller's bytes, `done..` of them in bounds.
        let n = unsafe {
            libc::write(
                fd,
                bytes[done..].as_ptr() as *const libc::c_void,
                bytes.len() - done,
            )
        };
        if n < 0 && crate::os::errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            *failed = true;
        } else {
            done += n as usize;
        }
    }
    !*failed
}

impl Sink for FdSink {
    fn put(&mut self, bytes: &[u8]) {
        let (fd, failed) = (self.fd, &mut self.failed);
        self.buffer.put(bytes, |full| write_all(fd, full, failed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's executable mapping is listed with its GNU build ID, as `readelf -n`
    /// prints it (40 hex digits for the linker's SHA-1), and a line the parser cannot take is
    /// skipped rather than misread.
    #[test]
    fn the_executables_mapping_carries_its_build_id() {
        let mappings = Mappings::read().unwrap();
        let here = the_executables_mapping_carries_its_build_id as fn() as usize;
        let id = mappings.id_of(here);
        assert!(id != 0, "no mapping holds this test's code");
        let mapping = &mappings.as_slice()[id as usize - 1];
        let build_id = &mapping.build_id[..usize::from(mapping.build_id_len)];
        let out = std::process::Command::new("readelf")
            .arg("-n")
            .arg(std::env::current_exe().unwrap())
            .output()
            .expect("readelf");
        let notes = String::from_utf8_lossy(&out.stdout);
        let expected = notes
            .lines()
            .find_map(|line| line.trim().strip_prefix("Build ID: "))
            .expect("the test binary has a build ID");
        assert_eq!(std::str::from_utf8(build_id).unwrap(), expected);
        assert!(parse_line(b"7f00-7f01 r-xp 00000000 00:00 0 [vdso]").is_none());
        assert!(parse_line(b"garbage").is_none());
        let entry = parse_line(b"1000-3000 r-xp 00002000 08:01 42 /usr/lib/x.so").unwrap();
        assert_eq!(
            (entry.start, entry.end, entry.offset),
            (0x1000, 0x3000, 0x2000)
        );
        assert!(entry.executable && entry.readable && entry.path == b"/usr/lib/x.so");
    }
}

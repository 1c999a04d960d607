//! Names for the addresses of a profile, from the files mapped where they lie: DWARF debug
//! information first (with inlined functions, innermost first), the symbol table second, and
//! `file+0xoffset` (what `addr2line -e file` takes) when the file is gone, differs from the one
//! profiled (another build ID), or has no symbols.

use super::decode::Mapping;
use object::{Object, ObjectKind, ObjectSegment};
use std::collections::HashMap;

/// A mapped file opened for lookups, with what turns a file offset into its ELF address.
struct File {
    loader: addr2line::Loader,
    /// Executables linked at a fixed address are looked up by the run-time address itself.
    fixed: bool,
    /// Loaded segments: (file offset, file size, virtual address).
    segments: Vec<(u64, u64, u64)>,
}

impl File {
    fn open(path: &str, build_id: &str) -> Option<File> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: a read-only mapping of a file the profile names, read by `object`'s
        // bounds-checked parser. A file rewritten meanwhile gives wrong names (caught by the
        // build-ID check when it is another build) and one truncated meanwhile faults the read,
        // as `addr2line`'s own mapping of it below would.
        let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let object = object::File::parse(&data[..]).ok()?;
        let found = object.build_id().ok().flatten().map(hex);
        if !build_id.is_empty() && found.as_deref() != Some(&build_id.to_ascii_lowercase()) {
            return None;
        }
        let segments = object
            .segments()
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (offset, size, segment.address())
            })
            .collect();
        let fixed = object.kind() == ObjectKind::Executable;
        // A stripped library's symbols live in a separate debug file named by its build ID
        // (Debian's -dbg and debuginfod's layout), where gdb and pprof look too.
        let debug = found
            .filter(|id| id.len() > 2)
            .map(|id| format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]))
            .filter(|debug| std::path::Path::new(debug).is_file());
        let loader = addr2line::Loader::new(debug.as_deref().unwrap_or(path)).ok()?;
        Some(File {
            loader,
            fixed,
            segments,
        })
    }

    /// The address to look up for `address` in `mapping` (file offset to ELF address).
    fn probe(&self, mapping: &Mapping, address: u64) -> Option<u64> {
        if self.fixed {
            return Some(address);
        }
        let offset = address.checked_sub(mapping.start)? + mapping.offset;
        self.segments
            .iter()
            .find(|(start, size, _)| (*start..start + size).contains(&offset))
            .map(|(start, _, virtual_address)| offset - start + virtual_address)
    }

    /// The functions at `probe`, innermost inlined first; empty when nothing names it.
    fn names(&self, probe: u64) -> Vec<String> {
        let mut names = Vec::new();
        if let Ok(mut frames) = self.loader.find_frames(probe) {
            while let Ok(Some(frame)) = frames.next() {
                if let Some(Ok(name)) = frame.function.as_ref().map(|f| f.demangle()) {
                    names.push(name.into_owned());
                }
            }
        }
        if names.is_empty() {
            if let Some(symbol) = self.loader.find_symbol(probe) {
                names.push(addr2line::demangle_auto(symbol.into(), None).into_owned());
            }
        }
        names
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Opens each mapped file once and names addresses in it.
#[derive(Default)]
pub struct Symbolizer {
    files: HashMap<(String, String), Option<File>>,
}

impl Symbolizer {
    /// The function names at `address` (innermost first): never empty.
    pub fn names(&mut self, mapping: Option<&Mapping>, address: u64) -> Vec<String> {
        let Some(mapping) = mapping else {
            return vec![format!("{address:#x}")];
        };
        let key = (mapping.file.clone(), mapping.build_id.clone());
        let file = self.files.entry(key).or_insert_with(|| {
            (mapping.file.starts_with('/'))
                .then(|| File::open(&mapping.file, &mapping.build_id))
                .flatten()
        });
        let names = file
            .as_ref()
            .and_then(|file| Some(file.names(file.probe(mapping, address)?)))
            .unwrap_or_default();
        if names.is_empty() {
            let offset = address.wrapping_sub(mapping.start) + mapping.offset;
            let base = mapping.file.rsplit('/').next().unwrap_or("");
            if base.is_empty() {
                return vec![format!("{address:#x}")];
            }
            return vec![format!("{base}+{offset:#x}")];
        }
        names
    }
}

//! Names of code addresses, for reports printed outside the allocator's paths.

use super::Writer;
use core::ffi::CStr;

/// Appends ` (symbol+0xoffset in object)` for the code at `address` as the dynamic loader
/// knows it (`dladdr`: exported and dynamic symbols only; a static function shows as its
/// object file). Appends nothing when the loader knows nothing. Takes the loader's lock: never
/// call it from an allocation path.
pub fn symbolize(address: usize, w: &mut Writer) {
    // SAFETY: Dl_info is plain pointers, for which all-zero is valid.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    if unsafe { libc::dladdr(address as *const libc::c_void, &mut info) } == 0 {
        return;
    }
    w.str(" (");
    if !info.dli_sname.is_null() {
        // SAFETY: the loader's symbol names are NUL-terminated strings it keeps alive.
        w.bytes(unsafe { CStr::from_ptr(info.dli_sname) }.to_bytes());
        w.str("+")
            .hex(address.wrapping_sub(info.dli_saddr as usize));
    } else {
        w.str("?");
    }
    if !info.dli_fname.is_null() {
        // SAFETY: as above, for the object's path.
        let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        w.str(" in ").bytes(name);
    }
    w.str(")");
}

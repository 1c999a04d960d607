//! Links `libnodalloc.so` with its hot code first: the functions ordinary programs run, listed
//! in `hot-code.ld` (written by `scripts/hot-code.sh`), are placed together at the start of the
//! library's code, so that a process maps the windows of code it runs and not the whole library
//! (DESIGN, "The library's code layout").

fn main() {
    println!("cargo:rerun-if-changed=hot-code.ld");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if linux {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-code.ld");
        // An `INSERT` script adds to the linker's default script instead of replacing it.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{}", script.display());
    }
}

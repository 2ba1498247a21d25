//! Link arguments of the firmware-style image: no C runtime, no libc, a static non-PIE ELF
//! entered at our own `_start` (see `src/rt.rs`).
//!
//! `-nostartfiles` drops crt1.o/crti.o (we provide `_start`), `-nostdlib` drops libc and libgcc
//! (the image talks to Linux through raw syscalls), `-static` makes a self-contained ELF, and
//! `-no-pie` overrides rustc's default `-pie`: with no dynamic loader and no self-relocating
//! startup code nobody would apply a PIE's relative relocations, so the addresses are fixed at
//! link time instead.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}

//! Gives `libnrt.so` the SONAME of the real runtime (`libnrt.so.1`), so a program linked with
//! `-lnrt` records `libnrt.so.1` as its dependency exactly as it would against AWS's library.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnrt.so.1");
    }
    println!("cargo:rerun-if-changed=build.rs");
}

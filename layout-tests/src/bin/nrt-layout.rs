//! `nrt-layout`: the layout report, generated-file drift check and DWARF conformance checker.
//! See [`nrt_layout::cli`] for the commands and exit codes.

fn main() {
    std::process::exit(nrt_layout::run_cli(std::env::args_os()));
}

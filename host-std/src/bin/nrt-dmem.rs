//! `nrt-dmem`: the demo, scenario runner, memory report and layout report (see
//! [`nrt_host::cli`]).

fn main() {
    std::process::exit(nrt_host::cli::main(std::env::args_os()));
}

//! `nrt-dmem`: the demo, scenario runner, memory report and layout report (see
//! [`nrt_dmem_cli`]).

fn main() {
    std::process::exit(nrt_dmem_cli::main(std::env::args_os()));
}

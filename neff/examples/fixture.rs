//! Writes the §12 fixture NEFF (the one embedded in libnrt) to the path given, for
//! `nrt-dmem neff inspect`: `cargo run -p nrt-neff --example fixture -- x.neff`.

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: fixture OUT.neff");
        std::process::exit(2);
    };
    match nrt_neff::pack::fixture().map(|b| std::fs::write(&path, b)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("writing {}: {e}", path.to_string_lossy());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}

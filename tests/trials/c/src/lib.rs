//! An outside integrator, C: a program (`trial.c`) written only against the
//! public `<nrt/nrt.h>`, as a C integrator of `libnrt.so` would. `tests/c_program.rs` compiles
//! it with `-Wall -Wextra -Werror -pedantic`, links it against the library cargo builds and runs
//! it on the simulated trn2. This crate holds no Rust code of its own.
#![forbid(unsafe_code)]

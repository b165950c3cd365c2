//! The `hookwall` binary: parses the command line and hands it to [`hookwall::cli::run`].

use clap::Parser as _;

/// mimalloc instead of glibc's malloc: after the dispatcher had drained a backlog of 850k
/// events, glibc's `_int_malloc` and `malloc_consolidate` took a tenth of the server's CPU and
/// forwarding fell from 25k to 20k events/s; with mimalloc it stayed at 24k (issue 6,
/// `docs/benchmarks.md` run 9).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hookwall::cli::run(hookwall::cli::Cli::parse())
}

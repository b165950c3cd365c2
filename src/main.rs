//! The `hookwall` binary: parses the command line and hands it to [`hookwall::cli::run`].

use clap::Parser as _;

/// mimalloc instead of glibc's malloc: after the dispatcher had drained a backlog of 850k
/// events, glibc's `_int_malloc` and `malloc_consolidate` took a tenth of the server's CPU and
/// forwarding fell from 25k to 20k events/s; with mimalloc it stayed at 24k (issue 6,
/// `docs/benchmarks.md` run 9).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    if let Some(missing) = missing_cpu_feature() {
        eprintln!(
            "hookwall: this CPU lacks {missing}, which this build requires (x86_64 with SSE4.2 \
             and PCLMULQDQ: .cargo/config.toml); rebuild without those target features to run here"
        );
        return std::process::ExitCode::from(1);
    }
    hookwall::cli::run(hookwall::cli::Cli::parse())
}

/// The first CPU feature this build was compiled for that the CPU running it lacks (checked
/// before any code compiled with it runs, instead of a SIGILL later), or `None`.
fn missing_cpu_feature() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(target_feature = "sse4.2") && !std::arch::is_x86_feature_detected!("sse4.2") {
            return Some("SSE4.2");
        }
        if cfg!(target_feature = "pclmulqdq") && !std::arch::is_x86_feature_detected!("pclmulqdq") {
            return Some("PCLMULQDQ");
        }
        if cfg!(target_feature = "popcnt") && !std::arch::is_x86_feature_detected!("popcnt") {
            return Some("POPCNT");
        }
    }
    None
}

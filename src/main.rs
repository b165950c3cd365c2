//! The `hookwall` binary: parses the command line and hands it to [`hookwall::cli::run`].

/// mimalloc instead of glibc's malloc: after the dispatcher had drained a backlog of 850k
/// events, glibc's `_int_malloc` and `malloc_consolidate` took a tenth of the server's CPU and
/// forwarding fell from 25k to 20k events/s; with mimalloc it stayed at 24k (issue 6,
/// `docs/benchmarks.md` run 9).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hookwall::cli::run(hookwall::cli::parse())
}

/// Refuses to run on a CPU without the x86_64 features this build was compiled for
/// (`.cargo/config.toml`: SSE4.2, PCLMULQDQ, POPCNT): exit 1 with a message naming the first
/// one missing, instead of a SIGILL with no message. It must run before RocksDB's C++ static
/// initializers, which already use SSE4.1, and so before `main`: it is a constructor with an
/// init priority (`.init_array.NNNNN` entries run before the unprioritised ones C++ uses).
/// Only the features this build was compiled with are checked.
#[cfg(target_arch = "x86_64")]
#[used]
#[link_section = ".init_array.00101"]
static REQUIRE_CPU_FEATURES: extern "C" fn() = require_cpu_features;

#[cfg(target_arch = "x86_64")]
extern "C" fn require_cpu_features() {
    // CPUID leaf 1, ECX: bit 20 SSE4.2, bit 1 PCLMULQDQ, bit 23 POPCNT (Intel SDM vol. 2A).
    // `__cpuid` is a safe function in recent Rust and unsafe in older ones (rust-version
    // 1.88). SAFETY: CPUID exists on every x86_64 CPU.
    #[allow(unused_unsafe)]
    let ecx = unsafe { std::arch::x86_64::__cpuid(1) }.ecx;
    let required = [
        (cfg!(target_feature = "sse4.2"), 20, "SSE4.2"),
        (cfg!(target_feature = "pclmulqdq"), 1, "PCLMULQDQ"),
        (cfg!(target_feature = "popcnt"), 23, "POPCNT"),
    ];
    let Some((_, _, missing)) =
        required.iter().find(|(built, bit, _)| *built && ecx & (1 << bit) == 0)
    else {
        return;
    };
    for part in [
        "hookwall: this CPU lacks ",
        *missing,
        ", which this build requires (x86_64 with SSE4.2, PCLMULQDQ and POPCNT: \
         .cargo/config.toml); rebuild without those target features to run on it\n",
    ] {
        // SAFETY: writing a valid buffer to stderr; nothing else runs yet.
        unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
    }
    // SAFETY: ending the process before anything was started.
    unsafe { libc::_exit(1) };
}

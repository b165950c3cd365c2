//! The `hookwall` binary: parses the command line and hands it to [`hookwall::cli::run`].

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    hookwall::cli::run(hookwall::cli::Cli::parse())
}

//! Tidy checks that keep the module boundaries of ARCHITECTURE.md true (rust-analyzer style):
//! every source file starts with a `//!` doc comment; only `src/ledger/` imports rocksdb;
//! only `src/clock.rs` reads time; only the IO modules touch sockets; notable log lines carry a
//! reason code.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("directory entry is readable").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<(String, String)> {
    // CARGO_MANIFEST_DIR as cargo sets it at run time: the checkout under test, even when the
    // binary was built by another checkout sharing the target directory.
    let root_buf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let root = root_buf.as_path();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).expect("under the root").display().to_string();
            (rel, fs::read_to_string(&p).expect("source is UTF-8"))
        })
        .collect()
}

/// Lines of code outside `#[cfg(test)]` modules (tests may use anything).
fn non_test_code(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

fn offenders(allowed: &[&str], needles: &[&str]) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|(path, _)| !allowed.iter().any(|a| path.starts_with(a)))
        .filter(|(_, text)| needles.iter().any(|n| non_test_code(text).contains(n)))
        .map(|(path, _)| path)
        .collect()
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(path, _)| path)
        .collect();
    assert!(missing.is_empty(), "files without a leading //! doc comment: {missing:?}");
}

#[test]
fn only_the_ledger_imports_rocksdb() {
    let found = offenders(&["src/ledger/"], &["rocksdb::", "use rocksdb"]);
    assert!(found.is_empty(), "rocksdb used outside src/ledger/: {found:?}");
}

#[test]
fn only_the_clock_reads_time() {
    let found = offenders(&["src/clock.rs"], &["SystemTime::now", "Instant::now"]);
    assert!(found.is_empty(), "time read outside src/clock.rs: {found:?}");
}

#[test]
fn only_io_modules_touch_sockets() {
    let allowed = ["src/ingress/", "src/dispatch/", "src/admin/", "src/server.rs", "src/loadgen/"];
    let found = offenders(&allowed, &["TcpListener", "TcpStream", "UdpSocket", "socket2::"]);
    assert!(found.is_empty(), "sockets touched outside the IO modules: {found:?}");
}

/// Issue 7, R28: every notable log line (info, warn, error) carries a reason `code = "…"`, so
/// operators can alert and grep on codes rather than on prose; debug lines are exempt.
#[test]
fn every_notable_log_line_has_a_reason_code() {
    let mut missing = Vec::new();
    for (path, text) in sources() {
        let code = non_test_code(&text);
        for level in ["tracing::info!(", "tracing::warn!(", "tracing::error!("] {
            for (at, _) in code.match_indices(level) {
                let call = &code[at..];
                let end = call.find(");").unwrap_or(call.len());
                if !call[..end].contains("code = \"") {
                    let line = code[..at].lines().count() + 1;
                    missing.push(format!("{path}:{line}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "log lines without a reason code: {missing:?}");
}

/// A one-line string literal with a run of 12 or more spaces inside its text holds the
/// indentation of a lost line continuation (a `\` at a line's end, dropped by a rewrap): users
/// read messages like "this build reads                  formats up to 3". Tables align with
/// fewer.
#[test]
fn no_message_holds_the_indentation_of_a_lost_line_continuation() {
    let gap = " ".repeat(12);
    let mut found = Vec::new();
    for (path, text) in sources() {
        for (n, line) in non_test_code(&text).lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            let line = line.replace("\\\\", "").replace("\\\"", "").replace("'\"'", "");
            let inside = line.split('"').skip(1).step_by(2);
            if inside.into_iter().any(|literal| literal.trim().contains(&gap)) {
                found.push(format!("{path}:{}", n + 1));
            }
        }
    }
    assert!(found.is_empty(), "string literals with a lost line continuation: {found:?}");
}

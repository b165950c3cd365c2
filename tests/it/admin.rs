//! `hookwall check-config` and `serve` on bad configs (SPEC §1, §2): exit codes, and every
//! error naming its field.

use std::process::{Command, Output};

/// Runs the binary with `args` in the crate root and returns its output (it exits by itself).
fn hookwall(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(args)
        .current_dir(dir)
        .env_remove("HOOKWALL_CONFIG")
        .env("HOOKWALL_LOG", "warn")
        .output()
        .expect("running hookwall")
}

/// SPEC §2, STYLE "Every file in config/ is loaded by a test": the dev config is valid.
#[test]
fn check_config_accepts_the_dev_config() {
    let root = &crate::harness::repo_root();
    let out = hookwall(&["check-config", "-c", "config/dev.toml"], root);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "exit code; stdout:\n{stdout}\nstderr:\n{stderr}");
    for id in ["stripe-dev", "github-dev", "standard-dev", "dev-sink"] {
        assert!(stdout.contains(id), "the tables list {id}; stdout:\n{stdout}");
    }
    assert!(!stdout.contains("whsec_dev_stripe"), "no secret value printed; stdout:\n{stdout}");
}

/// A config with an unknown key (`colour`) and a bad duration (`backoff_min`).
const BAD: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:1"

[ledger]
path = "./ledger"

[[source]]
id = "stripe-a"
tenant = "acme"
provider = "stripe"
colour = "blue"
secrets = [{ id = "k1", value = "whsec_x" }]
destination = "sink"

[[destination]]
id = "sink"
url = "http://127.0.0.1:9/hooks"
backoff_min = "soon"
"#;

/// SPEC §1, §2: unknown keys are errors and all problems are reported at once, each naming
/// its field; exit 2 for `check-config` and for `serve`.
#[test]
fn bad_config_exits_2_and_names_every_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, BAD).expect("writing the config");
    // The file, the unknown key and the bad duration are named.
    refused_by_check_and_serve(&path, dir.path(), &["bad.toml", "colour", "backoff_min"]);
    assert!(!dir.path().join("ledger").exists(), "serve created nothing for a bad config");
}

/// `check-config` and `serve` both refuse the config at `path` with exit 2, and each one's
/// stderr holds every text of `says`.
fn refused_by_check_and_serve(path: &std::path::Path, cwd: &std::path::Path, says: &[&str]) {
    let path_text = path.display().to_string();
    for command in ["check-config", "serve"] {
        let out = hookwall(&[command, "-c", &path_text], cwd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command} {path_text}: exit code:\n{stderr}");
        for text in says {
            assert!(stderr.contains(text), "{command} {path_text}: says {text:?}:\n{stderr}");
        }
    }
}

/// A `serve` that cannot start still says why when `HOOKWALL_LOG` hides its log (a mistyped
/// level is read as a target name and enables nothing; an audit's `HOOKWALL_LOG=debgu` run
/// exited 1 with no output at all), and an invalid filter is reported and `info` used. The
/// listen address here is one no interface has (192.0.2.1, TEST-NET-1): a valid config whose
/// start fails.
#[test]
fn a_failed_start_is_reported_whatever_hookwall_log_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = BAD.replace("colour = \"blue\"\n", "").replace("backoff_min = \"soon\"\n", "");
    let good = good.replace("listen = \"127.0.0.1:0\"", "listen = \"192.0.2.1:18080\"");
    assert!(good.contains("192.0.2.1"), "the config names the address:\n{good}");
    let path = dir.path().join("good.toml");
    std::fs::write(&path, good).expect("writing the config");
    let path_text = path.display().to_string();
    for filter in ["debgu", "hookwall=[[["] {
        let out = Command::new(env!("CARGO_BIN_EXE_hookwall"))
            .args(["serve", "-c", &path_text])
            .current_dir(dir.path())
            .env_remove("HOOKWALL_CONFIG")
            .env("HOOKWALL_LOG", filter)
            .output()
            .expect("running hookwall");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{filter}: exit code; stderr:\n{stderr}");
        assert!(stderr.contains("server.listen"), "{filter}: names the field; stderr:\n{stderr}");
        let why = "cannot listen on 192.0.2.1:18080: Cannot assign requested address";
        assert!(stderr.contains(why), "{filter}: says why:\n{stderr}");
        if filter.contains('[') {
            assert!(stderr.contains("is not a log filter"), "{filter}: reported:\n{stderr}");
        }
    }
}

/// SPEC §1: an empty `HOOKWALL_CONFIG` is named as the problem (clap reported a `--config`
/// given without a value, which the user never typed), exit 2.
#[test]
fn an_empty_hookwall_config_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    for command in ["check-config", "serve"] {
        let out = Command::new(env!("CARGO_BIN_EXE_hookwall"))
            .arg(command)
            .current_dir(dir.path())
            .env("HOOKWALL_CONFIG", "")
            .env("HOOKWALL_LOG", "warn")
            .output()
            .expect("running hookwall");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: exit code:\n{stderr}");
        assert!(stderr.contains("HOOKWALL_CONFIG is set but empty"), "{command}:\n{stderr}");
    }
}

/// A ledger directory that cannot be created (here under `/proc`, where not even root can
/// make one) fails the start in words, naming the path — not RocksDB's text with a Rust value
/// in it (`Os { code: 13, kind: PermissionDenied, … }`, review).
#[test]
fn a_ledger_directory_that_cannot_be_created_is_said_in_words() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = BAD.replace("colour = \"blue\"\n", "").replace("backoff_min = \"soon\"\n", "");
    let text = good.replace("path = \"./ledger\"", "path = \"/proc/hookwall-none/ledger\"");
    assert!(text.contains("/proc/hookwall-none"), "the config names the path:\n{text}");
    let path = dir.path().join("proc-ledger.toml");
    std::fs::write(&path, text).expect("writing the config");
    let out = hookwall(&["serve", "-c", &path.display().to_string()], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code:\n{stderr}");
    let says =
        "cannot open the ledger at /proc/hookwall-none/ledger: its directory cannot be created:";
    assert!(stderr.contains(says) && !stderr.contains("Os {"), "{stderr}");
}

/// SPEC §1: `check-config` refuses a `ledger.path` that `serve` could never open — a file, or
/// a directory of other files (where a ledger would be created beside them, admitting every
/// event again) — naming the field, with exit 2; `serve` too, before writing anything.
#[test]
fn a_ledger_path_that_cannot_be_a_ledger_is_a_config_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("a-file"), b"x").expect("writing a file");
    std::fs::create_dir(dir.path().join("other")).expect("a directory");
    std::fs::write(dir.path().join("other/notes.txt"), b"x").expect("a foreign file");
    let good = BAD.replace("colour = \"blue\"\n", "").replace("backoff_min = \"soon\"\n", "");
    let cases = [
        ("./a-file", "it is not a directory"),
        ("./other", "holds other files"),
        ("./a-file/ledger", "a part of the path before it is a file, not a directory"),
    ];
    for (ledger, says) in cases {
        let text = good.replace("path = \"./ledger\"", &format!("path = {ledger:?}"));
        assert!(text.contains(ledger), "the config names {ledger}:\n{text}");
        let path = dir.path().join("ledger-path.toml");
        std::fs::write(&path, text).expect("writing the config");
        refused_by_check_and_serve(&path, dir.path(), &["ledger.path", says]);
        let entries = std::fs::read_dir(dir.path().join("other")).expect("reading").count();
        assert_eq!(entries, 1, "{ledger}: nothing was written beside the foreign file");
    }
}

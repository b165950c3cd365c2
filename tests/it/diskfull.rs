//! R15: when the ledger cannot durably write, hookwall fails closed: 503 `unavailable` with
//! `Retry-After`, never a 2xx for a new event after the failure, and `/readyz` turns 503.
//! The ledger lives on a 16 MiB tmpfs that the test fills until ENOSPC (needs root: CI runs as
//! root).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::client::{self, Conn, Response};
use crate::harness::{Hookwall, Io, Setup};
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};

/// A mounted tmpfs, lazily unmounted on drop (also when the test panics).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("creating the mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("running mount");
        assert!(status.success(), "mount -t tmpfs failed: {status}");
        Tmpfs { dir: dir.to_path_buf() }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes `path` until the filesystem answers ENOSPC (1 MiB writes, then 4 KiB ones), bounded.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).expect("creating the filler");
    for block in [1usize << 20, 4096, 512] {
        let buf = vec![0xA5u8; block];
        let mut full = false;
        for _ in 0..(64 << 20) / block {
            match file.write_all(&buf) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        assert!(full, "a 16 MiB tmpfs did not fill up with {block}-byte writes");
    }
    // Flushed data is in the page cache, which on tmpfs is the filesystem itself.
    let _ = file.sync_all();
}

/// A Stripe event body of about `pad` extra bytes (bigger bodies need more WAL space).
pub(crate) fn padded_body(id: &str, pad: usize) -> Vec<u8> {
    sign::body(Provider::Stripe, id, &"w".repeat(pad))
}

/// One delivery; a connection failure fails the test with hookwall's log.
pub(crate) fn post(hw: &Hookwall, id: &str, body: &[u8]) -> Response {
    let h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, id, sign::now_unix_s(), body);
    let request = client::request("POST", "/webhooks/stripe-a", &h, body);
    let attempt = Conn::try_connect(hw.ingress).and_then(|mut c| {
        c.try_send(&request)?;
        c.try_read_response()
    });
    attempt
        .unwrap_or_else(|e| panic!("posting {id} to a full ledger: {e}; stderr:\n{}", hw.stderr()))
}

/// R15: ledger write failure (ENOSPC) → 503 `unavailable` + `Retry-After`, never 2xx after
/// the first failure; `/readyz` → 503.
#[test]
fn ledger_write_failure_fails_closed() {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "needs root for tmpfs; CI runs as root");
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = Sink::start(Script::always(200));
    let mount = dir.path().join("tmpfs");
    let _tmpfs = Tmpfs::mount(&mount, "16m");
    let mut setup = Setup::new(Io::Auto, dir.path(), &sink.url());
    setup.ledger = mount.join("ledger");
    setup.cores = 1;
    let hw = Hookwall::start(dir.path(), &setup);

    let id = sign::unique_id("evt_before_full");
    let r = post(&hw, &id, &padded_body(&id, 0));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "before the disk is full: {r}");

    fill(&mount.join("filler"));

    // Small bodies first (they may still fit in a partly used page), then large ones that
    // cannot. Bounded: 40 requests at most, and 5 more after the first 503.
    let pads = (0..8).map(|_| 0).chain((0..8).map(|_| 64 << 10)).chain((0..24).map(|_| 900 << 10));
    let mut answers: Vec<(String, u16, String, Option<String>)> = Vec::new();
    let mut first_unavailable = None;
    let mut acked: Vec<(String, usize)> = Vec::new();
    for (n, pad) in pads.enumerate() {
        let id = sign::unique_id("evt_full");
        let r = post(&hw, &id, &padded_body(&id, pad));
        if r.status == 200 {
            acked.push((id.clone(), pad));
        }
        answers.push((id, r.status, r.code(), r.header("retry-after").map(str::to_owned)));
        if r.status == 503 && first_unavailable.is_none() {
            first_unavailable = Some(n);
        }
        if first_unavailable.is_some_and(|f| n >= f + 5) {
            break;
        }
    }
    let summary: Vec<String> =
        answers.iter().map(|(_, s, c, ra)| format!("{s} {c} retry-after={ra:?}")).collect();
    eprintln!("answers with the ledger's filesystem full: {summary:#?}");
    for (_, status, code, _) in &answers {
        assert!(
            (*status, code.as_str()) == (200, "accepted")
                || (*status, code.as_str()) == (503, "unavailable"),
            "only accepted or unavailable are acceptable answers here; got {summary:#?}"
        );
    }
    let first = first_unavailable.unwrap_or_else(|| {
        panic!("no 503 unavailable although the ledger's filesystem is full; answers {summary:#?}; stderr:\n{}", hw.stderr())
    });
    assert!(answers[first].3.is_some(), "503 unavailable carries Retry-After: {summary:#?}");
    assert!(
        answers[first..].iter().all(|(_, status, _, _)| *status == 503),
        "R15: a 2xx after the first 503 (fail closed means no admission without a durable write): {summary:#?}"
    );

    // /readyz reports the ledger not writable.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = hw.admin_get("/readyz").status;
        if status == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz still {status} with a full ledger disk");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }

    // RocksDB keeps a failed WAL write fatal until the DB is reopened, so hookwall exits with
    // status 1 once the ledger has stayed unwritable (10 s) for its supervisor to restart it.
    let mut hw = hw;
    let status = hw.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "exit status; stderr:\n{}", hw.stderr());
    assert!(hw.stderr().contains("unwritable"), "the log says why; stderr:\n{}", hw.stderr());

    // The fault cleared, a restart admits again, and nothing acknowledged was lost.
    std::fs::remove_file(mount.join("filler")).expect("removing the filler");
    let hw = Hookwall::start(dir.path(), &setup);
    let r = post(&hw, &id, &padded_body(&id, 0));
    assert_eq!(r.answer(), (200, "duplicate".to_owned()), "acked before the fault: {r}");
    for (id, pad) in &acked {
        let r = post(&hw, id, &padded_body(id, *pad));
        let known = "an event acked while the disk filled is still known";
        assert_eq!(r.answer(), (200, "duplicate".to_owned()), "{known}: {r}");
    }
    let fresh = sign::unique_id("evt_after_recovery");
    let r = post(&hw, &fresh, &padded_body(&fresh, 0));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "after recovery: {r}");
    drop(hw);
}

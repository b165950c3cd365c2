//! R15 beyond a full disk: the ledger's filesystem turns read-only, or every IO on it returns
//! EIO. Every affected request gets 503 `unavailable`, no 2xx is given without a durable
//! record, `/readyz` turns 503, and once the fault clears the server recovers (hookwall exits 1
//! after 10 s of an unwritable ledger, as RocksDB keeps a failed WAL write fatal until reopened;
//! its supervisor restarts it) with every acknowledged event still known.
//!
//! The ledger lives on a sparse 512 MiB ext4 image (RocksDB preallocates its WAL) mounted through a loop device (`mount -o loop`; needs
//! root, as CI runs). No device-mapper is needed: the faults are ext4's own —
//! `trigger_fs_error` with `errors=remount-ro` (the kernel's emergency read-only remount, even
//! with files open for writing: every write then fails EROFS), and the `EXT4_IOC_SHUTDOWN` ioctl
//! (every later IO fails EIO, as a dying disk does). The fault clears by unmounting, checking
//! the filesystem and mounting it again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::diskfull::{padded_body, post};
use crate::harness::{Hookwall, Io, Setup};
use crate::sign;
use crate::sink::{Script, Sink};

/// `EXT4_IOC_SHUTDOWN` (`_IOR('X', 125, __u32)`, linux/fs/ext4/ext4.h).
const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587D;
/// `EXT4_GOING_FLAGS_NOLOGFLUSH`: shut down now, without flushing the journal.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// An ext4 image mounted via a loop device; lazily unmounted on drop (also on panic).
struct Ext4 {
    image: PathBuf,
    dir: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Ext4 {
    fn create(image: &Path, dir: &Path) -> Ext4 {
        let file = std::fs::File::create(image).expect("creating the image");
        file.set_len(512 << 20).expect("sizing the image");
        drop(file);
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image));
        std::fs::create_dir_all(dir).expect("creating the mount point");
        let fs = Ext4 { image: image.to_path_buf(), dir: dir.to_path_buf() };
        fs.mount();
        fs
    }

    fn mount(&self) {
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", "loop,errors=remount-ro"])
            .arg(&self.image)
            .arg(&self.dir));
    }

    /// The fault clears: unmount, repair what the error left marked, mount again.
    fn remount_clean(&self) {
        run(Command::new("umount").arg(&self.dir));
        // Exit 1 = errors corrected: expected after an injected error.
        let status = Command::new("e2fsck").arg("-fy").arg(&self.image).output().expect("e2fsck");
        assert!(matches!(status.status.code(), Some(0 | 1)), "e2fsck: {status:?}");
        self.mount();
    }

    /// The kernel's emergency read-only remount (`errors=remount-ro` after an fs error).
    fn make_read_only(&self) {
        let dev = self.loop_device();
        let knob = format!("/sys/fs/ext4/{dev}/trigger_fs_error");
        std::fs::write(&knob, "hookwall diskfaults test\n")
            .unwrap_or_else(|e| panic!("writing {knob}: {e}"));
    }

    /// Every later IO on the filesystem fails with EIO.
    fn shut_down(&self) {
        let dir = std::fs::File::open(&self.dir).expect("opening the mount point");
        let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: a valid descriptor and a pointer to a live u32, as the ioctl expects.
        let rc = unsafe {
            libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&dir), EXT4_IOC_SHUTDOWN as _, &flags)
        };
        assert_eq!(rc, 0, "EXT4_IOC_SHUTDOWN: {}", std::io::Error::last_os_error());
    }

    /// `loopN` of the mount, as named under /sys/fs/ext4.
    fn loop_device(&self) -> String {
        let out = Command::new("findmnt")
            .args(["-no", "SOURCE"])
            .arg(&self.dir)
            .output()
            .expect("running findmnt");
        let source = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        source.rsplit('/').next().unwrap_or_default().to_owned()
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    ReadOnly,
    Eio,
}

fn fails_closed_and_recovers(fault: Fault) {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "needs root for loop mounts; CI runs as root");
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = Sink::start(Script::always(200));
    let fs = Ext4::create(&dir.path().join("ledger.img"), &dir.path().join("mnt"));
    let mut setup = Setup::new(Io::Auto, dir.path(), &sink.url());
    setup.ledger = dir.path().join("mnt").join("ledger");
    setup.cores = 1;
    let hw = Hookwall::start(dir.path(), &setup);

    let before = sign::unique_id("evt_before_fault");
    let r = post(&hw, &before, &padded_body(&before, 0));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "before the fault: {r}");

    match fault {
        Fault::ReadOnly => fs.make_read_only(),
        Fault::Eio => fs.shut_down(),
    }

    // New events while the fault lasts: every answer is 503 unavailable with Retry-After
    // (a 2xx would be an admission without a durable record).
    let mut acked = Vec::new();
    let mut answers = Vec::new();
    for n in 0..6 {
        let id = sign::unique_id("evt_during_fault");
        let r = post(&hw, &id, &padded_body(&id, n * 1024));
        answers.push(format!(
            "{} {} retry-after={:?}",
            r.status,
            r.code(),
            r.header("retry-after")
        ));
        if r.status == 200 {
            acked.push(id);
        } else {
            assert_eq!(r.answer(), (503, "unavailable".to_owned()), "{fault:?}: {answers:#?}");
            assert!(r.header("retry-after").is_some(), "503 carries Retry-After: {r}");
        }
    }
    eprintln!("answers with the ledger {fault:?}: {answers:#?}");
    assert!(acked.is_empty(), "{fault:?}: a 2xx although no write can be durable: {answers:#?}");

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = hw.admin_get("/readyz").status;
        if status == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz still {status} with the ledger {fault:?}");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }

    // The unwritable ledger makes the process exit 1 for its supervisor.
    let mut hw = hw;
    let status = hw.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "exit status; stderr:\n{}", hw.stderr());
    assert!(hw.stderr().contains("unwritable"), "the log says why; stderr:\n{}", hw.stderr());

    // The fault clears; the restarted server is ready, admits again, and still knows the event
    // acknowledged before the fault.
    fs.remount_clean();
    let hw = Hookwall::start(dir.path(), &setup);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = hw.admin_get("/readyz").status;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz still {status} after recovery");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
    let r = post(&hw, &before, &padded_body(&before, 0));
    assert_eq!(r.answer(), (200, "duplicate".to_owned()), "acked before the fault: {r}");
    let fresh = sign::unique_id("evt_after_recovery");
    let r = post(&hw, &fresh, &padded_body(&fresh, 0));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "after recovery: {r}");
    drop(hw);
    drop(fs);
}

/// The ledger's filesystem turns read-only (EROFS on every write).
#[test]
fn ledger_read_only_fails_closed_and_recovers() {
    fails_closed_and_recovers(Fault::ReadOnly);
}

/// Every IO on the ledger's filesystem fails with EIO.
#[test]
fn ledger_eio_fails_closed_and_recovers() {
    fails_closed_and_recovers(Fault::Eio);
}

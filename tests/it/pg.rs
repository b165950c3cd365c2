//! A throwaway PostgreSQL server per test: `initdb` into a temp dir, `postgres` listening only
//! on a unix socket in that dir (no TCP port, so nothing to collide with), stopped and removed
//! on drop. Run as the `postgres` user when the tests run as root (CI does: initdb and postgres
//! refuse root). Needs the Debian `postgresql` package (`.ci/run` installs it); without it the
//! test FAILS with that message, it never passes silently.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a fresh server may take to accept connections.
const PG_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running throwaway PostgreSQL.
pub struct Postgres {
    child: Option<Child>,
    /// The port (of the unix socket's name, and of 127.0.0.1 when started with TLS).
    port: u16,
    /// Data dir and socket dir (removed on drop, after the server stopped).
    dir: tempfile::TempDir,
}

thread_local! {
    /// The URL of the server the current test runs on (set by `on_both_io_and_postgres!`);
    /// `Setup::new` picks it up.
    static CURRENT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The PostgreSQL URL of the current test, when it runs on the PostgreSQL ledger.
pub fn current_url() -> Option<String> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Runs `test` with a fresh server as the current test's ledger (`Setup::new` uses it).
pub fn with_postgres(test: impl FnOnce()) {
    let pg = Postgres::start();
    CURRENT.with(|c| *c.borrow_mut() = Some(pg.url()));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(test));
    CURRENT.with(|c| *c.borrow_mut() = None);
    drop(pg);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Where the PostgreSQL server binaries are: `HOOKWALL_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian's layout).
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("HOOKWALL_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.retain(|p| p.join("postgres").is_file() && p.join("initdb").is_file());
    versions.sort();
    versions.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/postgres and no \
             HOOKWALL_TEST_PG_BIN): install the Debian package `postgresql` \
             (`apt-get install --no-install-recommends postgresql`, as .ci/run does)"
        )
    })
}

/// `(uid, gid)` of the `postgres` user when we are root (the server refuses root).
fn run_as() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: a valid C string; the returned record is read before any other getpw* call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root, and there is no `postgres` user to run the throwaway server as \
         (the Debian package `postgresql` creates it)"
    );
    // SAFETY: non-null, just returned by getpwnam.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn command(bin: &Path, user: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(bin);
    if let Some((uid, gid)) = user {
        std::os::unix::process::CommandExt::uid(&mut c, uid);
        // std drops the supplementary groups itself when it changes the uid as root.
        std::os::unix::process::CommandExt::gid(&mut c, gid);
    }
    c.stdin(Stdio::null());
    c
}

impl Postgres {
    /// initdb + start; waits until it accepts a connection.
    pub fn start() -> Postgres {
        Postgres::launch(None)
    }

    /// As [`Postgres::start`], and also listening on 127.0.0.1 (a free port) with `ssl = on`
    /// serving the PEM certificate chain `cert` and key `key` (TLS is offered on TCP only).
    pub fn start_tls(cert: &str, key: &str) -> Postgres {
        Postgres::launch(Some((cert, key)))
    }

    fn launch(tls: Option<(&str, &str)>) -> Postgres {
        let bin = bin_dir();
        let user = run_as();
        let dir = tempfile::Builder::new().prefix("hookwall-pg").tempdir().expect("temp dir");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown temp dir");
        }
        let data = dir.path().join("data");
        let out = command(&bin.join("initdb"), user)
            .args(["-D", &data.display().to_string(), "-U", "postgres", "-A", "trust"])
            .args(["-E", "UTF8", "--no-sync", "--no-instructions"])
            .output()
            .expect("running initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let log = std::fs::File::create(dir.path().join("postgres.log")).expect("log file");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path().join("postgres.log"), Some(uid), Some(gid))
                .expect("chown log");
        }
        let socket_dir = dir.path().display().to_string();
        let mut args: Vec<String> = Vec::new();
        let port = match tls {
            None => {
                args.extend(["-c".into(), "listen_addresses=".into()]);
                5432
            }
            Some((cert, key)) => {
                for (name, pem) in [("server.crt", cert), ("server.key", key)] {
                    let path = data.join(name);
                    std::fs::write(&path, pem).expect("writing the server certificate");
                    // The server refuses a key readable by others.
                    std::fs::set_permissions(
                        &path,
                        std::os::unix::fs::PermissionsExt::from_mode(0o600),
                    )
                    .expect("chmod");
                    if let Some((uid, gid)) = user {
                        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown");
                    }
                }
                // A free port: bound and released here; the server binds it right after.
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("a free port")
                    .port();
                args.extend(["-c".into(), "listen_addresses=127.0.0.1".into()]);
                args.extend(["-c".into(), "ssl=on".into()]);
                port
            }
        };
        // Small and bounded: the machine is shared.
        let child = command(&bin.join("postgres"), user)
            .args(["-D", &data.display().to_string(), "-k", &socket_dir])
            .args(["-p", &port.to_string()])
            .args(&args)
            .args(["-c", "max_connections=40"])
            .args(["-c", "shared_buffers=16MB", "-c", "max_wal_size=64MB"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting postgres");
        let mut pg = Postgres { child: Some(child), port, dir };
        pg.wait_ready();
        pg
    }

    /// The TCP port on 127.0.0.1 (servers started with [`Postgres::start_tls`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection string of the `postgres` database over the unix socket.
    pub fn url(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.path().display(),
            self.port
        )
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + PG_READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait"))
            {
                panic!("postgres exited during start with {status}:\n{}", self.log());
            }
            if postgres::Client::connect(&self.url(), postgres::NoTls).is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "postgres not ready:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50)); // poll interval
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// A client of the test's database.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).expect("connecting to postgres")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGQUIT: immediate shutdown; the data dir is thrown away anyway.
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(pid, libc::SIGQUIT) };
            }
            let _ = child.wait();
        }
    }
}

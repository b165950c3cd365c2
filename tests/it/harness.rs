//! Runs the real `hookwall serve` binary: writes a config into a temp directory (ledger there
//! too, unless a test puts it elsewhere), picks free loopback ports, starts the child with its
//! stderr in a file, waits for `/readyz` to answer 200, and kills the child on drop.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::client::{self, Response};
use crate::sign::{self, Provider};

/// How long a start may take until `/readyz` answers 200 (RocksDB open included).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop (SIGTERM) may take.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a test waits for a forward to reach the sink.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(20);

/// `server.io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // the names are the config spellings of `server.io`
pub enum Io {
    /// `"io_uring"`.
    IoUring,
    /// `"epoll"`.
    Epoll,
    /// `"auto"`.
    Auto,
}

impl Io {
    fn name(self) -> &'static str {
        match self {
            Io::IoUring => "io_uring",
            Io::Epoll => "epoll",
            Io::Auto => "auto",
        }
    }
}

/// One `[[source]]`.
#[derive(Debug, Clone)]
pub struct Source {
    /// Source id (path segment).
    pub id: &'static str,
    /// Tenant.
    pub tenant: &'static str,
    /// Provider.
    pub provider: Provider,
    /// `(key id, secret value)` in config order.
    pub secrets: Vec<(&'static str, &'static str)>,
    /// `event_types` allow-list; empty = none.
    pub event_types: Vec<&'static str>,
}

impl Source {
    /// The idempotency key hookwall gives event `id` of this source.
    pub fn key(&self, id: &str) -> String {
        format!("{}/{}/{id}", self.tenant, self.id)
    }
}

/// The checkout under test: `CARGO_MANIFEST_DIR` as cargo sets it when it runs the test, not the
/// one compiled in (a target directory shared by two checkouts can hand one checkout a test
/// binary built in the other, which would then read the other's files).
pub fn repo_root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), Into::into)
}

/// The signature vectors made by the providers' official libraries: the file named by
/// `HOOKWALL_OFFICIAL_VECTORS` when set (`.ci/run` regenerates them into a temporary file,
/// leaving the clone untouched), else the committed `tests/data/official_vectors.json`, made by
/// the same script and libraries (`tests/vectors/gen_vectors.py`).
pub fn official_vectors_path() -> std::path::PathBuf {
    std::env::var_os("HOOKWALL_OFFICIAL_VECTORS")
        .filter(|p| !p.is_empty())
        .map_or_else(|| repo_root().join("tests/data/official_vectors.json"), Into::into)
}

/// `stripe-a`: Stripe, one key `k1`.
pub fn stripe_a() -> Source {
    Source {
        id: "stripe-a",
        tenant: "acme",
        provider: Provider::Stripe,
        secrets: vec![("k1", sign::STRIPE_SECRET)],
        event_types: Vec::new(),
    }
}

/// `stripe-rot`: Stripe during a rotation, keys `k-old` (listed first) and `k-new`.
pub fn stripe_rot() -> Source {
    Source {
        id: "stripe-rot",
        tenant: "acme",
        provider: Provider::Stripe,
        secrets: vec![("k-old", sign::STRIPE_OLD_SECRET), ("k-new", sign::STRIPE_NEW_SECRET)],
        event_types: Vec::new(),
    }
}

/// `github-a`: GitHub, one key `k1`.
pub fn github_a() -> Source {
    Source {
        id: "github-a",
        tenant: "acme",
        provider: Provider::Github,
        secrets: vec![("k1", sign::GITHUB_SECRET)],
        event_types: Vec::new(),
    }
}

/// `standard-a`: Standard Webhooks, one key `k1`, another tenant.
pub fn standard_a() -> Source {
    Source {
        id: "standard-a",
        tenant: "globex",
        provider: Provider::Standard,
        secrets: vec![("k1", sign::STANDARD_SECRET)],
        event_types: Vec::new(),
    }
}

/// Everything a test may vary in the config.
#[derive(Debug, Clone)]
pub struct Setup {
    /// `server.io`.
    pub io: Io,
    /// `server.cores`.
    pub cores: usize,
    /// `server.body_bytes_max`.
    pub body_bytes_max: usize,
    /// `server.header_bytes_max`.
    pub header_bytes_max: usize,
    /// `[ledger] path`.
    pub ledger: PathBuf,
    /// Sources (all forward to the one destination `sink`).
    pub sources: Vec<Source>,
    /// `destination.url`.
    pub destination_url: String,
    /// `destination.attempts_max`.
    pub attempts_max: u32,
    /// `destination.backoff_min`.
    pub backoff_min: &'static str,
    /// `destination.backoff_max`.
    pub backoff_max: &'static str,
    /// `RLIMIT_NOFILE` (soft and hard) for the child, when set.
    pub nofile: Option<u64>,
    /// Extra environment variables for the child (applied last: they win).
    pub env: Vec<(String, String)>,
    /// Extra `serve` arguments (after `-c FILE`).
    pub serve_args: Vec<String>,
    /// TOML written after the `[server]` keys (e.g. a `[server.tls]` table).
    pub server_extra: String,
    /// `server.read_timeout`.
    pub read_timeout: &'static str,
    /// Extra TOML lines for one source: `(source id, "key = value")`.
    pub source_lines: Vec<(&'static str, String)>,
    /// The admin bearer token, written to `admin-token` beside the config (`admin.token_file`);
    /// `None`: no `[admin]` table (the admin API is disabled).
    pub admin_token: Option<String>,
    /// `destination.paused`.
    pub paused: bool,
    /// `destination.breaker_failures_max` (default: not written, hookwall's default).
    pub breaker_failures_max: Option<u32>,
    /// `destination.signing_secret` as an inline value (`whsec_…`).
    pub signing_secret: Option<String>,
    /// Extra TOML lines in `[ledger]` (e.g. retention).
    pub ledger_extra: String,
    /// `ledger.backend = "postgres"` with this `ledger.url` (the schema is migrated by
    /// `hookwall migrate` before each start); `None`: RocksDB at `ledger`.
    pub postgres: Option<String>,
    /// `ledger.lease` (PostgreSQL only).
    pub lease: &'static str,
    /// `destination.timeout`.
    pub destination_timeout: &'static str,
    /// Extra TOML lines of the destination table (e.g. `kind = "nats"`).
    pub destination_extra: String,
    /// `destination.concurrency_max`.
    pub concurrency_max: u32,
}

impl Setup {
    /// The default setup: the four sources above, ledger `dir/ledger`, 2 cores, fast retries.
    pub fn new(io: Io, dir: &Path, destination_url: &str) -> Setup {
        Setup {
            io,
            cores: 2,
            body_bytes_max: 1_048_576,
            header_bytes_max: 16_384,
            ledger: dir.join("ledger"),
            sources: vec![stripe_a(), stripe_rot(), github_a(), standard_a()],
            destination_url: destination_url.to_owned(),
            attempts_max: 5,
            backoff_min: "10ms",
            backoff_max: "50ms",
            nofile: None,
            env: Vec::new(),
            serve_args: Vec::new(),
            server_extra: String::new(),
            read_timeout: "10s",
            source_lines: Vec::new(),
            admin_token: None,
            paused: false,
            breaker_failures_max: None,
            signing_secret: None,
            ledger_extra: String::new(),
            postgres: crate::pg::current_url(),
            lease: "30s",
            destination_timeout: "5s",
            destination_extra: String::new(),
            concurrency_max: 16,
        }
    }

    /// The TOML text for this setup on the given ports.
    pub fn toml(&self, listen: SocketAddr, admin: SocketAddr) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "[server]");
        let _ = writeln!(t, "listen = {}", quote(&listen.to_string()));
        let _ = writeln!(t, "admin_listen = {}", quote(&admin.to_string()));
        let _ = writeln!(t, "cores = {}", self.cores);
        let _ = writeln!(t, "io = {}", quote(self.io.name()));
        let _ = writeln!(t, "body_bytes_max = {}", self.body_bytes_max);
        let _ = writeln!(t, "header_bytes_max = {}", self.header_bytes_max);
        let _ = writeln!(t, "read_timeout = {}\n", quote(self.read_timeout));
        let _ = writeln!(t, "{}", self.server_extra);
        let _ = writeln!(t, "[ledger]");
        let _ = writeln!(t, "path = {}", quote(&self.ledger.display().to_string()));
        let _ = writeln!(t, "sync = true");
        if let Some(url) = &self.postgres {
            let _ = writeln!(t, "backend = \"postgres\"");
            let _ = writeln!(t, "url = {}", quote(url));
            let _ = writeln!(t, "pool_size = 3");
            let _ = writeln!(t, "lease = {}", quote(self.lease));
        }
        let _ = writeln!(t, "{}\n", self.ledger_extra);
        for s in &self.sources {
            let _ = writeln!(t, "[[source]]");
            let _ = writeln!(t, "id = {}", quote(s.id));
            let _ = writeln!(t, "tenant = {}", quote(s.tenant));
            let _ = writeln!(t, "provider = {}", quote(s.provider.name()));
            let secrets: Vec<String> = s
                .secrets
                .iter()
                .map(|(id, value)| format!("{{ id = {}, value = {} }}", quote(id), quote(value)))
                .collect();
            let _ = writeln!(t, "secrets = [{}]", secrets.join(", "));
            if !s.event_types.is_empty() {
                let types: Vec<String> = s.event_types.iter().map(|t| quote(t)).collect();
                let _ = writeln!(t, "event_types = [{}]", types.join(", "));
            }
            for (_, line) in self.source_lines.iter().filter(|(id, _)| *id == s.id) {
                let _ = writeln!(t, "{line}");
            }
            let _ = writeln!(t, "destination = \"sink\"\n");
        }
        let _ = writeln!(t, "[[destination]]");
        let _ = writeln!(t, "id = \"sink\"");
        let _ = writeln!(t, "url = {}", quote(&self.destination_url));
        let _ = writeln!(t, "timeout = {}", quote(self.destination_timeout));
        let _ = writeln!(t, "{}", self.destination_extra);
        let _ = writeln!(t, "attempts_max = {}", self.attempts_max);
        let _ = writeln!(t, "backoff_min = {}", quote(self.backoff_min));
        let _ = writeln!(t, "backoff_max = {}", quote(self.backoff_max));
        let _ = writeln!(t, "concurrency_max = {}", self.concurrency_max);
        let _ = writeln!(t, "paused = {}", self.paused);
        if let Some(n) = self.breaker_failures_max {
            let _ = writeln!(t, "breaker_failures_max = {n}");
        }
        if let Some(secret) = &self.signing_secret {
            let _ = writeln!(t, "signing_secret = {{ value = {} }}", quote(secret));
        }
        t
    }
}

/// Runs `hookwall migrate -c config` and asserts it succeeded.
pub fn migrate(config: &Path) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(["migrate", "-c"])
        .arg(config)
        .env_remove("HOOKWALL_CONFIG")
        .output()
        .expect("running hookwall migrate");
    assert!(
        out.status.success(),
        "hookwall migrate failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A TOML basic string (JSON string escaping is a subset TOML accepts for these values).
fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

/// The config file for `setup`: its TOML plus, with an admin token, the `[admin]` table naming
/// the token file (written to `dir/admin-token`). Used by start and reload alike, so a reload
/// does not change `admin.token_file`.
pub fn full_toml(dir: &Path, setup: &Setup, ingress: SocketAddr, admin: SocketAddr) -> String {
    let mut toml = setup.toml(ingress, admin);
    if let Some(token) = &setup.admin_token {
        let token_path = dir.join("admin-token");
        std::fs::write(&token_path, format!("{token}\n")).expect("writing the token file");
        let _ =
            writeln!(toml, "\n[admin]\ntoken_file = {}", quote(&token_path.display().to_string()));
    }
    toml
}

/// Two free loopback ports: bound to port 0 together (so they differ), then released.
pub fn free_ports() -> (SocketAddr, SocketAddr) {
    let a = TcpListener::bind("127.0.0.1:0").expect("binding a probe port");
    let b = TcpListener::bind("127.0.0.1:0").expect("binding a probe port");
    (a.local_addr().expect("probe address"), b.local_addr().expect("probe address"))
}

/// Makes `command`'s child start with `RLIMIT_NOFILE` = `n` descriptors (soft and hard).
pub fn limit_nofile(command: &mut Command, n: u64) {
    let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
    // SAFETY: setrlimit between fork and exec touches only the child's own limits.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// A `serve` child of a test that expects it either to fail its start or to serve: started by
/// [`start_or_exit`], ended by [`Attempt::finish`].
pub struct Attempt {
    child: Child,
    log: PathBuf,
    /// `Some(status)` when the child exited before it logged `hookwall ready`; `None` when it
    /// is serving.
    pub exited: Option<ExitStatus>,
}

/// Spawns `command` (a `serve`; stdin and stdout null, stderr into `log`, `HOOKWALL_LOG=info`)
/// and waits until it logs `hookwall ready` or exits, whichever comes first. Panics, naming
/// `what`, when neither happens within [`READY_TIMEOUT`].
pub fn start_or_exit(command: &mut Command, log: &Path, what: &str) -> Attempt {
    let child = command
        .env("HOOKWALL_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("creating the log"))
        .spawn()
        .expect("spawning hookwall");
    let mut attempt = Attempt { child, log: log.to_owned(), exited: None };
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = attempt.child.try_wait().expect("try_wait") {
            attempt.exited = Some(status);
            return attempt;
        }
        if attempt.log().contains("hookwall ready") {
            return attempt;
        }
        assert!(Instant::now() < deadline, "{what}: neither ready nor exited:\n{}", attempt.log());
        std::thread::sleep(Duration::from_millis(10)); // poll interval
    }
}

impl Attempt {
    /// The child's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The child's exit status and its whole stderr: the status it exited with before
    /// `ready`, or, when it was serving, the one of its stop on SIGTERM (panics if that takes
    /// over [`STOP_TIMEOUT`]).
    pub fn finish(mut self) -> (ExitStatus, String) {
        let status = match self.exited {
            Some(status) => status,
            None => {
                let pid = i32::try_from(self.child.id()).expect("pid fits in i32");
                // SAFETY: kill(2) on our own child's pid; no memory is involved.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill(SIGTERM)");
                let deadline = Instant::now() + STOP_TIMEOUT;
                loop {
                    if let Some(status) = self.child.try_wait().expect("try_wait") {
                        break status;
                    }
                    if Instant::now() >= deadline {
                        let _ = self.child.kill();
                        let _ = self.child.wait();
                        panic!("no exit within {STOP_TIMEOUT:?} of SIGTERM:\n{}", self.log());
                    }
                    std::thread::sleep(Duration::from_millis(10)); // poll interval
                }
            }
        };
        (status, self.log())
    }
}

impl Drop for Attempt {
    /// A test that panics before [`Attempt::finish`] leaves no child running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A running `hookwall serve`.
pub struct Hookwall {
    child: Option<Child>,
    /// `server.listen`.
    pub ingress: SocketAddr,
    /// `server.admin_listen`.
    pub admin: SocketAddr,
    /// Where the child's stderr goes.
    pub stderr_path: PathBuf,
    /// The config file it was started with (a reload re-reads it).
    pub config_path: PathBuf,
    /// The setup it runs.
    pub setup: Setup,
}

impl Hookwall {
    /// Writes the config into `dir`, starts the binary and waits for `/readyz` = 200.
    ///
    /// The ports are free when chosen, but another test's client socket may take one as its
    /// source port before hookwall binds it (the suite opens thousands): a start refused for a
    /// port in use is retried on new ports, a few times.
    pub fn start(dir: &Path, setup: &Setup) -> Hookwall {
        for _ in 0..4 {
            match Hookwall::try_start(dir, setup) {
                Ok(hw) => return hw,
                Err(log) if log.contains("is already in use") => {}
                Err(log) => panic!("hookwall exited during start; stderr:\n{log}"),
            }
        }
        match Hookwall::try_start(dir, setup) {
            Ok(hw) => hw,
            Err(log) => panic!("hookwall exited during start, five times; stderr:\n{log}"),
        }
    }

    /// [`Hookwall::start`] once; `Err(its log)` if the child exits during start.
    fn try_start(dir: &Path, setup: &Setup) -> Result<Hookwall, String> {
        let (ingress, admin) = free_ports();
        let n = next_start_number();
        let config_path = dir.join(format!("hookwall-{n}.toml"));
        let toml = full_toml(dir, setup, ingress, admin);
        std::fs::write(&config_path, toml).expect("writing the config");
        if setup.postgres.is_some() {
            migrate(&config_path);
        }
        let stderr_path = dir.join(format!("hookwall-{n}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("creating the stderr file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_hookwall"));
        if let Some(n) = setup.nofile {
            limit_nofile(&mut command, n);
        }
        let child = command
            .arg("serve")
            .arg("-c")
            .arg(&config_path)
            .current_dir(dir)
            .env(
                "HOOKWALL_LOG",
                std::env::var("HOOKWALL_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .env_remove("HOOKWALL_CONFIG")
            .envs(setup.env.iter().map(|(k, v)| (k, v)))
            .args(&setup.serve_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawning hookwall");
        let setup = setup.clone();
        let mut hw =
            Hookwall { child: Some(child), ingress, admin, stderr_path, config_path, setup };
        hw.wait_ready()?;
        if hw.setup.postgres.is_some() {
            // A postgres variant that silently ran on RocksDB would prove nothing.
            assert!(hw.stderr().contains("ledger_postgres"), "not on PostgreSQL:\n{}", hw.stderr());
        }
        Ok(hw)
    }

    /// Polls `/readyz` until 200; `Err(the exit status and log)` if the child exits, a panic
    /// with the log if the deadline passes.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait"))
            {
                self.child = None;
                return Err(format!("{status}\n{}", self.stderr()));
            }
            if let Ok(r) = client::try_get(self.admin, "/readyz") {
                if r.status == 200 {
                    return Ok(());
                }
            }
            assert!(
                Instant::now() < deadline,
                "hookwall not ready within {READY_TIMEOUT:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20)); // poll interval, not a wait for an outcome
        }
    }

    /// Descriptors the child has open now (entries of `/proc/PID/fd`).
    pub fn open_fds(&self) -> usize {
        let pid = self.child.as_ref().expect("a running child").id();
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
    }

    /// Runs the child out of descriptors now: its soft `RLIMIT_NOFILE` becomes at most 3 (its
    /// lowest free descriptor number, if lower), below every descriptor past stdin, stdout
    /// and stderr, so its next `socket`/`open`/`accept` fails with `EMFILE` whichever of its
    /// descriptors closes meanwhile (the limit as the lowest free number let a descriptor
    /// closed later, say a test client's connection, be taken again: a CI run's connect
    /// succeeded). prlimit(2); the hard limit stays, and nothing in the child raises the soft
    /// one after start. Returns the previous limits, for [`Hookwall::restore_nofile`].
    pub fn exhaust_descriptors(&self) -> libc::rlimit {
        let pid = self.child.as_ref().expect("a running child").id();
        let mut used: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("reading the child's descriptors")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        used.sort_unstable();
        let lowest_free =
            (0..).zip(&used).find(|(n, fd)| n != *fd).map_or(used.len() as u64, |(n, _)| n);
        let old = self.prlimit_nofile(None);
        let cur = lowest_free.min(3);
        self.prlimit_nofile(Some(libc::rlimit { rlim_cur: cur, rlim_max: old.rlim_max }));
        old
    }

    /// Gives the child back the descriptor limits [`Hookwall::exhaust_descriptors`] returned.
    pub fn restore_nofile(&self, old: libc::rlimit) {
        self.prlimit_nofile(Some(old));
    }

    /// prlimit(2) on the child's `RLIMIT_NOFILE`: sets `new` when given; returns the limits
    /// in force before.
    fn prlimit_nofile(&self, new: Option<libc::rlimit>) -> libc::rlimit {
        let pid = self.child.as_ref().expect("a running child").id();
        let pid = i32::try_from(pid).expect("pid fits in i32");
        let new = new.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
        let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `new` is null or points at a live struct, `old` is a valid struct to write.
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, new, &raw mut old) };
        assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
        old
    }

    /// The child's stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Rewrites the config file for `setup` (same ports), sends SIGHUP and waits until the
    /// reload's outcome is logged; returns whether it was applied (`reloaded`) or refused
    /// (`reload_rejected`).
    pub fn reload(&mut self, setup: &Setup) -> bool {
        let dir = self.config_path.parent().expect("the config is in the test's dir");
        std::fs::write(&self.config_path, full_toml(dir, setup, self.ingress, self.admin))
            .expect("rewriting the config");
        let outcomes = |log: &str| {
            let applied = log.matches("configuration reloaded").count();
            let refused = log.matches("configuration reload refused").count();
            (applied, refused)
        };
        let before = outcomes(&self.stderr());
        self.signal(libc::SIGHUP);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let now = outcomes(&self.stderr());
            if now.0 > before.0 {
                self.setup = setup.clone();
                return true;
            }
            if now.1 > before.1 {
                return false;
            }
            assert!(Instant::now() < deadline, "no reload outcome logged:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20)); // poll interval
        }
    }

    /// SIGTERM, then waits (bounded) for the exit; returns its status.
    pub fn stop(&mut self) -> ExitStatus {
        self.terminate();
        self.wait_exit(STOP_TIMEOUT)
    }

    /// Sends SIGTERM without waiting.
    pub fn terminate(&mut self) {
        self.signal(libc::SIGTERM);
    }

    /// The child's peak resident set (`VmHWM` in `/proc/PID/status`), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let child = self.child.as_ref().expect("hookwall is running");
        peak_rss_kib(child.id()).expect("VmHWM in /proc/PID/status")
    }

    /// The child's thread count now (`Threads:` in `/proc/PID/status`).
    pub fn threads(&self) -> usize {
        let child = self.child.as_ref().expect("hookwall is running");
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .expect("reading /proc/PID/status");
        let line = status.lines().find_map(|l| l.strip_prefix("Threads:")).expect("Threads:");
        line.trim().parse().expect("a thread count")
    }

    /// Sends `signal` to the child without waiting.
    pub fn signal(&self, signal: i32) {
        let child = self.child.as_ref().expect("hookwall is running");
        let pid = i32::try_from(child.id()).expect("pid fits in i32");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({signal}) failed");
    }

    /// Waits (bounded by `timeout`) for the child to exit on its own; returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("hookwall is running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("hookwall did not exit within {timeout:?}; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20)); // poll interval
        }
    }

    /// SIGKILL (kill -9) and reap.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("hookwall is running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaping hookwall");
    }

    /// `POST /webhooks/{source}` with `headers` and `body` on a fresh connection.
    pub fn post(&self, source: &str, headers: &[(String, String)], body: &[u8]) -> Response {
        client::send_one(self.ingress, "POST", &format!("/webhooks/{source}"), headers, body)
    }

    /// A delivery of event `id` with `body` to `source`, signed now with the source's first key.
    pub fn deliver(&self, source: &Source, id: &str, body: &[u8]) -> Response {
        self.deliver_at(source, id, body, sign::now_unix_s())
    }

    /// As [`Hookwall::deliver`], signed at `t`.
    pub fn deliver_at(&self, source: &Source, id: &str, body: &[u8], t: i64) -> Response {
        let headers = sign::headers(source.provider, source.secrets[0].1, id, t, body);
        self.post(source.id, &headers, body)
    }

    /// Waits (bounded: 30 s) until this hookwall holds no ingress connection and no
    /// connection to its ingress port waits in an accept queue or a handshake, on two polls in a
    /// row (a connection taken off the queue is counted open a moment later). After a flood of
    /// connections, this is the moment none of them can still take a limit place.
    pub fn wait_until_ingress_drained(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut quiet_polls = 0;
        while quiet_polls < 2 {
            let text = String::from_utf8_lossy(&self.admin_get("/metrics").body).into_owned();
            let open = crate::metrics::sample(&text, "hookwall_ingress_connections_open", &[]);
            let pending = pending_connections(self.ingress.port());
            quiet_polls = if open == Some(0.0) && pending == 0 { quiet_polls + 1 } else { 0 };
            assert!(
                Instant::now() < deadline,
                "the ingress drains within 30 s: {open:?} connections open, {pending} pending"
            );
            std::thread::sleep(Duration::from_millis(20)); // poll interval
        }
    }

    /// `GET path` on the admin listener.
    pub fn admin_get(&self, path: &str) -> Response {
        client::get(self.admin, path)
    }
}

impl Drop for Hookwall {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A failed test shows what the server logged: its stderr lives in a temp dir that goes
        // with the test, and a CI failure is otherwise all that is left of it.
        if std::thread::panicking() {
            let log = self.stderr();
            let tail: Vec<&str> = log.lines().rev().take(STDERR_TAIL_LINES).collect();
            eprintln!(
                "--- hookwall (ingress {}) stderr, last {} lines ---",
                self.ingress,
                tail.len()
            );
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Lines of a server's stderr a failed test prints.
const STDERR_TAIL_LINES: usize = 40;

/// Peak resident set of process `pid` (`VmHWM` in `/proc/PID/status`), in KiB; `None` when
/// the process is gone or has no address space (a zombie).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn next_start_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A temp dir, a sink and a running hookwall with the default setup; dropped hookwall first.
pub struct Fixture {
    /// The running binary.
    pub hw: Hookwall,
    /// The destination.
    pub sink: crate::sink::Sink,
    /// Holds config, ledger and logs (removed on drop, after the child is gone).
    pub dir: tempfile::TempDir,
}

impl Fixture {
    /// Default setup on `io`, destination answering by `script`.
    pub fn new(io: Io, script: crate::sink::Script) -> Fixture {
        Fixture::with(io, script, |_| {})
    }

    /// As [`Fixture::new`], with `edit` applied to the setup first.
    pub fn with(io: Io, script: crate::sink::Script, edit: impl FnOnce(&mut Setup)) -> Fixture {
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let sink = crate::sink::Sink::start(script);
        let mut setup = Setup::new(io, dir.path(), &sink.url());
        edit(&mut setup);
        let hw = Hookwall::start(dir.path(), &setup);
        Fixture { hw, sink, dir }
    }

    /// Sends a fresh Stripe event to `stripe-a`, waits for its forward, then waits until no
    /// source has an unsettled event (`hookwall_inbox_pending` 0). Afterwards every forward that
    /// earlier admissions caused has reached the sink: a test counts forwards after this barrier
    /// instead of waiting for their absence.
    pub fn flush_with_marker(&self) {
        let source = stripe_a();
        let id = sign::unique_id("evt_marker");
        let body = sign::body(Provider::Stripe, &id, "marker");
        let r = self.hw.deliver(&source, &id, &body);
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "marker: {r}");
        self.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
        for source in &self.hw.setup.sources {
            let labels = [("source", source.id)];
            crate::metrics::wait_for_sample(
                &self.hw,
                "hookwall_inbox_pending",
                &labels,
                0.0,
                FORWARD_TIMEOUT,
            );
        }
    }
}

/// Connections to IPv4 `port` the server has not accepted yet: the accept queues of the
/// sockets listening on it (the `rx_queue` of LISTEN rows in `/proc/net/tcp`, one row per core
/// with `SO_REUSEPORT`) plus handshakes not complete on its side (SYN_RECV rows: a client whose
/// final ACK was dropped at a full queue believes it is connected, and the connection joins a
/// queue later).
pub fn pending_connections(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp reads");
    table
        .lines()
        .skip(1)
        .filter_map(|row| {
            let f: Vec<&str> = row.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit_once(':')?.1, 16).ok()?;
            if local_port != port {
                return None;
            }
            match *f.get(3)? {
                "0A" => u64::from_str_radix(f.get(4)?.split_once(':')?.1, 16).ok(),
                "03" => Some(1),
                _ => None,
            }
        })
        .sum()
}

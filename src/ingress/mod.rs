//! Ingress: per-core accept/read/write loops. Two back ends — io_uring ([`uring`]) and epoll
//! ([`epoll`]) — drive the same sans-IO connection code ([`conn`]). Each core owns one
//! `SO_REUSEPORT` listening socket, so the kernel spreads connections over cores and cores
//! share nothing (invariant 4).

pub mod conn;
pub mod epoll;
pub mod gate;
pub mod overload;
pub mod startup;
pub mod uring;

use std::io;
use std::net::{SocketAddr, TcpListener};

use crate::config::IoMode;

/// The back end the cores run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// io_uring (one accept at a time, multishot receive, provided-buffer ring).
    IoUring,
    /// epoll via a tokio `current_thread` runtime per core.
    Epoll,
}

impl Backend {
    /// Name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Backend::IoUring => "io_uring",
            Backend::Epoll => "epoll",
        }
    }
}

/// Chooses the back end for `mode`, with the reason (logged at start).
///
/// # Errors
/// `io = "io_uring"` when io_uring is unusable here: the probe's reason.
pub fn choose(mode: IoMode) -> Result<(Backend, String), String> {
    match mode {
        IoMode::Epoll => Ok((Backend::Epoll, "server.io = \"epoll\"".to_owned())),
        IoMode::IoUring => uring::probe()
            .map(|()| (Backend::IoUring, "server.io = \"io_uring\"".to_owned()))
            .map_err(|why| format!("server.io = \"io_uring\" but io_uring is unusable: {why}")),
        IoMode::Auto => Ok(match uring::probe() {
            Ok(()) => (Backend::IoUring, "io_uring probe succeeded".to_owned()),
            Err(why) => (Backend::Epoll, format!("io_uring unavailable ({why}); falling back")),
        }),
    }
}

/// Binds `count` `SO_REUSEPORT` listeners on `addr`. When `addr` has port 0 the first socket
/// picks a port and the others join it.
///
/// `SO_REUSEPORT` would also let a second hookwall (or anything else running as the same
/// user) join the group silently, and the kernel would then split deliveries between two
/// ledgers — one event admitted twice. So the address is first bound without
/// `SO_REUSEPORT`: that fails with "address in use" when anyone listens there already.
///
/// # Errors
/// Socket, bind or listen failures (e.g. the address is in use).
pub fn bind_listeners(addr: SocketAddr, count: usize) -> io::Result<Vec<TcpListener>> {
    if addr.port() != 0 {
        let probe = socket(addr)?;
        probe.set_reuse_address(true)?;
        probe.bind(&addr.into()).map_err(|e| in_use(addr, e))?;
        drop(probe);
    }
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count {
        let socket = socket(addr)?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&addr.into()).map_err(|e| in_use(addr, e))?;
        socket.listen(4096)?;
        let listener: TcpListener = socket.into();
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

fn socket(addr: SocketAddr) -> io::Result<socket2::Socket> {
    socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
}

/// A failed bind of `addr`, naming the address: "address in use" with its likely cause, any
/// other error (an address no interface has, a privileged port) after the address.
pub(crate) fn in_use(addr: SocketAddr, e: io::Error) -> io::Error {
    let why = if e.kind() == io::ErrorKind::AddrInUse {
        format!("{addr} is already in use (another hookwall, or another server?)")
    } else {
        format!("cannot listen on {addr}: {e}")
    };
    io::Error::new(e.kind(), why)
}

/// Accept failures (EMFILE, ENFILE, ENOMEM, …) are logged at most this often.
const ACCEPT_ERROR_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Rate-limits the accept-failure log of one core, on either back end: a descriptor shortage
/// fails every accept, and logging each one would flood the log and burn the core.
pub(crate) struct AcceptErrors {
    failed: u64,
    last_logged: Option<std::time::Instant>,
}

impl AcceptErrors {
    pub(crate) fn new() -> AcceptErrors {
        AcceptErrors { failed: 0, last_logged: None }
    }

    /// Counts one failure and logs it (with the count since the last line) at most every
    /// `ACCEPT_ERROR_LOG_EVERY`.
    pub(crate) fn record(&mut self, error: &io::Error, now: std::time::Instant) {
        self.failed += 1;
        if self.last_logged.is_some_and(|t| now.duration_since(t) < ACCEPT_ERROR_LOG_EVERY) {
            return;
        }
        tracing::warn!(code = "accept_failed", error = %error, failed = self.failed, "accept failed; pausing accepts briefly (logged at most every 10 s)");
        self.failed = 0;
        self.last_logged = Some(now);
    }
}

/// File descriptors kept back from connections under a large limit (or a quarter of the
/// limit, if smaller, but never less than what is open at start and the cores' and
/// dispatcher's own: [`cap_for`]): what hookwall opens after start — the ledger's table files
/// as it grows (RocksDB's `max_open_files`, 512), the dispatcher's outbound connections,
/// admin connections, logs. Under a small limit only the quarter covers those.
const FDS_RESERVED: u64 = 1024;

/// Descriptors kept back for each ingress core: what it opens while it sets up (measured with
/// two cores: 4 each on io_uring, 6 on epoll, whose tokio runtime has its own), one to accept a
/// connection and close it at once at its cap, and one spare.
const FDS_PER_CORE: u64 = 8;

/// The soft `RLIMIT_NOFILE` in force (file descriptors; 0, no bound known, when it cannot be
/// read). `serve` raises it ([`raise_fd_limit`]) before it starts the dispatcher, which reads
/// it here for its connection budget.
pub fn descriptor_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a valid rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return 0;
    }
    limit.rlim_cur
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit in force
/// afterwards (file descriptors; 0 when it cannot be read). Used by `serve` and `loadgen`.
pub fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
    }
    limit.rlim_cur
}

/// The connection cap [`connections_per_core`] chose, with what it was chosen from (logged at
/// start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionCap {
    /// Connections each core may admit, at least 1.
    pub per_core: usize,
    /// Refused connections each core may hold open on top of `per_core` to answer them `503
    /// overloaded` (a quarter of its descriptors, at most
    /// [`crate::limits::REFUSING_CONNECTIONS_PER_CORE_MAX`]; 0 under a tiny limit, where
    /// every refused connection is closed at once).
    pub refusing: usize,
    /// The soft `RLIMIT_NOFILE` (descriptors) after raising it to the hard limit.
    pub limit: u64,
    /// Descriptors kept back from connections.
    pub kept_back: u64,
    /// Descriptors open when the cap was chosen (the ledger, listeners, the dispatcher's
    /// runtime), counted again when a reload changes the destinations' connections.
    pub open: u64,
    /// Ingress cores sharing the connections.
    pub cores: u64,
}

impl ConnectionCap {
    /// Whether the limit leaves fewer than [`crate::limits::CONNECTIONS_PER_CORE_LOW`]
    /// connections per core (or none: the cap is then 1 and accepts may fail for want of a
    /// descriptor), which `serve` warns about.
    pub fn is_low(&self) -> bool {
        self.per_core < crate::limits::CONNECTIONS_PER_CORE_LOW
    }

    /// The cap again under the same limit, open descriptors and cores, with `outbound`
    /// dispatcher connections at most instead: what a reload that changes the destinations'
    /// `concurrency_max` or `pipeline` leaves for ingress. Its `per_core` may exceed this
    /// cap's (fewer outbound connections), which the cores, sized at start, cannot hold more
    /// than; the caller takes the smaller.
    pub fn with_outbound(&self, outbound: usize) -> ConnectionCap {
        cap_for(self.limit, self.open, self.cores, outbound as u64)
    }

    /// The connections each core admits under this cap when the cores were set up with the
    /// cap `started` (a reload's figure for `descriptor_limit_low`): its share of
    /// [`ConnectionCap::total_max`], which is less than this cap's `per_core` would say when
    /// the cores keep the refusals they started with.
    pub fn per_core_in_force(&self, started: &ConnectionCap) -> usize {
        self.total_max(0, started) / usize::try_from(self.cores).unwrap_or(1).max(1)
    }

    /// The most connections over all cores (the [`crate::ingress::gate::Gate`]'s total) under
    /// this cap, for `server.connections_max` = `configured` (0 = not set) and cores set up
    /// with the cap `started` (each admitting `started.per_core` and holding
    /// `started.refusing` refused connections): every core at what this cap's share leaves
    /// beside those refusals, never more than `started.per_core`, or `configured` when it is
    /// set and smaller. So a reload that gives the destinations more connections takes their
    /// descriptors from ingress, whose cores were sized at start, instead of both running out
    /// (`EMFILE`).
    pub fn total_max(&self, configured: usize, started: &ConnectionCap) -> usize {
        let cores = usize::try_from(self.cores).unwrap_or(usize::MAX);
        let share = self.per_core.saturating_add(self.refusing);
        let per_core = share.saturating_sub(started.refusing).clamp(1, started.per_core.max(1));
        let derived = per_core.saturating_mul(cores);
        match configured {
            0 => derived,
            n => n.min(derived),
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (a server's usual start-up step) and
/// returns how many connections each of `cores` cores may hold: `CONNECTIONS_PER_CORE_MAX`,
/// or less when the descriptor limit cannot cover it. At the cap, new connections are
/// refused like those past the total (answered 503 `overloaded`, [`conn::CoreCtx::enter`]) instead
/// of running the process out of descriptors.
///
/// Called once everything but the cores is open (ledger, admin listener, dispatcher), with
/// `outbound` = the most connections the dispatcher opens (see
/// [`crate::config::DestinationConfig::connections_max`]); the arithmetic is
/// [`cap_for`]'s.
pub fn connections_per_core(cores: usize, outbound: usize) -> ConnectionCap {
    let limit = raise_fd_limit();
    cap_for(limit, open_fds(), cores as u64, outbound as u64)
}

/// The most connections the destinations may open together under a descriptor `limit`: the
/// quarter of it [`cap_for`] counts for them (an unknown limit, 0: no bound). The dispatcher is
/// held to it ([`crate::config::fit_connections`]), so its connects cannot fail for want of a
/// descriptor that ingress was given.
pub fn destination_connections_max(limit: u64) -> usize {
    match limit {
        0 => usize::MAX,
        n => usize::try_from(n / 4).unwrap_or(usize::MAX).max(1),
    }
}

/// The connection cap under a descriptor `limit` with `open` descriptors open, for `cores`
/// cores and `outbound` dispatcher connections at most. Kept back: [`FDS_RESERVED`] or a
/// quarter of the limit, whichever is smaller, but never less than what is needed besides
/// connections — what is `open`, [`FDS_PER_CORE`] per core and the outbound connections, the
/// latter counted up to a quarter of the limit (a destination allowed more connections than
/// the whole limit must not shrink the ingress cap to nothing; the two then share it) — so
/// under a small limit the cap is reached before an accept fails for want of a descriptor.
/// Each core's share of the rest is split between the connections it admits (`per_core`) and
/// the refused ones it holds for their 503 (`refusing`: a quarter of the share, at most
/// [`crate::limits::REFUSING_CONNECTIONS_PER_CORE_MAX`]), so a core at its cap still answers
/// the next connection instead of resetting it, within the descriptors.
fn cap_for(limit: u64, open: u64, cores: u64, outbound: u64) -> ConnectionCap {
    let cores = cores.max(1);
    let needed = open
        .saturating_add(cores.saturating_mul(FDS_PER_CORE))
        .saturating_add(outbound.min(limit / 4));
    let kept_back = FDS_RESERVED.min(limit / 4).max(needed);
    let share = usize::try_from(limit.saturating_sub(kept_back) / cores).unwrap_or(usize::MAX);
    let refusing = (share / 4).min(crate::limits::REFUSING_CONNECTIONS_PER_CORE_MAX);
    ConnectionCap {
        per_core: (share - refusing).clamp(1, crate::limits::CONNECTIONS_PER_CORE_MAX),
        refusing,
        limit,
        kept_back,
        open,
        cores,
    }
}

/// Descriptors this process has open (entries of `/proc/self/fd`, less the one reading it);
/// 0 when it cannot be read.
fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count().saturating_sub(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused connections a core may hold for their 503 when descriptors allow.
    const REFUSING: usize = crate::limits::REFUSING_CONNECTIONS_PER_CORE_MAX;

    #[test]
    fn open_descriptors_are_counted_from_proc() {
        let before = open_fds();
        let files: Vec<std::fs::File> =
            (0..5).map(|_| std::fs::File::open("/proc/self/stat").expect("opens")).collect();
        // Other test threads may open files meanwhile: at least the five held here.
        assert!(open_fds() >= before + 5, "{before} then {}", open_fds());
        drop(files);
    }

    /// Under a small limit the descriptors already open, the cores' and the dispatcher's are
    /// kept back (a quarter of 128 is fewer than the ~40 open at rest), so the cap is reached
    /// before an accept fails; a quarter of each core's share is for refused connections.
    #[test]
    fn a_small_limit_keeps_back_what_is_open_the_cores_and_the_dispatcher() {
        let cap = cap_for(128, 40, 2, 16);
        assert_eq!(cap.kept_back, 40 + 2 * FDS_PER_CORE + 16);
        let share = (128 - 72) / 2;
        assert_eq!((cap.per_core, cap.refusing), (share - share / 4, share / 4));
        assert!(cap.is_low());
    }

    /// A reload that raises the dispatcher's connections keeps back their descriptors from
    /// the total; one that lowers them again gives back no more than the cores were set up
    /// with. An explicit `connections_max` is kept unless the descriptors leave less.
    #[test]
    fn more_destination_connections_lower_the_total() {
        let start = cap_for(256, 40, 1, 2);
        assert_eq!((start.kept_back, start.per_core, start.refusing), (64, 144, 48));
        assert_eq!(start.total_max(0, &start), 144);
        let more = start.with_outbound(64);
        assert_eq!((more.kept_back, more.per_core + more.refusing), (40 + FDS_PER_CORE + 64, 144));
        // The core still holds the 48 refusals it was set up with: 144 - 48 admitted.
        assert_eq!(more.total_max(0, &start), 96);
        assert_eq!(more.total_max(50, &start), 50, "a smaller explicit total stays");
        assert_eq!(more.total_max(100, &start), 96, "a larger one is cut to the descriptors");
        let fewer = start.with_outbound(0);
        assert_eq!(fewer.total_max(0, &start), 144, "not past what the cores hold");
        let two = cap_for(256, 40, 2, 2);
        let two_more = two.with_outbound(64);
        let share = two_more.per_core + two_more.refusing;
        assert_eq!(two_more.total_max(0, &two), (share - two.refusing) * 2, "every core counts");
    }

    /// A large limit keeps back 1024 (RocksDB's table files, logs, the dispatcher) and the
    /// rest goes to connections, up to the per-core maximum.
    #[test]
    fn a_large_limit_keeps_back_1024() {
        let cap = cap_for(8192, 40, 2, 64);
        assert_eq!((cap.kept_back, cap.refusing), (1024, REFUSING));
        assert_eq!(cap.per_core, (8192 - 1024) / 2 - REFUSING);
        assert!(!cap.is_low());
        let huge = cap_for(1 << 20, 40, 2, 64);
        assert_eq!(huge.per_core, crate::limits::CONNECTIONS_PER_CORE_MAX);
    }

    /// A destination allowed as many connections as the whole limit counts for a quarter of
    /// it, instead of ingress getting one connection per core; the dispatcher is held to that
    /// quarter ([`destination_connections_max`], `config::fit_connections`).
    #[test]
    fn outbound_connections_count_up_to_a_quarter_of_the_limit() {
        let cap = cap_for(1024, 40, 2, 1024);
        assert_eq!(cap.kept_back, 40 + 2 * FDS_PER_CORE + 256);
        assert_eq!(cap.per_core, (1024 - 312) / 2 - REFUSING);
    }

    /// After a reload that gives the destinations more connections, the per-core figure in
    /// force is the cores' share of the new total, not what a core started under the new cap
    /// would admit: the running cores keep the refusal budget they started with. (The reload's
    /// `descriptor_limit_low` warning once gave the latter.)
    #[test]
    fn a_reload_reports_the_per_core_figure_in_force() {
        for cores in [1, 2] {
            let started = cap_for(256, 40, cores, 2);
            let reloaded = started.with_outbound(64);
            let in_force = reloaded.per_core_in_force(&started);
            assert_eq!(in_force * cores as usize, reloaded.total_max(0, &started));
            let share = reloaded.per_core + reloaded.refusing;
            assert_eq!(in_force, share - started.refusing, "{cores} cores");
            assert_ne!(in_force, reloaded.per_core, "{cores} cores: the refusals differ");
            assert_eq!(started.per_core_in_force(&started), started.per_core);
        }
        assert_eq!(cap_for(0, 40, 0, 2).per_core_in_force(&cap_for(0, 40, 0, 2)), 1);
    }

    /// No room at all (or an unreadable limit, 0): one connection per core, reported low.
    #[test]
    fn no_room_leaves_one_connection_per_core_reported_low() {
        for (limit, open) in [(40, 39), (40, 400), (0, 40)] {
            let cap = cap_for(limit, open, 2, 16);
            assert_eq!((cap.per_core, cap.refusing), (1, 0), "limit {limit}, {open} open");
            assert!(cap.is_low());
        }
        assert_eq!(cap_for(u64::MAX, u64::MAX, 0, u64::MAX).per_core, 1, "no overflow");
    }
}

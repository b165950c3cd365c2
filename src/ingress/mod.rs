//! Ingress: per-core accept/read/write loops. Two back ends — io_uring ([`uring`]) and epoll
//! ([`epoll`]) — drive the same sans-IO connection code ([`conn`]). Each core owns one
//! `SO_REUSEPORT` listening socket, so the kernel spreads connections over cores and cores
//! share nothing (invariant 4).

pub mod conn;
pub mod epoll;
pub mod uring;

use std::io;
use std::net::{SocketAddr, TcpListener};

use crate::config::IoMode;

/// The back end the cores run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// io_uring (multishot accept + receive, provided-buffer ring).
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
/// # Errors
/// Socket, bind or listen failures (e.g. the address is in use).
pub fn bind_listeners(addr: SocketAddr, count: usize) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&addr.into())?;
        socket.listen(4096)?;
        let listener: TcpListener = socket.into();
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

//! The io_uring back end: one ring per core (`SINGLE_ISSUER | DEFER_TASKRUN`), one accept at a
//! time on the core's own `SO_REUSEPORT` socket, a multishot receive per connection into a
//! provided-buffer ring, sends from the connection's output, an eventfd that the shard writers
//! ring when a commit answers one of this core's connections, and a 200 ms tick for
//! `read_timeout`. All request logic is in [`super::conn`]; this file only moves bytes.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use io_uring::types::{BufRingEntry, Fd, Timespec};
use io_uring::{cqueue, opcode, squeue, IoUring};

use super::conn::{Conn, CoreCtx, Received, Step};
use super::gate::Ticket;
use super::startup::Startup;
use crate::answer::Answer;
use crate::clock;
use crate::ledger::{Decision, Reply};
use crate::limits::{RECV_BUFFERS_PER_CORE, RECV_BUFFER_BYTES};

/// Submission queue entries per ring.
const RING_ENTRIES: u32 = 4096;
/// The provided-buffer group id used for receives.
const BUFFER_GROUP: u16 = 0;
/// How often connections are checked for `read_timeout` and the loop for shutdown.
const TICK_NS: u32 = 200_000_000;
/// How long a stopping core keeps serving the requests in progress before it leaves.
const DRAIN_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a stopping core waits for the kernel to finish with its buffers.
const QUIESCE_MAX: std::time::Duration = std::time::Duration::from_secs(1);

const KIND_ACCEPT: u64 = 1;
const KIND_RECV: u64 = 2;
const KIND_SEND: u64 = 3;
const KIND_WAKE: u64 = 4;
const KIND_TICK: u64 = 5;
const KIND_CANCEL: u64 = 6;

/// Packs an operation kind, a connection slot and its generation into `user_data`.
fn user_data(kind: u64, slot: usize, generation: u32) -> u64 {
    (kind << 60) | ((slot as u64) << 32) | u64::from(generation)
}

fn unpack(ud: u64) -> (u64, usize, u32) {
    let slot = usize::try_from((ud >> 32) & 0x0fff_ffff).expect("28 bits fit in usize");
    (ud >> 60, slot, (ud & 0xffff_ffff) as u32)
}

/// Builds a ring with the flags this back end needs.
fn build_ring() -> io::Result<IoUring> {
    IoUring::builder().setup_single_issuer().setup_defer_taskrun().build(RING_ENTRIES)
}

/// Checks that io_uring works here with everything this back end uses: ring setup with
/// `SINGLE_ISSUER | DEFER_TASKRUN` (6.1+), the opcodes, and a provided-buffer ring (5.19+).
/// Docker's default seccomp profile and `kernel.io_uring_disabled` make the first step fail
/// with EPERM.
///
/// # Errors
/// Why io_uring cannot be used, for the start-up log.
pub fn probe() -> Result<(), String> {
    let ring =
        build_ring().map_err(|e| format!("io_uring_setup(SINGLE_ISSUER|DEFER_TASKRUN): {e}"))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| format!("register_probe: {e}"))?;
    for (name, code) in [
        ("accept", opcode::Accept::CODE),
        ("recv", opcode::RecvMulti::CODE),
        ("send", opcode::Send::CODE),
        ("read", opcode::Read::CODE),
        ("timeout", opcode::Timeout::CODE),
        ("async_cancel", opcode::AsyncCancel::CODE),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("opcode {name} not supported"));
        }
    }
    let bufs = BufRing::new(&ring, 8, 64).map_err(|e| format!("register_buf_ring: {e}"))?;
    bufs.unregister(&ring);
    Ok(())
}

/// A provided-buffer ring: `count` buffers of `size` bytes the kernel picks from for receives.
struct BufRing {
    entries: *mut BufRingEntry,
    entries_layout: std::alloc::Layout,
    buffers: Box<[u8]>,
    count: u16,
    size: usize,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring, count: u16, size: usize) -> io::Result<BufRing> {
        assert!(count.is_power_of_two(), "buffer ring size must be a power of two");
        let bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        let entries_layout = std::alloc::Layout::from_size_align(bytes, 4096)
            .expect("page-aligned layout of a small ring is valid");
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(entries_layout) }.cast::<BufRingEntry>();
        if entries.is_null() {
            std::alloc::handle_alloc_error(entries_layout);
        }
        let buffers = vec![0u8; usize::from(count) * size].into_boxed_slice();
        let mut bufs = BufRing { entries, entries_layout, buffers, count, size, tail: 0 };
        // SAFETY: `entries` stays allocated (and `buffers` in place) until `unregister` +
        // drop, which happen after the ring stops using them.
        let registered = unsafe {
            ring.submitter().register_buf_ring_with_flags(entries as u64, count, BUFFER_GROUP, 0)
        };
        if let Err(e) = registered {
            // SAFETY: allocated above with this layout and not registered.
            unsafe { std::alloc::dealloc(bufs.entries.cast(), bufs.entries_layout) };
            bufs.entries = std::ptr::null_mut();
            return Err(e);
        }
        for bid in 0..count {
            bufs.push(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    fn push(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        let addr = self.buffers[usize::from(bid) * self.size..].as_ptr() as u64;
        // SAFETY: index < count, within the allocation.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(addr);
        entry.set_len(u32::try_from(self.size).expect("buffer size fits in u32"));
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: `entries` is the ring base; the tail field overlays entry 0's reserved
        // field and is read by the kernel, so it is written with release ordering.
        unsafe {
            let tail = BufRingEntry::tail(self.entries).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn data(&self, bid: u16, len: usize) -> &[u8] {
        let start = usize::from(bid) * self.size;
        &self.buffers[start..start + len.min(self.size)]
    }

    fn recycle(&mut self, bid: u16) {
        self.push(bid);
        self.publish();
    }

    fn unregister(self, ring: &IoUring) {
        if let Err(e) = ring.submitter().unregister_buf_ring(BUFFER_GROUP) {
            tracing::warn!(code = "uring_teardown_failed", error = %e, "unregister_buf_ring failed");
        }
        drop(self);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.entries.is_null() {
            // SAFETY: allocated in `new` with this layout; the ring no longer uses it.
            unsafe { std::alloc::dealloc(self.entries.cast(), self.entries_layout) };
        }
    }
}

/// Lets shard writers wake this core: decisions go into a channel, and the eventfd is
/// written once per batch of them (`pending` coalesces wake-ups; inside a writer's
/// [`crate::wake::batched`] answer round the write waits until every decision is queued).
struct Waker {
    efd: RawFd,
    pending: AtomicBool,
    tx: Sender<(u64, Decision)>,
}

impl Waker {
    fn wake(this: &Arc<Waker>, token: u64, decision: Decision) {
        // The receiver lives as long as the core loop; after it stops nobody waits for this.
        let _ = this.tx.send((token, decision));
        if !this.pending.swap(true, Ordering::AcqRel) {
            crate::wake::wake(this);
        }
    }
}

impl crate::wake::Wake for Waker {
    fn wake_now(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to an eventfd we own.
        let _ = unsafe { libc::write(self.efd, (&raw const one).cast(), 8) };
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        // SAFETY: the eventfd is owned by the waker and closed once.
        unsafe { libc::close(self.efd) };
    }
}

/// One connection's IO state.
struct Slot {
    fd: RawFd,
    generation: u32,
    conn: Conn,
    recv_armed: bool,
    /// Bytes handed to the kernel by the in-flight send (kept alive until its completion).
    sending: Vec<u8>,
    sent: usize,
    send_in_flight: bool,
    /// When the in-flight send was started or last made progress (the core's `arrived` then):
    /// a peer that takes nothing for `read_timeout` is closed (its answers would otherwise
    /// wait forever).
    send_progress_at: Instant,
    /// [`Conn::process`] stopped at its output backlog: run it again once a send completes.
    backlogged: bool,
    /// Flush, then close.
    close_after_flush: bool,
    /// `shutdown(2)` done; waiting for the receive and send to complete before `close(2)`.
    closing: bool,
    /// The place this connection holds inside the connection limits (`None`: refused).
    ticket: Option<Ticket>,
}

struct Core {
    ring: IoUring,
    bufs: BufRing,
    ctx: CoreCtx,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    generation: u32,
    waker: Arc<Waker>,
    wake_rx: Receiver<(u64, Decision)>,
    wake_buf: u64,
    tick: Timespec,
    listen_fd: RawFd,
    accepting: bool,
    /// An accept is armed: its completion has not been reaped yet. A stopping core waits for
    /// it, since a connection it accepted meanwhile was made before the stop and is served too.
    accept_armed: bool,
    /// Accepting paused after a resource error; resumed when this core closes a descriptor,
    /// or on the next tick (descriptors freed elsewhere in the process).
    accept_paused: bool,
    /// Descriptors this core closed since its accept was last armed: a resource error with
    /// some closed meanwhile is retried at once, since each close made room for one.
    closed_since_armed: u32,
    accept_errors: super::AcceptErrors,
    open: usize,
    /// The earliest the completions being processed can have arrived (queue-delay shedding,
    /// [`super::overload`]): when the core was already behind — completions were waiting as
    /// it asked for more — the moment it took the previous batch; else when this batch came.
    arrived: Instant,
    /// When the previous batch of completions was taken.
    reaped: Instant,
}

/// An `io_uring_enter` shorter than this did not sleep: completions were already waiting.
const ENTER_SLEPT_MIN: Duration = Duration::from_micros(50);

/// Runs one ingress core on io_uring: sets up its ring, receive buffers and eventfd, reports
/// to `startup` and, once every core has (`super::startup`), serves until `stop` is set, then
/// drains admissions in flight (at most 5 s) and returns.
///
/// # Errors
/// Set-up failures (also reported to `startup`, so the start fails before `ready`) and
/// unexpected `io_uring_enter` errors.
pub fn run(
    ctx: CoreCtx,
    listener: TcpListener,
    stop: &AtomicBool,
    startup: Startup,
) -> io::Result<()> {
    let (ring, bufs, efd) = set_up().inspect_err(|e| startup.failed(e))?;
    let (tx, wake_rx) = crossbeam_channel::unbounded();
    let waker = Arc::new(Waker { efd, pending: AtomicBool::new(false), tx });
    let mut core = Core {
        ring,
        bufs,
        ctx,
        slots: Vec::new(),
        free: Vec::new(),
        generation: 0,
        waker,
        wake_rx,
        wake_buf: 0,
        tick: Timespec::new().nsec(TICK_NS),
        listen_fd: listener.as_raw_fd(),
        accepting: true,
        accept_armed: false,
        accept_paused: false,
        closed_since_armed: 0,
        accept_errors: super::AcceptErrors::new(),
        open: 0,
        arrived: clock::monotonic(),
        reaped: clock::monotonic(),
    };
    let result = if startup.ready() { core.run(stop) } else { Ok(()) };
    core.quiesce();
    core.close_all();
    let Core { ring, bufs, .. } = core;
    bufs.unregister(&ring);
    // The ring goes before the buffers it was given: `bufs` was consumed above, the rest of
    // `core` (eventfd buffer, tick) outlives `ring`, declared after it.
    drop(ring);
    drop(listener);
    result
}

/// A core's ring, its registered receive buffers and its wake-up eventfd.
fn set_up() -> io::Result<(IoUring, BufRing, RawFd)> {
    let ring = build_ring()?;
    let bufs = BufRing::new(&ring, RECV_BUFFERS_PER_CORE, RECV_BUFFER_BYTES)?;
    // SAFETY: plain eventfd creation.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if efd < 0 {
        let e = io::Error::last_os_error();
        bufs.unregister(&ring);
        return Err(e);
    }
    Ok((ring, bufs, efd))
}

impl Core {
    fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        self.arm_accept();
        self.arm_wake();
        self.arm_tick();
        let mut completions: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
        let mut stopping_since: Option<Instant> = None;
        loop {
            if let Some(since) = stopping_since {
                // Until every connection is closed (idle ones close at the next tick) and the
                // accept has ended, or DRAIN_MAX.
                let open = self.slots.iter().flatten().next().is_some() || self.accept_armed;
                if !open || clock::monotonic().duration_since(since) > DRAIN_MAX {
                    tracing::debug!(open = self.open, "ingress core stopped");
                    return Ok(());
                }
            }
            let entered = clock::monotonic();
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
            let reaped = clock::monotonic();
            let behind = reaped.duration_since(entered) < ENTER_SLEPT_MIN;
            self.arrived = if behind { self.reaped } else { reaped };
            self.reaped = reaped;
            completions.clear();
            completions
                .extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(ud, result, flags) in &completions {
                self.complete(ud, result, flags);
            }
            if stopping_since.is_none() && stop.load(Ordering::Acquire) {
                stopping_since = Some(clock::monotonic());
                self.stop_accepting();
            }
        }
    }

    fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: every buffer an entry points to (receive buffers in the registered
            // ring, a slot's `sending`, `wake_buf`, `tick`) stays alive and unmoved until its
            // completion is reaped.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                tracing::error!(code = "uring_submit_failed", error = %e, "io_uring submit failed while the queue was full");
            }
        }
    }

    /// Arms one accept. Not a multishot accept: that one accepts the whole listen backlog into
    /// descriptors as soon as it can, ahead of this core, which then closes the excess over
    /// its cap; under a burst of connections it runs the process out of descriptors, which
    /// the ledger's files and the dispatcher's connections were promised ([`super::cap_for`]).
    /// One at a time, the core takes a descriptor only when it has judged the previous one
    /// (at its cap: accepted and closed, within the one [`super::FDS_PER_CORE`] keeps for it).
    fn arm_accept(&mut self) {
        self.accept_armed = true;
        self.closed_since_armed = 0;
        let entry =
            opcode::Accept::new(Fd(self.listen_fd), std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_CLOEXEC)
                .build()
                .user_data(user_data(KIND_ACCEPT, 0, 0));
        self.push(&entry);
    }

    fn arm_wake(&mut self) {
        let entry = opcode::Read::new(Fd(self.waker.efd), (&raw mut self.wake_buf).cast(), 8)
            .build()
            .user_data(user_data(KIND_WAKE, 0, 0));
        self.push(&entry);
    }

    fn arm_tick(&mut self) {
        let entry = opcode::Timeout::new(&raw const self.tick)
            .build()
            .user_data(user_data(KIND_TICK, 0, 0));
        self.push(&entry);
    }

    fn arm_recv(&mut self, slot: usize) {
        let Some(s) = self.slots[slot].as_mut() else { return };
        s.recv_armed = true;
        let ud = user_data(KIND_RECV, slot, s.generation);
        let entry = opcode::RecvMulti::new(Fd(s.fd), BUFFER_GROUP).build().user_data(ud);
        self.push(&entry);
    }

    /// Stops accepting and drains: every connection answers the request in progress (if any)
    /// with `Connection: close`; idle ones are closed at the next tick, so a request already on
    /// its way still gets its answer.
    fn stop_accepting(&mut self) {
        if self.accepting {
            // Connections already in the backlog were made before the stop: serve them too
            // (closing the listener would reset them, and they may carry a request).
            self.accept_backlog();
            self.accepting = false;
            let entry = opcode::AsyncCancel::new(user_data(KIND_ACCEPT, 0, 0))
                .build()
                .user_data(user_data(KIND_CANCEL, 0, 0));
            self.push(&entry);
        }
        for s in self.slots.iter_mut().flatten() {
            s.conn.drain();
        }
    }

    /// Accepts, without blocking, every connection waiting in the listen backlog.
    fn accept_backlog(&mut self) {
        // SAFETY: fcntl/accept4 on the listening socket this core owns; no memory is passed.
        unsafe {
            let flags = libc::fcntl(self.listen_fd, libc::F_GETFL);
            libc::fcntl(self.listen_fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            loop {
                let fd = libc::accept4(
                    self.listen_fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                );
                if fd < 0 {
                    break;
                }
                self.admit_connection(fd);
            }
        }
    }

    fn complete(&mut self, ud: u64, result: i32, flags: u32) {
        let (kind, slot, generation) = unpack(ud);
        match kind {
            KIND_ACCEPT => self.on_accept(result),
            KIND_RECV => self.on_recv(slot, generation, result, flags),
            KIND_SEND => self.on_send(slot, generation, result),
            KIND_WAKE => self.on_wake(),
            KIND_TICK => self.on_tick(),
            _ => {}
        }
    }

    fn on_accept(&mut self, result: i32) {
        self.accept_armed = false;
        if result == -libc::ECANCELED {
            return;
        }
        if result >= 0 {
            self.admit_connection(result);
        } else {
            let error = io::Error::from_raw_os_error(-result);
            self.accept_errors.record(&error, clock::monotonic());
            if self.closed_since_armed == 0 {
                // Out of descriptors or memory: the next accept would fail at once too. Pause
                // until this core closes a descriptor or the next tick, instead of spinning;
                // the backlog keeps the connections meanwhile.
                self.accept_paused = true;
                return;
            }
        }
        if self.accepting && !self.accept_paused {
            self.arm_accept();
        }
    }

    /// This core closed a descriptor: room for one more, so a paused accept resumes.
    fn closed_descriptor(&mut self) {
        self.closed_since_armed = self.closed_since_armed.saturating_add(1);
        if self.accept_paused && self.accepting {
            self.accept_paused = false;
            self.arm_accept();
        }
    }

    fn admit_connection(&mut self, fd: RawFd) {
        set_nodelay(fd);
        self.generation = self.generation.wrapping_add(1);
        let mut conn = Conn::new(&self.ctx, clock::monotonic());
        // Known for the per-address limit and for `server.trusted_proxies` (signed URLs).
        let peer = peer_ip(fd);
        conn.set_peer(peer);
        let ticket = match self.ctx.enter(self.open, peer) {
            Ok(ticket) => Some(ticket),
            Err(reason) => {
                if !self.ctx.refuse(reason) {
                    // Enough refused connections held already: closed unanswered.
                    // SAFETY: closing the fd we were just given.
                    unsafe { libc::close(fd) };
                    self.closed_descriptor();
                    return;
                }
                conn.refuse(Answer::Overloaded);
                None
            }
        };
        if !self.accepting {
            // Accepted by the kernel before the accept was cancelled: made before the stop,
            // so it is served like the others, then closed.
            conn.drain();
        }
        let slot = Slot {
            fd,
            generation: self.generation,
            conn,
            recv_armed: false,
            sending: Vec::new(),
            sent: 0,
            send_in_flight: false,
            send_progress_at: self.arrived,
            backlogged: false,
            close_after_flush: false,
            closing: false,
            ticket,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.open += 1;
        self.ctx.stats.connections_open.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(slot = index, accepting = self.accepting, "connection accepted");
        self.arm_recv(index);
    }

    fn live(&mut self, slot: usize, generation: u32) -> Option<&mut Slot> {
        self.slots.get_mut(slot)?.as_mut().filter(|s| s.generation == generation)
    }

    fn on_recv(&mut self, slot: usize, generation: u32, result: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let now = self.arrived;
        let input_max = self.ctx.input_bytes_max();
        let Some(s) = self
            .slots
            .get_mut(slot)
            .and_then(Option::as_mut)
            .filter(|s| s.generation == generation)
        else {
            if let Some(bid) = bid {
                self.bufs.recycle(bid);
            }
            return;
        };
        if !more {
            s.recv_armed = false;
        }
        if result > 0 {
            let len = usize::try_from(result).expect("positive i32 fits in usize");
            let mut received = Received::Ok;
            if let Some(bid) = bid {
                if !s.closing {
                    received = s.conn.receive(self.bufs.data(bid, len), now);
                }
                self.bufs.recycle(bid);
            }
            if s.closing {
                self.maybe_free(slot);
                return;
            }
            if received != Received::Ok {
                // TLS alert or close_notify: answer what is pending (saying so), flush, close.
                s.close_after_flush = true;
                s.conn.drain();
                self.drive(slot);
                return;
            }
            if s.conn.unconsumed() > input_max {
                self.close(slot);
                return;
            }
            if !more {
                self.arm_recv(slot);
            }
            self.drive(slot);
        } else if result == -libc::ENOBUFS && !s.closing {
            // Every buffer is in use; they are recycled as completions are processed.
            self.arm_recv(slot);
        } else if result == 0 && !s.closing {
            // Peer finished sending: answer what is pending, then close.
            s.close_after_flush = true;
            if !s.conn.admitting() {
                self.drive(slot);
                self.flush(slot);
            }
        } else if s.closing {
            self.maybe_free(slot);
        } else {
            self.close(slot);
        }
    }

    fn on_send(&mut self, slot: usize, generation: u32, result: i32) {
        let now = self.arrived;
        let Some(s) = self.live(slot, generation) else { return };
        s.send_in_flight = false;
        if s.closing {
            self.maybe_free(slot);
            return;
        }
        if result < 0 {
            self.close(slot);
            return;
        }
        s.sent += usize::try_from(result).expect("non-negative i32 fits in usize");
        s.send_progress_at = now;
        if s.sent >= s.sending.len() {
            s.sending.clear();
            s.sent = 0;
        }
        // Backlogged: process the requests that waited first (`drive` flushes after). A flush
        // alone would find nothing to send and, after a half-close, close the connection with
        // those requests unanswered.
        if std::mem::take(&mut s.backlogged) {
            self.drive(slot);
        } else {
            self.flush(slot);
        }
    }

    fn on_wake(&mut self) {
        // A read-modify-write, not a store: it reads the latest writer swap (which follows that
        // writer's send), so the drain below sees every decision whose sender found `pending`
        // set; a later sender finds it clear and wakes again. No decision is left unwoken.
        self.waker.pending.swap(false, Ordering::SeqCst);
        while let Ok((token, decision)) = self.wake_rx.try_recv() {
            let (_, slot, generation) = unpack(token);
            let ctx = &self.ctx;
            let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) else { continue };
            if s.generation != generation || s.closing {
                continue;
            }
            s.conn.on_decision(ctx, decision);
            self.drive(slot);
        }
        self.arm_wake();
    }

    fn on_tick(&mut self) {
        let now = clock::monotonic();
        let mut expired = Vec::new();
        let mut stuck = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(s) = s.as_mut().filter(|s| !s.closing) {
                if s.send_in_flight
                    && now.duration_since(s.send_progress_at) >= self.ctx.read_timeout
                {
                    // The peer has taken none of its answers for `read_timeout`.
                    stuck.push(i);
                    continue;
                }
                if s.backlogged {
                    // Complete requests wait behind answers still being sent: not a slow
                    // request (no 408); the send's own deadline above applies.
                    continue;
                }
                if s.conn.on_tick(&self.ctx, now) {
                    s.close_after_flush = true;
                    expired.push(i);
                }
            }
        }
        for slot in expired {
            self.flush(slot);
        }
        for slot in stuck {
            self.close(slot);
        }
        if !self.accepting {
            let idle: Vec<usize> = (0..self.slots.len())
                .filter(|&i| {
                    self.slots[i].as_ref().is_some_and(|s| {
                        s.conn.idle() && !s.send_in_flight && !s.closing && !s.conn.has_output()
                    })
                })
                .collect();
            for slot in idle {
                self.close(slot);
            }
        } else if self.accept_paused {
            self.accept_paused = false;
            self.arm_accept();
        }
        self.arm_tick();
    }

    /// Runs the connection's state machine, then sends what it produced.
    fn drive(&mut self, slot: usize) {
        let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut).filter(|s| !s.closing)
        else {
            return;
        };
        let token = user_data(0, slot, s.generation);
        let waker = &self.waker;
        let mut make_reply = || -> Reply {
            let waker = Arc::clone(waker);
            Box::new(move |decision| Waker::wake(&waker, token, decision))
        };
        match s.conn.process(&self.ctx, &mut make_reply) {
            Step::NeedRead | Step::Wait => {}
            Step::Backlogged => s.backlogged = true,
            Step::Close => s.close_after_flush = true,
        }
        self.flush(slot);
    }

    fn flush(&mut self, slot: usize) {
        let now = self.arrived;
        let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) else { return };
        if s.send_in_flight || s.closing {
            return;
        }
        if s.sending.is_empty() {
            s.conn.take_output(&mut s.sending);
            s.sent = 0;
        }
        if s.sending.is_empty() {
            if s.close_after_flush && !s.conn.admitting() {
                self.close(slot);
            }
            return;
        }
        let rest = &s.sending[s.sent..];
        let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(Fd(s.fd), rest.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(KIND_SEND, slot, s.generation));
        s.send_in_flight = true;
        if s.sent == 0 {
            s.send_progress_at = now;
        }
        self.push(&entry);
    }

    /// Starts closing: `shutdown(2)` ends the multishot receive; the fd is closed and the
    /// slot freed once no operation references it.
    fn close(&mut self, slot: usize) {
        let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) else { return };
        if !s.closing {
            s.closing = true;
            // SAFETY: shutting down a socket fd this slot owns.
            unsafe { libc::shutdown(s.fd, libc::SHUT_RDWR) };
        }
        self.maybe_free(slot);
    }

    fn maybe_free(&mut self, slot: usize) {
        let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) else { return };
        if s.recv_armed || s.send_in_flight {
            return;
        }
        tracing::debug!(slot, idle = s.conn.idle(), "connection closed");
        // SAFETY: no operation references the fd any more; closed exactly once.
        unsafe { libc::close(s.fd) };
        match s.ticket.take() {
            Some(ticket) => self.ctx.gate.leave(ticket),
            None => self.ctx.refusal_closed(),
        }
        self.slots[slot] = None;
        self.free.push(slot);
        self.open -= 1;
        self.ctx.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
        self.closed_descriptor();
    }

    /// At exit, before any buffer is freed: shuts every socket down and reaps completions
    /// until no receive, send or accept references memory this core owns (bounded: one
    /// second). Freeing a send buffer or the receive buffers while the kernel may still use
    /// them would break the promise `push` relies on.
    fn quiesce(&mut self) {
        if self.accepting {
            self.accepting = false;
            let cancel = opcode::AsyncCancel::new(user_data(KIND_ACCEPT, 0, 0))
                .build()
                .user_data(user_data(KIND_CANCEL, 0, 0));
            self.push(&cancel);
        }
        let open: Vec<usize> = (0..self.slots.len()).filter(|&i| self.slots[i].is_some()).collect();
        for slot in open {
            self.close(slot);
        }
        let deadline = clock::monotonic() + QUIESCE_MAX;
        let mut completions: Vec<(u64, i32, u32)> = Vec::new();
        while (self.slots.iter().flatten().next().is_some() || self.accept_armed)
            && clock::monotonic() < deadline
        {
            // The tick timeout stays armed, so this wait ends within TICK_NS.
            if let Err(e) = self.ring.submit_and_wait(1) {
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) {
                    tracing::warn!(code = "uring_teardown_failed", error = %e, "io_uring wait failed while stopping");
                    return;
                }
            }
            completions.clear();
            completions
                .extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(ud, result, flags) in &completions {
                self.complete(ud, result, flags);
            }
        }
    }

    /// At exit: closes every socket still open (after [`Core::quiesce`]; the ring goes away
    /// next, cancelling whatever is left).
    fn close_all(&mut self) {
        for s in self.slots.iter_mut().filter_map(Option::take) {
            // SAFETY: closing fds owned by the slots, once.
            unsafe { libc::close(s.fd) };
            self.ctx.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Disables Nagle: answers are small and must leave at once.
pub(crate) fn set_nodelay(fd: RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on a socket fd with a valid int option.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// The client address of connected socket `fd` (for the per-address limit); `None` when the
/// kernel cannot say (the connection is then only counted in the total).
fn peer_ip(fd: RawFd) -> Option<std::net::IpAddr> {
    // SAFETY: `fd` is a connected socket this core owns for the duration of the call.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let addr = socket2::SockRef::from(&borrowed).peer_addr().ok()?;
    addr.as_socket().map(|a| a.ip())
}

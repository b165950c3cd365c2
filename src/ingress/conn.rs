//! One HTTP/1.1 connection as a sans-IO state machine, driven identically by the io_uring and
//! the epoll back ends: the back end appends received bytes to [`Conn::input`], calls
//! [`Conn::process`], sends what is in [`Conn::output`], and feeds the ledger's decision back
//! with [`Conn::on_decision`]. Responses leave in request order (pipelining): while one request
//! waits for its commit, later pipelined requests wait in `input`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::answer::Answer;
use crate::clock;
use crate::http::{self, Frame, Framer};
use crate::ledger::{Decision, Ledger, Reply};
use crate::metrics::CoreStats;
use crate::pipeline::{self, Handled, Pipeline};

/// What the back end must do next for this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send `output` (if any), then read more bytes.
    NeedRead,
    /// Send `output` (if any); an admission is in flight: wait for [`Conn::on_decision`].
    Wait,
    /// Send `output`, then close.
    Close,
}

/// Everything a connection needs from its core: the pipeline, the ledger and the counters.
pub struct CoreCtx {
    /// Routes and sources.
    pub pipeline: Arc<Pipeline>,
    /// Where admissions go.
    pub ledger: Ledger,
    /// This core's counters.
    pub stats: Arc<CoreStats>,
    /// Framing limits.
    pub limits: http::Limits,
    /// `server.read_timeout`.
    pub read_timeout: Duration,
    /// Most open connections on this core (see [`super::connections_per_core`]).
    pub connections_max: usize,
}

impl CoreCtx {
    /// The context for one core that may hold `connections_max` connections.
    pub fn new(
        pipeline: Arc<Pipeline>,
        ledger: Ledger,
        stats: Arc<CoreStats>,
        connections_max: usize,
    ) -> CoreCtx {
        let server = &pipeline.config.server;
        let limits = http::Limits {
            header_bytes_max: server.header_bytes_max,
            body_bytes_max: server.body_bytes_max,
        };
        let read_timeout = server.read_timeout;
        CoreCtx { pipeline, ledger, stats, limits, read_timeout, connections_max }
    }

    /// Most bytes a connection may hold unprocessed before it is closed as abusive: one full
    /// request plus one head (a pipelined flood while a commit is pending).
    pub fn input_bytes_max(&self) -> usize {
        2 * (self.limits.header_bytes_max + self.limits.body_bytes_max)
    }
}

#[derive(Debug)]
enum Phase {
    /// Reading (or between) requests; `source` once the head routed.
    Reading { source: Option<usize> },
    /// Waiting for the ledger's decision on a request of `source`.
    Admitting { source: usize, event_id: String, keep_alive: bool, read_at: Instant },
    /// Answered with `Connection: close`; nothing more is read.
    Closing,
}

/// One connection's state.
pub struct Conn {
    /// Received bytes not yet consumed by the framer, from `input_start`.
    pub input: Vec<u8>,
    input_start: usize,
    /// Bytes to send, in order.
    pub output: Vec<u8>,
    framer: Framer,
    phase: Phase,
    /// When the first byte of the current request arrived (for `read_timeout`).
    request_started: Option<Instant>,
    /// Last time any byte arrived or an answer left (idle keep-alive timeout).
    last_activity: Instant,
    /// The server is stopping: every further answer closes the connection.
    draining: bool,
}

impl Conn {
    /// A new connection accepted at `now`.
    pub fn new(ctx: &CoreCtx, now: Instant) -> Conn {
        Conn {
            input: Vec::new(),
            input_start: 0,
            output: Vec::new(),
            framer: Framer::new(ctx.limits),
            phase: Phase::Reading { source: None },
            request_started: None,
            last_activity: now,
            draining: false,
        }
    }

    /// The server is stopping: the request in progress (if any) is still read and answered,
    /// with `Connection: close`, and nothing more.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// Whether no request is in progress: nothing buffered, none started, none admitting.
    /// An idle connection can be closed without losing anything.
    pub fn idle(&self) -> bool {
        matches!(self.phase, Phase::Reading { .. })
            && self.request_started.is_none()
            && self.input_start == self.input.len()
    }

    /// Appends received bytes.
    pub fn receive(&mut self, bytes: &[u8], now: Instant) {
        if self.request_started.is_none() && !bytes.is_empty() {
            self.request_started = Some(now);
        }
        self.last_activity = now;
        self.input.extend_from_slice(bytes);
    }

    /// Whether an admission is in flight (the connection must not be freed silently: its
    /// decision will still arrive).
    pub fn admitting(&self) -> bool {
        matches!(self.phase, Phase::Admitting { .. })
    }

    /// Runs the framer over buffered input and answers what can be answered. `make_reply`
    /// is called at most once per call, when an admission is handed to the ledger.
    pub fn process(&mut self, ctx: &CoreCtx, make_reply: &mut dyn FnMut() -> Reply) -> Step {
        loop {
            let source = match self.phase {
                Phase::Admitting { .. } => return Step::Wait,
                Phase::Closing => return Step::Close,
                Phase::Reading { source } => source,
            };
            if self.input.len() - self.input_start > ctx.input_bytes_max() {
                return self.close_now();
            }
            let (used, frame) = self.framer.advance(&self.input[self.input_start..]);
            self.consume(used);
            match frame {
                Frame::Incomplete => return Step::NeedRead,
                Frame::Head(head) => self.on_head(ctx, &head),
                Frame::Error(e) => self.answer(ctx, source, e.answer(), None, false, None),
                Frame::Request(req) => {
                    let Some(source) = source else {
                        // A request always follows its routed head; anything else is a bug.
                        unreachable!("framer returned a request without a routed head");
                    };
                    self.on_request(ctx, source, req, make_reply);
                }
            }
        }
    }

    fn on_head(&mut self, ctx: &CoreCtx, head: &http::Head) {
        match ctx.pipeline.routes.route(head) {
            Ok(source) => {
                self.phase = Phase::Reading { source: Some(source) };
                let fits =
                    head.content_length.is_none_or(|n| n <= ctx.limits.body_bytes_max as u64);
                if head.expect_continue && fits {
                    // The client waits before sending its body: an unsigned delivery is told
                    // 401 now instead of being invited to upload it (SPEC §3 order holds:
                    // 404, 405 and 413 are decided first).
                    let provider = ctx.pipeline.config.sources[source].provider;
                    if self.framer.header(provider.signature_header()).is_none() {
                        let answer = Answer::SignatureMissing;
                        self.answer(ctx, Some(source), answer, None, false, None);
                    } else {
                        http::write_continue(&mut self.output);
                    }
                }
            }
            Err(answer) => {
                let source = ctx.pipeline.routes.lookup(head.path());
                self.answer(ctx, source, answer, None, false, None);
            }
        }
    }

    fn on_request(
        &mut self,
        ctx: &CoreCtx,
        source: usize,
        req: http::Request,
        make_reply: &mut dyn FnMut() -> Reply,
    ) {
        let read_at = clock::monotonic();
        let keep_alive = req.keep_alive;
        let config = &ctx.pipeline.config.sources[source];
        match pipeline::handle(source, config, req, clock::now_unix_ms(), make_reply) {
            Handled::Answer(answer, id) => {
                self.answer(ctx, Some(source), answer, id.as_deref(), keep_alive, Some(read_at));
            }
            Handled::Challenge(challenge) => {
                let body = (challenge.content_type, challenge.body.as_slice());
                self.respond(
                    ctx,
                    Some(source),
                    Answer::Challenge,
                    None,
                    keep_alive,
                    Some(read_at),
                    Some(body),
                );
            }
            Handled::Rejected(record) => {
                ctx.ledger.reject(record);
                let answer = Answer::SchemaRejected;
                self.answer(ctx, Some(source), answer, None, keep_alive, Some(read_at));
            }
            Handled::Admit(admission) => {
                let event_id = pipeline::event_id_of(&admission.key).to_owned();
                match ctx.ledger.admit(admission) {
                    Ok(()) => {
                        self.phase = Phase::Admitting { source, event_id, keep_alive, read_at };
                    }
                    Err(_refused) => {
                        let answer = Answer::Overloaded;
                        self.answer(
                            ctx,
                            Some(source),
                            answer,
                            Some(&event_id),
                            keep_alive,
                            Some(read_at),
                        );
                    }
                }
            }
        }
    }

    /// Answers the request waiting for `decision` (called by the back end when the ledger's
    /// reply arrives). The back end then calls [`Conn::process`] again for pipelined requests.
    pub fn on_decision(&mut self, ctx: &CoreCtx, decision: Decision) {
        let Phase::Admitting { source, ref event_id, keep_alive, read_at } = self.phase else {
            unreachable!("a decision arrives only for a connection that is admitting");
        };
        let answer = match decision {
            Decision::Accepted => Answer::Accepted,
            Decision::Duplicate => Answer::Duplicate,
            Decision::Conflict => Answer::Conflict,
            Decision::Unavailable => Answer::Unavailable,
        };
        let event_id = event_id.clone();
        self.phase = Phase::Reading { source: None };
        self.answer(ctx, Some(source), answer, Some(&event_id), keep_alive, Some(read_at));
    }

    /// Checks `read_timeout` at `now`: a request still incomplete after it gets 408 and the
    /// connection closes; an idle keep-alive connection closes silently. Returns whether the
    /// back end must flush and close.
    pub fn on_tick(&mut self, ctx: &CoreCtx, now: Instant) -> bool {
        if !matches!(self.phase, Phase::Reading { .. }) {
            return matches!(self.phase, Phase::Closing);
        }
        if let Some(started) = self.request_started {
            if now.duration_since(started) >= ctx.read_timeout {
                let source = match self.phase {
                    Phase::Reading { source } => source,
                    _ => None,
                };
                self.answer(ctx, source, Answer::Timeout, None, false, None);
                return true;
            }
            return false;
        }
        now.duration_since(self.last_activity) >= ctx.read_timeout
    }

    fn answer(
        &mut self,
        ctx: &CoreCtx,
        source: Option<usize>,
        answer: Answer,
        event_id: Option<&str>,
        keep_alive: bool,
        read_at: Option<Instant>,
    ) {
        self.respond(ctx, source, answer, event_id, keep_alive, read_at, None);
    }

    /// As `answer`; a `challenge` (content type, body) replaces the fixed JSON body.
    #[allow(clippy::too_many_arguments)]
    fn respond(
        &mut self,
        ctx: &CoreCtx,
        source: Option<usize>,
        answer: Answer,
        event_id: Option<&str>,
        keep_alive: bool,
        read_at: Option<Instant>,
        challenge: Option<(&str, &[u8])>,
    ) {
        let keep_alive = keep_alive && !self.draining;
        match challenge {
            Some((content_type, body)) => {
                http::write_challenge(&mut self.output, content_type, body, keep_alive);
            }
            None => http::write_answer(&mut self.output, answer, event_id, keep_alive),
        }
        ctx.stats.count(source, answer);
        if let (Some(source), Some(read_at)) = (source, read_at) {
            let waited = clock::monotonic().duration_since(read_at);
            let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
            ctx.stats.record_ack_us(source, micros);
        }
        tracing::debug!(source = ?source.map(|s| &ctx.pipeline.config.sources[s].id), status = answer.code(), "answered");
        let now = clock::monotonic();
        self.last_activity = now;
        self.request_started = (self.input_start < self.input.len()).then_some(now);
        self.phase = if keep_alive { Phase::Reading { source: None } } else { Phase::Closing };
        if !keep_alive {
            self.input.clear();
            self.input_start = 0;
        }
    }

    fn close_now(&mut self) -> Step {
        self.phase = Phase::Closing;
        Step::Close
    }

    fn consume(&mut self, used: usize) {
        self.input_start += used;
        if self.input_start == self.input.len() {
            self.input.clear();
            self.input_start = 0;
        } else if self.input_start > 64 * 1024 && self.input_start * 2 > self.input.len() {
            self.input.drain(..self.input_start);
            self.input_start = 0;
        }
        if self.input_start < self.input.len() && self.request_started.is_none() {
            self.request_started = Some(clock::monotonic());
        }
    }
}

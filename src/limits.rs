//! Every compile-time bound of hookwall, in one place (TigerBeetle style: a limit on everything,
//! named `*_max`). Runtime-configurable bounds (`body_bytes_max`, `header_bytes_max`, …) live in
//! the config; these are the fixed ones, with const assertions between them.

/// Header fields of a request parsed without allocating; a head with more is parsed again with
/// room for as many as `header_bytes_max` can hold (SPEC §2: only the size gets 431).
pub const HEADER_COUNT_MAX: usize = 64;
/// Longest provider event id accepted, in bytes; longer ids are `schema_rejected` (R13).
pub const EVENT_ID_BYTES_MAX: usize = 255;
/// Longest event type kept, in bytes; longer types are `schema_rejected`.
pub const EVENT_TYPE_BYTES_MAX: usize = 255;
/// Longest ordering value kept as is, in bytes (R22); longer values are replaced by their
/// SHA-256 in hex (71 bytes), so the ordering index key stays small.
pub const ORDERING_VALUE_BYTES_MAX: usize = 128;
/// Admissions that may wait for one shard writer; a full queue answers 503 `overloaded`.
pub const SHARD_QUEUE_MAX: usize = 8192;
/// Most items (admissions, settlements, operator actions) decided in one group-commit
/// `WriteBatch`. Small enough that one commit never takes most of what is in flight: past
/// saturation with 2048 sender connections, drains of up to 1024 made the stages take turns —
/// the writer deciding and inserting a thousand events while ingress waited for their answers,
/// then ingress parsing a thousand new requests while the writer waited — and both CPUs sat
/// idle a quarter of the time: 23k answers/s of 38k offered, p99 1.4–4 s from the intended
/// send time. At 128: every offered request answered (admitted or shed), p99 0.18–0.22 s, and
/// the closed-loop, ingest-only and drain figures unchanged (`docs/benchmarks.md`, run 11).
/// A synced write costs about 0.2 ms on the dev VM, so the extra commits are cheap.
pub const COMMIT_BATCH_MAX: usize = 128;
/// Most admissions, or settlements, one PostgreSQL ledger thread decides in one transaction
/// (`ledger::postgres`). Kept at the value that backend was measured with (docs/postgres.md):
/// its writers wait on round trips to the server, not on the ingress core, so the turn-taking
/// that made [`COMMIT_BATCH_MAX`] small does not arise, and fewer, larger transactions keep a
/// drain of settlements fast.
pub const POSTGRES_COMMIT_BATCH_MAX: usize = 1024;
/// Most secrets one source may hold (rotation overlap, R3).
pub const SECRETS_PER_SOURCE_MAX: usize = 16;
/// Most signatures read from one signature header (e.g. several `v1=` in Stripe's header).
pub const SIGNATURES_PER_HEADER_MAX: usize = 16;
/// Most open connections per ingress core; further accepts are closed at once.
pub const CONNECTIONS_PER_CORE_MAX: usize = 16_384;
/// Most connections refused at a limit (`connections_per_ip_max`, `connections_max`) that one
/// ingress core holds open to answer `503 overloaded`; beyond it a refused connection is closed
/// at once without an answer. Refused connections stay outside the gate's counts, so without
/// this bound one address opening connections faster than `read_timeout` closes them would
/// fill the core's cap ([`CONNECTIONS_PER_CORE_MAX`]) and starve every other sender — the
/// flood the per-address limit exists to stop (issue 5, checklist item 8).
pub const REFUSING_CONNECTIONS_PER_CORE_MAX: usize = 64;
/// Below this many connections per core (what the descriptor limit leaves), `serve` warns
/// (`descriptor_limit_low`).
pub const CONNECTIONS_PER_CORE_LOW: usize = 64;
/// Size of one receive buffer in the io_uring provided-buffer ring, in bytes.
pub const RECV_BUFFER_BYTES: usize = 16_384;
/// Buffers in each core's provided-buffer ring (a power of two, as the kernel requires).
pub const RECV_BUFFERS_PER_CORE: u16 = 1024;
/// Most ledger shards (one writer thread each).
pub const SHARDS_MAX: usize = 64;
/// Most PostgreSQL connections of one node (`ledger.pool_size`): each is a thread here and a
/// backend process on the database server.
pub const POSTGRES_POOL_MAX: usize = 64;
/// Longest one statement of `serve`'s PostgreSQL connections may run, lock waits included
/// (the server's `statement_timeout`, unless `ledger.url`'s `options` set one): past it no
/// provider's acknowledgment deadline (10 s at most in the provider table) can be met, and a
/// stuck statement — a table locked by hand, a stalled server — would otherwise hold a
/// writer, its senders' answers, the lease scans and shutdown for as long as it lasts. The
/// transaction fails instead: admissions answer `503 unavailable`, settlements are repeated.
/// `hookwall migrate` sets none (a migration may rightly take longer).
pub const POSTGRES_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Unacknowledged data on a PostgreSQL connection for this long drops it (Linux
/// `TCP_USER_TIMEOUT`, unless `ledger.url` sets `tcp_user_timeout`): a server that vanished
/// without closing is noticed in seconds, not after the kernel's ~15 minutes of retransmits.
pub const POSTGRES_TCP_USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Largest file the config loader reads: the config itself, TLS certificates and keys (bytes).
/// A mistyped path such as `/dev/zero` is an error, not an out-of-memory.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Largest secret file (`file = "…"` of a secret), in bytes.
pub const SECRET_FILE_BYTES_MAX: u64 = 64 * 1024;
/// Most ingress cores.
pub const CORES_MAX: usize = 256;
/// Most settlements (dispatch results) waiting for one shard writer.
pub const SETTLE_QUEUE_MAX: usize = 65_536;
/// Most schedule entries one dispatcher scan reads from one shard.
pub const DISPATCH_SCAN_MAX: usize = 1024;
/// Longest error text kept per attempt in the ledger, in bytes.
pub const ATTEMPT_ERROR_BYTES_MAX: usize = 512;

const _: () = assert!(RECV_BUFFERS_PER_CORE.is_power_of_two());
const _: () = assert!(COMMIT_BATCH_MAX <= SHARD_QUEUE_MAX);
const _: () = assert!(CORES_MAX >= SHARDS_MAX);

/// Deadline-aware admission (R17): a delivery whose estimated wait for its commit exceeds this
/// share of its source's `ack_deadline` is answered 503 `overloaded` at once, leaving the rest
/// of the deadline for the network and the sender's own timer.
pub const ACK_DEADLINE_SHED_SHARE: f64 = 0.5;

/// Queue-delay shedding (`ingress::overload`, CoDel's rule): the longest a complete request may
/// wait for its core while the core is saturated. 50 ms is under the shortest provider
/// deadline (3 s) by far, and over a loop turn of a busy but keeping-up core (a few ms).
pub const QUEUE_DELAY_TARGET: std::time::Duration = std::time::Duration::from_millis(50);

/// Queue-delay shedding: a core is saturated when every request of one such interval waited
/// longer than [`QUEUE_DELAY_TARGET`] (five targets: a burst drains well within it).
pub const QUEUE_DELAY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Queue-delay shedding: the fewest requests an interval must have seen to call its queue
/// standing (a quiet core with a few slow requests is not saturated).
pub const QUEUE_DELAY_SAMPLES_MIN: u32 = 16;

/// Sojourn shedding (`ingress::overload::Pie`, RFC 8033): the mean sojourn of admissions —
/// a request's arrival at its core to the ledger's decision — a saturated core is held to by
/// shedding a share of arrivals. Unsaturated, a sojourn is a group commit or two (p99 under
/// 10 ms at 64 connections on the 2-core benchmark machine); a standing 20 ms means arrivals
/// outrun the core. What the core measures misses the wait before it reads a request (on that
/// machine, past saturation, about as long again), so the target is below the 50 ms of
/// [`QUEUE_DELAY_TARGET`] and still far under every provider's ack deadline (R17).
pub const SOJOURN_TARGET: std::time::Duration = std::time::Duration::from_millis(20);

/// Sojourn shedding (`ingress::overload::Pie`, RFC 8033 §4.2): how often the share of arrivals
/// shed is updated (RFC 8033's `T_UPDATE`, 15 ms).
pub const PIE_UPDATE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(15);

/// Sojourn shedding: change of the shed share per update per second of sojourn over the target
/// (RFC 8033's α, 0.125).
pub const PIE_ALPHA: f64 = 0.125;

/// Sojourn shedding: change of the shed share per update per second of sojourn growth since
/// the previous update (RFC 8033's β, 1.25).
pub const PIE_BETA: f64 = 1.25;

/// Sojourn shedding: from this shed share on, one update raises the share by at most
/// [`PIE_STEP_MAX`] (RFC 8033 §5.5, "Cap Drop Adjustment": an optional element; above 10 %).
pub const PIE_STEP_CAPPED_FROM: f64 = 0.1;

/// Sojourn shedding: the most one update raises a share of at least [`PIE_STEP_CAPPED_FROM`]
/// (RFC 8033 §5.5, 2 %): a sudden long sojourn — a stall that just ended — then raises the
/// share over several updates, which see whether the queue is still there, not in one jump.
pub const PIE_STEP_MAX: f64 = 0.02;

/// Sojourn shedding: how long a queue may stand before anything is shed (RFC 8033 §4.4's
/// `MAX_BURST`, 150 ms).
pub const PIE_BURST_ALLOWANCE: std::time::Duration = std::time::Duration::from_millis(150);

/// Longest duration any config field takes: 100 years of 365.25 days (humantime's `y`, so
/// `"100y"` is the most). Every deadline computed from one stays representable — a monotonic
/// `Instant`, Unix milliseconds, a `u64` of nanoseconds (584 years) and an RFC 3339 year below
/// 10000 (the admin API's timestamps). Without it `timeout = "300000000000y"` passed the config
/// check and aborted `serve` at the first attempt ("overflow when adding duration to instant").
pub const CONFIG_DURATION_MAX: std::time::Duration =
    std::time::Duration::from_secs(100 * 31_557_600);

/// Answers one ingress connection may have waiting to be sent, in bytes, before it stops
/// processing further pipelined requests until the socket takes them (a peer that sends
/// without reading answers; its input then reaches the input limit and it is closed). About
/// 240 answers; a client pipelining normally never gets near it.
pub const CONN_OUTPUT_BACKLOG_MAX: usize = 64 * 1024;

/// `hookwall loadgen`: most connections one run may open.
pub const LOADGEN_CONNECTIONS_MAX: usize = 4096;
/// `hookwall loadgen`: most worker threads (`--threads`); each has its own stack, and far
/// more threads than CPUs only add switching (an audit's `--threads 100000` aborted the
/// process when the kernel refused the stacks).
pub const LOADGEN_THREADS_MAX: usize = 1024;
/// `hookwall loadgen`: longest `--duration` (a run always stops by itself).
pub const LOADGEN_DURATION_MAX: std::time::Duration = std::time::Duration::from_secs(3600);
/// `hookwall loadgen`: highest `--rate`, requests per second.
pub const LOADGEN_RATE_MAX: f64 = 10_000_000.0;
/// `hookwall loadgen`: largest response (head and body) read, in bytes; more is an error.
pub const LOADGEN_RESPONSE_BYTES_MAX: usize = 1 << 20;
/// `hookwall loadgen`: earlier events each connection remembers for duplicate sends.
pub const LOADGEN_HISTORY_MAX: usize = 256;
/// `hookwall loadgen`: highest latency recorded, µs (60 s; longer saturates).
pub const LOADGEN_LATENCY_US_MAX: u64 = 60_000_000;

//! The ledger's on-disk encoding: compact, hand-written, versioned records and sortable keys.
//!
//! Values start with a version byte ([`VERSION`]); integers inside values are little-endian,
//! strings and byte strings carry a `u32` length prefix, options a `0`/`1` tag. Keys that must
//! sort (inbox seq, schedule `due_ms ‖ seq`, list keys) are big-endian. Decoding never panics:
//! garbage, a short record, an unknown version or trailing bytes is a [`DecodeError`]; what to do
//! with one (a broken invariant in the writer) is the caller's decision.

/// Version byte written first in every record value.
pub const VERSION: u8 = 1;

/// Why a stored record could not be decoded. A broken invariant when it is a claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record ends before a field does.
    #[error("record ends early while reading {0}")]
    Short(&'static str),
    /// The first byte is not a version this build writes.
    #[error("unknown record version {0}")]
    Version(u8),
    /// A tag or enum byte has no meaning.
    #[error("invalid {field} tag {tag}")]
    Tag {
        /// Which field.
        field: &'static str,
        /// The byte found.
        tag: u8,
    },
    /// A string field is not UTF-8.
    #[error("{0} is not UTF-8")]
    Utf8(&'static str),
    /// Bytes left after the last field.
    #[error("{0} trailing bytes")]
    Trailing(usize),
    /// A key has the wrong length for its column family.
    #[error("key of {0} bytes has the wrong length")]
    KeyLength(usize),
}

/// Where an event is in its life (SPEC §5). Stored in its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventState {
    /// Admitted, no attempt settled yet.
    Received,
    /// At least one attempt failed; a retry is scheduled.
    Failed,
    /// A 2xx was received (settled).
    Delivered,
    /// Dead-lettered: will not be retried by itself (settled, R19).
    Dead,
    /// Dropped by an operator (settled, R20).
    Dropped,
}

impl EventState {
    /// The state's name in the admin API and logs.
    pub fn code(self) -> &'static str {
        match self {
            EventState::Received => "received",
            EventState::Failed => "failed",
            EventState::Delivered => "delivered",
            EventState::Dead => "dead",
            EventState::Dropped => "dropped",
        }
    }

    /// The state named `code` (the inverse of [`EventState::code`]).
    pub fn from_code(code: &str) -> Option<EventState> {
        [
            EventState::Received,
            EventState::Failed,
            EventState::Delivered,
            EventState::Dead,
            EventState::Dropped,
        ]
        .into_iter()
        .find(|s| s.code() == code)
    }

    fn tag(self) -> u8 {
        match self {
            EventState::Received => 0,
            EventState::Failed => 1,
            EventState::Delivered => 2,
            EventState::Dead => 3,
            EventState::Dropped => 4,
        }
    }

    fn from_tag(tag: u8) -> Result<EventState, DecodeError> {
        Ok(match tag {
            0 => EventState::Received,
            1 => EventState::Failed,
            2 => EventState::Delivered,
            3 => EventState::Dead,
            4 => EventState::Dropped,
            _ => return Err(DecodeError::Tag { field: "state", tag }),
        })
    }
}

/// The ledger's decision for one idempotency key (`claims/s` value): the first binding of the
/// key to a fingerprint (R11) plus the event's delivery progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Life state.
    pub state: EventState,
    /// Attempts made.
    pub attempts: u32,
    /// SHA-256 of the first admitted body; never changed (R11).
    pub fingerprint: [u8; 32],
    /// Inbox sequence number in the shard.
    pub seq: u64,
    /// Source index.
    pub source: u32,
    /// Key id that verified the first copy (R3).
    pub secret_id: String,
    /// Admission time, Unix ms.
    pub received_at_ms: u64,
    /// When delivered, Unix ms.
    pub delivered_at_ms: Option<u64>,
    /// When the next attempt is due, Unix ms (unsettled events only).
    pub next_attempt_ms: Option<u64>,
    /// Last attempt error, at most `ATTEMPT_ERROR_BYTES_MAX` bytes.
    pub last_error: Option<String>,
    /// The event's place in its ordering group while it is unsettled (R22, `ordering_key`);
    /// `None` for unordered events and once the event is delivered, dead or dropped. Encoded
    /// last and optional, so claims written before ordering existed decode as unordered.
    pub ordering: Option<OrderPlace>,
}

impl Claim {
    /// Whether this stored claim may have a delivered mark ([`delivered_mark_key`]) that
    /// settles it: only a claim as admitted (or replayed) without an error is delivered that
    /// way, so only such a claim's reader needs to look for one.
    pub fn may_be_marked_delivered(&self) -> bool {
        self.state == EventState::Received && self.last_error.is_none()
    }

    /// This claim as its delivered mark settled it: what `decide::transition` would have
    /// written for the delivery (delivered, its attempts and time, no next attempt, out of its
    /// ordering group).
    pub fn mark_delivered(&mut self, mark: &AttemptRecord) {
        self.state = EventState::Delivered;
        self.attempts = mark.attempt;
        self.delivered_at_ms = Some(mark.at_ms);
        self.next_attempt_ms = None;
        self.ordering = None;
    }
}

/// Where an ordered event stands in its group (R22): its group (`tenant/source` ‖ ordering
/// value) and its admission stamp, which orders the group's events across shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderPlace {
    /// The ordering value from the body (at most `ORDERING_VALUE_BYTES_MAX` bytes).
    pub value: String,
    /// Admission stamp: Unix µs, strictly increasing over every shard of the process (and
    /// above every stamp in the index at open), so an event acknowledged before another was
    /// received always sorts first.
    pub stamp: u64,
}

/// An admitted event as stored in `inbox/s` under its seq: what dispatch needs to forward it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRecord {
    /// Idempotency key (first, so [`decode_inbox_head`] reads it without the body).
    pub key: String,
    /// Source index.
    pub source: u32,
    /// Admission time, Unix ms.
    pub received_at_ms: u64,
    /// Key id that verified it.
    pub secret_id: String,
    /// Signed timestamp, Unix s.
    pub signed_at: Option<i64>,
    /// Event type.
    pub event_type: Option<String>,
    /// Original `Content-Type`.
    pub content_type: Option<Vec<u8>>,
    /// Exact original body.
    pub body: Vec<u8>,
}

/// A conflicting copy (`quarantine` value): same key, other fingerprint. No body (R11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineRecord {
    /// Idempotency key.
    pub key: String,
    /// Source index.
    pub source: u32,
    /// Fingerprint of the first binding.
    pub first_fingerprint: [u8; 32],
    /// Fingerprint of the refused copy.
    pub new_fingerprint: [u8; 32],
    /// When the refused copy arrived, Unix ms.
    pub received_at_ms: u64,
}

/// A minimised refused body (`rejected` value, R23): no body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectRecord {
    /// Source index.
    pub source: u32,
    /// Unix ms.
    pub received_at_ms: u64,
    /// Reason code.
    pub reason: String,
    /// Event id, when one was found.
    pub event_id: Option<String>,
    /// Body length in bytes.
    pub body_bytes: u64,
    /// SHA-256 of the body.
    pub fingerprint: [u8; 32],
}

/// One operator action (`audit` value, R20): who, what, on which event or destination, why.
/// Never a token or a payload: the actor is a token id (a hash prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// When the action was committed, Unix ms.
    pub at_ms: u64,
    /// Who: the first 8 hex digits of SHA-256 of the bearer token used.
    pub actor: String,
    /// What: `replay`, `drop`, `pause`, `resume`.
    pub action: String,
    /// The idempotency key acted on, for event actions.
    pub key: Option<String>,
    /// The destination id acted on, for destination actions.
    pub destination: Option<String>,
    /// The operator's reason, as given.
    pub reason: Option<String>,
    /// The event's state before the action, for event actions.
    pub state_before: Option<String>,
}

/// One settled attempt (an attempt-history value in `inbox/s`): the error history of an event (R20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// Attempt number (1-based; starts again at 1 after a replay).
    pub attempt: u32,
    /// When its settlement was written, Unix ms.
    pub at_ms: u64,
    /// `delivered`, `retry` or `dead`.
    pub outcome: String,
    /// What went wrong (no payload, no secret), for `retry` and `dead`.
    pub error: Option<String>,
}

/// [`AttemptRecord::outcome`] of a delivery.
pub const ATTEMPT_DELIVERED: &str = "delivered";

/// Encodes an attempt record.
pub fn encode_attempt(a: &AttemptRecord) -> Vec<u8> {
    let mut e = Enc::new(32 + a.outcome.len() + a.error.as_ref().map_or(0, String::len));
    e.u32(a.attempt);
    e.u64(a.at_ms);
    e.bytes(a.outcome.as_bytes());
    e.opt_bytes(a.error.as_deref().map(str::as_bytes));
    e.0
}

/// Decodes an attempt record.
///
/// # Errors
/// [`DecodeError`] for anything but a complete record of this version.
pub fn decode_attempt(v: &[u8]) -> Result<AttemptRecord, DecodeError> {
    let mut d = Dec::new(v)?;
    let a = AttemptRecord {
        attempt: d.u32("attempt")?,
        at_ms: d.u64("at_ms")?,
        outcome: d.string("outcome")?,
        error: d.opt_string("error")?,
    };
    d.end()?;
    Ok(a)
}

/// Attempt-history key in `inbox/s`: seq BE ‖ at_ms BE ‖ attempt BE (an event's attempts in
/// time order, right after its 8-byte record key).
pub fn attempt_key(seq: u64, at_ms: u64, attempt: u32) -> [u8; 20] {
    let mut k = [0; 20];
    k[..8].copy_from_slice(&seq.to_be_bytes());
    k[8..16].copy_from_slice(&at_ms.to_be_bytes());
    k[16..].copy_from_slice(&attempt.to_be_bytes());
    k
}

/// Key in `inbox/s` of an event's delivered mark: `attempt_key(seq, u64::MAX, u32::MAX)`, so it
/// sorts after every attempt record of the seq and reads as the last entry of its history.
///
/// A first delivery of an event whose claim says `received` without an error is recorded as
/// this mark (an [`AttemptRecord`] with outcome [`ATTEMPT_DELIVERED`]) instead of a rewritten
/// claim: keys in seq order are cheap memtable inserts, a claim's random key is not
/// (docs/benchmarks.md, runs 32–33). The claim stays as admitted; every claim read overlays the
/// mark ([`Claim::mark_delivered`]). The mark is deleted only with its claim.
pub fn delivered_mark_key(seq: u64) -> [u8; 20] {
    attempt_key(seq, u64::MAX, u32::MAX)
}

/// The value of a delivered mark: attempt `attempt` delivered at `at_ms`.
pub fn encode_delivered_mark(attempt: u32, at_ms: u64) -> Vec<u8> {
    let record =
        AttemptRecord { attempt, at_ms, outcome: ATTEMPT_DELIVERED.to_owned(), error: None };
    encode_attempt(&record)
}

/// What an expiry entry expires once its time has come (R25).
///
/// The checked kinds read the claim when they are swept (a dropped event may have been
/// replayed since; an identity may have expired and been admitted anew) and look for the seq's
/// records; the delivered kinds are written only when the settlement already knows there is
/// nothing but the inbox record: `DeliveredPayload` is swept with a blind delete,
/// `DeliveredIdentity` reads the claim but not the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryKind {
    /// The inbox record (raw body) and attempt history: `payload_retention` after settling.
    Payload,
    /// The claim (the identity), and whatever payload is left: `dedupe_retention` after
    /// admission.
    Identity,
    /// The inbox record of an event delivered without a failed attempt: it has no attempt
    /// history, and delivered is terminal (no replay), so nothing will need the record again
    /// whatever its claim says by then: only `seq`'s record is deleted, nothing is read.
    DeliveredPayload,
    /// The claim of an event delivered without a failed attempt: checked against the claim
    /// like `Identity`, but its payload is not looked for (its `DeliveredPayload` entry removes
    /// it, whichever expires first).
    DeliveredIdentity,
    /// `DeliveredPayload` for every event one group commit delivered cleanly (ledger format
    /// 3): the value lists their seqs ([`encode_expiry_seqs`]); the key's seq is the first.
    /// One entry per commit instead of one per event: two memtable inserts per forwarded event
    /// fewer when written, and two reads and deletes fewer when swept (docs/benchmarks.md,
    /// run 34).
    DeliveredPayloads,
    /// `DeliveredIdentity` for the events one group commit delivered cleanly and received in
    /// the same second (ledger format 3): the value lists their seqs and idempotency keys
    /// ([`encode_expiry_members`]); the key's seq is the first, its time the end of that second
    /// plus `dedupe_retention`, so no identity expires early and none more than a second late.
    DeliveredIdentities,
}

/// Expiry key (after the shard's `meta` prefix `exp/{s}/`): due_ms BE ‖ kind (0 payload,
/// 1 identity, 2 delivered payload, 3 delivered identity, 4 delivered payloads, 5 delivered
/// identities) ‖ seq BE; the value is the idempotency key (kinds 0–3) or the list of the
/// entry's events (kinds 4 and 5).
pub fn expiry_key(due_ms: u64, kind: ExpiryKind, seq: u64) -> [u8; 17] {
    let mut k = [0; 17];
    k[..8].copy_from_slice(&due_ms.to_be_bytes());
    k[8] = match kind {
        ExpiryKind::Payload => 0,
        ExpiryKind::Identity => 1,
        ExpiryKind::DeliveredPayload => 2,
        ExpiryKind::DeliveredIdentity => 3,
        ExpiryKind::DeliveredPayloads => 4,
        ExpiryKind::DeliveredIdentities => 5,
    };
    k[9..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The value of a [`ExpiryKind::DeliveredPayloads`] entry: each seq as u64 BE, in the order
/// given.
pub fn encode_expiry_seqs(seqs: impl ExactSizeIterator<Item = u64>) -> Vec<u8> {
    let mut v = Vec::with_capacity(seqs.len() * 8);
    seqs.for_each(|seq| v.extend_from_slice(&seq.to_be_bytes()));
    v
}

/// The seqs of a [`ExpiryKind::DeliveredPayloads`] entry.
///
/// # Errors
/// [`DecodeError::Short`] when the value is not a whole number of seqs.
pub fn decode_expiry_seqs(v: &[u8]) -> Result<Vec<u64>, DecodeError> {
    if !v.len().is_multiple_of(8) {
        return Err(DecodeError::Short("seq of a delivered payloads entry"));
    }
    Ok(v.chunks_exact(8).map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes"))).collect())
}

/// The value of a [`ExpiryKind::DeliveredIdentities`] entry: per event, seq u64 BE ‖ key
/// length u32 BE ‖ idempotency key.
pub fn encode_expiry_members<'a>(members: impl Iterator<Item = (u64, &'a str)> + Clone) -> Vec<u8> {
    let len = members.clone().map(|(_, key)| 12 + key.len()).sum();
    let mut v = Vec::with_capacity(len);
    for (seq, key) in members {
        v.extend_from_slice(&seq.to_be_bytes());
        let key_len = u32::try_from(key.len()).expect("idempotency keys are bounded");
        v.extend_from_slice(&key_len.to_be_bytes());
        v.extend_from_slice(key.as_bytes());
    }
    v
}

/// The `(seq, idempotency key)` pairs of a [`ExpiryKind::DeliveredIdentities`] entry.
///
/// # Errors
/// [`DecodeError::Short`] for a value that ends inside a member, [`DecodeError::Utf8`] for a
/// key that is not UTF-8.
pub fn decode_expiry_members(mut v: &[u8]) -> Result<Vec<(u64, String)>, DecodeError> {
    let mut out = Vec::new();
    while !v.is_empty() {
        let head =
            v.get(..12).ok_or(DecodeError::Short("member of a delivered identities entry"))?;
        let seq = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
        let key_len = u32::from_be_bytes(head[8..].try_into().expect("4 bytes")) as usize;
        let key = v
            .get(12..12 + key_len)
            .ok_or(DecodeError::Short("key of a delivered identities entry"))?;
        let key = std::str::from_utf8(key).map_err(|_| DecodeError::Utf8("idempotency key"))?;
        out.push((seq, key.to_owned()));
        v = &v[12 + key_len..];
    }
    Ok(out)
}

/// Splits an expiry key (without its prefix) into `(due_ms, kind, seq)`.
///
/// # Errors
/// [`DecodeError::KeyLength`] for a key that is not 17 bytes, [`DecodeError::Tag`] for an
/// unknown kind.
pub fn parse_expiry_key(k: &[u8]) -> Result<(u64, ExpiryKind, u64), DecodeError> {
    let k: &[u8; 17] = k.try_into().map_err(|_| DecodeError::KeyLength(k.len()))?;
    let due = u64::from_be_bytes(k[..8].try_into().expect("8 of 17 bytes"));
    let kind = match k[8] {
        0 => ExpiryKind::Payload,
        1 => ExpiryKind::Identity,
        2 => ExpiryKind::DeliveredPayload,
        3 => ExpiryKind::DeliveredIdentity,
        4 => ExpiryKind::DeliveredPayloads,
        5 => ExpiryKind::DeliveredIdentities,
        tag => return Err(DecodeError::Tag { field: "expiry kind", tag }),
    };
    let seq = u64::from_be_bytes(k[9..].try_into().expect("8 of 17 bytes"));
    Ok((due, kind, seq))
}

/// Encodes an audit record.
pub fn encode_audit(a: &AuditRecord) -> Vec<u8> {
    let text = [&a.key, &a.destination, &a.reason, &a.state_before];
    let len: usize = text.iter().map(|t| t.as_ref().map_or(0, String::len)).sum();
    let mut e = Enc::new(48 + a.actor.len() + a.action.len() + len);
    e.u64(a.at_ms);
    e.bytes(a.actor.as_bytes());
    e.bytes(a.action.as_bytes());
    for t in text {
        e.opt_bytes(t.as_deref().map(str::as_bytes));
    }
    e.0
}

/// Decodes an audit record.
///
/// # Errors
/// [`DecodeError`] for anything but a complete record of this version.
pub fn decode_audit(v: &[u8]) -> Result<AuditRecord, DecodeError> {
    let mut d = Dec::new(v)?;
    let a = AuditRecord {
        at_ms: d.u64("at_ms")?,
        actor: d.string("actor")?,
        action: d.string("action")?,
        key: d.opt_string("key")?,
        destination: d.opt_string("destination")?,
        reason: d.opt_string("reason")?,
        state_before: d.opt_string("state_before")?,
    };
    d.end()?;
    Ok(a)
}

/// Appends fields to a value buffer.
struct Enc(Vec<u8>);

impl Enc {
    fn new(capacity: usize) -> Enc {
        let mut v = Vec::with_capacity(capacity + 1);
        v.push(VERSION);
        Enc(v)
    }
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        let len = u32::try_from(b.len()).expect("ledger fields are bounded far below 4 GiB");
        self.u32(len);
        self.0.extend_from_slice(b);
    }
    fn fixed(&mut self, b: &[u8; 32]) {
        self.0.extend_from_slice(b);
    }
    fn opt_u64(&mut self, x: Option<u64>) {
        match x {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                self.u64(x);
            }
        }
    }
    fn opt_bytes(&mut self, b: Option<&[u8]>) {
        match b {
            None => self.u8(0),
            Some(b) => {
                self.u8(1);
                self.bytes(b);
            }
        }
    }
}

/// Reads fields from a value; every read checks the remaining length.
struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn new(v: &'a [u8]) -> Result<Dec<'a>, DecodeError> {
        match v.split_first() {
            None => Err(DecodeError::Short("version")),
            Some((&VERSION, rest)) => Ok(Dec(rest)),
            Some((&other, _)) => Err(DecodeError::Version(other)),
        }
    }
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Short(field));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, field)?[0])
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes(b.try_into().expect("take returned 4 bytes")))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(8, field)?;
        Ok(u64::from_le_bytes(b.try_into().expect("take returned 8 bytes")))
    }
    fn fixed(&mut self, field: &'static str) -> Result<[u8; 32], DecodeError> {
        Ok(self.take(32, field)?.try_into().expect("take returned 32 bytes"))
    }
    fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(field)? as usize;
        self.take(len, field)
    }
    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let b = self.bytes(field)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Utf8(field))
    }
    fn present(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(DecodeError::Tag { field, tag }),
        }
    }
    fn opt_u64(&mut self, field: &'static str) -> Result<Option<u64>, DecodeError> {
        if self.present(field)? {
            self.u64(field).map(Some)
        } else {
            Ok(None)
        }
    }
    fn opt_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        if self.present(field)? {
            self.string(field).map(Some)
        } else {
            Ok(None)
        }
    }
    fn opt_bytes(&mut self, field: &'static str) -> Result<Option<Vec<u8>>, DecodeError> {
        if self.present(field)? {
            self.bytes(field).map(|b| Some(b.to_vec()))
        } else {
            Ok(None)
        }
    }
    fn end(self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.0.len()))
        }
    }
}

/// Encodes a claim (`claims/s` value).
pub fn encode_claim(c: &Claim) -> Vec<u8> {
    let error = c.last_error.as_ref().map_or(0, String::len);
    let ordering = c.ordering.as_ref().map_or(0, |o| 12 + o.value.len());
    let mut e = Enc::new(96 + c.secret_id.len() + error + ordering);
    e.u8(c.state.tag());
    e.u32(c.attempts);
    e.fixed(&c.fingerprint);
    e.u64(c.seq);
    e.u32(c.source);
    e.bytes(c.secret_id.as_bytes());
    e.u64(c.received_at_ms);
    e.opt_u64(c.delivered_at_ms);
    e.opt_u64(c.next_attempt_ms);
    e.opt_bytes(c.last_error.as_deref().map(str::as_bytes));
    if let Some(o) = &c.ordering {
        e.bytes(o.value.as_bytes());
        e.u64(o.stamp);
    }
    e.0
}

/// Decodes a claim.
///
/// # Errors
/// [`DecodeError`] for anything but a complete record of this version.
pub fn decode_claim(v: &[u8]) -> Result<Claim, DecodeError> {
    let mut d = Dec::new(v)?;
    let claim = Claim {
        state: EventState::from_tag(d.u8("state")?)?,
        attempts: d.u32("attempts")?,
        fingerprint: d.fixed("fingerprint")?,
        seq: d.u64("seq")?,
        source: d.u32("source")?,
        secret_id: d.string("secret_id")?,
        received_at_ms: d.u64("received_at_ms")?,
        delivered_at_ms: d.opt_u64("delivered_at_ms")?,
        next_attempt_ms: d.opt_u64("next_attempt_ms")?,
        last_error: d.opt_string("last_error")?,
        ordering: None,
    };
    let claim = if d.0.is_empty() {
        claim
    } else {
        let value = d.string("ordering value")?;
        Claim { ordering: Some(OrderPlace { value, stamp: d.u64("ordering stamp")? }), ..claim }
    };
    d.end()?;
    Ok(claim)
}

/// Encodes an inbox record (`inbox/s` value).
pub fn encode_inbox(r: &InboxRecord) -> Vec<u8> {
    let texts = r.key.len() + r.secret_id.len() + r.event_type.as_ref().map_or(0, String::len);
    let mut e = Enc::new(64 + texts + r.content_type.as_ref().map_or(0, Vec::len) + r.body.len());
    e.bytes(r.key.as_bytes());
    e.u32(r.source);
    e.u64(r.received_at_ms);
    e.bytes(r.secret_id.as_bytes());
    e.opt_u64(r.signed_at.map(|s| s.cast_unsigned()));
    e.opt_bytes(r.event_type.as_deref().map(str::as_bytes));
    e.opt_bytes(r.content_type.as_deref());
    e.bytes(&r.body);
    e.0
}

/// Decodes only the key and source of an inbox record (the settle path never copies bodies).
///
/// # Errors
/// [`DecodeError`] when the head is not a valid record start.
pub fn decode_inbox_head(v: &[u8]) -> Result<(String, u32), DecodeError> {
    let mut d = Dec::new(v)?;
    Ok((d.string("key")?, d.u32("source")?))
}

/// Decodes a whole inbox record.
///
/// # Errors
/// [`DecodeError`] for anything but a complete record of this version.
pub fn decode_inbox(v: &[u8]) -> Result<InboxRecord, DecodeError> {
    let mut d = Dec::new(v)?;
    let r = InboxRecord {
        key: d.string("key")?,
        source: d.u32("source")?,
        received_at_ms: d.u64("received_at_ms")?,
        secret_id: d.string("secret_id")?,
        signed_at: d.opt_u64("signed_at")?.map(u64::cast_signed),
        event_type: d.opt_string("event_type")?,
        content_type: d.opt_bytes("content_type")?,
        body: d.bytes("body")?.to_vec(),
    };
    d.end()?;
    Ok(r)
}

/// Encodes a quarantine record.
pub fn encode_quarantine(q: &QuarantineRecord) -> Vec<u8> {
    let mut e = Enc::new(88 + q.key.len());
    e.bytes(q.key.as_bytes());
    e.u32(q.source);
    e.fixed(&q.first_fingerprint);
    e.fixed(&q.new_fingerprint);
    e.u64(q.received_at_ms);
    e.0
}

/// Decodes a quarantine record.
///
/// # Errors
/// [`DecodeError`] for anything but a complete record of this version.
pub fn decode_quarantine(v: &[u8]) -> Result<QuarantineRecord, DecodeError> {
    let mut d = Dec::new(v)?;
    let q = QuarantineRecord {
        key: d.string("key")?,
        source: d.u32("source")?,
        first_fingerprint: d.fixed("first_fingerprint")?,
        new_fingerprint: d.fixed("new_fingerprint")?,
        received_at_ms: d.u64("received_at_ms")?,
    };
    d.end()?;
    Ok(q)
}

/// Encodes a rejected record.
pub fn encode_reject(r: &RejectRecord) -> Vec<u8> {
    let mut e = Enc::new(64 + r.reason.len() + r.event_id.as_ref().map_or(0, String::len));
    e.u32(r.source);
    e.u64(r.received_at_ms);
    e.bytes(r.reason.as_bytes());
    e.opt_bytes(r.event_id.as_deref().map(str::as_bytes));
    e.u64(r.body_bytes);
    e.fixed(&r.fingerprint);
    e.0
}

/// Decodes a rejected record.
///
/// # Errors
/// [`DecodeError`] for anything but a complete record of this version.
pub fn decode_reject(v: &[u8]) -> Result<RejectRecord, DecodeError> {
    let mut d = Dec::new(v)?;
    let r = RejectRecord {
        source: d.u32("source")?,
        received_at_ms: d.u64("received_at_ms")?,
        reason: d.string("reason")?,
        event_id: d.opt_string("event_id")?,
        body_bytes: d.u64("body_bytes")?,
        fingerprint: d.fixed("fingerprint")?,
    };
    d.end()?;
    Ok(r)
}

/// `inbox/s` key: the seq, 8 bytes big-endian (sorts in admission order).
pub fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// `schedule/s` key: `due_ms` BE ‖ `seq` BE (sorts by due time, then admission order).
pub fn schedule_key(due_ms: u64, seq: u64) -> [u8; 16] {
    let mut k = [0; 16];
    k[..8].copy_from_slice(&due_ms.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// `audit` key: `at_ms` BE ‖ a process-wide sequence BE (sorts by time; unique per record).
pub fn audit_key(at_ms: u64, seq: u64) -> [u8; 16] {
    schedule_key(at_ms, seq)
}

/// What the dispatcher needs from an event's claim, kept in its `schedule/s` entry's value so
/// a due scan reads the inbox record alone, not the claim as well: the attempts already made
/// and the event's ordering place (R22). Written with the claim, in the same batch, whenever
/// the entry is put (admission, retry, replay), so the two always agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleValue {
    /// Attempts made before this entry's attempt.
    pub attempts: u32,
    /// The event's place in its ordering group; `None` when unordered.
    pub ordering: Option<OrderPlace>,
}

/// Encodes the `schedule/s` value of an event in `claim`'s state.
pub fn encode_schedule(claim: &Claim) -> Vec<u8> {
    let extra = claim.ordering.as_ref().map_or(0, |o| 12 + o.value.len());
    let mut e = Enc::new(8 + extra);
    e.u32(claim.attempts);
    if let Some(o) = &claim.ordering {
        e.bytes(o.value.as_bytes());
        e.u64(o.stamp);
    }
    e.0
}

/// Decodes a `schedule/s` value: `None` for the empty value of entries written before the
/// value existed (their reader falls back to the claim).
///
/// # Errors
/// [`DecodeError`] for anything but an empty or complete value of this version.
pub fn decode_schedule(v: &[u8]) -> Result<Option<ScheduleValue>, DecodeError> {
    if v.is_empty() {
        return Ok(None);
    }
    let mut d = Dec::new(v)?;
    let attempts = d.u32("attempts")?;
    let ordering = if d.0.is_empty() {
        None
    } else {
        let value = d.string("ordering value")?;
        Some(OrderPlace { value, stamp: d.u64("ordering stamp")? })
    };
    d.end()?;
    Ok(Some(ScheduleValue { attempts, ordering }))
}

/// Splits a `schedule/s` key into `(due_ms, seq)`.
///
/// # Errors
/// [`DecodeError::KeyLength`] when it is not 16 bytes.
pub fn parse_schedule_key(k: &[u8]) -> Result<(u64, u64), DecodeError> {
    let k: &[u8; 16] = k.try_into().map_err(|_| DecodeError::KeyLength(k.len()))?;
    let due = u64::from_be_bytes(k[..8].try_into().expect("8 of 16 bytes"));
    let seq = u64::from_be_bytes(k[8..].try_into().expect("8 of 16 bytes"));
    Ok((due, seq))
}

/// A meta counter value: `u64` big-endian.
///
/// # Errors
/// [`DecodeError::KeyLength`] when it is not 8 bytes.
pub fn parse_u64(v: &[u8]) -> Result<u64, DecodeError> {
    let b: [u8; 8] = v.try_into().map_err(|_| DecodeError::KeyLength(v.len()))?;
    Ok(u64::from_be_bytes(b))
}

/// FNV-1a, 64 bit, of `bytes`: the key → shard map (stable forever; see `Ledger::shard_of`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// Lower-case hex of a fingerprint, for views.
pub fn hex32(b: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for &x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 0xf)]));
    }
    s
}

/// Cuts `s` to at most `max` bytes on a character boundary (attempt errors, R28).
pub fn truncate_utf8(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Claim {
        Claim {
            state: EventState::Failed,
            attempts: 3,
            fingerprint: [7; 32],
            seq: 42,
            source: 2,
            secret_id: "k2".into(),
            received_at_ms: 1_700_000_000_000,
            delivered_at_ms: None,
            next_attempt_ms: Some(1_700_000_001_000),
            last_error: Some("503 from destination".into()),
            ordering: None,
        }
    }

    /// R22: an ordered claim round-trips; cut at the end of the unordered fields it reads as
    /// unordered (how claims written before ordering existed decode); any other cut fails.
    #[test]
    fn ordered_claims_round_trip_and_older_claims_read_as_unordered() {
        let ordered = Claim {
            ordering: Some(OrderPlace { value: "cus_1".into(), stamp: 1_700_000_000_000_123 }),
            ..claim()
        };
        let bytes = encode_claim(&ordered);
        assert_eq!(decode_claim(&bytes), Ok(ordered));
        let plain = encode_claim(&claim());
        assert_eq!(bytes[..plain.len()], plain[..]);
        assert_eq!(decode_claim(&plain), Ok(claim()));
        for cut in plain.len() + 1..bytes.len() {
            assert!(decode_claim(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// The schedule value round-trips with and without an ordering place, every cut of it
    /// fails, and the empty value of older entries reads as absent (the claim is read then).
    #[test]
    fn schedule_values_round_trip_and_the_empty_value_reads_as_absent() {
        let ordered = Claim {
            ordering: Some(OrderPlace { value: "cus_1".into(), stamp: 1_700_000_000_000_123 }),
            ..claim()
        };
        let plain = encode_schedule(&claim());
        let bytes = encode_schedule(&ordered);
        for (c, bytes) in [(claim(), &plain), (ordered, &bytes)] {
            let want = ScheduleValue { attempts: c.attempts, ordering: c.ordering };
            assert_eq!(decode_schedule(bytes), Ok(Some(want)));
        }
        // The ordering place is optional and last: only a cut right before it decodes.
        assert_eq!(bytes[..plain.len()], plain[..]);
        for cut in (1..bytes.len()).filter(|&cut| cut != plain.len()) {
            assert!(decode_schedule(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(decode_schedule(&[]), Ok(None));
    }

    fn inbox() -> InboxRecord {
        InboxRecord {
            key: "t/s/evt_1".into(),
            source: 1,
            received_at_ms: 5,
            secret_id: "k1".into(),
            signed_at: Some(-3),
            event_type: Some("invoice.paid".into()),
            content_type: Some(b"application/json".to_vec()),
            body: b"{\"id\":\"evt_1\"}".to_vec(),
        }
    }

    /// Encodes, decodes, compares, then checks that every strict prefix and one trailing byte
    /// fail to decode.
    fn check<T: PartialEq + std::fmt::Debug>(
        value: &T,
        enc: fn(&T) -> Vec<u8>,
        dec: fn(&[u8]) -> Result<T, DecodeError>,
    ) {
        let bytes = enc(value);
        assert_eq!(dec(&bytes).as_ref(), Ok(value));
        for n in 0..bytes.len() {
            assert!(dec(&bytes[..n]).is_err(), "prefix of {n} bytes decoded");
        }
        let mut long = bytes.clone();
        long.push(0);
        // Trailing bytes, or (claims) the start of an incomplete optional ordering place.
        assert!(
            matches!(dec(&long), Err(DecodeError::Trailing(1) | DecodeError::Short(_))),
            "one trailing byte decoded"
        );
        let mut versioned = bytes;
        versioned[0] = 9;
        assert_eq!(dec(&versioned), Err(DecodeError::Version(9)));
    }

    #[test]
    fn records_roundtrip_and_reject_garbage() {
        check(&claim(), encode_claim, decode_claim);
        let plain = Claim { last_error: None, next_attempt_ms: None, ..claim() };
        check(&plain, encode_claim, decode_claim);
        check(&inbox(), encode_inbox, decode_inbox);
        let bare = InboxRecord { signed_at: None, event_type: None, content_type: None, ..inbox() };
        check(&bare, encode_inbox, decode_inbox);
        let q = QuarantineRecord {
            key: "t/s/e".into(),
            source: 0,
            first_fingerprint: [1; 32],
            new_fingerprint: [2; 32],
            received_at_ms: 9,
        };
        check(&q, encode_quarantine, decode_quarantine);
        let r = RejectRecord {
            source: 4,
            received_at_ms: 10,
            reason: "no_stable_id".into(),
            event_id: Some("e".into()),
            body_bytes: 77,
            fingerprint: [3; 32],
        };
        check(&r, encode_reject, decode_reject);
        let a = AuditRecord {
            at_ms: 11,
            actor: "0a1b2c3d".into(),
            action: "drop".into(),
            key: Some("t/s/e".into()),
            destination: None,
            reason: Some("duplicate of evt_2".into()),
            state_before: Some("dead".into()),
        };
        check(&a, encode_audit, decode_audit);
        let t = AttemptRecord {
            attempt: 2,
            at_ms: 12,
            outcome: "retry".into(),
            error: Some("status 503".into()),
        };
        check(&t, encode_attempt, decode_attempt);
        check(&AttemptRecord { error: None, ..t }, encode_attempt, decode_attempt);
    }

    /// Each encoder sizes its buffer once, counting every variable field: with every text 300
    /// bytes long, a field left out of the estimate makes the buffer grow (doubling, a copy of
    /// the whole value, the body included for inbox records), which leaves it far over the
    /// value's length.
    #[test]
    fn encoders_size_their_buffer_once() {
        let text = || "x".repeat(300);
        let once = |what: &str, bytes: Vec<u8>| {
            assert!(
                bytes.capacity() <= bytes.len() + 128,
                "{what}: {} bytes in a buffer of {}: the estimate missed a field",
                bytes.len(),
                bytes.capacity()
            );
        };
        let ordering = Some(OrderPlace { value: text(), stamp: 1 });
        let c = Claim { secret_id: text(), last_error: Some(text()), ordering, ..claim() };
        once("claim", encode_claim(&c));
        once("schedule", encode_schedule(&c));
        let r = InboxRecord {
            key: text(),
            secret_id: text(),
            event_type: Some(text()),
            content_type: Some(text().into_bytes()),
            body: text().into_bytes(),
            ..inbox()
        };
        once("inbox", encode_inbox(&r));
        let q = QuarantineRecord {
            key: text(),
            source: 0,
            first_fingerprint: [1; 32],
            new_fingerprint: [2; 32],
            received_at_ms: 9,
        };
        once("quarantine", encode_quarantine(&q));
        let reject = RejectRecord {
            source: 4,
            received_at_ms: 10,
            reason: text(),
            event_id: Some(text()),
            body_bytes: 77,
            fingerprint: [3; 32],
        };
        once("reject", encode_reject(&reject));
        let a = AuditRecord {
            at_ms: 11,
            actor: text(),
            action: text(),
            key: Some(text()),
            destination: Some(text()),
            reason: Some(text()),
            state_before: Some(text()),
        };
        once("audit", encode_audit(&a));
        let t = AttemptRecord { attempt: 2, at_ms: 12, outcome: text(), error: Some(text()) };
        once("attempt", encode_attempt(&t));
    }

    #[test]
    fn garbage_and_bad_tags_are_errors() {
        assert!(decode_claim(&[]).is_err());
        assert!(decode_claim(&[0xff; 40]).is_err());
        let mut bad_state = encode_claim(&claim());
        bad_state[1] = 9;
        assert_eq!(decode_claim(&bad_state), Err(DecodeError::Tag { field: "state", tag: 9 }));
        assert_eq!(decode_inbox_head(&encode_inbox(&inbox())), Ok(("t/s/evt_1".into(), 1)));
    }

    #[test]
    fn keys_sort_and_parse() {
        assert!(schedule_key(1, 9) < schedule_key(2, 0));
        assert!(schedule_key(1, 1) < schedule_key(1, 2));
        assert_eq!(parse_schedule_key(&schedule_key(77, 5)), Ok((77, 5)));
        assert!(parse_schedule_key(&[0; 15]).is_err());
        assert!(seq_key(255) < seq_key(256));
        let e = expiry_key(5, ExpiryKind::Identity, 9);
        assert_eq!(parse_expiry_key(&e), Ok((5, ExpiryKind::Identity, 9)));
        for kind in [
            ExpiryKind::Payload,
            ExpiryKind::Identity,
            ExpiryKind::DeliveredPayload,
            ExpiryKind::DeliveredIdentity,
            ExpiryKind::DeliveredPayloads,
            ExpiryKind::DeliveredIdentities,
        ] {
            assert_eq!(parse_expiry_key(&expiry_key(5, kind, 9)), Ok((5, kind, 9)));
        }
        assert!(expiry_key(4, ExpiryKind::Identity, 9) < expiry_key(5, ExpiryKind::Payload, 0));
        let mut bad = e;
        bad[8] = 7;
        assert!(parse_expiry_key(&bad).is_err());
    }

    /// The lists of a group commit's expiry entries decode to what was encoded, and a value
    /// cut anywhere inside a member is an error, not a shorter list.
    #[test]
    fn expiry_lists_round_trip_and_refuse_a_cut_value() {
        let seqs = encode_expiry_seqs([7, u64::MAX, 0].into_iter());
        assert_eq!(decode_expiry_seqs(&seqs), Ok(vec![7, u64::MAX, 0]));
        assert_eq!(decode_expiry_seqs(&[]), Ok(vec![]));
        let members = [(3, "t/s/evt_é"), (9, ""), (12, "t/s/x")];
        let value = encode_expiry_members(members.iter().copied());
        let decoded = decode_expiry_members(&value).expect("decodes");
        let decoded: Vec<(u64, &str)> = decoded.iter().map(|(q, k)| (*q, k.as_str())).collect();
        assert_eq!(decoded, members);
        let whole = [12 + "t/s/evt_é".len(), 12 + "t/s/evt_é".len() + 12, value.len()];
        for cut in 1..value.len() {
            if !whole.contains(&cut) {
                assert!(decode_expiry_members(&value[..cut]).is_err(), "cut at {cut}");
            }
        }
        for cut in 1..seqs.len() {
            assert_eq!(
                cut.is_multiple_of(8),
                decode_expiry_seqs(&seqs[..cut]).is_ok(),
                "cut at {cut}"
            );
        }
        let mut bad_utf8 = encode_expiry_members([(1, "ab")].into_iter());
        bad_utf8[12] = 0xff;
        assert_eq!(decode_expiry_members(&bad_utf8), Err(DecodeError::Utf8("idempotency key")));
    }

    #[test]
    fn fnv_hex_and_truncate() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(&hex32(&[0xab; 32])[..4], "abab");
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("abc", 5), "abc");
        let codes: Vec<_> =
            [EventState::Received, EventState::Dropped].map(EventState::code).into();
        assert_eq!(codes, ["received", "dropped"]);
    }
}

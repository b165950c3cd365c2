//! One attempt to a `kind = "nats"` destination: publish the event's exact body to the
//! destination's subject through JetStream (official `async-nats` client), with
//! `Nats-Msg-Id` = the idempotency key, so JetStream's duplicate window stores a repeated
//! publish once (R21: a retry after a lost ack is not a second message). Delivered = the
//! publish ack arrived from the configured stream. The forwarding headers of SPEC §5 travel
//! as NATS headers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;

use super::attempt::Target;
use super::classify::AttemptResult;
use crate::config::NatsTarget;
use crate::ledger::DueEvent;

/// A server URL's client, connected on first use and reconnecting by itself afterwards;
/// replaced after a panic inside the client library (tagged with [`CONTAINED_PANICS`] at
/// connect). Its lock is held across a connect, so attempts to one URL wait for one connect
/// rather than each opening its own.
type Slot = Arc<tokio::sync::Mutex<Option<(async_nats::Client, u64)>>>;

/// The slot of `url`: one per server URL, so a connect that hangs (an address that accepts and
/// never answers) holds up only the attempts to that URL. The map's own lock is held only to
/// find the slot. (It was one lock over every URL, held across the connect: one unreachable
/// NATS server delayed every NATS destination by up to its `timeout` per attempt.)
fn slot(url: &str) -> Slot {
    static SLOTS: OnceLock<std::sync::Mutex<HashMap<String, Slot>>> = OnceLock::new();
    let slots = SLOTS.get_or_init(Default::default);
    let mut slots = slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(slots.entry(url.to_owned()).or_default())
}

/// Panics inside the client library contained so far ([`contain_panic`]). A client connected
/// before the latest may have lost its connection task to it, and would fail every later
/// publish: [`client`] connects anew instead.
static CONTAINED_PANICS: AtomicU64 = AtomicU64::new(0);

async fn client(url: &str, timeout: Duration) -> Result<async_nats::Client, AttemptResult> {
    let slot = slot(url);
    let mut cached = slot.lock().await;
    let panics = CONTAINED_PANICS.load(Ordering::SeqCst);
    if let Some((c, at)) = cached.as_ref() {
        if *at == panics {
            return Ok(c.clone());
        }
    }
    let options = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .name(concat!("hookwall/", env!("CARGO_PKG_VERSION")));
    match options.connect(url).await {
        Ok(c) => {
            *cached = Some((c.clone(), panics));
            Ok(c)
        }
        Err(e) => {
            *cached = None;
            Err(AttemptResult::Connect(super::attempt::short(&e.to_string())))
        }
    }
}

/// Whether a panic at source file `file` (its `Location`) happened inside the NATS client
/// library: async-nats 0.51 panics on some malformed server input — an `-ERR` line without a
/// message, a `MSG` length near `usize::MAX` (an overflow only because `overflow-checks` is on
/// in the release profile; without it the wrapped length would panic in `bytes`, which is not
/// contained), a header value with a bare CR — so whoever answers on a destination's NATS
/// address could otherwise abort hookwall, and again at every restart while the event is due.
fn is_nats_client_panic(file: &str) -> bool {
    file.contains("/async-nats-") || file.starts_with("async-nats-")
}

/// Called by `serve`'s panic hook (`cli::abort_on_panic`) for every panic: true — contain it,
/// do not abort — when it is the NATS client library's ([`is_nats_client_panic`]). The panic
/// then unwinds the client's connection task or an attempt's publish task ([`publish`]): the
/// attempt fails, and every cached client is replaced at its next use.
pub fn contain_panic(file: &str) -> bool {
    let ours = is_nats_client_panic(file);
    if ours {
        CONTAINED_PANICS.fetch_add(1, Ordering::SeqCst);
    }
    ours
}

/// Publishes attempt `attempt` of `event` and waits for the stream's ack, all within
/// `target.timeout`. Ack from `nats.stream` → `Status { code: 200 }` (delivered); an ack from
/// another stream (the subject is bound elsewhere) → 409, a permanent failure; no ack in time →
/// `Timeout`; no stream listens on the subject → `Other` (retried).
///
/// The publish runs in its own task, so a panic inside the client library
/// ([`contain_panic`]) fails this attempt (`Other`) instead of the attempt task. The headers
/// are the forwarding headers' checked values (visible ASCII) and `Nats-Msg-Id` is
/// [`nats_msg_id`], so the library's header asserts cannot fire on them.
pub(super) async fn publish(
    target: &Target,
    nats: &NatsTarget,
    event: &DueEvent,
    body: Vec<u8>,
    attempt: u32,
) -> AttemptResult {
    let (url, timeout) = (target.url.clone(), target.timeout);
    let (subject, stream) = (nats.subject.clone(), nats.stream.clone());
    let forwarded = super::attempt::forward_headers(target, event, attempt);
    let msg_id = nats_msg_id(&event.key);
    let work = async move {
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in &forwarded {
            if let Ok(value) = value.to_str() {
                headers.insert(train_case(name.as_str()).as_str(), value);
            }
        }
        headers.insert("Nats-Msg-Id", msg_id.as_str());
        let client = client(&url, timeout).await?;
        let js = async_nats::jetstream::new(client);
        let ack = js
            .publish_with_headers(subject, headers, body.into())
            .await
            .map_err(|e| AttemptResult::Other(super::attempt::short(&e.to_string())))?
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::TimedOut => AttemptResult::Timeout,
                _ => AttemptResult::Other(super::attempt::short(&e.to_string())),
            })?;
        if ack.stream == stream {
            Ok(AttemptResult::Status { code: 200, retry_after: None })
        } else {
            Ok(AttemptResult::Status { code: 409, retry_after: None })
        }
    };
    let mut task = tokio::spawn(work);
    match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(Ok(result) | Err(result))) => result,
        Ok(Err(e)) => {
            AttemptResult::Other(super::attempt::short(&format!("the NATS client failed: {e}")))
        }
        Err(_) => {
            task.abort();
            AttemptResult::Timeout
        }
    }
}

/// `Nats-Msg-Id` of the event with idempotency key `key`: the key itself — UTF-8 included, as
/// NATS headers allow — with only CR and LF, which a NATS header value cannot hold (async-nats
/// asserts it), written `%0D` and `%0A`, and therefore `%` written `%25`: distinct keys keep
/// distinct ids (JetStream drops a second message with the same id as a duplicate; unescaped,
/// a key `a%0Db` and a key `a\rb` would share one and one event would be lost).
fn nats_msg_id(key: &str) -> String {
    if key.contains(['\r', '\n', '%']) {
        key.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
    } else {
        key.to_owned()
    }
}

/// `idempotency-key` → `Idempotency-Key`: NATS header names are case-sensitive, so the
/// forwarding headers keep the spelling SPEC §5 gives them.
fn train_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::AttemptResult;

    /// Where rustc places a registry crate's panics (CI's `$CARGO_HOME` included), and
    /// nothing of hookwall's own or of another crate.
    #[test]
    fn only_the_nats_client_crate_s_panics_are_contained() {
        for file in [
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/async-nats-0.51.0/src/connection.rs",
            "/home/ci/.cargo/registry/src/index.crates.io-0000/async-nats-0.52.1/src/header.rs",
            "async-nats-0.51.0/src/connection.rs",
        ] {
            assert!(super::is_nats_client_panic(file), "{file}");
        }
        for file in [
            "src/dispatch/nats.rs",
            "src/ledger/writer.rs",
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rocksdb-0.24.0/src/db.rs",
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/nats-0.1.0/src/lib.rs",
        ] {
            assert!(!super::is_nats_client_panic(file), "{file}");
        }
    }

    #[test]
    fn the_msg_id_is_the_key_with_only_cr_lf_and_percent_escaped() {
        assert_eq!(super::nats_msg_id("acme/stripe/evt_1"), "acme/stripe/evt_1");
        assert_eq!(super::nats_msg_id("acme/stripe/évt 41"), "acme/stripe/évt 41");
        assert_eq!(super::nats_msg_id("acme/stripe/a\r\nb"), "acme/stripe/a%0D%0Ab");
        assert_eq!(super::nats_msg_id("acme/stripe/%41"), "acme/stripe/%2541");
        let id = super::nats_msg_id("acme/stripe/a\r\nb");
        assert!(id.parse::<async_nats::HeaderValue>().is_ok(), "a valid NATS header value");
    }

    /// Distinct idempotency keys get distinct message ids, the escapes included (a key may
    /// spell out what another's escape produces).
    #[test]
    fn distinct_keys_keep_distinct_msg_ids() {
        let keys =
            ["a/b/c\rd", "a/b/c%0Dd", "a/b/c%250Dd", "a/b/c%d", "a/b/c%25d", "a/b/c\n", "a/b/c%0A"];
        let ids: std::collections::HashSet<String> =
            keys.iter().map(|k| super::nats_msg_id(k)).collect();
        assert_eq!(ids.len(), keys.len(), "{ids:?}");
    }

    /// A NATS server address that accepts and never speaks holds up only its own attempts: a
    /// connect to another URL (here a closed port, refused at once) is not queued behind it.
    /// Before, one lock over every URL was held across the connect, so the second attempt
    /// waited for the first one's whole connect timeout (found by an audit of the dispatcher).
    #[test]
    fn a_hanging_connect_holds_up_only_its_own_url() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
        let silent_url = format!("nats://{}", silent.local_addr().expect("addr"));
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
        let closed_url = format!("nats://{}", closed.local_addr().expect("addr"));
        drop(closed);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let hanging = tokio::spawn(async move {
                super::client(&silent_url, Duration::from_secs(30)).await.map(|_| ())
            });
            // The first connect is under way (and holds its URL's lock) once accepted.
            let (_held, _) = tokio::task::spawn_blocking(move || silent.accept())
                .await
                .expect("joins")
                .expect("the first connect arrives");
            let other = super::client(&closed_url, Duration::from_secs(5));
            let other = tokio::time::timeout(Duration::from_secs(15), other).await;
            assert!(
                matches!(other, Ok(Err(AttemptResult::Connect(_)))),
                "the refused URL waited behind the silent one: {other:?}"
            );
            assert!(!hanging.is_finished(), "the silent URL's connect is still waiting");
            hanging.abort();
        });
    }

    #[test]
    fn header_names_keep_the_spec_spelling() {
        assert_eq!(super::train_case("idempotency-key"), "Idempotency-Key");
        assert_eq!(super::train_case("hookwall-received-at"), "Hookwall-Received-At");
        assert_eq!(super::train_case("content-type"), "Content-Type");
    }
}

//! One attempt to a `kind = "nats"` destination: publish the event's exact body to the
//! destination's subject through JetStream (official `async-nats` client), with
//! `Nats-Msg-Id` = the idempotency key, so JetStream's duplicate window stores a repeated
//! publish once (R21: a retry after a lost ack is not a second message). Delivered = the
//! publish ack arrived from the configured stream. The forwarding headers of SPEC §5 travel
//! as NATS headers.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;

use super::attempt::Target;
use super::classify::AttemptResult;
use crate::config::NatsTarget;
use crate::ledger::DueEvent;

/// One client per server URL, connected on first use and reconnecting by itself afterwards.
fn clients() -> &'static tokio::sync::Mutex<HashMap<String, async_nats::Client>> {
    static CLIENTS: OnceLock<tokio::sync::Mutex<HashMap<String, async_nats::Client>>> =
        OnceLock::new();
    CLIENTS.get_or_init(|| tokio::sync::Mutex::new(HashMap::new()))
}

async fn client(url: &str, timeout: Duration) -> Result<async_nats::Client, AttemptResult> {
    let mut clients = clients().lock().await;
    if let Some(c) = clients.get(url) {
        return Ok(c.clone());
    }
    let options = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .name(concat!("hookwall/", env!("CARGO_PKG_VERSION")));
    match options.connect(url).await {
        Ok(c) => {
            clients.insert(url.to_owned(), c.clone());
            Ok(c)
        }
        Err(e) => Err(AttemptResult::Connect(super::attempt::short(&e.to_string()))),
    }
}

/// Publishes attempt `attempt` of `event` and waits for the stream's ack, all within
/// `target.timeout`. Ack from `nats.stream` → `Status { code: 200 }` (delivered); an ack from
/// another stream (the subject is bound elsewhere) → 409, a permanent failure; no ack in time →
/// `Timeout`; no stream listens on the subject → `Other` (retried).
pub(super) async fn publish(
    target: &Target,
    nats: &NatsTarget,
    event: &DueEvent,
    body: Vec<u8>,
    attempt: u32,
) -> AttemptResult {
    let work = async {
        let client = client(&target.url, target.timeout).await?;
        let js = async_nats::jetstream::new(client);
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in &super::attempt::forward_headers(target, event, attempt) {
            if let Ok(value) = value.to_str() {
                headers.insert(train_case(name.as_str()).as_str(), value);
            }
        }
        headers.insert("Nats-Msg-Id", event.key.as_str());
        let ack = js
            .publish_with_headers(nats.subject.clone(), headers, body.into())
            .await
            .map_err(|e| AttemptResult::Other(super::attempt::short(&e.to_string())))?
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::TimedOut => AttemptResult::Timeout,
                _ => AttemptResult::Other(super::attempt::short(&e.to_string())),
            })?;
        if ack.stream == nats.stream {
            Ok(AttemptResult::Status { code: 200, retry_after: None })
        } else {
            Ok(AttemptResult::Status { code: 409, retry_after: None })
        }
    };
    match tokio::time::timeout(target.timeout, work).await {
        Ok(Ok(result) | Err(result)) => result,
        Err(_) => AttemptResult::Timeout,
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
    #[test]
    fn header_names_keep_the_spec_spelling() {
        assert_eq!(super::train_case("idempotency-key"), "Idempotency-Key");
        assert_eq!(super::train_case("hookwall-received-at"), "Hookwall-Received-At");
        assert_eq!(super::train_case("content-type"), "Content-Type");
    }
}

//! Hot reload on SIGHUP (issue 7, R3): secrets rotate and destinations move without a restart;
//! a bad file, or a change only a restart can make, is refused with its reason logged while the
//! running configuration keeps serving.

use crate::harness::{self, Fixture, Io, Setup};
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};
use std::time::{Duration, Instant};

/// Delivers a fresh Stripe event to `stripe-a` signed with `secret`; returns `(status, code)`.
fn deliver_signed(f: &Fixture, secret: &str) -> (u16, String) {
    let id = sign::unique_id("evt_reload");
    let body = sign::body(Provider::Stripe, &id, "reload");
    let headers = sign::headers(Provider::Stripe, secret, &id, sign::now_unix_s(), &body);
    f.hw.post("stripe-a", &headers, &body).answer()
}

/// `setup` with `stripe-a`'s keys replaced by `secrets`.
fn with_stripe_a_secrets(setup: &Setup, secrets: Vec<(&'static str, &'static str)>) -> Setup {
    let mut setup = setup.clone();
    let source = setup.sources.iter_mut().find(|s| s.id == "stripe-a").expect("stripe-a");
    source.secrets = secrets;
    setup
}

on_both_io! {
    /// R3, issue 7: a key rotated in the file is in force right after SIGHUP — the new key is
    /// accepted, the removed one is `signature_invalid` — with no restart (same process, same
    /// connections).
    fn sighup_rotates_secrets_without_restart(io: Io) {
        let mut f = Fixture::new(io, Script::always(200));
        let accepted = (200, "accepted".to_owned());
        let invalid = (401, "signature_invalid".to_owned());
        assert_eq!(deliver_signed(&f, sign::STRIPE_SECRET), accepted);
        assert_eq!(deliver_signed(&f, sign::STRIPE_NEW_SECRET), invalid, "not yet configured");

        let rotated = with_stripe_a_secrets(&f.hw.setup, vec![("k2", sign::STRIPE_NEW_SECRET)]);
        assert!(f.hw.reload(&rotated), "the reload is applied:\n{}", f.hw.stderr());
        assert_eq!(deliver_signed(&f, sign::STRIPE_NEW_SECRET), accepted, "the new key works");
        assert_eq!(deliver_signed(&f, sign::STRIPE_SECRET), invalid, "the removed key is refused");
        assert!(f.hw.stderr().contains("configuration reloaded"), "{}", f.hw.stderr());
    }
}

/// Issue 7: a file with errors is refused as a whole, every error logged with its field, and
/// the old configuration keeps serving (the old key still verifies).
#[test]
fn bad_file_is_refused_and_the_running_config_stays() {
    let mut f = Fixture::new(Io::Auto, Script::always(200));
    let mut bad = with_stripe_a_secrets(&f.hw.setup, vec![("k2", sign::STRIPE_NEW_SECRET)]);
    bad.backoff_min = "soon";
    assert!(!f.hw.reload(&bad), "a bad file is refused");
    let log = f.hw.stderr();
    assert!(log.contains("backoff_min"), "the bad field is named:\n{log}");
    assert!(log.contains("reload_rejected"), "the reason code is logged:\n{log}");
    assert_eq!(deliver_signed(&f, sign::STRIPE_SECRET), (200, "accepted".to_owned()));
    assert_eq!(deliver_signed(&f, sign::STRIPE_NEW_SECRET), (401, "signature_invalid".to_owned()));
    let text = String::from_utf8_lossy(&f.hw.admin_get("/metrics").body).into_owned();
    let reloads = |outcome: &str| {
        crate::metrics::sample(&text, "hookwall_config_reloads_total", &[("outcome", outcome)])
    };
    assert_eq!(reloads("rejected"), Some(1.0), "metrics:\n{text}");
    assert_eq!(reloads("applied"), Some(0.0), "metrics:\n{text}");
    let ok = crate::metrics::sample(&text, "hookwall_config_last_reload_successful", &[]);
    assert_eq!(ok, Some(0.0), "the refused reload shows; metrics:\n{text}");

    let good = f.hw.setup.clone();
    assert!(f.hw.reload(&good), "the fixed file is applied:\n{}", f.hw.stderr());
    let text = String::from_utf8_lossy(&f.hw.admin_get("/metrics").body).into_owned();
    let ok = crate::metrics::sample(&text, "hookwall_config_last_reload_successful", &[]);
    assert_eq!(ok, Some(1.0), "metrics:\n{text}");
}

/// Issue 7: changes only a restart can make — here a new source and a different core count —
/// are refused with the fields named and "restart" said; nothing of the file is applied, not
/// even the key rotation that came with it.
#[test]
fn changes_that_need_a_restart_are_refused_whole() {
    let mut f = Fixture::new(Io::Auto, Script::always(200));
    let mut changed = with_stripe_a_secrets(&f.hw.setup, vec![("k2", sign::STRIPE_NEW_SECRET)]);
    changed.cores = 1;
    changed.sources.push(harness::Source { id: "stripe-new", ..harness::stripe_a() });
    assert!(!f.hw.reload(&changed), "refused:\n{}", f.hw.stderr());
    let log = f.hw.stderr();
    assert!(log.contains("server.cores changed"), "names server.cores:\n{log}");
    assert!(log.contains("the list of sources changed"), "names the sources:\n{log}");
    assert!(log.contains("restart"), "says a restart applies it:\n{log}");
    assert_eq!(deliver_signed(&f, sign::STRIPE_SECRET), (200, "accepted".to_owned()));
    assert_eq!(deliver_signed(&f, sign::STRIPE_NEW_SECRET), (401, "signature_invalid".to_owned()));
}

/// Issue 7: a destination's URL changed in the file takes effect on SIGHUP: events admitted
/// afterwards are forwarded to the new URL, none to the old one.
#[test]
fn sighup_moves_a_destination() {
    let mut f = Fixture::new(Io::Auto, Script::always(200));
    let source = harness::stripe_a();
    let id = sign::unique_id("evt_old_sink");
    let r = f.hw.deliver(&source, &id, &sign::body(Provider::Stripe, &id, "old"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    f.sink.wait_for_key(&source.key(&id), 1, harness::FORWARD_TIMEOUT);

    let new_sink = Sink::start(Script::always(200));
    let mut moved = f.hw.setup.clone();
    moved.destination_url = new_sink.url();
    assert!(f.hw.reload(&moved), "applied:\n{}", f.hw.stderr());
    let id = sign::unique_id("evt_new_sink");
    let r = f.hw.deliver(&source, &id, &sign::body(Provider::Stripe, &id, "new"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    new_sink.wait_for_key(&source.key(&id), 1, harness::FORWARD_TIMEOUT);
    assert!(f.sink.for_key(&source.key(&id)).is_empty(), "nothing went to the old URL");
}

/// The admin token is re-read from `admin.token_file` on SIGHUP: after rewriting the file and
/// reloading, the new token is accepted and the old one is 401 (docs/admin.md; the docs said
/// "read once at start" until a bad-input review found otherwise).
#[test]
fn sighup_rotates_the_admin_token() {
    let mut f = Fixture::with(Io::Auto, Script::always(200), |setup| {
        setup.admin_token = Some("old-admin-token".to_owned());
    });
    let admin = f.hw.admin;
    let list = |token: &str| {
        let auth = vec![("Authorization".to_owned(), format!("Bearer {token}"))];
        crate::client::send_one(admin, "GET", "/admin/audit", &auth, b"").status
    };
    assert_eq!(list("old-admin-token"), 200);
    assert_eq!(list("new-admin-token"), 401);
    let mut rotated = f.hw.setup.clone();
    rotated.admin_token = Some("new-admin-token".to_owned());
    assert!(f.hw.reload(&rotated), "the reload is applied:\n{}", f.hw.stderr());
    assert_eq!(list("new-admin-token"), 200, "the new token works");
    assert_eq!(list("old-admin-token"), 401, "the old token is refused");
}

/// Issue 7 (found in review, fixed in stop 36): a reload that shortens a destination's
/// `timeout` applies to the next attempt, also one the `http://` client would have pipelined
/// behind a slow request started under the old timeout. Its connection watched only the
/// deadline of the request at its head, so the new attempt timed out only when the slow
/// answer came (30 s here), not after its own 1 s. The retry arriving well before the slow
/// answer could have is the proof.
#[test]
fn a_shortened_destination_timeout_applies_to_the_next_attempt() {
    let slow = Duration::from_secs(30);
    let mut f = Fixture::with(Io::Auto, Script::always(200).slow(slow), |s| {
        s.destination_timeout = "60s";
        // One connection (`concurrency_max` 16 / `pipeline` 16), so the next request queues behind.
        s.destination_extra = "pipeline = 16".to_owned();
    });
    let source = harness::stripe_a();
    let first = sign::unique_id("evt_slow_head");
    let r = f.hw.deliver(&source, &first, &sign::body(Provider::Stripe, &first, "head"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    f.sink.wait_for_key(&source.key(&first), 1, harness::FORWARD_TIMEOUT);

    let mut shorter = f.hw.setup.clone();
    shorter.destination_timeout = "1s";
    assert!(f.hw.reload(&shorter), "applied:\n{}", f.hw.stderr());
    let started = Instant::now();
    let next = sign::unique_id("evt_after_reload");
    let r = f.hw.deliver(&source, &next, &sign::body(Provider::Stripe, &next, "next"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    // Attempt 1 times out after 1 s, attempt 2 follows after a 10-50 ms backoff.
    let seen = f.sink.wait_for_key(&source.key(&next), 2, slow / 2);
    let retried = seen[1].arrived_at.duration_since(started);
    assert!(retried < slow / 2, "the retry came {retried:?} after the reload");
}

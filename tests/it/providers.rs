//! The providers added after stripe, github and standard v1 (issue 3), each through the running
//! server on both back ends: a signed delivery is `accepted` and forwarded once byte for byte
//! with the matched key id recorded; the provider's retry is a `duplicate`; a changed body, a
//! wrong key and (for timestamped schemes) a stale or future timestamp are refused with the
//! SPEC §3 answer. Signing is `sign.rs`'s, written from the providers' documentation
//! independently of `src/`.

use crate::client::Response;
use crate::harness::{Fixture, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::Script;

/// `standard-v1a`: Standard Webhooks with an Ed25519 public key first and a v1 HMAC key second
/// (a source moving from symmetric to asymmetric signing).
fn standard_v1a() -> Source {
    Source {
        id: "standard-v1a",
        tenant: "globex",
        provider: Provider::StandardV1a,
        secrets: vec![("k-pk", sign::STANDARD_V1A_PUBLIC), ("k-sym", sign::STANDARD_SECRET)],
        event_types: Vec::new(),
    }
}

/// `slack-a`: Slack, one key.
fn slack_a() -> Source {
    Source {
        id: "slack-a",
        tenant: "acme",
        provider: Provider::Slack,
        secrets: vec![("k1", sign::SLACK_SECRET)],
        event_types: Vec::new(),
    }
}

/// `svix-a`: Svix, one key.
fn svix_a() -> Source {
    Source {
        id: "svix-a",
        tenant: "acme",
        provider: Provider::Svix,
        secrets: vec![("k1", sign::SVIX_SECRET)],
        event_types: Vec::new(),
    }
}

/// `shopify-a`: Shopify, one key.
fn shopify_a() -> Source {
    Source {
        id: "shopify-a",
        tenant: "acme",
        provider: Provider::Shopify,
        secrets: vec![("k1", sign::SHOPIFY_SECRET)],
        event_types: Vec::new(),
    }
}

/// `paddle-a`: Paddle, one key (default tolerance: Paddle's 5 s).
fn paddle_a() -> Source {
    Source {
        id: "paddle-a",
        tenant: "acme",
        provider: Provider::Paddle,
        secrets: vec![("k1", sign::PADDLE_SECRET)],
        event_types: Vec::new(),
    }
}

/// `twitch-a`: Twitch EventSub, one key.
fn twitch_a() -> Source {
    Source {
        id: "twitch-a",
        tenant: "acme",
        provider: Provider::Twitch,
        secrets: vec![("k1", sign::TWITCH_SECRET)],
        event_types: Vec::new(),
    }
}

/// `typeform-a`: Typeform, one key.
fn typeform_a() -> Source {
    Source {
        id: "typeform-a",
        tenant: "acme",
        provider: Provider::Typeform,
        secrets: vec![("k1", sign::TYPEFORM_SECRET)],
        event_types: Vec::new(),
    }
}

/// `pagerduty-a`: PagerDuty, one secret.
fn pagerduty_a() -> Source {
    Source {
        id: "pagerduty-a",
        tenant: "acme",
        provider: Provider::Pagerduty,
        secrets: vec![("k1", sign::PAGERDUTY_SECRET)],
        event_types: Vec::new(),
    }
}

/// `segment-a`: Segment, one shared secret.
fn segment_a() -> Source {
    Source {
        id: "segment-a",
        tenant: "acme",
        provider: Provider::Segment,
        secrets: vec![("k1", sign::SEGMENT_SECRET)],
        event_types: Vec::new(),
    }
}

/// `woocommerce-a`: WooCommerce, one secret.
fn woocommerce_a() -> Source {
    Source {
        id: "woocommerce-a",
        tenant: "acme",
        provider: Provider::Woocommerce,
        secrets: vec![("k1", sign::WOOCOMMERCE_SECRET)],
        event_types: Vec::new(),
    }
}

/// `bitbucket-a`: Bitbucket Cloud, one secret.
fn bitbucket_a() -> Source {
    Source {
        id: "bitbucket-a",
        tenant: "acme",
        provider: Provider::Bitbucket,
        secrets: vec![("k1", sign::BITBUCKET_SECRET)],
        event_types: Vec::new(),
    }
}

/// `gitlab-a`: GitLab, one token.
fn gitlab_a() -> Source {
    Source {
        id: "gitlab-a",
        tenant: "acme",
        provider: Provider::Gitlab,
        secrets: vec![("k1", sign::GITLAB_TOKEN)],
        event_types: Vec::new(),
    }
}

#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), (status, code.to_owned()), "{what}: got {r}");
}

/// A wrong key of the same form as the source's first.
fn wrong_key(provider: Provider) -> &'static str {
    match provider {
        // Any public key but the configured one: `sign::headers` then signs with another seed.
        Provider::StandardV1a => "whpk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        Provider::Standard | Provider::Svix => "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        _ => sign::WRONG_SECRET,
    }
}

/// The header whose absence makes a delivery unsigned (also for `providers_more`).
pub(crate) fn providers_more_signature_header(provider: Provider) -> &'static str {
    signature_header(provider)
}

/// The header whose absence makes a delivery unsigned.
fn signature_header(provider: Provider) -> &'static str {
    match provider {
        Provider::Stripe => "stripe-signature",
        Provider::Github => "x-hub-signature-256",
        Provider::Slack => "x-slack-signature",
        Provider::Standard | Provider::StandardV1a => "webhook-signature",
        Provider::Svix => "svix-signature",
        Provider::Shopify => "x-shopify-hmac-sha256",
        Provider::Paddle => "paddle-signature",
        Provider::Twitch => "twitch-eventsub-message-signature",
        Provider::Typeform => "typeform-signature",
        Provider::Gitlab => "x-gitlab-token",
        Provider::Segment => "x-signature",
        Provider::Pagerduty => "x-pagerduty-signature",
        Provider::Woocommerce => "x-wc-webhook-signature",
        Provider::Bitbucket => "x-hub-signature",
        Provider::Twilio => "x-twilio-signature",
        Provider::Square => "x-square-hmacsha256-signature",
        Provider::Sendgrid => "x-twilio-email-event-webhook-signature",
        Provider::Discord => "x-signature-ed25519",
        Provider::GithubSha1 | Provider::Intercom => "x-hub-signature",
        Provider::Hmac => "x-it-signature",
        Provider::Linear => "linear-signature",
        Provider::Postmark => "authorization",
        Provider::Calendly => "calendly-webhook-signature",
        Provider::Coinbase => "x-cc-webhook-signature",
        Provider::Zoom => "x-zm-signature",
        Provider::Hubspot => "x-hubspot-signature-v3",
        Provider::Mandrill => "x-mandrill-signature",
        Provider::Adyen => "",
        // Signed inside the body: `providers_more` sends the unsigned body instead.
        Provider::Mailgun => "",
    }
}

/// The whole round for one source on a running fixture.
fn round(f: &Fixture, source: &Source) {
    let what = source.id;
    let id = sign::unique_id("evt_prov");
    let body = sign::body(source.provider, &id, "first copy");
    // Signed now: Paddle's default tolerance is 5 s. The retry below is signed 5 s ahead,
    // inside the default future_skew (60 s).
    let t = sign::now_unix_s();

    let r = f.hw.deliver_at(source, &id, &body, t);
    expect(&r, 200, "accepted", &format!("{what}: first copy"));
    assert_eq!(r.id().as_deref(), Some(id.as_str()), "{what}: the answer names the event id");
    let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    assert!(fwd[0].body == body, "{what}: forwarded byte for byte");
    let verification = fwd[0].header("hookwall-verification");
    assert!(
        verification.contains(source.provider.name()) && verification.contains(source.secrets[0].0),
        "{what}: Hookwall-Verification {verification:?} names provider and matched key"
    );

    // The provider's retry (a new signing time where the scheme signs one).
    let r = f.hw.deliver_at(source, &id, &body, t + 5);
    expect(&r, 200, "duplicate", &format!("{what}: retry"));

    // A changed body under the same headers.
    let headers = sign::headers(source.provider, source.secrets[0].1, &id, t, &body);
    let changed = sign::body(source.provider, &id, "second copy");
    let r = f.hw.post(source.id, &headers, &changed);
    if source.provider == Provider::Gitlab {
        // GitLab's token binds no body: authentic, same id, other bytes → conflict (SPEC §3).
        expect(&r, 409, "conflict", &format!("{what}: changed body"));
    } else {
        expect(&r, 401, "signature_invalid", &format!("{what}: changed body"));
    }

    let other = sign::unique_id("evt_prov_wrong");
    let wrong = sign::headers(source.provider, wrong_key(source.provider), &other, t, &body);
    expect(
        &f.hw.post(source.id, &wrong, &body),
        401,
        "signature_invalid",
        &format!("{what}: wrong key"),
    );
    let mut missing = sign::headers(source.provider, source.secrets[0].1, &other, t, &body);
    sign::remove_header(&mut missing, signature_header(source.provider));
    expect(
        &f.hw.post(source.id, &missing, &body),
        401,
        "signature_missing",
        &format!("{what}: unsigned"),
    );

    let timestamped = [
        Provider::StandardV1a,
        Provider::Slack,
        Provider::Svix,
        Provider::Paddle,
        Provider::Twitch,
    ];
    if timestamped.contains(&source.provider) {
        let now = sign::now_unix_s();
        // Past every default tolerance (Twitch's is 600 s).
        let stale = f.hw.deliver_at(source, &other, &body, now - 700);
        expect(&stale, 401, "stale", &format!("{what}: 700 s old"));
        let ahead = f.hw.deliver_at(source, &other, &body, now + 400);
        expect(&ahead, 401, "stale", &format!("{what}: 400 s ahead"));
    }
}

on_both_io! {
    /// Issue 3: Slack, Standard Webhooks v1a, Svix, Shopify, Paddle, Twitch, Typeform, GitLab,
    /// Segment, PagerDuty, WooCommerce and Bitbucket through the running server.
    fn providers_accepted_then_duplicate(io: Io) {
        let sources = [
            slack_a(),
            standard_v1a(),
            svix_a(),
            shopify_a(),
            paddle_a(),
            twitch_a(),
            typeform_a(),
            gitlab_a(),
            segment_a(),
            pagerduty_a(),
            woocommerce_a(),
            bitbucket_a(),
        ];
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.sources.extend(sources.iter().cloned());
        });
        for source in &sources {
            round(&f, source);
        }

        // The v1a source's second key is a v1 HMAC key: a v1 delivery matches it (R3).
        let source = standard_v1a();
        let id = sign::unique_id("evt_v1_on_v1a");
        let body = sign::body(Provider::Standard, &id, "v1 copy");
        let headers =
            sign::headers(Provider::Standard, sign::STANDARD_SECRET, &id, sign::now_unix_s(), &body);
        expect(&f.hw.post(source.id, &headers, &body), 200, "accepted", "v1 on the v1a source");
        let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
        let verification = fwd[0].header("hookwall-verification");
        assert!(verification.contains("k-sym"), "matched key k-sym: {verification:?}");

        slack_url_verification(&f);
        twitch_callback_verification(&f);

        f.flush_with_marker();
        for source in &sources {
            let recorded = f.sink.recorded();
            let prefix = format!("{}/{}/evt_prov_", source.tenant, source.id);
            let forwards = recorded
                .iter()
                .filter(|r| r.header("idempotency-key").starts_with(&prefix))
                .count();
            assert_eq!(forwards, 1, "{}: one forward, duplicates and refusals none", source.id);
        }
    }
}

/// Slack's `url_verification` handshake: answered `{"challenge":…}` only once it verified;
/// unsigned, forged or stale handshakes get the 401s; a handshake is never admitted.
fn slack_url_verification(f: &Fixture) {
    let source = slack_a();
    let body: &[u8] =
        br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let now = sign::now_unix_s();
    let headers = sign::headers(Provider::Slack, sign::SLACK_SECRET, "handshake", now, body);
    let r = f.hw.post(source.id, &headers, body);
    assert_eq!(r.status, 200, "handshake: {r}");
    assert_eq!(r.header("content-type"), Some("application/json"), "handshake: {r}");
    assert_eq!(
        r.json(),
        serde_json::json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}),
        "handshake answer"
    );
    let mut unsigned = headers.clone();
    sign::remove_header(&mut unsigned, "x-slack-signature");
    expect(&f.hw.post(source.id, &unsigned, body), 401, "signature_missing", "unsigned handshake");
    let forged = sign::headers(Provider::Slack, sign::WRONG_SECRET, "handshake", now, body);
    expect(&f.hw.post(source.id, &forged, body), 401, "signature_invalid", "forged handshake");
    let old = sign::headers(Provider::Slack, sign::SLACK_SECRET, "handshake", now - 400, body);
    expect(&f.hw.post(source.id, &old, body), 401, "stale", "replayed handshake");
    let labels = [("source", "slack-a"), ("provider", "slack"), ("status", "challenge")];
    let name = "hookwall_ingress_requests_total";
    crate::metrics::wait_for_sample(&f.hw, name, &labels, 1.0, FORWARD_TIMEOUT);
    let recorded = f.sink.recorded();
    assert!(
        recorded.iter().all(|r| !r.body.windows(16).any(|w| w == b"url_verification")),
        "a handshake is never forwarded"
    );
}

/// Twitch's `webhook_callback_verification`: the raw challenge as `text/plain`, only when
/// authentic; never admitted.
fn twitch_callback_verification(f: &Fixture) {
    let source = twitch_a();
    let body: &[u8] =
        br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow"}}"#;
    let id = sign::unique_id("twitch_handshake");
    let now = sign::now_unix_s();
    let kind = ("Twitch-Eventsub-Message-Type", "webhook_callback_verification");
    let mut headers = sign::headers(Provider::Twitch, sign::TWITCH_SECRET, &id, now, body);
    sign::set_header(&mut headers, kind.0, kind.1);
    let r = f.hw.post(source.id, &headers, body);
    assert_eq!(r.status, 200, "handshake: {r}");
    assert_eq!(r.header("content-type"), Some("text/plain"), "handshake: {r}");
    assert_eq!(r.body, b"pogchamp-kappa-360noscope-vohiyo", "the raw challenge");
    let mut forged = sign::headers(Provider::Twitch, sign::WRONG_SECRET, &id, now, body);
    sign::set_header(&mut forged, kind.0, kind.1);
    expect(&f.hw.post(source.id, &forged, body), 401, "signature_invalid", "forged handshake");
    let labels = [("source", "twitch-a"), ("provider", "twitch"), ("status", "challenge")];
    let name = "hookwall_ingress_requests_total";
    crate::metrics::wait_for_sample(&f.hw, name, &labels, 1.0, FORWARD_TIMEOUT);
    assert!(f.sink.for_key(&source.key(&id)).is_empty(), "a handshake is never forwarded");
}

//! Signing as the providers do it, written here from the providers' documentation with `ring`,
//! independently of `src/` (a shared bug would otherwise cancel out). Also the bodies and headers
//! of test deliveries.

use base64::Engine as _;

/// Stripe secret of source `stripe-a` (used as written, `whsec_` included).
pub const STRIPE_SECRET: &str = "whsec_it_stripe_secret_0123456789";
/// Older secret of source `stripe-rot` (listed first in the config).
pub const STRIPE_OLD_SECRET: &str = "whsec_it_stripe_rotation_old";
/// Newer secret of source `stripe-rot`.
pub const STRIPE_NEW_SECRET: &str = "whsec_it_stripe_rotation_new";
/// A secret no source knows.
pub const WRONG_SECRET: &str = "whsec_it_nobody_knows_this_one";
/// GitHub secret of source `github-a` (GitHub's documentation example).
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
/// Standard Webhooks secret of source `standard-a` (the spec's example form).
pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Seed of the Ed25519 key pair that signs Standard Webhooks v1a test deliveries (a sender's
/// `whsk_`; hookwall never sees it).
pub const STANDARD_V1A_SEED: [u8; 32] = [0x11; 32];
/// The public key of [`STANDARD_V1A_SEED`] as a dashboard shows it, computed outside Rust with
/// PyNaCl (`SigningKey(bytes([0x11] * 32)).verify_key`); `v1a_public_key_matches_seed` checks
/// ring agrees.
pub const STANDARD_V1A_PUBLIC: &str = "whpk_0EqyMnQrtKs6E2i9RhXk5tAiSrcaAWuvhSCjMsl3hzc=";
/// Svix endpoint secret of source `svix-a`.
pub const SVIX_SECRET: &str = "whsec_aG9va3dhbGwtc3ZpeC1pdC1zZWNyZXQ=";
/// Slack signing secret of source `slack-a` (used as written).
pub const SLACK_SECRET: &str = "hookwall0it0slack0signing0secret";
/// Shopify client secret of source `shopify-a` (used as written).
pub const SHOPIFY_SECRET: &str = "shpss_hookwall_it_client_secret";
/// Paddle notification secret key of source `paddle-a` (used as written).
pub const PADDLE_SECRET: &str = "pdl_ntfset_01hookwall_it_secret";
/// Twitch EventSub secret of source `twitch-a` (used as written).
pub const TWITCH_SECRET: &str = "hookwall-it-twitch-secret";
/// Typeform webhook secret of source `typeform-a` (used as written).
pub const TYPEFORM_SECRET: &str = "hookwall it typeform secret";
/// PagerDuty webhook subscription secret of source `pagerduty-a` (used as written).
pub const PAGERDUTY_SECRET: &str = "hookwall-it-pagerduty-secret";
/// Segment shared secret of source `segment-a` (used as written).
pub const SEGMENT_SECRET: &str = "hookwall-it-segment-secret";
/// WooCommerce webhook secret of source `woocommerce-a` (used as written).
pub const WOOCOMMERCE_SECRET: &str = "hookwall it woocommerce secret";
/// Bitbucket webhook secret of source `bitbucket-a` (used as written).
pub const BITBUCKET_SECRET: &str = "hookwall-it-bitbucket-secret";
/// Twilio Auth Token of the `twilio-*` sources (used as written).
pub const TWILIO_TOKEN: &str = "0123456789abcdef0123456789abcdef";
/// Square signature key of the `square-*` sources (used as written).
pub const SQUARE_KEY: &str = "sq0wbk-hookwall-it-signature-key";
/// The SendGrid sender's P-256 private key (base64 PKCS#8, made with Python's `cryptography`
/// from a fixed scalar); hookwall never sees it.
pub const SENDGRID_PKCS8: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAdXm2bLzpMXm9wgZKjtMXW5/gJGis8TV5vcIGSo7TF2hRANCAAR4s6mVDt2Nc83Jp1htSK3TQhGizmeRhdV3H8K9GbqcbA7DBPyqIMt1lnUOjOsvUR0s79/+uApWOsTBDtuqosDJ";
/// Its public key as SendGrid's Mail Settings show it (base64 SubjectPublicKeyInfo): the
/// secret of the `sendgrid-*` sources.
pub const SENDGRID_PUBLIC: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEeLOplQ7djXPNyadYbUit00IRos5nkYXVdx/CvRm6nGwOwwT8qiDLdZZ1DozrL1EdLO/f/rgKVjrEwQ7bqqLAyQ==";
/// HubSpot app client secret of source `hubspot-a` (used as written).
pub const HUBSPOT_SECRET: &str = "hookwall-it-hubspot-client-secret";
/// Mandrill webhook key of source `mandrill-a` (used as written).
pub const MANDRILL_KEY: &str = "hookwall-it-mandrill-webhook-key";
/// Adyen HMAC key of source `adyen-a` (hex, as the Customer Area shows it).
pub const ADYEN_KEY: &str = "8c9f3a1b2d4e5f60718293a4b5c6d7e8f9012345678abcdef0123456789abcde";
/// GitLab secret token of source `gitlab-a`.
pub const GITLAB_TOKEN: &str = "hookwall-it-gitlab-token";
/// Seed of the Ed25519 key pair that signs Discord test deliveries (Discord's, never ours).
pub const DISCORD_SEED: [u8; 32] = [0x33; 32];
/// The hex public key of [`DISCORD_SEED`], as Discord's Developer Portal shows it (computed
/// with PyNaCl: `SigningKey(bytes([0x33] * 32)).verify_key.encode().hex()`;
/// `discord_public_key_matches_seed` checks ring agrees).
pub const DISCORD_PUBLIC: &str = "17cb79fb2b4120f2b1ec65e4198d6e08b28e813feb01e4a400839b85e18080ce";
/// GitHub secret of source `github-sha1` (`legacy_sha1 = true`).
pub const GITHUB_SHA1_SECRET: &str = "hookwall-it-github-legacy-sha1";
/// Secret of the generic `hmac` source `hmac-a`.
pub const HMAC_SECRET: &str = "hookwall-it-generic-hmac";
/// The `hmac` table of source `hmac-a`: `X-It-Signature: v1=<base64 HMAC-SHA512>` over
/// `{id}.{timestamp}.{body}`.
pub const HMAC_TABLE: &str = r#"hmac = { header = "X-It-Signature", prefix = "v1=", algorithm = "sha512", encoding = "base64", content = "{id}.{timestamp}.{body}", timestamp_header = "X-It-Timestamp", id_header = "X-It-Id", type_pointer = "/type" }"#;
/// Linear signing secret of source `linear-a`.
pub const LINEAR_SECRET: &str = "lin_wh_hookwall_it";
/// Intercom client secret of source `intercom-a`.
pub const INTERCOM_SECRET: &str = "hookwall-it-intercom-client-secret";
/// Postmark basic-auth credentials of source `postmark-a` (`user:password`).
pub const POSTMARK_CREDENTIALS: &str = "hookwall:it-postmark-password";
/// Calendly signing key of source `calendly-a`.
pub const CALENDLY_SECRET: &str = "hookwall-it-calendly-signing-key";
/// Coinbase Commerce shared secret of source `coinbase-a`.
pub const COINBASE_SECRET: &str = "hookwall-it-coinbase-shared-secret";
/// Zoom secret token of source `zoom-a`.
pub const ZOOM_SECRET: &str = "hookwall-it-zoom-secret-token";
/// Mailgun webhook signing key of source `mailgun-a`.
pub const MAILGUN_SECRET: &str = "key-hookwall-it-mailgun";

/// A provider as the tests sign for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `Stripe-Signature: t=…,v1=…`; id and type in the body.
    Stripe,
    /// `X-Hub-Signature-256`; id in `X-GitHub-Delivery`, type in `X-GitHub-Event`.
    Github,
    /// Standard Webhooks v1; id in `webhook-id`.
    Standard,
    /// Standard Webhooks v1a (Ed25519, signed with [`STANDARD_V1A_SEED`]); id in `webhook-id`.
    StandardV1a,
    /// Slack Events API (`X-Slack-Signature: v0=…`); id in body `event_id`.
    Slack,
    /// Svix (`svix-*` headers, v1); id in `svix-id`.
    Svix,
    /// `X-Shopify-Hmac-Sha256` (base64); id in `X-Shopify-Event-Id`, type `X-Shopify-Topic`.
    Shopify,
    /// `Paddle-Signature: ts=…;h1=…`; id body `event_id`, type body `event_type`.
    Paddle,
    /// Twitch EventSub (`Twitch-Eventsub-Message-*`); id the message id.
    Twitch,
    /// `Typeform-Signature: sha256=…` (base64); id body `event_id`, type body `event_type`.
    Typeform,
    /// `X-Gitlab-Token`; id in `Idempotency-Key`, type in `X-Gitlab-Event`.
    Gitlab,
    /// `X-Signature` (hex HMAC-SHA1); id body `messageId`, type body `type`.
    Segment,
    /// `X-PagerDuty-Signature: v1=…`; id body `event.id`, type `event.event_type`.
    Pagerduty,
    /// `X-WC-Webhook-Signature` (base64); id `X-WC-Webhook-Delivery-ID`, type
    /// `X-WC-Webhook-Topic`.
    Woocommerce,
    /// `X-Hub-Signature: sha256=…` (hex); id `X-Request-UUID`, type `X-Event-Key`.
    Bitbucket,
    /// `X-Twilio-Signature` (base64 HMAC-SHA1 over URL + sorted form params); id
    /// `I-Twilio-Idempotency-Token`. Signed with [`url_headers`].
    Twilio,
    /// `x-square-hmacsha256-signature` (base64 HMAC-SHA256 over URL + body); id body
    /// `event_id`. Signed with [`url_headers`].
    Square,
    /// SendGrid Event Webhook: ECDSA P-256 over timestamp + body; a JSON array of events,
    /// each id its `sg_event_id`.
    Sendgrid,
    /// Discord interactions (`X-Signature-Ed25519`, hex, over timestamp ‖ body; signed with
    /// [`DISCORD_SEED`] when the secret is [`DISCORD_PUBLIC`], else another seed); id body `id`.
    Discord,
    /// GitHub's legacy `X-Hub-Signature: sha1=…` (source with `legacy_sha1 = true`).
    GithubSha1,
    /// The generic `hmac` scheme of [`HMAC_TABLE`].
    Hmac,
    /// `Linear-Signature` (hex over the body); `webhookTimestamp` (ms) in the body.
    Linear,
    /// `X-Hub-Signature: sha1=…` (hex HMAC-SHA1); id body `id`, type `topic`.
    Intercom,
    /// `Authorization: Basic base64(user:password)`; id the body's SHA-256.
    Postmark,
    /// `Calendly-Webhook-Signature: t=…,v1=…`; id the body's SHA-256.
    Calendly,
    /// `X-CC-Webhook-Signature` (hex over the body); id body `event.id`.
    Coinbase,
    /// `x-zm-signature: v0=…` over `"v0:{ts}:{body}"`; id the body's SHA-256.
    Zoom,
    /// The signature inside the body (`signature.timestamp`/`token`/`signature`); id
    /// `event-data.id`. Signed by [`body_at`], not by [`headers`].
    Mailgun,
    /// HubSpot v3 (`X-HubSpot-Signature-v3`, base64 HMAC-SHA256 over method ‖ URL ‖ body ‖
    /// ms timestamp); a JSON array of events, each id derived from its members without
    /// `attemptNumber` ([`hubspot_event_id`]). Signed with [`hubspot_headers`].
    Hubspot,
    /// Mandrill (`X-Mandrill-Signature`, base64 HMAC-SHA1 over URL ‖ sorted form params); a
    /// form whose `mandrill_events` is a JSON array, each event's id the SHA-256 of its bytes.
    /// Signed with [`mandrill_headers`].
    Mandrill,
    /// Adyen: each notification item's `additionalData.hmacSignature` (base64 HMAC-SHA256,
    /// hex key, over its signed fields); id `pspReference:eventCode:success`. Signed by
    /// [`body_at`] / [`adyen_item`], not by [`headers`].
    Adyen,
}

impl Provider {
    /// The config spelling (`provider = "…"`).
    pub fn name(self) -> &'static str {
        match self {
            Provider::Stripe => "stripe",
            Provider::Github => "github",
            Provider::Standard | Provider::StandardV1a => "standard",
            Provider::Slack => "slack",
            Provider::Svix => "svix",
            Provider::Shopify => "shopify",
            Provider::Paddle => "paddle",
            Provider::Twitch => "twitch",
            Provider::Typeform => "typeform",
            Provider::Gitlab => "gitlab",
            Provider::Segment => "segment",
            Provider::Pagerduty => "pagerduty",
            Provider::Woocommerce => "woocommerce",
            Provider::Bitbucket => "bitbucket",
            Provider::Twilio => "twilio",
            Provider::Square => "square",
            Provider::Sendgrid => "sendgrid",
            Provider::Discord => "discord",
            Provider::GithubSha1 => "github",
            Provider::Hmac => "hmac",
            Provider::Linear => "linear",
            Provider::Intercom => "intercom",
            Provider::Postmark => "postmark",
            Provider::Calendly => "calendly",
            Provider::Coinbase => "coinbase",
            Provider::Zoom => "zoom",
            Provider::Mailgun => "mailgun",
            Provider::Hubspot => "hubspot",
            Provider::Mandrill => "mandrill",
            Provider::Adyen => "adyen",
        }
    }
}

/// HMAC-SHA256 of the concatenated `parts` keyed by `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for part in parts {
        ctx.update(part);
    }
    ctx.sign().as_ref().to_vec()
}

/// Stripe's `v1`: hex HMAC-SHA256 over `"{t}.{body}"`, keyed by the secret's bytes as written.
pub fn stripe_v1(secret: &str, t: i64, body: &[u8]) -> String {
    hex::encode(hmac_sha256(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body]))
}

/// A whole `Stripe-Signature` header with one `v1`.
pub fn stripe_header(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", stripe_v1(secret, t, body))
}

/// GitHub's `X-Hub-Signature-256`: `sha256=` + hex HMAC-SHA256 over the body.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac_sha256(secret.as_bytes(), &[body])))
}

/// Standard Webhooks `webhook-signature` entry: `v1,` + base64 HMAC-SHA256 over
/// `"{id}.{ts}.{body}"`, keyed by the base64 after `whsec_`.
pub fn standard_signature(secret: &str, id: &str, ts: i64, body: &[u8]) -> String {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = base64::engine::general_purpose::STANDARD.decode(b64).expect("test secret is base64");
    let tag = hmac_sha256(&key, &[id.as_bytes(), b".", ts.to_string().as_bytes(), b".", body]);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(tag))
}

/// Svix's `svix-signature` entry: the Standard Webhooks v1 computation.
pub fn svix_signature(secret: &str, id: &str, ts: i64, body: &[u8]) -> String {
    standard_signature(secret, id, ts, body)
}

/// Standard Webhooks `v1a,` + base64 Ed25519 signature over `"{id}.{ts}.{body}"` by the key
/// pair of `seed`.
pub fn standard_v1a_signature(seed: &[u8; 32], id: &str, ts: i64, body: &[u8]) -> String {
    let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(seed).expect("a valid seed");
    let message = [id.as_bytes(), b".", ts.to_string().as_bytes(), b".", body].concat();
    let sig = pair.sign(&message);
    format!("v1a,{}", base64::engine::general_purpose::STANDARD.encode(sig.as_ref()))
}

/// Slack's `X-Slack-Signature`: `v0=` + hex HMAC-SHA256 over `"v0:{ts}:{body}"`, keyed by the
/// signing secret's bytes as written.
pub fn slack_signature(secret: &str, ts: i64, body: &[u8]) -> String {
    let mac = hmac_sha256(secret.as_bytes(), &[b"v0:", ts.to_string().as_bytes(), b":", body]);
    format!("v0={}", hex::encode(mac))
}

/// Shopify's `X-Shopify-Hmac-Sha256`: base64 HMAC-SHA256 over the body, keyed by the secret's
/// bytes as written.
pub fn shopify_signature(secret: &str, body: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(hmac_sha256(secret.as_bytes(), &[body]))
}

/// The wall clock in Unix seconds (the signing time of a fresh delivery).
pub fn now_unix_s() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_secs()).expect("seconds fit in i64")
}

/// An event id unique within this test process (and, by the pid and clock, across runs).
pub fn unique_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .subsec_nanos();
    format!("{prefix}_{}_{nanos:09}_{n}", std::process::id())
}

/// A JSON body for `provider` carrying `id` where the provider puts it (Stripe only; the
/// others carry the id in a header) and `note` so two bodies of one id can differ.
pub fn body(provider: Provider, id: &str, note: &str) -> Vec<u8> {
    let text = match provider {
        Provider::Stripe => format!(
            r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"note":"{note}"}}}}}}"#
        ),
        Provider::Github => format!(r#"{{"action":"opened","delivery":"{id}","zen":"{note}"}}"#),
        Provider::Standard | Provider::StandardV1a | Provider::Svix => {
            format!(r#"{{"type":"invoice.paid","data":{{"note":"{note}"}}}}"#)
        }
        Provider::Slack => format!(
            r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"message","text":"{note}"}}}}"#
        ),
        Provider::Shopify => format!(r#"{{"id":820982911946154508,"note":"{note}"}}"#),
        Provider::Paddle => format!(
            r#"{{"event_id":"{id}","event_type":"transaction.completed","data":{{"note":"{note}"}}}}"#
        ),
        Provider::Twitch => {
            format!(r#"{{"subscription":{{"type":"channel.follow"}},"event":{{"note":"{note}"}}}}"#)
        }
        Provider::Typeform => format!(
            r#"{{"event_id":"{id}","event_type":"form_response","form_response":{{"note":"{note}"}}}}"#
        ),
        Provider::Gitlab => format!(r#"{{"object_kind":"push","note":"{note}"}}"#),
        Provider::Pagerduty => format!(
            r#"{{"event":{{"id":"{id}","event_type":"incident.triggered","data":{{"note":"{note}"}}}}}}"#
        ),
        Provider::Segment => {
            format!(r#"{{"messageId":"{id}","type":"track","properties":{{"note":"{note}"}}}}"#)
        }
        Provider::Woocommerce => format!(r#"{{"id":727,"status":"processing","note":"{note}"}}"#),
        Provider::Bitbucket => format!(r#"{{"push":{{"changes":[]}},"note":"{note}"}}"#),
        // A form, with a repeated key as Twilio sends several media URLs.
        Provider::Twilio => format!(
            "MessageSid=SM{id}&Body={}&From=%2B15017122661&To=%2B15558675310\
             &MediaUrl=https%3A%2F%2Fm%2Fb&MediaUrl=https%3A%2F%2Fm%2Fa",
            note.replace(' ', "+")
        ),
        Provider::Square => format!(
            r#"{{"merchant_id":"6SSW7HV8K2ST5","type":"payment.updated","event_id":"{id}","data":{{"note":"{note}"}}}}"#
        ),
        Provider::Sendgrid => format!("[{}]", sendgrid_event(id, note)),
        Provider::Discord => {
            format!(r#"{{"id":"{id}","application_id":"1","type":2,"data":{{"name":"{note}"}}}}"#)
        }
        Provider::GithubSha1 => format!(r#"{{"zen":"{note}","hook_id":1}}"#),
        Provider::Hmac => format!(r#"{{"type":"order.paid","note":"{note}"}}"#),
        // Unstamped: `body_at` adds `webhookTimestamp`.
        Provider::Linear => format!(r#"{{"action":"create","type":"Issue","note":"{note}"}}"#),
        Provider::Intercom => format!(
            r#"{{"type":"notification_event","id":"{id}","topic":"ping","data":{{"note":"{note}"}},"delivery_attempts":1}}"#
        ),
        Provider::Postmark => {
            format!(r#"{{"RecordType":"Delivery","MessageID":"{id}","Details":"{note}"}}"#)
        }
        Provider::Calendly => {
            format!(r#"{{"event":"invitee.created","payload":{{"uri":"{id}","note":"{note}"}}}}"#)
        }
        Provider::Coinbase => format!(
            r#"{{"id":"d-{id}","attempt_number":1,"event":{{"id":"{id}","type":"charge:confirmed","data":{{"note":"{note}"}}}}}}"#
        ),
        Provider::Zoom => {
            format!(r#"{{"event":"meeting.started","payload":{{"uuid":"{id}","note":"{note}"}}}}"#)
        }
        // Unsigned: `body_at` adds the `signature` object.
        Provider::Mailgun => {
            format!(r#"{{"event-data":{{"id":"{id}","event":"delivered","note":"{note}"}}}}"#)
        }
        Provider::Hubspot => format!("[{}]", hubspot_event(&hubspot_members(id, note, 0))),
        Provider::Mandrill => mandrill_form(&[mandrill_event(id, note)]),
        // Unsigned (an empty signature): `body_at` signs.
        Provider::Adyen => {
            adyen_body(&[adyen_item_signed_by(None, id, "AUTHORISATION", "true", note)])
        }
    };
    text.into_bytes()
}

/// The body of the provider's retry of a delivery first made by [`body_at`] at `t_first`, sent at
/// `t_retry`: Coinbase counts `attempt_number`, Intercom `delivery_attempts`, Mailgun signs
/// anew (new timestamp and token); the others resend the same bytes.
pub fn retry_body(
    provider: Provider,
    secret: &str,
    id: &str,
    (t_first, t_retry): (i64, i64),
    note: &str,
) -> Vec<u8> {
    let first = body_at(provider, secret, id, t_first, note);
    let text = String::from_utf8(first).expect("test bodies are UTF-8");
    match provider {
        Provider::Coinbase => text.replacen(r#""attempt_number":1"#, r#""attempt_number":2"#, 1),
        Provider::Intercom => {
            text.replacen(r#""delivery_attempts":1"#, r#""delivery_attempts":2"#, 1)
        }
        Provider::Mailgun => {
            return body_at(provider, secret, id, t_retry, note);
        }
        _ => text,
    }
    .into_bytes()
}

/// [`body`] signed where the provider signs inside the body: Linear's `webhookTimestamp` (ms,
/// `t` + 0.25 s) and Mailgun's `signature` object (HMAC-SHA256 of `t ‖ token` by `secret`).
/// The same as [`body`] for every other provider.
pub fn body_at(provider: Provider, secret: &str, id: &str, t: i64, note: &str) -> Vec<u8> {
    match provider {
        Provider::Linear => format!(
            r#"{{"action":"create","type":"Issue","webhookTimestamp":{t}250,"note":"{note}"}}"#
        )
        .into_bytes(),
        Provider::Mailgun => {
            let nonce = format!("{id}/{t}");
            let digest = ring::digest::digest(&ring::digest::SHA256, nonce.as_bytes());
            let token = &hex::encode(digest)[..50];
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[t.to_string().as_bytes(), token.as_bytes()],
            ));
            format!(
                r#"{{"signature":{{"timestamp":"{t}","token":"{token}","signature":"{sig}"}},"event-data":{{"id":"{id}","event":"delivered","note":"{note}"}}}}"#
            )
            .into_bytes()
        }
        Provider::Adyen => {
            adyen_body(&[adyen_item(secret, id, "AUTHORISATION", "true", note)]).into_bytes()
        }
        _ => body(provider, id, note),
    }
}

/// The headers of a delivery of `body` as event `id`, signed by `secret` at `t` (Unix s).
/// `Content-Type: application/json` is included. For [`Provider::StandardV1a`], `secret` is
/// the configured public key; the delivery is signed with [`STANDARD_V1A_SEED`] when it is
/// [`STANDARD_V1A_PUBLIC`], and with another seed otherwise (a wrong key).
pub fn headers(
    provider: Provider,
    secret: &str,
    id: &str,
    t: i64,
    body: &[u8],
) -> Vec<(String, String)> {
    let mut h = vec![("Content-Type".to_owned(), "application/json".to_owned())];
    match provider {
        Provider::Stripe => h.push(("Stripe-Signature".to_owned(), stripe_header(secret, t, body))),
        Provider::Github => {
            h.push(("X-GitHub-Delivery".to_owned(), id.to_owned()));
            h.push(("X-GitHub-Event".to_owned(), "pull_request".to_owned()));
            h.push(("X-Hub-Signature-256".to_owned(), github_signature(secret, body)));
        }
        Provider::Standard => {
            h.push(("webhook-id".to_owned(), id.to_owned()));
            h.push(("webhook-timestamp".to_owned(), t.to_string()));
            h.push(("webhook-signature".to_owned(), standard_signature(secret, id, t, body)));
        }
        Provider::StandardV1a => {
            let seed = if secret == STANDARD_V1A_PUBLIC { STANDARD_V1A_SEED } else { [0x22; 32] };
            h.push(("webhook-id".to_owned(), id.to_owned()));
            h.push(("webhook-timestamp".to_owned(), t.to_string()));
            h.push(("webhook-signature".to_owned(), standard_v1a_signature(&seed, id, t, body)));
        }
        Provider::Slack => {
            h.push(("X-Slack-Request-Timestamp".to_owned(), t.to_string()));
            h.push(("X-Slack-Signature".to_owned(), slack_signature(secret, t, body)));
        }
        Provider::Svix => {
            h.push(("svix-id".to_owned(), id.to_owned()));
            h.push(("svix-timestamp".to_owned(), t.to_string()));
            h.push(("svix-signature".to_owned(), svix_signature(secret, id, t, body)));
        }
        Provider::Shopify => {
            h.push(("X-Shopify-Hmac-Sha256".to_owned(), shopify_signature(secret, body)));
            h.push(("X-Shopify-Event-Id".to_owned(), id.to_owned()));
            h.push(("X-Shopify-Webhook-Id".to_owned(), format!("wh-{id}-{t}")));
            h.push(("X-Shopify-Topic".to_owned(), "orders/create".to_owned()));
            h.push(("X-Shopify-Triggered-At".to_owned(), t.to_string()));
        }
        Provider::Paddle => {
            let mac = hmac_sha256(secret.as_bytes(), &[t.to_string().as_bytes(), b":", body]);
            h.push(("Paddle-Signature".to_owned(), format!("ts={t};h1={}", hex::encode(mac))));
        }
        Provider::Twitch => {
            let at = std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(u64::try_from(t).expect("t after 1970"));
            let ts = humantime::format_rfc3339_nanos(at).to_string();
            let mac = hmac_sha256(secret.as_bytes(), &[id.as_bytes(), ts.as_bytes(), body]);
            let sig = format!("sha256={}", hex::encode(mac));
            h.push(("Twitch-Eventsub-Message-Id".to_owned(), id.to_owned()));
            h.push(("Twitch-Eventsub-Message-Timestamp".to_owned(), ts));
            h.push(("Twitch-Eventsub-Message-Signature".to_owned(), sig));
            h.push(("Twitch-Eventsub-Message-Type".to_owned(), "notification".to_owned()));
            h.push(("Twitch-Eventsub-Subscription-Type".to_owned(), "channel.follow".to_owned()));
        }
        Provider::Typeform => {
            let mac = hmac_sha256(secret.as_bytes(), &[body]);
            let b64 = base64::engine::general_purpose::STANDARD.encode(mac);
            h.push(("Typeform-Signature".to_owned(), format!("sha256={b64}")));
        }
        Provider::Pagerduty => {
            let v1 = hex::encode(hmac_sha256(secret.as_bytes(), &[body]));
            h.push(("X-PagerDuty-Signature".to_owned(), format!("v1={v1}")));
        }
        Provider::Segment => {
            let key =
                ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
            h.push(("X-Signature".to_owned(), hex::encode(ring::hmac::sign(&key, body))));
        }
        Provider::Woocommerce => {
            let mac = hmac_sha256(secret.as_bytes(), &[body]);
            let b64 = base64::engine::general_purpose::STANDARD.encode(mac);
            h.push(("X-WC-Webhook-Signature".to_owned(), b64));
            h.push(("X-WC-Webhook-Delivery-ID".to_owned(), id.to_owned()));
            h.push(("X-WC-Webhook-Topic".to_owned(), "order.updated".to_owned()));
        }
        Provider::Bitbucket => {
            let mac = hex::encode(hmac_sha256(secret.as_bytes(), &[body]));
            h.push(("X-Hub-Signature".to_owned(), format!("sha256={mac}")));
            h.push(("X-Request-UUID".to_owned(), id.to_owned()));
            h.push(("X-Event-Key".to_owned(), "repo:push".to_owned()));
        }
        Provider::Gitlab => {
            h.push(("X-Gitlab-Token".to_owned(), secret.to_owned()));
            h.push(("X-Gitlab-Event".to_owned(), "Push Hook".to_owned()));
            h.push(("Idempotency-Key".to_owned(), id.to_owned()));
            h.push(("X-Gitlab-Event-UUID".to_owned(), format!("uuid-{id}-{t}")));
        }
        Provider::Sendgrid => {
            // Signed by the configured key's owner, or by another key (a wrong key).
            let pkcs8 = if secret == SENDGRID_PUBLIC {
                base64::engine::general_purpose::STANDARD.decode(SENDGRID_PKCS8).expect("base64")
            } else {
                let rng = ring::rand::SystemRandom::new();
                let alg = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
                ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng)
                    .expect("a key")
                    .as_ref()
                    .to_vec()
            };
            h.push((
                "X-Twilio-Email-Event-Webhook-Signature".to_owned(),
                sendgrid_signature(&pkcs8, t, body),
            ));
            h.push(("X-Twilio-Email-Event-Webhook-Timestamp".to_owned(), t.to_string()));
        }
        Provider::Twilio | Provider::Square | Provider::Hubspot | Provider::Mandrill => {
            panic!("{provider:?} signs a URL: url_headers, hubspot_headers or mandrill_headers")
        }
        Provider::Discord => {
            let seed = if secret == DISCORD_PUBLIC { DISCORD_SEED } else { [0x44; 32] };
            let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).expect("seed");
            let ts = t.to_string();
            let sig = hex::encode(pair.sign(&[ts.as_bytes(), body].concat()).as_ref());
            h.push(("X-Signature-Ed25519".to_owned(), sig));
            h.push(("X-Signature-Timestamp".to_owned(), ts));
        }
        Provider::GithubSha1 => {
            let key =
                ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
            let mac = hex::encode(ring::hmac::sign(&key, body));
            h.push(("X-GitHub-Delivery".to_owned(), id.to_owned()));
            h.push(("X-GitHub-Event".to_owned(), "ping".to_owned()));
            h.push(("X-Hub-Signature".to_owned(), format!("sha1={mac}")));
        }
        Provider::Hmac => {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA512, secret.as_bytes());
            let ts = t.to_string();
            let content = [id.as_bytes(), b".", ts.as_bytes(), b".", body].concat();
            let tag =
                base64::engine::general_purpose::STANDARD.encode(ring::hmac::sign(&key, &content));
            h.push(("X-It-Signature".to_owned(), format!("v1={tag}")));
            h.push(("X-It-Timestamp".to_owned(), ts));
            h.push(("X-It-Id".to_owned(), id.to_owned()));
        }
        Provider::Linear => {
            let mac = hex::encode(hmac_sha256(secret.as_bytes(), &[body]));
            h.push(("Linear-Signature".to_owned(), mac));
            h.push(("Linear-Delivery".to_owned(), id.to_owned()));
            h.push(("Linear-Event".to_owned(), "Issue".to_owned()));
        }
        Provider::Intercom => {
            let key =
                ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
            let mac = hex::encode(ring::hmac::sign(&key, body));
            h.push(("X-Hub-Signature".to_owned(), format!("sha1={mac}")));
        }
        Provider::Postmark => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
            h.push(("Authorization".to_owned(), format!("Basic {b64}")));
        }
        Provider::Calendly => {
            let mac = hmac_sha256(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body]);
            let value = format!("t={t},v1={}", hex::encode(mac));
            h.push(("Calendly-Webhook-Signature".to_owned(), value));
        }
        Provider::Coinbase => {
            let mac = hex::encode(hmac_sha256(secret.as_bytes(), &[body]));
            h.push(("X-CC-Webhook-Signature".to_owned(), mac));
        }
        Provider::Zoom => {
            let ts = t.to_string();
            let mac = hmac_sha256(secret.as_bytes(), &[b"v0:", ts.as_bytes(), b":", body]);
            h.push(("x-zm-signature".to_owned(), format!("v0={}", hex::encode(mac))));
            h.push(("x-zm-request-timestamp".to_owned(), ts));
        }
        // Signed inside the body (`body_at`).
        Provider::Mailgun | Provider::Adyen => {}
    }
    h
}

/// One SendGrid event object (its exact text), id `sg_event_id`.
pub fn sendgrid_event(id: &str, note: &str) -> String {
    format!(
        r#"{{"email":"a@example.com","timestamp":1700000000,"event":"delivered","sg_event_id":"{id}","sg_message_id":"m.filter0001","note":"{note}"}}"#
    )
}

/// SendGrid's `X-Twilio-Email-Event-Webhook-Signature` ("Event Webhook Security Features"):
/// base64 of the DER ECDSA P-256/SHA-256 signature over `{t}{body}` by the PKCS#8 key.
pub fn sendgrid_signature(pkcs8: &[u8], t: i64, body: &[u8]) -> String {
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng).expect("a P-256 key");
    let message = [t.to_string().as_bytes(), body].concat();
    let signature = pair.sign(&rng, &message).expect("signing");
    base64::engine::general_purpose::STANDARD.encode(signature.as_ref())
}

/// Twilio's `X-Twilio-Signature` (its "Webhooks security" docs): base64 HMAC-SHA1, keyed by the
/// Auth Token, over `url` followed by each form parameter's name and value, sorted (repeated
/// values deduplicated, as Twilio's SDKs do); over `url` alone when it carries `bodySHA256`.
pub fn twilio_signature(token: &str, url: &str, body: &[u8]) -> String {
    let mut content = url.as_bytes().to_vec();
    if !url.contains("bodySHA256=") {
        let mut pairs: Vec<(String, String)> =
            form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        pairs.sort();
        pairs.dedup();
        for (k, v) in pairs {
            content.extend_from_slice(k.as_bytes());
            content.extend_from_slice(v.as_bytes());
        }
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, token.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(ring::hmac::sign(&key, &content))
}

/// A Twilio SharedKey secret (Twilio's "Sign webhooks with shared keys").
pub const TWILIO_SHARED_KEY: &str = "twilio-shared-key-secret-0123456789";

/// [`twilio_signature`] made with HMAC-SHA256, as a SharedKey whose Webhook Setting names
/// `HMAC_SHA256` signs (the same string, another hash).
pub fn twilio_signature_sha256(secret: &str, url: &str, body: &[u8]) -> String {
    let mut pairs: Vec<(String, String)> =
        form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    pairs.sort();
    pairs.dedup();
    let params: String = pairs.into_iter().map(|(k, v)| k + &v).collect();
    let mac = hmac_sha256(secret.as_bytes(), &[url.as_bytes(), params.as_bytes()]);
    base64::engine::general_purpose::STANDARD.encode(mac)
}

/// Adyen's `HmacSignature` header (Balance Platform / Management API webhooks): base64
/// HMAC-SHA256 of the raw body, keyed by the hex-decoded HMAC key.
pub fn adyen_header_signature(key: &str, body: &[u8]) -> String {
    let key = hex::decode(key).expect("a hex key");
    base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key, &[body]))
}

/// Square's `x-square-hmacsha256-signature`: base64 HMAC-SHA256 over `url` followed by the body.
pub fn square_signature(key: &str, url: &str, body: &[u8]) -> String {
    let mac = hmac_sha256(key.as_bytes(), &[url.as_bytes(), body]);
    base64::engine::general_purpose::STANDARD.encode(mac)
}

/// The headers of a delivery of `body` as event `id` by a URL-signing provider, signed by
/// `secret` over `url` (the URL the provider posted to, as it saw it).
pub fn url_headers(
    provider: Provider,
    secret: &str,
    url: &str,
    id: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    let h = |pairs: &[(&str, String)]| {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), v.clone())).collect::<Vec<_>>()
    };
    match provider {
        Provider::Twilio => {
            let json = url.contains("bodySHA256=");
            let kind = if json { "application/json" } else { "application/x-www-form-urlencoded" };
            h(&[
                ("Content-Type", kind.to_owned()),
                ("X-Twilio-Signature", twilio_signature(secret, url, body)),
                ("I-Twilio-Idempotency-Token", id.to_owned()),
            ])
        }
        Provider::Square => h(&[
            ("Content-Type", "application/json".to_owned()),
            ("x-square-hmacsha256-signature", square_signature(secret, url, body)),
        ]),
        other => panic!("{other:?} does not sign a URL"),
    }
}

/// The members of one HubSpot event (name, JSON text as sent), as HubSpot's Webhooks API lays
/// them out; `id` travels as `sourceId`, `note` as `propertyValue`, `attempt` as
/// `attemptNumber` (0 first, one more per retry).
pub fn hubspot_members(id: &str, note: &str, attempt: u32) -> Vec<(&'static str, String)> {
    vec![
        ("eventId", "1234567".to_owned()),
        ("subscriptionId", "2881778".to_owned()),
        ("portalId", "62515".to_owned()),
        ("appId", "1160452".to_owned()),
        ("occurredAt", "1700000000123".to_owned()),
        ("subscriptionType", r#""contact.propertyChange""#.to_owned()),
        ("attemptNumber", attempt.to_string()),
        ("objectId", "123".to_owned()),
        ("propertyName", r#""lifecyclestage""#.to_owned()),
        ("propertyValue", format!("{note:?}")),
        ("changeSource", r#""CRM""#.to_owned()),
        ("sourceId", format!("{id:?}")),
    ]
}

/// The exact text of one HubSpot event with `members`.
pub fn hubspot_event(members: &[(&str, String)]) -> String {
    let inner: Vec<String> = members.iter().map(|(n, v)| format!("\"{n}\":{v}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// The event id hookwall gives a HubSpot event (docs/providers.md): `sha256:` and the hex
/// SHA-256 of its members except `attemptNumber`, in order, each name and raw value preceded
/// by its byte length as 8 little-endian bytes.
pub fn hubspot_event_id(members: &[(&str, String)]) -> String {
    let mut intent = Vec::new();
    for (name, value) in members.iter().filter(|(n, _)| *n != "attemptNumber") {
        for piece in [name.as_bytes(), value.as_bytes()] {
            intent.extend_from_slice(&(piece.len() as u64).to_le_bytes());
            intent.extend_from_slice(piece);
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &intent);
    format!("sha256:{}", hex::encode(digest.as_ref()))
}

/// HubSpot's v3 headers ("Validating requests"): `X-HubSpot-Signature-v3` = base64
/// HMAC-SHA256 by the client secret over `POST` ‖ `url` ‖ body ‖ the timestamp `t_ms` (Unix
/// milliseconds, sent in `X-HubSpot-Request-Timestamp`).
pub fn hubspot_headers(secret: &str, url: &str, t_ms: i64, body: &[u8]) -> Vec<(String, String)> {
    let ts = t_ms.to_string();
    let mac = hmac_sha256(secret.as_bytes(), &[b"POST", url.as_bytes(), body, ts.as_bytes()]);
    vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        (
            "X-HubSpot-Signature-v3".to_owned(),
            base64::engine::general_purpose::STANDARD.encode(mac),
        ),
        ("X-HubSpot-Request-Timestamp".to_owned(), ts),
    ]
}

/// One Mandrill message event (its exact text): `id` as the message `_id`, `note` as subject.
pub fn mandrill_event(id: &str, note: &str) -> String {
    format!(
        r#"{{"event":"send","_id":"{id}","ts":1700000000,"msg":{{"email":"a@example.com","subject":"{note}","state":"sent"}}}}"#
    )
}

/// A Mandrill form body: `mandrill_events` = the JSON array of `events`, URL-encoded.
pub fn mandrill_form(events: &[String]) -> String {
    let array = format!("[{}]", events.join(","));
    form_urlencoded::Serializer::new(String::new()).append_pair("mandrill_events", &array).finish()
}

/// The event id hookwall gives a Mandrill event (docs/providers.md): `sha256:` and the hex
/// SHA-256 of its exact bytes.
pub fn mandrill_event_id(event: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, event.as_bytes());
    format!("sha256:{}", hex::encode(digest.as_ref()))
}

/// Mandrill's headers ("Authenticating webhook requests"): `X-Mandrill-Signature` = base64
/// HMAC-SHA1 by the webhook key over `url` followed by each POST parameter's name and value,
/// sorted by name.
pub fn mandrill_headers(key: &str, url: &str, body: &[u8]) -> Vec<(String, String)> {
    let mut params: Vec<(String, String)> =
        form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    params.sort();
    let mut content = url.to_owned();
    for (name, value) in params {
        content.push_str(&name);
        content.push_str(&value);
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key.as_bytes());
    let mac = ring::hmac::sign(&key, content.as_bytes());
    vec![
        ("Content-Type".to_owned(), "application/x-www-form-urlencoded".to_owned()),
        ("X-Mandrill-Signature".to_owned(), base64::engine::general_purpose::STANDARD.encode(mac)),
    ]
}

/// One Adyen notification item (the array element, its exact text) signed with the hex `key`
/// per Adyen's "Verify HMAC signatures": base64 HMAC-SHA256 over
/// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:`
/// `eventCode:success`. `note` is the merchant reference.
pub fn adyen_item(key: &str, psp: &str, event_code: &str, success: &str, note: &str) -> String {
    adyen_item_signed_by(Some(key), psp, event_code, success, note)
}

/// [`adyen_item`], with an empty signature when `key` is `None`.
pub fn adyen_item_signed_by(
    key: Option<&str>,
    psp: &str,
    event_code: &str,
    success: &str,
    note: &str,
) -> String {
    let signature = key.map_or_else(String::new, |key| {
        let signed = format!("{psp}::HookwallIt:{note}:1130:EUR:{event_code}:{success}");
        let key = hex::decode(key).expect("a hex key");
        base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key, &[signed.as_bytes()]))
    });
    format!(
        r#"{{"NotificationRequestItem":{{"additionalData":{{"hmacSignature":"{signature}"}},"amount":{{"currency":"EUR","value":1130}},"eventCode":"{event_code}","merchantAccountCode":"HookwallIt","merchantReference":"{note}","originalReference":"","pspReference":"{psp}","success":"{success}"}}}}"#
    )
}

/// An Adyen delivery of `items` (each an array element's exact text).
pub fn adyen_body(items: &[String]) -> String {
    format!(r#"{{"live":"false","notificationItems":[{}]}}"#, items.join(","))
}

/// Replaces (or adds) header `name` (case-insensitive) in `headers`.
pub fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    headers.push((name.to_owned(), value.to_owned()));
}

/// Removes header `name` (case-insensitive) from `headers`.
pub fn remove_header(headers: &mut Vec<(String, String)>, name: &str) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
}

/// The hard-coded v1a public key is the one of the seed (ring agrees with PyNaCl).
#[test]
fn v1a_public_key_matches_seed() {
    use ring::signature::KeyPair as _;
    let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&STANDARD_V1A_SEED)
        .expect("a valid seed");
    let public = base64::engine::general_purpose::STANDARD.encode(pair.public_key().as_ref());
    assert_eq!(format!("whpk_{public}"), STANDARD_V1A_PUBLIC);
}

/// The hard-coded Discord public key is the one of the seed (ring agrees with PyNaCl).
#[test]
fn discord_public_key_matches_seed() {
    use ring::signature::KeyPair as _;
    let pair =
        ring::signature::Ed25519KeyPair::from_seed_unchecked(&DISCORD_SEED).expect("a valid seed");
    assert_eq!(hex::encode(pair.public_key().as_ref()), DISCORD_PUBLIC);
}

//! Signing for `hookwall loadgen`: each request is signed exactly as its provider signs a
//! delivery (`docs/providers.md`, SPEC §4), with the secret as the provider's dashboard shows
//! it. One `match` on the closed [`Provider`] enum per step: a new provider is a compile error
//! here until it is signed too. Each body is shaped like the provider's events, carrying the
//! event id where the provider puts it (body field or header).

use base64::Engine as _;

use crate::provider::Provider;

/// Event type every generated delivery carries where the provider has one.
pub const EVENT_TYPE: &str = "invoice.paid";

/// The `hmac` source table loadgen's `hmac` deliveries match (loadgen has no source config, so
/// it signs this one scheme): `X-Hookwall-Signature: sha256=<hex HMAC-SHA256>` over
/// `{timestamp}.{body}`, timestamp in `X-Hookwall-Timestamp`, id in `X-Hookwall-Id`.
pub const LOADGEN_HMAC_TABLE: &str = r#"{ header = "X-Hookwall-Signature", prefix = "sha256=", algorithm = "sha256", encoding = "hex", content = "{timestamp}.{body}", timestamp_header = "X-Hookwall-Timestamp", id_header = "X-Hookwall-Id" }"#;

/// The key a generated delivery is signed with.
enum SignKey {
    /// HMAC (SHA-256, or SHA-1 for Segment) keyed as the provider keys it.
    Hmac(ring::hmac::Key),
    /// Standard Webhooks v1a: the sender's Ed25519 key pair (from a `whsk_` secret).
    Ed25519(ring::signature::Ed25519KeyPair),
    /// GitLab: the token itself is sent; Postmark: `user:password` for basic auth.
    Token(String),
    /// SendGrid: the sender's ECDSA P-256 key pair (from a base64 PKCS#8 private key; the
    /// appliance holds only the public key).
    EcdsaP256(ring::signature::EcdsaKeyPair),
}

/// Signs generated deliveries for one provider and secret.
pub struct Signer {
    provider: Provider,
    key: SignKey,
    /// The URL the deliveries are posted to, as URL-signing providers (Twilio, Square,
    /// HubSpot, Mandrill) sign it.
    url: String,
}

/// Decodes the base64 after `prefix` (Standard Webhooks / Svix key forms).
fn base64_after(secret: &str, prefix: &str) -> Result<Vec<u8>, String> {
    let b64 = secret.strip_prefix(prefix).unwrap_or(secret);
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| format!("not base64 after the {prefix} prefix"))
}

impl Signer {
    /// A signer for `provider` keyed by `secret` as the provider's dashboard shows it; for
    /// `standard`, a `whsec_…` secret signs v1 (HMAC) and a `whsk_…` secret key (base64 of the
    /// 32-byte Ed25519 seed, or of seed ‖ public key) signs v1a.
    ///
    /// # Errors
    /// What is wrong with the secret's form (never the secret itself).
    pub fn new(provider: Provider, secret: &str) -> Result<Signer, String> {
        if secret.is_empty() {
            return Err("secret is empty".to_owned());
        }
        let sha256 = |material: &[u8]| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, material);
        let key = match provider {
            Provider::Stripe
            | Provider::Github
            | Provider::Slack
            | Provider::Shopify
            | Provider::Paddle
            | Provider::Pagerduty
            | Provider::Twitch
            | Provider::Typeform
            | Provider::Woocommerce
            | Provider::Bitbucket
            | Provider::Square => SignKey::Hmac(sha256(secret.as_bytes())),
            Provider::Segment | Provider::Twilio | Provider::Mandrill => SignKey::Hmac(
                ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes()),
            ),
            Provider::Standard if secret.starts_with("whsk_") => {
                let bytes = base64_after(secret, "whsk_")?;
                let seed = bytes.get(..32).filter(|_| bytes.len() == 32 || bytes.len() == 64);
                let seed = seed.ok_or("a whsk_ key must decode to 32 or 64 bytes")?;
                let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(seed)
                    .map_err(|_| "not an Ed25519 seed".to_owned())?;
                SignKey::Ed25519(pair)
            }
            Provider::Standard if secret.starts_with("whpk_") => {
                return Err(
                    "a whpk_ key is the receiver's public key; signing needs the sender's \
                     whsk_ secret key (v1a) or a whsec_ secret (v1)"
                        .to_owned(),
                );
            }
            Provider::Standard | Provider::Svix => {
                let material = base64_after(secret, "whsec_")?;
                if material.is_empty() {
                    return Err("the secret decodes to zero bytes".to_owned());
                }
                SignKey::Hmac(sha256(&material))
            }
            Provider::Sendgrid => {
                let pkcs8 = base64::engine::general_purpose::STANDARD
                    .decode(secret.trim())
                    .map_err(|_| "a SendGrid signing key is base64 PKCS#8".to_owned())?;
                let algorithm = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
                let rng = ring::rand::SystemRandom::new();
                let pair = ring::signature::EcdsaKeyPair::from_pkcs8(algorithm, &pkcs8, &rng)
                    .map_err(|_| "not a P-256 PKCS#8 private key".to_owned())?;
                SignKey::EcdsaP256(pair)
            }
            Provider::Gitlab => SignKey::Token(secret.to_owned()),
            // The same rule as the source's (`provider::postmark::key`): `user:password`.
            Provider::Postmark => {
                crate::provider::postmark::key(secret)?;
                SignKey::Token(secret.to_owned())
            }
            // Adyen: the HMAC key as the Customer Area shows it (hex).
            Provider::Adyen => {
                let material = hex::decode(secret.trim())
                    .map_err(|_| "an Adyen HMAC key is hex digits".to_owned())?;
                SignKey::Hmac(sha256(&material))
            }
            Provider::Hmac
            | Provider::Linear
            | Provider::Calendly
            | Provider::Coinbase
            | Provider::Zoom
            | Provider::Mailgun
            | Provider::Hubspot => SignKey::Hmac(sha256(secret.as_bytes())),
            Provider::Intercom => SignKey::Hmac(ring::hmac::Key::new(
                ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
                secret.as_bytes(),
            )),
            // Discord: the sender's 32-byte Ed25519 seed as 64 hex characters (the source is
            // configured with its public key).
            Provider::Discord => {
                let mut seed = [0; 32];
                hex::decode_to_slice(secret, &mut seed)
                    .map_err(|_| "a Discord signing seed is 64 hex characters".to_owned())?;
                let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
                    .map_err(|_| "not an Ed25519 seed".to_owned())?;
                SignKey::Ed25519(pair)
            }
        };
        Ok(Signer { provider, key, url: "http://127.0.0.1/".to_owned() })
    }

    /// The same signer for deliveries posted to `url` (`http://host[:port]/path[?query]`, as
    /// the server rebuilds it from `Host` and the request target); only Twilio, Square, HubSpot
    /// and Mandrill sign it. The default is `http://127.0.0.1/`.
    #[must_use]
    pub fn with_url(mut self, url: String) -> Signer {
        self.url = url;
        self
    }

    /// A JSON body for event `id`, shaped like the provider's events (about 200–330 bytes),
    /// with the id where the provider carries it in the body (Stripe, Slack, Paddle, Typeform,
    /// PagerDuty, Segment); the others carry it in a header. Mailgun's body carries its
    /// signature, made now ([`Signer::body_at`]).
    pub fn body(&self, id: &str) -> Vec<u8> {
        self.body_at(id, crate::clock::now_unix_s())
    }

    /// [`Signer::body`] with Mailgun's in-body signature and Linear's `webhookTimestamp` made
    /// at `t` (Unix seconds); `t` is unused for every other provider.
    pub fn body_at(&self, id: &str, t: i64) -> Vec<u8> {
        const INVOICE: &str = r#"{"id":"in_1Loadgen","object":"invoice","amount_paid":2000,"currency":"usd","customer":"cus_Loadgen","status":"paid","lines":{"data":[{"id":"il_1","amount":2000}]}}"#;
        let text = match self.provider {
            Provider::Stripe => format!(
                r#"{{"id":"{id}","object":"event","type":"{EVENT_TYPE}","created":1700000000,"livemode":false,"data":{{"object":{INVOICE}}}}}"#
            ),
            Provider::Github => format!(r#"{{"action":"opened","number":1,"invoice":{INVOICE}}}"#),
            Provider::Standard | Provider::Svix => {
                format!(
                    r#"{{"type":"{EVENT_TYPE}","timestamp":"2026-01-01T00:00:00Z","data":{INVOICE}}}"#
                )
            }
            Provider::Slack => format!(
                r#"{{"type":"event_callback","event_id":"{id}","team_id":"T1","event":{{"type":"message","invoice":{INVOICE}}}}}"#
            ),
            Provider::Shopify => format!(r#"{{"id":820982911946154508,"invoice":{INVOICE}}}"#),
            Provider::Paddle => format!(
                r#"{{"event_id":"{id}","event_type":"transaction.completed","data":{INVOICE}}}"#
            ),
            Provider::Twitch => {
                format!(r#"{{"subscription":{{"type":"channel.follow"}},"event":{INVOICE}}}"#)
            }
            Provider::Typeform => format!(
                r#"{{"event_id":"{id}","event_type":"form_response","form_response":{INVOICE}}}"#
            ),
            Provider::Gitlab => format!(r#"{{"object_kind":"push","invoice":{INVOICE}}}"#),
            Provider::Pagerduty => format!(
                r#"{{"event":{{"id":"{id}","event_type":"incident.triggered","data":{INVOICE}}}}}"#
            ),
            Provider::Segment => {
                format!(r#"{{"messageId":"{id}","type":"track","properties":{INVOICE}}}"#)
            }
            Provider::Woocommerce => {
                format!(r#"{{"id":727,"status":"processing","invoice":{INVOICE}}}"#)
            }
            Provider::Bitbucket => {
                format!(
                    r#"{{"push":{{"changes":[]}},"repository":{{"name":"r"}},"invoice":{INVOICE}}}"#
                )
            }
            // An SMS status callback as Twilio posts it (a form; the id travels in a header).
            Provider::Twilio => format!(
                "MessageSid=SM{id}&MessageStatus=delivered&To=%2B15558675310&From=%2B15017122661\
                 &Body=Paid+2000+usd&AccountSid=AC0000000000000000000000000000000"
            ),
            Provider::Square => format!(
                r#"{{"merchant_id":"6SSW7HV8K2ST5","type":"invoice.payment_made","event_id":"{id}","created_at":"2026-01-01T00:00:00Z","data":{{"type":"invoice","object":{INVOICE}}}}}"#
            ),
            // A batch of one event (SendGrid always posts an array).
            Provider::Sendgrid => format!(
                r#"[{{"email":"payer@example.com","timestamp":1700000000,"event":"delivered","sg_event_id":"{id}","sg_message_id":"msg.filter0001","invoice":{INVOICE}}}]"#
            ),
            Provider::Discord => format!(
                r#"{{"id":"{id}","application_id":"1","type":2,"token":"t","version":1,"data":{{"name":"invoice","invoice":{INVOICE}}}}}"#
            ),
            Provider::Hmac => format!(r#"{{"type":"{EVENT_TYPE}","data":{INVOICE}}}"#),
            Provider::Linear => format!(
                r#"{{"action":"create","type":"Issue","webhookTimestamp":{t}000,"data":{INVOICE}}}"#
            ),
            Provider::Intercom => format!(
                r#"{{"type":"notification_event","id":"{id}","topic":"conversation.user.created","data":{{"item":{INVOICE}}}}}"#
            ),
            Provider::Postmark => format!(
                r#"{{"RecordType":"Delivery","MessageID":"{id}","Recipient":"a@example.com","Details":{INVOICE}}}"#
            ),
            Provider::Calendly => format!(
                r#"{{"event":"invitee.created","created_at":"2026-01-01T00:00:00Z","payload":{{"uri":"{id}","invoice":{INVOICE}}}}}"#
            ),
            Provider::Coinbase => format!(
                r#"{{"id":"d-{id}","scheduled_for":"2026-01-01T00:00:00Z","event":{{"id":"{id}","type":"charge:confirmed","data":{INVOICE}}}}}"#
            ),
            Provider::Zoom => format!(
                r#"{{"event":"meeting.started","event_ts":1700000000000,"payload":{{"uuid":"{id}","object":{INVOICE}}}}}"#
            ),
            Provider::Mailgun => {
                let token =
                    &hex::encode(crate::verify::sha256(format!("{id}/{t}").as_bytes()))[..50];
                let signature =
                    hex::encode(self.mac(&[t.to_string().as_bytes(), token.as_bytes()]));
                format!(
                    r#"{{"signature":{{"timestamp":"{t}","token":"{token}","signature":"{signature}"}},"event-data":{{"id":"{id}","event":"delivered","timestamp":{t},"invoice":{INVOICE}}}}}"#
                )
            }
            // A batch of one event (HubSpot always posts an array); the identity is the
            // event's content, which carries the id as `changeSource`'s `sourceId`.
            // A form whose `mandrill_events` is a batch of one event (the id in `_id`).
            Provider::Mandrill => {
                let events = format!(
                    r#"[{{"event":"send","_id":"{id}","ts":1700000000,"msg":{{"email":"payer@example.com","subject":"Paid","invoice":{INVOICE}}}}}]"#
                );
                let encoded: String = form_urlencoded::Serializer::new(String::new())
                    .append_pair("mandrill_events", &events)
                    .finish();
                encoded
            }
            // A batch of one notification item, signed inside the item (pspReference = id).
            Provider::Adyen => {
                let signed = format!("{id}::Loadgen:invoice:2000:EUR:AUTHORISATION:true");
                let signature = base64::engine::general_purpose::STANDARD
                    .encode(self.mac(&[signed.as_bytes()]));
                format!(
                    r#"{{"live":"false","notificationItems":[{{"NotificationRequestItem":{{"additionalData":{{"hmacSignature":"{signature}"}},"amount":{{"currency":"EUR","value":2000}},"eventCode":"AUTHORISATION","merchantAccountCode":"Loadgen","merchantReference":"invoice","originalReference":"","pspReference":"{id}","success":"true"}}}}]}}"#
                )
            }
            Provider::Hubspot => format!(
                r#"[{{"eventId":1,"subscriptionId":12345,"portalId":62515,"appId":54321,"occurredAt":1700000000000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","sourceId":"{id}","invoice":{INVOICE}}}]"#
            ),
        };
        text.into_bytes()
    }

    /// The headers of a delivery of `body` as event `id`, signed at `t` (Unix seconds), as
    /// `(name, value)` pairs, `Content-Type: application/json` first. Each provider's scheme
    /// (signed content, encoding, headers) is the one its file in `src/provider/` verifies.
    pub fn sign(&self, id: &str, t: i64, body: &[u8]) -> Vec<(&'static str, String)> {
        let mut h = vec![("Content-Type", "application/json".to_owned())];
        let ts = t.to_string();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        match self.provider {
            Provider::Stripe => {
                let mac = hex::encode(self.mac(&[ts.as_bytes(), b".", body]));
                h.push(("Stripe-Signature", format!("t={t},v1={mac}")));
            }
            Provider::Github => {
                h.push(("X-GitHub-Delivery", id.to_owned()));
                h.push(("X-GitHub-Event", "invoice".to_owned()));
                h.push((
                    "X-Hub-Signature-256",
                    format!("sha256={}", hex::encode(self.mac(&[body]))),
                ));
            }
            Provider::Standard | Provider::Svix => {
                let content = [id.as_bytes(), b".", ts.as_bytes(), b".", body];
                let signature = match &self.key {
                    SignKey::Ed25519(pair) => {
                        format!("v1a,{}", b64(pair.sign(&content.concat()).as_ref()))
                    }
                    _ => format!("v1,{}", b64(&self.mac(&content))),
                };
                let (id_h, ts_h, sig_h) = if self.provider == Provider::Svix {
                    ("svix-id", "svix-timestamp", "svix-signature")
                } else {
                    ("webhook-id", "webhook-timestamp", "webhook-signature")
                };
                h.push((id_h, id.to_owned()));
                h.push((ts_h, ts));
                h.push((sig_h, signature));
            }
            Provider::Slack => {
                let mac = hex::encode(self.mac(&[b"v0:", ts.as_bytes(), b":", body]));
                h.push(("X-Slack-Request-Timestamp", ts));
                h.push(("X-Slack-Signature", format!("v0={mac}")));
            }
            Provider::Shopify => {
                h.push(("X-Shopify-Hmac-Sha256", b64(&self.mac(&[body]))));
                h.push(("X-Shopify-Event-Id", id.to_owned()));
                h.push(("X-Shopify-Webhook-Id", format!("wh-{id}")));
                h.push(("X-Shopify-Topic", "orders/create".to_owned()));
                h.push(("X-Shopify-Triggered-At", ts));
            }
            Provider::Paddle => {
                let mac = hex::encode(self.mac(&[ts.as_bytes(), b":", body]));
                h.push(("Paddle-Signature", format!("ts={t};h1={mac}")));
            }
            Provider::Twitch => {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.unsigned_abs());
                let rfc3339 = humantime::format_rfc3339_nanos(at).to_string();
                let mac = hex::encode(self.mac(&[id.as_bytes(), rfc3339.as_bytes(), body]));
                h.push(("Twitch-Eventsub-Message-Id", id.to_owned()));
                h.push(("Twitch-Eventsub-Message-Timestamp", rfc3339));
                h.push(("Twitch-Eventsub-Message-Signature", format!("sha256={mac}")));
                h.push(("Twitch-Eventsub-Message-Type", "notification".to_owned()));
                h.push(("Twitch-Eventsub-Subscription-Type", "channel.follow".to_owned()));
            }
            Provider::Typeform => {
                h.push(("Typeform-Signature", format!("sha256={}", b64(&self.mac(&[body])))));
            }
            Provider::Pagerduty => {
                h.push(("X-PagerDuty-Signature", format!("v1={}", hex::encode(self.mac(&[body])))));
            }
            Provider::Segment => h.push(("X-Signature", hex::encode(self.mac(&[body])))),
            Provider::Woocommerce => {
                h.push(("X-WC-Webhook-Signature", b64(&self.mac(&[body]))));
                h.push(("X-WC-Webhook-Delivery-ID", id.to_owned()));
                h.push(("X-WC-Webhook-Topic", "order.updated".to_owned()));
            }
            Provider::Bitbucket => {
                h.push(("X-Hub-Signature", format!("sha256={}", hex::encode(self.mac(&[body])))));
                h.push(("X-Request-UUID", id.to_owned()));
                h.push(("X-Event-Key", "repo:push".to_owned()));
                h.push(("X-Attempt-Number", "1".to_owned()));
            }
            Provider::Sendgrid => {
                let signature = match &self.key {
                    SignKey::EcdsaP256(pair) => {
                        let rng = ring::rand::SystemRandom::new();
                        let message = [ts.as_bytes(), body].concat();
                        pair.sign(&rng, &message).map(|s| b64(s.as_ref())).unwrap_or_default()
                    }
                    _ => String::new(),
                };
                h.push(("X-Twilio-Email-Event-Webhook-Signature", signature));
                h.push(("X-Twilio-Email-Event-Webhook-Timestamp", ts));
            }
            Provider::Twilio => {
                h[0].1 = "application/x-www-form-urlencoded".to_owned();
                let params = crate::provider::twilio::sorted_params(body);
                h.push((
                    "X-Twilio-Signature",
                    b64(&self.mac(&[self.url.as_bytes(), params.as_bytes()])),
                ));
                h.push(("I-Twilio-Idempotency-Token", id.to_owned()));
            }
            Provider::Square => {
                let signature = b64(&self.mac(&[self.url.as_bytes(), body]));
                h.push(("x-square-hmacsha256-signature", signature));
            }
            Provider::Gitlab => {
                let token = match &self.key {
                    SignKey::Token(token) => token.clone(),
                    _ => String::new(),
                };
                h.push(("X-Gitlab-Token", token));
                h.push(("X-Gitlab-Event", "Push Hook".to_owned()));
                h.push(("Idempotency-Key", id.to_owned()));
                h.push(("X-Gitlab-Event-UUID", format!("uuid-{id}")));
            }
            Provider::Discord => {
                let signature = match &self.key {
                    SignKey::Ed25519(pair) => {
                        hex::encode(pair.sign(&[ts.as_bytes(), body].concat()).as_ref())
                    }
                    _ => String::new(),
                };
                h.push(("X-Signature-Ed25519", signature));
                h.push(("X-Signature-Timestamp", ts));
            }
            Provider::Hmac => {
                let mac = hex::encode(self.mac(&[ts.as_bytes(), b".", body]));
                h.push(("X-Hookwall-Signature", format!("sha256={mac}")));
                h.push(("X-Hookwall-Timestamp", ts));
                h.push(("X-Hookwall-Id", id.to_owned()));
            }
            Provider::Linear => {
                h.push(("Linear-Signature", hex::encode(self.mac(&[body]))));
                h.push(("Linear-Delivery", id.to_owned()));
                h.push(("Linear-Event", "Issue".to_owned()));
            }
            Provider::Intercom => {
                h.push(("X-Hub-Signature", format!("sha1={}", hex::encode(self.mac(&[body])))));
            }
            Provider::Postmark => {
                let credentials = match &self.key {
                    SignKey::Token(credentials) => credentials.as_bytes(),
                    _ => b"",
                };
                h.push(("Authorization", format!("Basic {}", b64(credentials))));
            }
            Provider::Calendly => {
                let mac = hex::encode(self.mac(&[ts.as_bytes(), b".", body]));
                h.push(("Calendly-Webhook-Signature", format!("t={t},v1={mac}")));
            }
            Provider::Coinbase => {
                h.push(("X-CC-Webhook-Signature", hex::encode(self.mac(&[body]))));
            }
            Provider::Zoom => {
                let mac = hex::encode(self.mac(&[b"v0:", ts.as_bytes(), b":", body]));
                h.push(("x-zm-signature", format!("v0={mac}")));
                h.push(("x-zm-request-timestamp", ts));
            }
            // The signature travels in the body (`body_at`).
            Provider::Mailgun | Provider::Adyen => {}
            Provider::Mandrill => {
                h[0].1 = "application/x-www-form-urlencoded".to_owned();
                let content = crate::provider::mandrill::signed_content(&self.url, body);
                h.push(("X-Mandrill-Signature", b64(&self.mac(&[&content]))));
            }
            Provider::Hubspot => {
                let ms = format!("{t}000");
                let content = [b"POST", self.url.as_bytes(), body, ms.as_bytes()];
                h.push(("X-HubSpot-Signature-v3", b64(&self.mac(&content))));
                h.push(("X-HubSpot-Request-Timestamp", ms));
            }
        }
        h
    }

    /// The HMAC of `parts` (an empty tag for the non-HMAC keys, which never call this).
    fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        let SignKey::Hmac(key) = &self.key else { return Vec::new() };
        let mut ctx = ring::hmac::Context::with_key(key);
        for part in parts {
            ctx.update(part);
        }
        ctx.sign().as_ref().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use ring::signature::KeyPair as _;

    use super::*;
    use crate::config::Config;
    use crate::http::Request;

    /// A `whsk_` secret key and the matching `whpk_` public key.
    fn v1a_pair() -> (String, String) {
        let seed = [7u8; 32];
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).expect("seed");
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        (format!("whsk_{}", b64(&seed)), format!("whpk_{}", b64(pair.public_key().as_ref())))
    }

    /// Signs with the loadgen signer (`sign_secret`) and verifies with the appliance's own
    /// config loader and verifier (`verify_secret`), then inspects the event id.
    fn check(provider: Provider, sign_secret: &str, verify_secret: &str) {
        let extra = if provider == Provider::Hmac {
            format!("hmac = {LOADGEN_HMAC_TABLE}\n")
        } else {
            String::new()
        };
        let signer = Signer::new(provider, sign_secret).expect("valid secret");
        let t = 1_700_000_000;
        let body = signer.body_at("evt_1", t);
        let signed = signer.sign("evt_1", t, &body);
        let text = format!(
            "[[source]]\nid = \"s\"\ntenant = \"t\"\nprovider = \"{}\"\n\
             secrets = [{{ id = \"k\", value = {verify_secret:?} }}]\n{extra}destination = \"d\"\n\
             [[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n",
            provider.name()
        );
        let config = Config::from_toml_str(&text, std::path::Path::new("t.toml"), &|_| None)
            .unwrap_or_else(|e| panic!("{provider:?}: {e}"));
        let mut headers: crate::http::Headers =
            signed.iter().map(|(n, v)| (&**n, v.as_bytes())).collect();
        // The signer's default URL is `http://127.0.0.1/`.
        headers.push("host", b"127.0.0.1");
        let req = Request {
            method: "POST".to_owned(),
            target: "/".to_owned(),
            headers,
            body,
            keep_alive: true,
        };
        let source = &config.sources[0];
        let verdict = crate::verify::verify(source, &req, t);
        assert!(verdict.is_ok(), "{provider:?}: {:?}", verdict.err());
        if provider.batches() {
            let events = crate::inspect::inspect_batch(source, &req);
            assert!(events.is_ok_and(|e| e.len() == 1), "{provider:?}: one event");
        } else {
            let inspected = crate::inspect::inspect(source, &req);
            assert!(inspected.is_ok(), "{provider:?}: {:?}", inspected.err());
        }
    }

    /// A SendGrid signing key (base64 PKCS#8) and its public key as Mail Settings shows it
    /// (base64 SPKI).
    fn sendgrid_pair() -> (String, String) {
        let algorithm = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(algorithm, &rng).expect("key");
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng)
            .expect("key");
        let spki_prefix =
            hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").expect("hex");
        let spki = [spki_prefix.as_slice(), pair.public_key().as_ref()].concat();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        (b64(pkcs8.as_ref()), b64(&spki))
    }

    #[test]
    fn every_provider_signs_what_the_appliance_verifies() {
        for provider in Provider::ALL.into_iter().filter(|p| *p != Provider::Sendgrid) {
            let secret = match provider {
                Provider::Stripe => "whsec_loadgen_test",
                Provider::Standard | Provider::Svix => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                Provider::Postmark => "hookwall:It's a Secret to Everybody",
                Provider::Discord => continue,
                Provider::Adyen => {
                    "44782def547aaa06c910c43932b1eb0c71fc68d9d0c057550c48ec2acf6ba056"
                }
                _ => "It's a Secret to Everybody",
            };
            check(provider, secret, secret);
        }
        // Discord: signed with a seed, verified with its public key.
        let seed = [9u8; 32];
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).expect("seed");
        check(Provider::Discord, &hex::encode(seed), &hex::encode(pair.public_key().as_ref()));
        let (secret_key, public_key) = v1a_pair();
        check(Provider::Standard, &secret_key, &public_key);
        let (private, public) = sendgrid_pair();
        check(Provider::Sendgrid, &private, &public);
    }

    #[test]
    fn the_body_is_json_carrying_the_id() {
        let signer = Signer::new(Provider::Stripe, "whsec_x").expect("valid secret");
        let v: serde_json::Value = serde_json::from_slice(&signer.body("evt_9")).expect("JSON");
        assert_eq!(v["id"], "evt_9");
        assert_eq!(v["type"], EVENT_TYPE);
    }

    #[test]
    fn malformed_secrets_are_refused_without_echoing_them() {
        for (provider, secret) in [
            (Provider::Standard, "whsec_!!!"),
            (Provider::Standard, "whsk_AAAA"),
            (Provider::Svix, "whsec_"),
            (Provider::Stripe, ""),
            (Provider::Postmark, "no-colon-s3cret"),
        ] {
            let why = Signer::new(provider, secret).err().expect("refused");
            assert!(secret.len() < 6 || !why.contains(secret), "{why}");
        }
        assert!(Signer::new(Provider::Postmark, "hookwall:s3cret").is_ok(), "user:password");
    }
}

//! Signing for `hookwall loadgen`: each request is signed exactly as its provider signs a
//! delivery (README "Providers", SPEC §4), with the key derived by
//! [`crate::provider::hmac_key`] from the secret as the provider's dashboard shows it. One
//! `match` on the closed [`Provider`] enum: a new provider is a compile error here until it is
//! signed too.

use base64::Engine as _;

use crate::provider::{self, Provider};

/// Event type every generated delivery carries (Stripe and Standard Webhooks in the body,
/// GitHub in `X-GitHub-Event`).
pub const EVENT_TYPE: &str = "invoice.paid";

/// Signs generated deliveries for one provider and secret.
pub struct Signer {
    provider: Provider,
    key: ring::hmac::Key,
}

impl Signer {
    /// A signer for `provider` keyed by `secret` (as the provider's dashboard shows it).
    ///
    /// # Errors
    /// What is wrong with the secret's form (never the secret itself).
    pub fn new(provider: Provider, secret: &str) -> Result<Signer, String> {
        Ok(Signer { provider, key: provider::hmac_key(provider, secret)? })
    }

    /// A JSON body for event `id` (about 330 bytes, shaped like a Stripe `invoice.paid` event;
    /// Stripe reads the id from it, the others from a header).
    pub fn body(&self, id: &str) -> Vec<u8> {
        format!(
            r#"{{"id":"{id}","object":"event","type":"{EVENT_TYPE}","created":1700000000,"livemode":false,"data":{{"object":{{"id":"in_1Loadgen","object":"invoice","amount_paid":2000,"currency":"usd","customer":"cus_Loadgen","status":"paid","lines":{{"data":[{{"id":"il_1","amount":2000}}]}}}}}}}}"#
        )
        .into_bytes()
    }

    /// The headers of a delivery of `body` as event `id`, signed at `t` (Unix seconds):
    /// - `stripe`: `Stripe-Signature: t={t},v1={hex HMAC-SHA256 over "{t}.{body}"}`;
    /// - `github`: `X-GitHub-Delivery: {id}`, `X-GitHub-Event`, `X-Hub-Signature-256:
    ///   sha256={hex HMAC-SHA256 over the body}` (GitHub signs no timestamp);
    /// - `standard`: `webhook-id: {id}`, `webhook-timestamp: {t}`, `webhook-signature:
    ///   v1,{base64 HMAC-SHA256 over "{id}.{t}.{body}"}`.
    ///
    /// Returned as `(name, value)` pairs, `Content-Type: application/json` first.
    pub fn sign(&self, id: &str, t: i64, body: &[u8]) -> Vec<(&'static str, String)> {
        let mut headers = vec![("Content-Type", "application/json".to_owned())];
        match self.provider {
            Provider::Stripe => {
                let mac = self.mac(&[t.to_string().as_bytes(), b".", body]);
                headers.push(("Stripe-Signature", format!("t={t},v1={}", hex::encode(mac))));
            }
            Provider::Github => {
                let mac = self.mac(&[body]);
                headers.push(("X-GitHub-Delivery", id.to_owned()));
                headers.push(("X-GitHub-Event", "invoice".to_owned()));
                headers.push(("X-Hub-Signature-256", format!("sha256={}", hex::encode(mac))));
            }
            Provider::Standard => {
                let ts = t.to_string();
                let mac = self.mac(&[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
                let b64 = base64::engine::general_purpose::STANDARD.encode(mac);
                headers.push(("webhook-id", id.to_owned()));
                headers.push(("webhook-timestamp", ts));
                headers.push(("webhook-signature", format!("v1,{b64}")));
            }
        }
        headers
    }

    fn mac(&self, parts: &[&[u8]]) -> ring::hmac::Tag {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        for part in parts {
            ctx.update(part);
        }
        ctx.sign()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Secret, SourceConfig};
    use crate::http::Request;

    /// Signs with the loadgen signer and verifies with the appliance's own verifier.
    fn check(provider: Provider, secret: &str) {
        let signer = Signer::new(provider, secret).expect("valid secret");
        let t = 1_700_000_000;
        let body = signer.body("evt_1");
        let signed = signer.sign("evt_1", t, &body);
        let source = SourceConfig {
            id: "s".to_owned(),
            tenant: "t".to_owned(),
            provider,
            tolerance: provider.default_tolerance(),
            future_skew: std::time::Duration::from_secs(60),
            event_types: None,
            secrets: vec![Secret {
                id: "k".to_owned(),
                key: provider::hmac_key(provider, secret).expect("valid secret"),
                not_before: None,
                not_after: None,
            }],
            destination: 0,
            ack_deadline: provider.ack_deadline(),
        };
        let req = Request {
            method: "POST".to_owned(),
            target: "/".to_owned(),
            headers: signed
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
                .collect(),
            body,
            keep_alive: true,
        };
        let verdict = crate::verify::verify(&source, &req, t);
        assert!(verdict.is_ok(), "{provider:?}: {:?}", verdict.err());
    }

    #[test]
    fn every_provider_signs_what_the_appliance_verifies() {
        for provider in Provider::ALL {
            let secret = match provider {
                Provider::Stripe => "whsec_loadgen_test",
                Provider::Github => "It's a Secret to Everybody",
                Provider::Standard => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            };
            check(provider, secret);
        }
    }

    #[test]
    fn the_body_is_json_carrying_the_id() {
        let signer = Signer::new(Provider::Stripe, "whsec_x").expect("valid secret");
        let v: serde_json::Value = serde_json::from_slice(&signer.body("evt_9")).expect("JSON");
        assert_eq!(v["id"], "evt_9");
        assert_eq!(v["type"], EVENT_TYPE);
    }
}

//! Providers: who signs a delivery and how. A closed enum; each provider's documented facts
//! (signed content, id source, timestamp source, retry horizon, ack deadline) live here and in
//! the per-provider files, and are tabled in the README.

use std::time::Duration;

pub mod github;
pub mod standard;
pub mod stripe;

/// A webhook provider whose signature scheme hookwall implements (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Stripe: `Stripe-Signature: t=…,v1=…` = hex HMAC-SHA256 over `"{t}.{body}"`, keyed by the
    /// whole `whsec_…` string.
    Stripe,
    /// GitHub: `X-Hub-Signature-256: sha256=…` = hex HMAC-SHA256 over the body; no signed
    /// timestamp; id `X-GitHub-Delivery`.
    Github,
    /// Standard Webhooks v1 (HMAC): `webhook-signature: v1,…` = base64 HMAC-SHA256 over
    /// `"{webhook-id}.{webhook-timestamp}.{body}"`, keyed by base64-decoded `whsec_…`.
    Standard,
}

impl Provider {
    /// Every provider this build verifies, in SPEC §4 order.
    pub const ALL: [Provider; 3] = [Provider::Stripe, Provider::Github, Provider::Standard];

    /// Providers named in SPEC §4 that this build does not verify yet (config error names them).
    pub const PLANNED: [&'static str; 26] = [
        "slack",
        "twilio",
        "shopify",
        "svix",
        "sendgrid",
        "discord",
        "paddle",
        "square",
        "zoom",
        "hubspot",
        "mailgun",
        "pagerduty",
        "twitch",
        "typeform",
        "intercom",
        "linear",
        "woocommerce",
        "gitlab",
        "bitbucket",
        "mandrill",
        "calendly",
        "coinbase",
        "postmark",
        "segment",
        "adyen",
        "hmac",
    ];

    /// The config spelling (`provider = "stripe"`), also the metric label.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Stripe => "stripe",
            Provider::Github => "github",
            Provider::Standard => "standard",
        }
    }

    /// Parses the config spelling; `None` for anything not in [`Provider::ALL`].
    pub fn parse(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The header that carries the signature (lowercase): without it a delivery is
    /// `signature_missing`, which ingress can tell from the head alone.
    pub fn signature_header(self) -> &'static str {
        match self {
            Provider::Stripe => stripe::SIGNATURE_HEADER,
            Provider::Github => github::SIGNATURE_HEADER,
            Provider::Standard => standard::SIGNATURE_HEADER,
        }
    }

    /// Whether the scheme signs a timestamp (GitHub does not: freshness cannot be checked, R7).
    pub fn signs_timestamp(self) -> bool {
        !matches!(self, Provider::Github)
    }

    /// Default `tolerance`: Stripe's libraries and the Standard Webhooks spec both use 300 s.
    pub fn default_tolerance(self) -> Duration {
        Duration::from_secs(300)
    }

    /// How long the provider keeps retrying one event (its retry horizon). `dedupe_retention`
    /// must not be shorter (R25). Stripe: up to 3 days in live mode. GitHub: no automatic
    /// retries (manual redelivery only, kept 3 days in the delivery log). Standard Webhooks
    /// (Svix schedule): 5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h ≈ 27.6 h.
    pub fn retry_horizon(self) -> Duration {
        match self {
            Provider::Stripe | Provider::Github => Duration::from_secs(3 * 86_400),
            Provider::Standard => Duration::from_secs(27 * 3_600 + 36 * 60),
        }
    }

    /// How long the provider waits for our answer before it counts the attempt as failed (R17).
    /// GitHub: 10 s. Stripe: documents no exact figure, ~10 s observed; Svix: 15 s.
    pub fn ack_deadline(self) -> Duration {
        match self {
            Provider::Stripe | Provider::Github => Duration::from_secs(10),
            Provider::Standard => Duration::from_secs(15),
        }
    }
}

/// Derives the HMAC-SHA256 key from a secret written exactly as the provider's dashboard shows
/// it. Stripe and GitHub key the MAC with the secret's UTF-8 bytes as written (Stripe's
/// `whsec_` prefix included); Standard Webhooks strips `whsec_` and base64-decodes the rest.
///
/// # Errors
/// A message naming what is wrong with the secret's form (never the secret itself).
pub fn hmac_key(provider: Provider, secret: &str) -> Result<ring::hmac::Key, String> {
    use base64::Engine as _;
    if secret.is_empty() {
        return Err("secret is empty".to_owned());
    }
    let material = match provider {
        Provider::Stripe | Provider::Github => secret.as_bytes().to_vec(),
        Provider::Standard => {
            let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
            base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| {
                "Standard Webhooks secret is not base64 after the whsec_ prefix".to_owned()
            })?
        }
    };
    if material.is_empty() {
        return Err("secret decodes to zero bytes".to_owned());
    }
    Ok(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &material))
}

//! Stripe's webhook signature scheme, as documented in Stripe's "Verify webhook signatures
//! manually" guide: the `Stripe-Signature` header is a comma-separated list of `key=value`
//! elements; `t` is the signing time in Unix seconds and each `v1` is a hex HMAC-SHA256 over
//! `"{t}.{body}"`, keyed by the endpoint secret exactly as the dashboard shows it (`whsec_…`).
//! Several `v1` appear while Stripe rolls a secret. `v0` (test-mode legacy scheme) and unknown
//! schemes are ignored, so a header cannot downgrade us to a weaker scheme.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// Bytes of an HMAC-SHA256 tag.
const TAG_BYTES: usize = 32;

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "stripe-signature";

/// Reads `Stripe-Signature` into the signed timestamp, the `v1` candidates and the signed
/// content `{t}.{body}`, where `{t}` is the exact text of `t` in the header.
///
/// Elements without `=` are skipped, as Stripe's own libraries do.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent or repeated, `t` is absent, repeated
/// or not an integer, or there is no `v1` element.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let (t_text, candidates) = elements(header)?;
    let signed_at = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    if candidates.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented::signed(Some(signed_at), candidates, [t_text, b".", &req.body, b"", b""]))
}

/// Splits the header into the text of its single `t` and its `v1` candidates.
fn elements(header: &[u8]) -> Result<(&[u8], Candidates), Reject> {
    let mut t_text = None;
    let mut candidates = Candidates::new();
    for element in header.split(|&b| b == b',') {
        let Some(eq) = element.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (key, value) = (&element[..eq], &element[eq + 1..]);
        match key {
            b"t" if t_text.replace(value).is_some() => return Err(Reject::SignatureMissing),
            b"v1" => candidates.offer(verify::decode_hex_tag(value, Scheme::Hmac, TAG_BYTES)),
            _ => {}
        }
    }
    Ok((t_text.ok_or(Reject::SignatureMissing)?, candidates))
}

//! Mandrill (Mailchimp Transactional), as documented in "Authenticating webhook requests":
//! `X-Mandrill-Signature` is the base64 HMAC-SHA1, keyed by the webhook's key exactly as shown
//! (its UTF-8 bytes), of the webhook URL (the [`crate::signed_url`] rule: set `public_url` to
//! the URL as entered at Mandrill when a proxy rewrites it) followed by each POST parameter's
//! name and value, names sorted, values decoded. A name given twice counts once, with its last
//! value, as the documented PHP (`$_POST`) and Python (`request.POST[key]`) examples read it.
//!
//! No signed timestamp (freshness cannot be checked, R7). The body is a form whose
//! `mandrill_events` parameter is a JSON array of events: a batch ([`crate::batch`]). Events
//! carry no event id (`_id` is the message's, shared by its send, open and click events; sync
//! events have none), so each event's identity is its content (see `docs/providers.md`).
//!
//! URL check: when a webhook is added, Mandrill sends a HEAD request and, when that is not
//! answered 200, a POST whose `mandrill_events` is `[]`, signed with the generic key
//! `test-webhook` (Mandrill support, "Why can't my webhook or inbound route URL be
//! verified?"). hookwall answers both: the HEAD with a bodiless 200 (for `mandrill` sources
//! only; other sources answer a HEAD 405, `pipeline::Routes::route`), the POST with
//! [`url_check`]; neither admits anything.

use base64::Engine as _;

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-mandrill-signature";
/// The form parameter holding the JSON array of events.
pub const EVENTS_PARAM: &str = "mandrill_events";
/// The member of each event holding its type (`send`, `open`, `click`, …).
pub const EVENT_TYPE_MEMBER: &str = "event";
/// The key Mandrill signs its URL-check POST with.
pub const URL_CHECK_KEY: &str = "test-webhook";

/// The signed content: `url`, then each form parameter's name and value (decoded), names
/// sorted byte-wise, the last value of a repeated name.
pub fn signed_content(url: &str, body: &[u8]) -> Vec<u8> {
    let params: std::collections::BTreeMap<String, String> =
        form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let mut out = url.as_bytes().to_vec();
    for (name, value) in &params {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Reads the signature header; the signed content is [`signed_content`] over `url`.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated or not base64 of 20 bytes.
pub(crate) fn presented<'a>(req: &'a Request, url: &str) -> Result<Presented<'a>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag =
        verify::decode_base64_tag(header, Scheme::Hmac, 20).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    Ok(Presented::alternatives(None, candidates, vec![signed_content(url, &req.body)]))
}

/// The decoded value of the single `mandrill_events` parameter of a form body; `None` when it
/// is absent or given twice.
pub fn events_param(body: &[u8]) -> Option<Vec<u8>> {
    let mut values = form_urlencoded::parse(body).filter(|(name, _)| name == EVENTS_PARAM);
    match (values.next(), values.next()) {
        (Some((_, value)), None) => Some(value.into_owned().into_bytes()),
        _ => None,
    }
}

/// Mandrill's URL-check POST, answered 200 without admitting anything: `mandrill_events` is
/// exactly `[]` and the request is signed over `url` with [`URL_CHECK_KEY`]. `None` for
/// anything else (which then goes through ordinary verification with the source's keys).
pub(crate) fn url_check(req: &Request, url: &str) -> Option<crate::pipeline::Challenge> {
    if events_param(&req.body)?.trim_ascii() != b"[]" {
        return None;
    }
    let header = verify::unique_header(req, SIGNATURE_HEADER)?;
    let tag = base64::engine::general_purpose::STANDARD.decode(header).ok()?;
    let key =
        ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, URL_CHECK_KEY.as_bytes());
    ring::hmac::verify(&key, &signed_content(url, &req.body), &tag).ok()?;
    Some(crate::pipeline::Challenge {
        content_type: "application/json",
        body: br#"{"status":"challenge"}"#.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::{events_param, signed_content};

    #[test]
    fn sorted_names_last_value_wins() {
        let body = b"b=2&a=1&b=3&mandrill_events=%5B%5D";
        assert_eq!(
            signed_content("https://x/h", body),
            b"https://x/ha1b3mandrill_events[]".to_vec()
        );
    }

    #[test]
    fn events_param_once() {
        assert_eq!(events_param(b"mandrill_events=%5B1%5D"), Some(b"[1]".to_vec()));
        assert_eq!(events_param(b"mandrill_events=1&mandrill_events=2"), None);
        assert_eq!(events_param(b"other=1"), None);
    }
}

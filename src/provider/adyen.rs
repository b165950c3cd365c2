//! Adyen (standard payments webhooks, HMAC signatures), as documented in Adyen's "Verify HMAC
//! signatures" and implemented by its Python library (Adyen 16.0.0, `Adyen/util.py`,
//! `generate_notification_sig` / `is_valid_hmac_notification`): each `NotificationRequestItem`
//! of the body's `notificationItems` carries its own `additionalData.hmacSignature`, the base64
//! HMAC-SHA256, keyed by the **hex-decoded** HMAC key from the Customer Area, of the item's
//! `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:`
//! `eventCode:success` (`value` and `currency` from `amount`; a missing or `null` field is
//! empty; a number as its JSON text; `true`/`false` as written). The values are the parsed
//! JSON strings, so escapes such as `\/` do not matter; the body itself is not signed.
//!
//! A delivery is verified only when one key made every item's signature. No signed timestamp
//! (R7). A delivery is a batch ([`crate::batch`]): each item is its own event, id
//! `{pspReference}:{eventCode}:{success}` (Adyen: the same `eventCode` and `pspReference` may be
//! sent again, and a later one with another `success` is an update), type `eventCode`.
//!
//! **Header HMAC** (`hmac_signature = "header"` on the source): Balance Platform (configuration,
//! transfer, transaction, report… webhooks) and Management API webhooks carry no
//! `notificationItems`; Adyen signs them in the `HmacSignature` header, the base64 HMAC-SHA256
//! of the raw body keyed by the same kind of hex HMAC key (Adyen's "Verify HMAC signatures";
//! Adyen Python library 16.0.0 `Adyen/util.py` `generate_payload_sig` /
//! `is_valid_hmac_payload`, "for webhooks that provide the hmacSignature in the HTTP header (i.e.
//! Banking, Management API)"). Such a body is one event (`{"data": {…}, "environment": …,
//! "timestamp": …, "type": …}`): type its `type`; its id is its content (`sha256:<hex>`), since
//! it carries no event id — `data.id` is the resource's and is repeated by every update of it
//! (a transfer's updates differ only by `data.sequenceNumber`), while Adyen computes the
//! signature when the payload is generated, so its retries resend the same bytes. No signed
//! timestamp: the body's optional `timestamp` is when the event was queued and a retry from the
//! queue (up to 30 days) keeps it, so it bounds no freshness.
//!
//! Why a per-source option and not detection: the same hex key could be given to both kinds of
//! webhook, and the two schemes are not separated — an item's signed text is eight fields
//! joined by `:`, which a forger controls entirely, so a header signature over a body `B`
//! (which has `:`s) would also be a valid item signature for an item whose fields are `B` cut
//! at seven of its colons. Letting the request choose the scheme would let one signed
//! platform webhook forge a payments notification. Adyen links each HMAC key to one webhook
//! (one endpoint), so one source per webhook with its scheme fixed costs nothing.

use std::borrow::Cow;

use crate::http::Request;
use crate::verify::{self, Key, Presented, Proof, Reject, Scheme, CONTENT_PIECES_MAX};

/// `hmac_signature` value: each item's `additionalData.hmacSignature` (the default).
pub const IN_ADDITIONAL_DATA: &str = "additional_data";
/// `hmac_signature` value: the `HmacSignature` header over the raw body.
pub const IN_HEADER: &str = "header";
/// The header of the header-HMAC scheme (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "hmacsignature";
/// The body member holding a header-signed webhook's type.
pub const EVENT_TYPE_MEMBER: &str = "type";

/// The body member holding the array of items.
pub const ITEMS_MEMBER: &str = "notificationItems";
/// The member of each array element holding the item.
pub const ITEM_MEMBER: &str = "NotificationRequestItem";
/// The signed fields, in order (`value` and `currency` are `amount`'s members).
pub const SIGNED_FIELDS: [&str; 8] = [
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "value",
    "currency",
    "eventCode",
    "success",
];

/// The verification key from the HMAC key as the Customer Area shows it (hex, usually 64
/// characters).
///
/// # Errors
/// When it is not an even number of hex digits (never echoing it).
pub(crate) fn key(secret: &str) -> Result<Key, String> {
    let bytes = hex::decode(secret.trim())
        .map_err(|_| "not hex (Adyen's HMAC key is shown as hex digits)".to_owned())?;
    Ok(Key::Hmac(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)))
}

/// The signed text of one item (module doc).
pub fn signing_string(item: &serde_json::Value) -> String {
    let text = |value: Option<&serde_json::Value>| match value {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    SIGNED_FIELDS
        .iter()
        .map(|field| match *field {
            "value" | "currency" => text(item.get("amount").and_then(|a| a.get(field))),
            _ => text(item.get(field)),
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// Reads every item's signature and signed text.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the body is not a JSON object with a non-empty
/// `notificationItems` array of `{"NotificationRequestItem": {…}}`, or any item lacks an
/// `additionalData.hmacSignature` that is base64 of 32 bytes.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    use base64::Engine as _;
    let body: serde_json::Value =
        serde_json::from_slice(&req.body).map_err(|_| Reject::SignatureMissing)?;
    let items =
        body.get(ITEMS_MEMBER).and_then(|v| v.as_array()).ok_or(Reject::SignatureMissing)?;
    let mut signed = Vec::with_capacity(items.len());
    for element in items {
        let item = element
            .get(ITEM_MEMBER)
            .filter(|item| item.is_object())
            .ok_or(Reject::SignatureMissing)?;
        let signature = item
            .get("additionalData")
            .and_then(|a| a.get("hmacSignature"))
            .and_then(|s| s.as_str())
            .ok_or(Reject::SignatureMissing)?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .map_err(|_| Reject::SignatureMissing)?;
        let tag: [u8; 32] = decoded.try_into().map_err(|_| Reject::SignatureMissing)?;
        signed.push((tag, signing_string(item).into_bytes()));
    }
    if signed.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented {
        signed_at: None,
        proof: Proof::Items(signed),
        content: [b""; CONTENT_PIECES_MAX],
        alternatives: Vec::new(),
    })
}

/// Reads the `HmacSignature` header (header-HMAC sources): one base64 HMAC-SHA256 tag over the
/// raw body.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated or not base64 of 32 bytes.
pub(crate) fn presented_header(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag =
        verify::decode_base64_tag(header, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}

/// The exact bytes of the body's `notificationItems` array; `None` when the body is not a JSON
/// object with exactly one such member.
pub fn items_array(body: &[u8]) -> Option<&[u8]> {
    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(rename = "notificationItems", borrow)]
        items: &'a serde_json::value::RawValue,
    }
    // serde would also read a struct from an array: only an object is the envelope.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_slice(body).ok()?;
    let raw = envelope.items.get().as_bytes();
    // `raw` borrows `body`: find where it sits to return the body's own bytes.
    let start = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    body.get(start..start + raw.len())
}

/// The id (`{pspReference}:{eventCode}:{success}`) and type (`eventCode`) of one array element
/// `{"NotificationRequestItem": {…}}`; `None` when a field is missing, not a string, or given
/// twice.
pub fn item_identity(element: &[u8]) -> Option<(String, String)> {
    #[derive(serde::Deserialize)]
    struct Item<'a> {
        #[serde(rename = "pspReference", borrow)]
        psp_reference: Cow<'a, str>,
        #[serde(rename = "eventCode", borrow)]
        event_code: Cow<'a, str>,
        #[serde(borrow)]
        success: Cow<'a, str>,
    }
    #[derive(serde::Deserialize)]
    struct Wrapper<'a> {
        #[serde(rename = "NotificationRequestItem", borrow)]
        item: Item<'a>,
    }
    // Objects only (serde would also read a struct from an array).
    let value: serde_json::Value = serde_json::from_slice(element).ok()?;
    if !value.get(ITEM_MEMBER).is_some_and(serde_json::Value::is_object) {
        return None;
    }
    let Wrapper { item } = serde_json::from_slice(element).ok()?;
    let id = format!("{}:{}:{}", item.psp_reference, item.event_code, item.success);
    Some((id, item.event_code.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::{item_identity, items_array, signing_string};

    #[test]
    fn signing_string_in_adyen_order() {
        let item = serde_json::json!({
            "pspReference": "7914073381342284", "merchantAccountCode": "TestMerchant",
            "merchantReference": "TestPayment-1407325143704", "amount": {"value": 1130,
            "currency": "EUR"}, "eventCode": "AUTHORISATION", "success": "true"
        });
        assert_eq!(
            signing_string(&item),
            "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
        );
    }

    #[test]
    fn items_and_identity() {
        let body = br#"{"live":"false","notificationItems": [{"NotificationRequestItem":{"pspReference":"p","eventCode":"CAPTURE","success":"true"}}]}"#;
        let array = items_array(body).expect("the array");
        assert!(array.starts_with(b"[{") && array.ends_with(b"}]"));
        assert_eq!(
            item_identity(&array[1..array.len() - 1]),
            Some(("p:CAPTURE:true".to_owned(), "CAPTURE".to_owned()))
        );
        assert_eq!(item_identity(br#"{"NotificationRequestItem":{"pspReference":"p"}}"#), None);
        assert_eq!(items_array(b"[1]"), None);
        assert_eq!(item_identity(br#"{"NotificationRequestItem":["p","CAPTURE","true"]}"#), None);
    }
}

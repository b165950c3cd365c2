#!/usr/bin/env python3
"""Writes tests/data/official_vectors.json: signature test vectors produced by the providers'
own libraries, so hookwall's verification is checked against code it shares nothing with.

    pip install -r tests/vectors/requirements.txt
    python3 tests/vectors/gen_vectors.py            # writes tests/data/official_vectors.json
    python3 tests/vectors/gen_vectors.py OUT.json   # writes elsewhere

Signing code used (read in the installed package sources):

* stripe (stripe-python 16.1.0, stripe/_webhook.py): ``stripe.WebhookSignature.
  generate_signature_header(payload, secret, timestamp)`` -- documented there as "Compute the
  `Stripe-Signature` header for a given webhook body & secret. Useful for signing payloads in
  unit tests." It formats ``t={timestamp},v1={hex}`` where the hex comes from
  ``WebhookSignature._compute_signature("{t}.{payload}", secret)`` (HMAC-SHA256 keyed by the
  secret's UTF-8 bytes). Every generated header is also checked with the library's own
  ``WebhookSignature.verify_header(payload, header, secret, tolerance=None)``.
* standardwebhooks (1.1.0, standardwebhooks/webhooks.py): ``Webhook(secret).sign(msg_id,
  timestamp: datetime, data: str)`` -> ``v1,{base64}`` (HMAC-SHA256 keyed by the base64-decoded
  secret after its ``whsec_`` prefix, over ``"{id}.{ts}.{body}"``). Each is checked with
  ``Webhook(secret).verify`` at its own timestamp.
* Standard Webhooks v1a (asymmetric): the Python library implements only v1, so these are made
  as the spec describes with PyNaCl (1.6.2, libsodium's Ed25519): ``nacl.signing.SigningKey``
  from a fixed seed signs ``"{id}.{ts}.{body}"``; the entry is ``v1a,{base64 signature}``; the
  receiver's key is ``whpk_{base64 of the 32-byte verify key}``. Each signature is checked
  with ``VerifyKey.verify``.
* svix (2.9.1, svix/webhooks.py): ``svix.webhooks.Webhook(secret).sign(msg_id, timestamp,
  data)`` (delegates to standardwebhooks), sent as ``svix-id``/``svix-timestamp``/
  ``svix-signature``, and checked with ``svix.webhooks.Webhook(secret).verify`` on those
  headers at the signed time.
* slack_sdk (3.48.0, slack_sdk/signature/__init__.py): ``SignatureVerifier(secret).
  generate_signature(timestamp=, body=)`` -> ``v0={hex}``, each checked with the same class's
  ``is_valid`` under a clock frozen at the signed time. The first case is the example of
  Slack's "Verifying requests from Slack" (a slash-command form body; the SDK reproduces the
  documented signature, which is asserted).
* shopify: Shopify ships no Python verifier; the cases follow the Python example of Shopify's
  "Verify the webhook" docs (``base64.b64encode(hmac.new(secret.encode(), body,
  hashlib.sha256).digest())``), computed here with Python's ``hmac`` (independent of ring).
* paddle-python-sdk (1.16.1, paddle_billing/Notifications/PaddleSignature.py): the header is
  ``ts={t};h1={PaddleSignature.calculate_hmac(secret, f"{t}:{body}").hexdigest()}``, each
  checked with ``PaddleSignature().verify(header, body, Secret(secret))``; one case carries
  two ``h1`` (rotation), the second from the source's secret.
* twitch: Twitch ships no Python verifier; the cases follow "Handling webhook events"
  (``"sha256=" + hex(HMAC-SHA256(secret, message_id + timestamp + body))``, RFC 3339
  timestamps with nanoseconds), computed with Python's ``hmac``.
* typeform: Typeform ships no verifier; the cases follow "Secure your webhooks"
  (``"sha256=" + base64(HMAC-SHA256(secret, body))``), computed with Python's ``hmac``.
* pagerduty: PagerDuty ships no Python verifier; the cases follow "Verifying Signatures"
  (``X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the body>``, comma-separated while
  rotating), computed with Python's ``hmac``.
* segment: Segment ships no Python verifier; the cases follow its Webhooks destination docs
  (``X-Signature`` = hex HMAC-SHA1 of the body with the shared secret), computed with
  Python's ``hmac``.
* woocommerce: WooCommerce ships no Python verifier; the cases follow its REST API docs
  ("Webhooks", delivery/payload: ``X-WC-Webhook-Signature`` = base64 HMAC-SHA256 of the body
  keyed by the webhook's secret), computed with Python's ``hmac``; the delivery id and topic
  travel in ``X-WC-Webhook-Delivery-ID`` and ``X-WC-Webhook-Topic``.
* bitbucket: Atlassian ships no Python verifier; the cases follow Bitbucket Cloud's "Manage
  webhooks" (``X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>`` keyed by the
  webhook's secret), computed with Python's ``hmac``; the request id and event key travel in
  ``X-Request-UUID`` and ``X-Event-Key`` ("Event payloads", HTTP headers).
* twilio (twilio-python 9.13.0, twilio/request_validator.py): ``RequestValidator(token).
  compute_signature(url, params)`` (base64 HMAC-SHA1 over the URL followed by the sorted
  parameters, each name's distinct values sorted) for form bodies, and over the URL alone,
  whose ``bodySHA256`` query parameter is ``compute_hash(body)``, for JSON bodies. Each case
  is checked with ``RequestValidator(token).validate(url, params_or_body, signature)`` at the
  URL hookwall sees (the case's ``url``), which may differ from the signed one by the port
  (the SDK's add_port/remove_port quirk). Params are passed as a Django-style ``getlist``
  object so that repeated keys keep all their values. Shared-key cases (Twilio's "Sign webhooks
  with shared keys"): the request carries ``X-Twilio-Webhooks-Signature-Settings:
  key=<SharedKey id>,algorithm=…``; the algorithm is the SDK's
  ``get_signature_algorithm(header)``, the signature ``RequestValidator(shared_secret).
  compute_signature(url, params, algorithm)`` (HMAC-SHA256 or -SHA1 over the same string), each
  checked with ``validate(url, params_or_body, signature, algorithm)``.
* squareup (46.0.0.20260916, square/utils/webhooks_helper.py): the header is base64
  HMAC-SHA256 of ``notification_url + body`` with the signature key (computed with Python's
  ``hmac`` as that file does), each checked with ``verify_signature(request_body=,
  signature_header=, signature_key=, notification_url=)``.
* sendgrid (6.12.5, sendgrid/helpers/eventwebhook/__init__.py): the library only verifies,
  so each case is signed as that code verifies (ECDSA P-256 / SHA-256 over ``timestamp +
  payload``, DER, base64) with ``cryptography`` (the library's own dependency) from a fixed
  private scalar, and checked with ``EventWebhook(public_key).verify_signature(payload,
  signature, timestamp)``; the public key is the base64 DER SubjectPublicKeyInfo, as the Mail
  Settings page shows it. ECDSA signatures are randomised: a regenerated file differs in them.
* gitlab: GitLab does not sign; a case is the token as configured and the headers GitLab sends
  (``X-Gitlab-Token``, ``Idempotency-Key``, ``X-Gitlab-Event``), as in GitLab's "Webhooks"
  docs. Nothing is computed.
* discord: discord-interactions (0.4.0, discord_interactions/__init__.py) ships only the
  verifier, ``verify_key(raw_body, signature, timestamp, client_public_key)`` (hex Ed25519 over
  ``timestamp + body``); the signatures are made with PyNaCl ``SigningKey(seed).sign(ts +
  body)`` and each is checked with ``verify_key``. The key given to hookwall is the hex public
  key, as Discord's Developer Portal shows it.
* github legacy sha1 (sources with ``legacy_sha1 = true``): computed with Python's ``hmac``
  per GitHub's "Validating webhook deliveries" (``X-Hub-Signature: sha1=<hex HMAC-SHA1>``).
* hmac (the generic scheme): hookwall's own configurable scheme; each case carries its source
  table and is computed with Python's ``hmac``/``hashlib`` from that table's template.
* linear: Linear ships no Python verifier; the cases follow its "Webhooks" docs
  (``Linear-Signature`` = hex HMAC-SHA256 of the body, ``webhookTimestamp`` in ms in the body,
  ``Linear-Delivery`` the delivery id), computed with Python's ``hmac``.
* intercom: the cases follow Intercom's "Webhooks" docs (``X-Hub-Signature: sha1=<hex
  HMAC-SHA1 of the body>`` keyed by the client secret), computed with Python's ``hmac``.
* postmark: Postmark does not sign; a case is the basic-auth header Postmark sends for a
  webhook URL with ``user:password@`` (RFC 7617). Nothing is computed.
* calendly: Calendly ships no Python verifier; the cases follow "Webhook signatures"
  (``Calendly-Webhook-Signature: t=<ts>,v1=<hex HMAC-SHA256 of "t.body">``), computed with
  Python's ``hmac``.
* coinbase-commerce (1.0.1, coinbase_commerce/webhook.py): the signature is
  ``WebhookSignature._compute_signature(payload, secret)`` and each is checked with
  ``WebhookSignature.verify_sig_header(payload, header, secret)``.
* zoom: Zoom ships no Python verifier; the cases follow "Using webhooks" (``x-zm-signature:
  v0=<hex HMAC-SHA256 of "v0:{ts}:{body}">``), computed with Python's ``hmac``.
* mailgun (1.10.0, mailgun/security.py): the SDK ships only the verifier,
  ``SecurityGuard.verify_webhook(signing_key, token, timestamp, signature, max_age_seconds=0)``
  (hex HMAC-SHA256 of ``timestamp + token``); signatures are made with Python's ``hmac`` and
  each is checked with it. The signature travels inside the JSON body.
* hubspot-api-client (12.0.0, hubspot/utils/signature.py): ``Signature.get_signature(secret,
  body, "v3", uri, "POST", timestamp_ms)`` (base64 HMAC-SHA256 over ``method + uri + body +
  timestamp``), each checked with ``Signature.is_valid(..., signature_version="v3", ...)`` with
  that module's clock frozen at the case's time (it refuses timestamps older than 5 minutes).
  The bodies are JSON arrays of events as HubSpot's Webhooks API posts them. One case signs the
  URI with HubSpot's documented percent-escapes decoded (``%2F`` -> ``/``, ``%3F`` -> ``?``)
  while the request carries them encoded (its ``url``), as HubSpot's "Validating requests" v3
  steps describe; the SDK signs whatever URI it is given.
* mandrill: Mailchimp Transactional ships no verifier; the cases follow its "Authenticating
  webhook requests" (``X-Mandrill-Signature`` = base64 HMAC-SHA1 keyed by the webhook key over
  the webhook URL followed by each POST parameter's name and value, sorted by name, as its
  ``generateSignature`` example builds it), computed with Python's ``hmac``. The body is the
  form ``mandrill_events=<JSON array>`` (``urllib.parse.urlencode``).
* Adyen header HMAC (16.0.0, Adyen/util.py; sources with ``hmac_signature = "header"``):
  Balance Platform / Management API webhook bodies, whose ``HmacSignature`` header is
  ``generate_payload_sig(body_bytes, hex_key)`` (base64 HMAC-SHA256 of the raw body with the
  hex-decoded key), each checked with ``is_valid_hmac_payload(signature, hex_key, body_bytes)``.
* Adyen (16.0.0, Adyen/util.py): each notification item's ``additionalData.hmacSignature`` is
  ``generate_notification_sig(item, hex_key)`` (base64 HMAC-SHA256, hex-decoded key, over
  ``pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:
  eventCode:success``), and every item is checked with ``is_valid_hmac_notification`` (which
  reads one item, so each is passed alone). The bodies are written as text (one with ``\/``
  escapes in a signed field, one pretty-printed with CRLF) so the signed values are the parsed
  ones, not the bytes.

Bodies include the failure classes issue 3 names: JSON re-serialised with ``\/`` and
``\u0026`` escapes (signed and verified as sent, never re-encoded), a body ending in CRLF, and
headers carrying several signatures of which one matches.

Inputs are fixed (no randomness, no clock), so the output is stable and a regenerated file only
differs when a library changes what it computes. Each case carries the secret exactly as the
provider's dashboard shows it, the headers as sent, the body (UTF-8 text) and the signed
timestamp, which the Rust test uses as "now".
"""

import base64
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import hashlib
import hmac

import coinbase_commerce.webhook
from Adyen.util import (generate_notification_sig, generate_payload_sig,
                        is_valid_hmac_notification, is_valid_hmac_payload)
import hubspot.utils.signature
from hubspot.utils.signature import Signature as HubSpotSignature
import discord_interactions
import nacl.signing
from mailgun.security import SecurityGuard
import standardwebhooks
import stripe
import svix.webhooks
from paddle_billing.Notifications import PaddleSignature, Secret
from slack_sdk.signature import SignatureVerifier
from standardwebhooks.webhooks import Webhook
from square.utils.webhooks_helper import verify_signature as square_verify_signature
from sendgrid.helpers.eventwebhook import EventWebhook
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from twilio.request_validator import RequestValidator, get_signature_algorithm
from urllib.parse import parse_qsl, urlencode

try:
    from importlib.metadata import version
except ImportError:  # pragma: no cover - Python < 3.8
    version = None

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "official_vectors.json"


def stripe_cases():
    """Stripe cases: one header per (secret, body, timestamp), plus a rolled-secret header
    carrying two v1 signatures of which only one is made with the source's secret."""
    inputs = [
        ("simple", "whsec_test_secret", 1614265330,
         '{"id":"evt_1","object":"event","type":"invoice.paid"}'),
        ("pretty printed with newlines", "whsec_5vQ0pKq3nJtJ7ZyW0mRkE1a9", 1700000000,
         '{\n  "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",\n  "object": "event",\n'
         '  "type": "charge.succeeded",\n  "data": {"object": {"amount": 2000}}\n}\n'),
        ("unicode body", "whsec_unicode_key_0123456789", 1735689600,
         '{"id":"evt_\u00e9t\u00e9","object":"event","type":"customer.updated",'
         '"data":{"object":{"name":"Zo\u00eb \u2603 \U0001F600"}}}'),
        ("secret without whsec_ prefix", "sk_plain_secret_value", 1262304000,
         '{"id":"evt_plain","object":"event","type":"ping"}'),
    ]
    cases = []
    for name, secret, t, body in inputs:
        header = stripe.WebhookSignature.generate_signature_header(body, secret, timestamp=t)
        stripe.WebhookSignature.verify_header(body, header, secret, tolerance=None)
        cases.append(case("stripe", name, secret, t, body, {"Stripe-Signature": header}))

    # Rolled secret: Stripe sends one v1 per active secret. The source only knows the new one.
    old_secret, new_secret, t = "whsec_old_rolled_secret", "whsec_new_rolled_secret", 1714000000
    body = '{"id":"evt_rolled","object":"event","type":"invoice.paid"}'
    old = stripe.WebhookSignature.generate_signature_header(body, old_secret, timestamp=t)
    new = stripe.WebhookSignature.generate_signature_header(body, new_secret, timestamp=t)
    header = old + "," + new.split(",", 1)[1]  # t=..,v1=<old>,v1=<new>
    stripe.WebhookSignature.verify_header(body, header, new_secret, tolerance=None)
    cases.append(case("stripe", "rolled secret: two v1, second matches", new_secret, t, body,
                      {"Stripe-Signature": header}))
    return cases


def standard_cases():
    """Standard Webhooks v1 cases, including the spec's own example secret and a signature
    list with an entry from another key and a v1a entry the verifier must skip."""
    inputs = [
        ("spec example secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
         "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}'),
        ("32-byte secret", "whsec_" + base64.b64encode(bytes(range(32))).decode(),
         "msg_2Xb8pQ1", 1700000123,
         '{"type":"invoice.paid","data":{"id":"in_1","amount":1999}}'),
        ("unicode body", "whsec_" + base64.b64encode(b"hookwall-standard-key-material!!").decode(),
         "msg_unicode_\u00e9", 1735689600, '{"type":"user.created","name":"Zo\u00eb \u2603"}'),
        ("secret without whsec_ prefix", base64.b64encode(b"no-prefix-secret-bytes").decode(),
         "msg_noprefix", 1262304000, '{"type":"ping"}'),
    ]
    cases = []
    inputs.append(("escaped JSON as sent", "whsec_" + base64.b64encode(b"escaped-json-key").decode(),
                   "msg_escaped", 1700000456, ESCAPED_BODY))
    inputs.append(("trailing CRLF", "whsec_" + base64.b64encode(b"crlf-body-key-0001").decode(),
                   "msg_crlf", 1700000789, CRLF_BODY))
    for name, secret, msg_id, t, body in inputs:
        signature = Webhook(secret).sign(msg_id, at(t), body)
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": str(t),
            "webhook-signature": signature,
        }
        checked_by_library(t, lambda: Webhook(secret).verify(body, headers, json_parse=False))
        cases.append(case("standard", name, secret, t, body, headers))

    secret = "whsec_" + base64.b64encode(b"rotated-standard-key-new").decode()
    other = "whsec_" + base64.b64encode(b"rotated-standard-key-old").decode()
    msg_id, t, body = "msg_rotated", 1714000000, '{"type":"invoice.paid","id":"x"}'
    signatures = " ".join([
        Webhook(other).sign(msg_id, at(t), body),
        "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
        Webhook(secret).sign(msg_id, at(t), body),
    ])
    cases.append(case("standard", "several signatures, third matches", secret, t, body, {
        "webhook-id": msg_id,
        "webhook-timestamp": str(t),
        "webhook-signature": signatures,
    }))
    return cases


def frozen_now(unix_s):
    """Runs a library's own verify() as if the clock read ``unix_s`` (its tolerance is 5 min)."""
    import standardwebhooks.webhooks as module

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.fromtimestamp(unix_s, tz=tz)

    return module, Frozen


def checked_by_library(unix_s, verify):
    """Calls ``verify()`` with standardwebhooks' clock frozen at ``unix_s``."""
    module, frozen = frozen_now(unix_s)
    real = module.datetime
    module.datetime = frozen
    try:
        verify()
    finally:
        module.datetime = real


ESCAPED_BODY = '{"type":"invoice.paid","url":"https:\\/\\/example.com\\/a?b=1\\u0026c=2"}'
CRLF_BODY = '{"type":"invoice.paid","n":1}\r\n'


def standard_v1a_cases():
    """Standard Webhooks v1a (Ed25519) cases, made per the spec with PyNaCl."""
    cases = []
    inputs = [
        ("v1a, seed 0..31", bytes(range(32)), "msg_v1a_1", 1614265330, '{"test": 2432232314}'),
        ("v1a, escaped JSON as sent", bytes([7] * 32), "msg_v1a_2", 1700000123, ESCAPED_BODY),
        ("v1a, trailing CRLF", bytes([9] * 32), "msg_v1a_3", 1735689600, CRLF_BODY),
    ]
    for name, seed, msg_id, t, body in inputs:
        signing = nacl.signing.SigningKey(seed)
        whpk = "whpk_" + base64.b64encode(bytes(signing.verify_key)).decode()
        content = f"{msg_id}.{t}.{body}".encode()
        signature = signing.sign(content).signature
        signing.verify_key.verify(content, signature)
        entry = "v1a," + base64.b64encode(signature).decode()
        cases.append(case("standard", name, whpk, t, body, {
            "webhook-id": msg_id,
            "webhook-timestamp": str(t),
            "webhook-signature": entry,
        }))
    # A v1 entry from a symmetric key and another key's v1a before the matching v1a.
    signing, other = nacl.signing.SigningKey(bytes([3] * 32)), nacl.signing.SigningKey(bytes([4] * 32))
    msg_id, t, body = "msg_v1a_several", 1714000000, '{"type":"invoice.paid"}'
    content = f"{msg_id}.{t}.{body}".encode()
    entries = " ".join([
        Webhook("whsec_" + base64.b64encode(b"some-symmetric-key").decode()).sign(msg_id, at(t), body),
        "v1a," + base64.b64encode(other.sign(content).signature).decode(),
        "v1a," + base64.b64encode(signing.sign(content).signature).decode(),
    ])
    cases.append(case("standard", "v1a, several signatures, third matches",
                      "whpk_" + base64.b64encode(bytes(signing.verify_key)).decode(), t, body, {
                          "webhook-id": msg_id,
                          "webhook-timestamp": str(t),
                          "webhook-signature": entries,
                      }))
    return cases


def svix_cases():
    """Svix cases signed with the svix library and checked with its own verify()."""
    inputs = [
        ("docs example secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
         "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}'),
        ("escaped JSON as sent", "whsec_" + base64.b64encode(b"svix-escaped-body-key").decode(),
         "msg_svix_escaped", 1700000123, ESCAPED_BODY),
        ("trailing CRLF", "whsec_" + base64.b64encode(b"svix-crlf-body-key-000").decode(),
         "msg_svix_crlf", 1735689600, CRLF_BODY),
    ]
    cases = []
    for name, secret, msg_id, t, body in inputs:
        wh = svix.webhooks.Webhook(secret)
        headers = {"svix-id": msg_id, "svix-timestamp": str(t),
                   "svix-signature": wh.sign(msg_id, at(t), body)}
        checked_by_library(t, lambda: wh.verify(body, headers))
        cases.append(case("svix", name, secret, t, body, headers))

    secret = "whsec_" + base64.b64encode(b"svix-rotated-new-key").decode()
    old = "whsec_" + base64.b64encode(b"svix-rotated-old-key").decode()
    msg_id, t, body = "msg_svix_rotated", 1714000000, '{"type":"invoice.paid"}'
    headers = {"svix-id": msg_id, "svix-timestamp": str(t), "svix-signature": " ".join([
        svix.webhooks.Webhook(old).sign(msg_id, at(t), body),
        svix.webhooks.Webhook(secret).sign(msg_id, at(t), body),
    ])}
    checked_by_library(t, lambda: svix.webhooks.Webhook(secret).verify(body, headers))
    cases.append(case("svix", "two signatures while rotating, second matches", secret, t, body,
                      headers))
    return cases


SLACK_DOCS_BODY = (
    "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    "&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmi"
    "bIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)


def slack_cases():
    """Slack cases signed and checked with slack_sdk's SignatureVerifier."""
    class Frozen:
        def __init__(self, t):
            self.t = t

        def now(self):
            return float(self.t)

    inputs = [
        ("docs example (slash command form)", "8f742231b10e8888abcd99yyyzzz85a5", 1531420618,
         SLACK_DOCS_BODY),
        ("event_callback", "0123456789abcdef0123456789abcdef", 1700000000,
         '{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"message","text":"hi"}}'),
        ("escaped JSON as sent", "hookwall-slack-signing-secret-01", 1700000321,
         '{"type":"event_callback","event_id":"Ev_escaped","event":{"text":"a\\/b \\u0026 c"}}'),
        ("trailing CRLF", "hookwall-slack-signing-secret-02", 1735689600,
         '{"type":"event_callback","event_id":"Ev_crlf"}\r\n'),
    ]
    cases = []
    for name, secret, t, body in inputs:
        verifier = SignatureVerifier(secret, clock=Frozen(t))
        signature = verifier.generate_signature(timestamp=str(t), body=body)
        assert verifier.is_valid(body=body, timestamp=str(t), signature=signature)
        cases.append(case("slack", name, secret, t, body, {
            "X-Slack-Request-Timestamp": str(t),
            "X-Slack-Signature": signature,
        }))
    assert cases[0]["headers"]["X-Slack-Signature"] == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"), "Slack's docs"
    return cases


def shopify_cases():
    """Shopify cases per Shopify's documented Python verification."""
    inputs = [
        ("order", "shpss_0123456789abcdef0123456789abcdef",
         '{"id":820982911946154508,"email":"jon@example.com","total_price":"403.00"}'),
        ("escaped JSON as sent", "hookwall-shopify-client-secret", ESCAPED_BODY),
        ("trailing CRLF", "hookwall-shopify-crlf", CRLF_BODY),
    ]
    cases = []
    for name, secret, body in inputs:
        digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
        cases.append(case("shopify", name, secret, 1700000000, body, {
            "X-Shopify-Hmac-Sha256": base64.b64encode(digest).decode(),
            "X-Shopify-Event-Id": "98880550-7158-44d4-b7cd-2c97c8a091b5",
            "X-Shopify-Topic": "orders/create",
        }))
    return cases


def paddle_cases():
    """Paddle Billing cases signed with the SDK's HMAC helper and checked by its verifier."""
    inputs = [
        ("transaction.completed", "pdl_ntfset_01hookwallexample_not_a_real_secret",
         1671552777,
         '{"event_id":"evt_01gks14ge726w50ce2rdje9rxv","event_type":"transaction.completed",'
         '"occurred_at":"2023-01-13T12:30:00Z","notification_id":"ntf_01gks14gpcfyxpg8r1m7xvdw54",'
         '"data":{"id":"txn_01","status":"completed"}}'),
        ("escaped JSON as sent", "pdl_ntfset_hookwall_escaped", 1700000000,
         '{"event_id":"evt_escaped","event_type":"customer.updated","data":'
         '{"name":"a\\/b \\u0026 c"}}'),
        ("trailing CRLF", "pdl_ntfset_hookwall_crlf", 1735689600,
         '{"event_id":"evt_crlf","event_type":"customer.created"}\r\n'),
    ]
    cases = []
    for name, secret, t, body in inputs:
        h1 = PaddleSignature.calculate_hmac(secret, f"{t}:{body}".encode()).hexdigest()
        header = f"ts={t};h1={h1}"
        assert PaddleSignature().verify(header, body, Secret(secret))
        cases.append(case("paddle", name, secret, t, body, {"Paddle-Signature": header}))
    old, new, t = "pdl_ntfset_hookwall_old", "pdl_ntfset_hookwall_new", 1714000000
    body = '{"event_id":"evt_rotated","event_type":"subscription.updated"}'
    hashes = [PaddleSignature.calculate_hmac(s, f"{t}:{body}".encode()).hexdigest() for s in (old, new)]
    header = f"ts={t};h1={hashes[0]};h1={hashes[1]}"
    assert PaddleSignature().verify(header, body, Secret(new))
    cases.append(case("paddle", "two h1 while rotating, second matches", new, t, body,
                      {"Paddle-Signature": header}))
    return cases


def twitch_cases():
    """Twitch EventSub cases per Twitch's documented computation."""
    inputs = [
        ("channel.follow notification", "hookwall-twitch-secret-0123",
         "befa7b53-d79d-478f-86b9-120f112b044e", 1573899072, "634234626",
         '{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow"},'
         '"event":{"user_login":"cool_user","broadcaster_user_login":"cooler_user"}}'),
        ("escaped JSON as sent", "hookwall-twitch-escaped", "msg-escaped", 1700000000, "5",
         '{"subscription":{"type":"channel.update"},"event":{"title":"a\\/b \\u0026 c"}}'),
        ("trailing CRLF", "hookwall-twitch-crlf", "msg-crlf", 1735689600, "000000001",
         '{"subscription":{"type":"stream.online"},"event":{}}\r\n'),
    ]
    cases = []
    for name, secret, msg_id, t, fraction, body in inputs:
        stamp = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        ts = f"{stamp}.{fraction}Z"
        mac = hmac.new(secret.encode(), (msg_id + ts + body).encode(), hashlib.sha256).hexdigest()
        subscription = json.loads(body)["subscription"]["type"]
        cases.append(case("twitch", name, secret, t, body, {
            "Twitch-Eventsub-Message-Id": msg_id,
            "Twitch-Eventsub-Message-Timestamp": ts,
            "Twitch-Eventsub-Message-Signature": "sha256=" + mac,
            "Twitch-Eventsub-Message-Type": "notification",
            "Twitch-Eventsub-Subscription-Type": subscription,
        }))
    return cases


def typeform_cases():
    """Typeform cases per Typeform's documented computation."""
    inputs = [
        ("form_response", "hookwall-typeform-secret",
         '{"event_id":"01HXYZ0TYPEFORM0EVENT","event_type":"form_response",'
         '"form_response":{"form_id":"lT4Z3j","answers":[{"type":"text","text":"Zo\u00eb"}]}}'),
        ("escaped JSON as sent", "typeform secret with spaces",
         '{"event_id":"01HESCAPED","event_type":"form_response","form_response":'
         '{"hidden":{"url":"https:\\/\\/x.test\\/?a=1\\u0026b=2"}}}'),
        ("trailing CRLF", "typeform-crlf", '{"event_id":"01HCRLF","event_type":"form_response"}\r\n'),
    ]
    cases = []
    for name, secret, body in inputs:
        digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
        cases.append(case("typeform", name, secret, 1700000000, body, {
            "Typeform-Signature": "sha256=" + base64.b64encode(digest).decode(),
        }))
    return cases


def pagerduty_cases():
    """PagerDuty Webhooks v3 cases per PagerDuty's documented computation."""
    inputs = [
        ("incident.triggered", "hookwall-pagerduty-secret",
         '{"event":{"id":"01DEN8IFLMXQQ0PKQA64YQ1X1E","event_type":"incident.triggered",'
         '"resource_type":"incident","occurred_at":"2020-10-02T18:45:22.169Z",'
         '"data":{"id":"PGR0VU2","type":"incident","title":"A little bump in the road"}}}'),
        ("escaped JSON as sent", "pagerduty secret 2",
         '{"event":{"id":"01ESCAPED","event_type":"incident.annotated",'
         '"data":{"content":"a\\/b \\u0026 c"}}}'),
        ("trailing CRLF", "pagerduty secret 3",
         '{"event":{"id":"01CRLF","event_type":"incident.resolved"}}\r\n'),
    ]
    cases = []
    for name, secret, body in inputs:
        mac = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
        other = hmac.new(b"another-secret", body.encode(), hashlib.sha256).hexdigest()
        header = f"v1={other},v1={mac}" if name == "incident.triggered" else f"v1={mac}"
        cases.append(case("pagerduty", name, secret, 1700000000, body,
                          {"X-PagerDuty-Signature": header}))
    return cases


def segment_cases():
    """Segment Webhooks destination cases per Segment's documented computation."""
    inputs = [
        ("track", "hookwall-segment-shared-secret",
         '{"anonymousId":"23adfd82-aa0f-45a7-a756-24f2a7a4c895","event":"Order Completed",'
         '"messageId":"ajs-f8ca1e4de5024d9430b3928bd8ac6b96","type":"track",'
         '"properties":{"revenue":19.99},"timestamp":"2015-12-12T19:11:01.249Z"}'),
        ("escaped JSON as sent", "segment secret 2",
         '{"messageId":"msg-escaped","type":"page","properties":{"url":"https:\\/\\/x.test\\/?a=1\\u0026b=2"}}'),
        ("trailing CRLF", "segment secret 3", '{"messageId":"msg-crlf","type":"identify"}\r\n'),
    ]
    cases = []
    for name, secret, body in inputs:
        mac = hmac.new(secret.encode(), body.encode(), hashlib.sha1).hexdigest()
        cases.append(case("segment", name, secret, 1700000000, body, {"X-Signature": mac}))
    return cases


def woocommerce_cases():
    """WooCommerce cases per WooCommerce's documented computation."""
    inputs = [
        ("order.updated", "hookwall-woocommerce-secret", "d1f0c2a4-order-727",
         '{"id":727,"parent_id":0,"status":"processing","currency":"EUR",'
         '"billing":{"first_name":"Zo\u00eb"},"line_items":[{"id":315,"name":"Woo Album #1"}]}'),
        ("escaped JSON as sent", "woocommerce secret with spaces", "d-escaped",
         '{"id":728,"permalink":"https:\\/\\/shop.test\\/?p=728\\u0026a=1"}'),
        ("trailing CRLF", "woocommerce-crlf", "d-crlf", '{"id":729,"status":"completed"}\r\n'),
    ]
    cases = []
    for name, secret, delivery, body in inputs:
        digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
        cases.append(case("woocommerce", name, secret, 1700000000, body, {
            "X-WC-Webhook-Signature": base64.b64encode(digest).decode(),
            "X-WC-Webhook-Delivery-ID": delivery,
            "X-WC-Webhook-Topic": name if name == "order.updated" else "order.created",
        }))
    return cases


def bitbucket_cases():
    """Bitbucket Cloud cases per Atlassian's documented computation."""
    inputs = [
        ("repo:push", "hookwall-bitbucket-secret", "{9b1c5c2e-6f0a-4c1e-9d7a-0c1f2e3d4b5a}",
         '{"push":{"changes":[{"new":{"name":"main","type":"branch"}}]},'
         '"repository":{"full_name":"team/repo","name":"r\u00e9po"},"actor":{"display_name":"Zo\u00eb"}}'),
        ("escaped JSON as sent", "bitbucket secret with spaces", "{1c2d-escaped}",
         '{"pullrequest":{"id":7,"links":{"html":{"href":"https:\\/\\/bitbucket.test\\/?a=1\\u0026b=2"}}}}'),
        ("trailing CRLF", "bitbucket-crlf", "{3e4f-crlf}", '{"push":{"changes":[]}}\r\n'),
    ]
    cases = []
    for name, secret, request_uuid, body in inputs:
        mac = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
        cases.append(case("bitbucket", name, secret, 1700000000, body, {
            "X-Hub-Signature": "sha256=" + mac,
            "X-Request-UUID": request_uuid,
            "X-Event-Key": name if name == "repo:push" else "pullrequest:updated",
            "X-Attempt-Number": "1",
        }))
    return cases


def gitlab_cases():
    """GitLab cases: the token is sent as configured; nothing binds the body."""
    return [case("gitlab", "push hook", "hookwall-gitlab-token", 1700000000,
                 '{"object_kind":"push","ref":"refs/heads/main"}', {
                     "X-Gitlab-Token": "hookwall-gitlab-token",
                     "X-Gitlab-Event": "Push Hook",
                     "Idempotency-Key": "f0e5e2a2-b1a4-4b47-9c2c-1a8d2f3b4c5d",
                     "X-Gitlab-Event-UUID": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
                 })]


class FormParams(dict):
    """Form parameters with every value of a repeated name (Django's ``QueryDict`` shape, whose
    ``getlist`` twilio's RequestValidator.get_values uses)."""

    def __init__(self, body):
        super().__init__()
        self.lists = {}
        for name, value in parse_qsl(body, keep_blank_values=True):
            self.lists.setdefault(name, []).append(value)
            self[name] = value

    def getlist(self, name):
        return self.lists[name]


TWILIO_SMS_BODY = ("ToCountry=US&MessageSid=SM0123456789abcdef0123456789abcdef&To=%2B15558675310"
                   "&Body=Hello+%26+welcome%21&From=%2B15017122661&NumMedia=0"
                   "&AccountSid=AC0123456789abcdef0123456789abcdef")


def twilio_cases():
    """Twilio cases signed and checked with twilio-python's RequestValidator."""
    token = "0123456789abcdef0123456789abcdef"
    json_body = '{"MessageSid":"SM00aa","Body":"caf\\u00e9 \\/ 1"}'
    json_hash = RequestValidator(token).compute_hash(json_body)
    # (name, signed URL, URL hookwall sees, body, JSON?)
    inputs = [
        ("docs example form", "https://mycompany.com/myapp.php?foo=1&bar=2",
         "https://mycompany.com/myapp.php?foo=1&bar=2",
         "CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030"
         "&To=%2B18005551212", False),
        ("SMS webhook", "https://hooks.example.com/webhooks/twilio-a",
         "https://hooks.example.com/webhooks/twilio-a", TWILIO_SMS_BODY, False),
        ("signed with :443, seen without port", "https://hooks.example.com:443/webhooks/twilio-a",
         "https://hooks.example.com/webhooks/twilio-a", TWILIO_SMS_BODY, False),
        ("signed without port, seen with :8443", "https://hooks.example.com/webhooks/twilio-a",
         "https://hooks.example.com:8443/webhooks/twilio-a", TWILIO_SMS_BODY, False),
        ("repeated keys", "https://hooks.example.com/webhooks/twilio-a?x=1",
         "https://hooks.example.com/webhooks/twilio-a?x=1",
         "MediaUrl=https%3A%2F%2Fm%2Fb&Body=two&MediaUrl=https%3A%2F%2Fm%2Fa&Body=one", False),
        ("JSON body with bodySHA256",
         f"https://hooks.example.com/webhooks/twilio-a?bodySHA256={json_hash}",
         f"https://hooks.example.com/webhooks/twilio-a?bodySHA256={json_hash}", json_body, True),
    ]
    cases = []
    for name, signed_url, seen_url, body, is_json in inputs:
        # The documented example ("Webhooks security") uses the Auth Token 12345.
        secret = "12345" if name == "docs example form" else token
        validator = RequestValidator(secret)
        params = {} if is_json else FormParams(body)
        signature = validator.compute_signature(signed_url, params)
        assert validator.validate(seen_url, body if is_json else params, signature), name
        content_type = "application/json" if is_json else "application/x-www-form-urlencoded"
        entry = case("twilio", name, secret, 1700000000, body, {
            "Content-Type": content_type,
            "X-Twilio-Signature": signature,
            "I-Twilio-Idempotency-Token": f"idem-{len(cases)}-0123456789",
        })
        entry["url"] = seen_url
        cases.append(entry)
    assert cases[0]["headers"]["X-Twilio-Signature"] == "0/KCTR6DLpKmkAf8muzZqo1nDgQ=", "docs"
    return cases + twilio_shared_key_cases()


def twilio_shared_key_cases():
    """Twilio SharedKey cases: the algorithm named by X-Twilio-Webhooks-Signature-Settings,
    signed and checked with twilio-python's RequestValidator(shared secret)."""
    shared = "whsk-shared-0123456789abcdef0123456789ABCDEF"
    json_body = '{"MessageSid":"SM00bb","Body":"caf\\u00e9 \\/ 2"}'
    json_hash = RequestValidator(shared).compute_hash(json_body)
    sha256 = "key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA256"
    # (name, settings header, signed URL, URL hookwall sees, body, JSON?)
    inputs = [
        ("shared key HMAC_SHA256 form", sha256, "https://hooks.example.com/webhooks/twilio-a",
         "https://hooks.example.com/webhooks/twilio-a", TWILIO_SMS_BODY, False),
        ("shared key HMAC_SHA256 signed with :443, seen without port", sha256,
         "https://hooks.example.com:443/webhooks/twilio-a?x=1",
         "https://hooks.example.com/webhooks/twilio-a?x=1",
         "MediaUrl=https%3A%2F%2Fm%2Fb&Body=two&MediaUrl=https%3A%2F%2Fm%2Fa&Body=one", False),
        ("shared key HMAC_SHA256 JSON body with bodySHA256", sha256,
         f"https://hooks.example.com/webhooks/twilio-a?bodySHA256={json_hash}",
         f"https://hooks.example.com/webhooks/twilio-a?bodySHA256={json_hash}", json_body, True),
        ("shared key HMAC_SHA1", "key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA1",
         "https://hooks.example.com/webhooks/twilio-a",
         "https://hooks.example.com/webhooks/twilio-a", TWILIO_SMS_BODY, False),
    ]
    cases = []
    for name, settings, signed_url, seen_url, body, is_json in inputs:
        algorithm = get_signature_algorithm(settings)
        validator = RequestValidator(shared)
        params = {} if is_json else FormParams(body)
        signature = validator.compute_signature(signed_url, params, algorithm)
        assert validator.validate(seen_url, body if is_json else params, signature, algorithm), name
        # The same signature is no HMAC-SHA1 signature (the algorithm matters).
        assert not validator.validate(seen_url, body if is_json else params, signature) \
            or algorithm == "HMAC_SHA1", name
        content_type = "application/json" if is_json else "application/x-www-form-urlencoded"
        entry = case("twilio", name, shared, 1700000000, body, {
            "Content-Type": content_type,
            "X-Twilio-Signature": signature,
            "X-Twilio-Webhooks-Signature-Settings": settings,
            "I-Twilio-Idempotency-Token": f"idem-shared-{len(cases)}-0123456789",
        })
        entry["url"] = seen_url
        cases.append(entry)
    assert len(cases[0]["headers"]["X-Twilio-Signature"]) == 44, "a 32-byte tag in base64"
    return cases


def square_cases():
    """Square cases signed as squareup's webhooks_helper computes, checked with it."""
    inputs = [
        ("payment.updated", "sq0wbk-Hx2hookwallSignatureKey01",
         "https://example.com/webhooks/square",
         '{"merchant_id":"6SSW7HV8K2ST5","type":"payment.updated",'
         '"event_id":"13b867cf-db3d-4b1c-90b6-2f32a9d78124","created_at":"2020-02-06T21:27:30Z",'
         '"data":{"type":"payment","id":"KkAkhdMsgzn59SM8A89WgKwekxLZY"}}'),
        ("escaped JSON as sent", "sq0wbk-hookwall-escaped", "https://hooks.example.com/sq?a=1",
         '{"type":"invoice.paid","event_id":"e-escaped","url":"https:\\/\\/x\\u0026y"}'),
        ("trailing CRLF", "sq0wbk-hookwall-crlf", "https://hooks.example.com:8443/square",
         '{"type":"customer.created","event_id":"e-crlf"}\r\n'),
    ]
    cases = []
    for name, key, url, body in inputs:
        digest = hmac.new(key.encode(), (url + body).encode(), hashlib.sha256).digest()
        signature = base64.b64encode(digest).decode()
        assert square_verify_signature(request_body=body, signature_header=signature,
                                       signature_key=key, notification_url=url), name
        entry = case("square", name, key, 1700000000, body, {
            "Content-Type": "application/json",
            "x-square-hmacsha256-signature": signature,
        })
        entry["url"] = url
        cases.append(entry)
    return cases


def sendgrid_cases():
    """SendGrid cases signed with cryptography and checked with sendgrid's EventWebhook."""
    private = ec.derive_private_key(0x686F6F6B77616C6C2D73656E64677269642D766563746F7273,
                                    ec.SECP256R1())
    spki = private.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    public_key = base64.b64encode(spki).decode()
    inputs = [
        ("batch of two", 1700000000,
         '[{"email":"a@example.com","timestamp":1699999990,"event":"processed",'
         '"sg_event_id":"rbtnWrG1DVDGGGFHFyun0A","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001"},'
         '{"email":"a@example.com","timestamp":1699999995,"event":"delivered",'
         '"sg_event_id":"8PNhS3dHWDpOy0W8aS0QaA","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001"}]'),
        ("escaped JSON as sent", 1700000321,
         '[{"event":"click","sg_event_id":"e-escaped","url":"https:\\/\\/x\\u0026y"}]'),
        ("pretty-printed with CRLF", 1735689600,
         '[\r\n  {"event": "open", "sg_event_id": "e-crlf"},\r\n  {"event": "bounce", '
         '"sg_event_id": "e-crlf-2"}\r\n]\r\n'),
    ]
    cases = []
    helper = EventWebhook(public_key)
    for name, t, body in inputs:
        der = private.sign((str(t) + body).encode(), ec.ECDSA(hashes.SHA256()))
        signature = base64.b64encode(der).decode()
        assert helper.verify_signature(body, signature, str(t)), name
        cases.append(case("sendgrid", name, public_key, t, body, {
            "Content-Type": "application/json",
            "X-Twilio-Email-Event-Webhook-Signature": signature,
            "X-Twilio-Email-Event-Webhook-Timestamp": str(t),
        }))
    return cases


def discord_cases():
    """Discord interactions: PyNaCl signs, discord-interactions' verify_key checks."""
    inputs = [
        ("application command", bytes(range(32)), 1700000000,
         '{"id":"1172346712233664512","application_id":"1172346712233664000","type":2,'
         '"token":"aW50ZXJhY3Rpb24","version":1,"data":{"name":"hello","type":1}}'),
        ("escaped JSON as sent", bytes([21] * 32), 1700000321,
         '{"id":"1172346712233664513","type":3,"data":{"custom_id":"a\\/b \\u0026 c"}}'),
        ("trailing CRLF", bytes([42] * 32), 1735689600,
         '{"id":"1172346712233664514","type":2}\r\n'),
    ]
    cases = []
    for name, seed, t, body in inputs:
        signing = nacl.signing.SigningKey(seed)
        public = bytes(signing.verify_key).hex()
        signature = signing.sign(str(t).encode() + body.encode()).signature.hex()
        assert discord_interactions.verify_key(body.encode(), signature, str(t), public)
        cases.append(case("discord", name, public, t, body, {
            "X-Signature-Ed25519": signature,
            "X-Signature-Timestamp": str(t),
        }))
    return cases


def github_legacy_cases():
    """GitHub's legacy X-Hub-Signature (HMAC-SHA1), for sources with legacy_sha1 = true."""
    inputs = [
        ("sha1, docs secret", "It's a Secret to Everybody", '{"zen":"Keep it logically awesome."}'),
        ("sha1, escaped JSON as sent", "github legacy 2", ESCAPED_BODY),
        ("sha1, trailing CRLF", "github legacy 3", CRLF_BODY),
    ]
    cases = []
    for n, (name, secret, body) in enumerate(inputs):
        mac = hmac.new(secret.encode(), body.encode(), hashlib.sha1).hexdigest()
        cases.append(case("github", name, secret, 1700000000, body, {
            "X-Hub-Signature": "sha1=" + mac,
            "X-GitHub-Delivery": f"72d3162e-cc78-11e3-81ab-4c9367dc095{n}",
            "X-GitHub-Event": "ping",
        }, source_toml="legacy_sha1 = true"))
    return cases


def hmac_generic_cases():
    """The generic hmac scheme, computed from each case's own source table."""
    cases = []
    # Defaults: sha256, hex, "{body}", id from a header, no timestamp.
    table = 'hmac = { header = "X-Signature", id_header = "X-Event-Id" }'
    body = '{"type":"order.paid","n":1}'
    mac = hmac.new(b"generic-secret-1", body.encode(), hashlib.sha256).hexdigest()
    cases.append(case("hmac", "defaults: sha256 hex over the body", "generic-secret-1", 1700000000,
                      body, {"X-Signature": mac, "X-Event-Id": "ev-1"}, source_toml=table))
    # sha512, base64, prefix, template with id, timestamp and url.
    table = ('hmac = { header = "X-Sig", prefix = "v1=", algorithm = "sha512", encoding = "base64", '
             'content = "{id}:{timestamp}:{url}:{body}", timestamp_header = "X-Ts", '
             'id_header = "X-Id", url = "https://hooks.example.com/in" }')
    t, body = 1700000123, ESCAPED_BODY
    content = f"ev-2:{t}:https://hooks.example.com/in:{body}".encode()
    tag = base64.b64encode(hmac.new(b"generic-secret-2", content, hashlib.sha512).digest()).decode()
    cases.append(case("hmac", "sha512 base64, id+timestamp+url template", "generic-secret-2", t, body,
                      {"X-Sig": "v1=" + tag, "X-Ts": str(t), "X-Id": "ev-2"},
                      source_toml=table, timestamped=True))
    # sha1 with a prefix, body timestamp in ms and body id.
    table = ('hmac = { header = "X-Hook-Signature", prefix = "sha1=", algorithm = "sha1", '
             'id_pointer = "/meta/id", timestamp_pointer = "/meta/sent_at", timestamp_unit = "ms" }')
    t = 1735689600
    body = f'{{"meta":{{"id":"m-3","sent_at":{t}250}},"data":{{}}}}\r\n'
    mac = hmac.new(b"generic-secret-3", body.encode(), hashlib.sha1).hexdigest()
    cases.append(case("hmac", "sha1, body timestamp (ms) and id, trailing CRLF", "generic-secret-3",
                      t, body, {"X-Hook-Signature": "sha1=" + mac}, source_toml=table,
                      timestamped=True))
    return cases


def linear_cases():
    """Linear cases per Linear's documented computation."""
    inputs = [
        ("Issue create", "lin_wh_hookwall_1", "234d1a4e-b617-4388-90fe-adc3633d6b72", 1700000000,
         '{{"action":"create","type":"Issue","data":{{"id":"i-1","title":"Zo\u00eb"}},'
         '"webhookTimestamp":{ms},"webhookId":"w-1"}}'),
        ("escaped JSON as sent", "lin_wh_hookwall_2", "d-2", 1700000321,
         '{{"action":"update","type":"Comment","data":{{"body":"a\\/b \\u0026 c"}},'
         '"webhookTimestamp":{ms}}}'),
        ("trailing CRLF", "lin_wh_hookwall_3", "d-3", 1735689600,
         '{{"action":"remove","type":"Issue","webhookTimestamp":{ms}}}\r\n'),
    ]
    cases = []
    for name, secret, delivery, t, template in inputs:
        body = template.format(ms=t * 1000 + 417)
        mac = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
        cases.append(case("linear", name, secret, t, body, {
            "Linear-Signature": mac,
            "Linear-Delivery": delivery,
            "Linear-Event": json.loads(body)["type"],
        }))
    return cases


def intercom_cases():
    """Intercom cases per Intercom's documented computation."""
    inputs = [
        ("conversation.user.created", "intercom-client-secret-1",
         '{"type":"notification_event","id":"notif_ccd8a4d2","topic":"conversation.user.created",'
         '"data":{"item":{"type":"conversation","id":"147"}}}'),
        ("escaped JSON as sent", "intercom-client-secret-2",
         '{"type":"notification_event","id":"notif_esc","topic":"ping","data":{"item":'
         '{"message":"a\\/b \\u0026 c"}}}'),
        ("trailing CRLF", "intercom-client-secret-3",
         '{"type":"notification_event","id":"notif_crlf","topic":"ping"}\r\n'),
    ]
    cases = []
    for name, secret, body in inputs:
        mac = hmac.new(secret.encode(), body.encode(), hashlib.sha1).hexdigest()
        cases.append(case("intercom", name, secret, 1700000000, body,
                          {"X-Hub-Signature": "sha1=" + mac}))
    return cases


def postmark_cases():
    """Postmark: the basic-auth header of a user:password webhook URL; nothing is signed."""
    secret = "hookwall:postmark-pass"
    return [case("postmark", "delivery with basic auth", secret, 1700000000,
                 '{"RecordType":"Delivery","ServerID":23,"MessageID":"00000000-0000-0000-0000-000000000000",'
                 '"Recipient":"john@example.com","DeliveredAt":"2019-11-05T16:33:54.9070259Z"}',
                 {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()})]


def calendly_cases():
    """Calendly cases per Calendly's documented computation."""
    inputs = [
        ("invitee.created", "calendly-signing-key-1", 1700000000,
         '{"created_at":"2023-11-14T22:13:20.000000Z","created_by":"https://api.calendly.com/users/AAA",'
         '"event":"invitee.created","payload":{"email":"zo\u00eb@example.com","name":"Zo\u00eb"}}'),
        ("escaped JSON as sent", "calendly-signing-key-2", 1700000321,
         '{"event":"invitee.canceled","payload":{"uri":"https:\\/\\/api.calendly.com\\/x?a=1\\u0026b=2"}}'),
        ("trailing CRLF", "calendly-signing-key-3", 1735689600,
         '{"event":"routing_form_submission.created","payload":{}}\r\n'),
    ]
    cases = []
    for name, secret, t, body in inputs:
        mac = hmac.new(secret.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
        cases.append(case("calendly", name, secret, t, body,
                          {"Calendly-Webhook-Signature": f"t={t},v1={mac}"}))
    return cases


def coinbase_cases():
    """Coinbase Commerce cases signed and checked with coinbase-commerce's WebhookSignature."""
    signature = coinbase_commerce.webhook.WebhookSignature
    inputs = [
        ("charge:created", "coinbase-shared-secret-1",
         '{"id":1,"scheduled_for":"2017-01-31T20:50:02Z","event":{"id":"24934862-d980-46cb-9402-43c81b0cdba6",'
         '"resource":"event","type":"charge:created","api_version":"2018-03-22",'
         '"created_at":"2017-01-31T20:49:02Z","data":{"code":"66BEOV2A","name":"The Sovereign Individual"}}}'),
        ("escaped JSON as sent", "coinbase-shared-secret-2",
         '{"id":2,"event":{"id":"e-esc","type":"charge:confirmed","data":{"hosted_url":"https:\\/\\/commerce.coinbase.com\\/charges\\/X?a=1\\u0026b=2"}}}'),
        ("trailing CRLF", "coinbase-shared-secret-3",
         '{"id":3,"event":{"id":"e-crlf","type":"charge:failed"}}\r\n'),
    ]
    cases = []
    for name, secret, body in inputs:
        header = signature._compute_signature(body, secret)
        assert signature.verify_sig_header(body, header, secret)
        cases.append(case("coinbase", name, secret, 1700000000, body,
                          {"X-CC-Webhook-Signature": header}))
    return cases


def zoom_cases():
    """Zoom cases per Zoom's documented computation."""
    inputs = [
        ("meeting.started", "zoom-secret-token-1", 1700000000,
         '{"event":"meeting.started","event_ts":1700000000123,"payload":{"account_id":"AAA",'
         '"object":{"id":"1234567890","topic":"Zo\u00eb meeting"}}}'),
        ("escaped JSON as sent", "zoom-secret-token-2", 1700000321,
         '{"event":"recording.completed","payload":{"object":{"share_url":"https:\\/\\/zoom.us\\/rec?a=1\\u0026b=2"}}}'),
        ("trailing CRLF", "zoom-secret-token-3", 1735689600,
         '{"event":"meeting.ended","payload":{}}\r\n'),
    ]
    cases = []
    for name, secret, t, body in inputs:
        mac = hmac.new(secret.encode(), f"v0:{t}:{body}".encode(), hashlib.sha256).hexdigest()
        cases.append(case("zoom", name, secret, t, body, {
            "x-zm-signature": "v0=" + mac,
            "x-zm-request-timestamp": str(t),
        }))
    return cases


def mailgun_cases():
    """Mailgun cases: signed with Python's hmac, checked with the SDK's verify_webhook."""
    inputs = [
        ("delivered", "key-hookwall-mailgun-1", 1700000000,
         "e0b5477167110d68991efc6b9f89f0a11066af27834600e123", "CPgfbmQMTCKtHW6uIWtuVe"),
        ("failed, escaped JSON as sent", "key-hookwall-mailgun-2", 1700000321,
         "c0b5477167110d68991efc6b9f89f0a11066af27834600e456", "Ase8d8cBA2Gg0YEJkkdtHA"),
        ("opened, trailing CRLF", "key-hookwall-mailgun-3", 1735689600,
         "a0b5477167110d68991efc6b9f89f0a11066af27834600e789", "EaeLkIrDFdyHhZi4h3SFhg"),
    ]
    cases = []
    for n, (name, secret, t, token, event_id) in enumerate(inputs):
        sig = hmac.new(secret.encode(), f"{t}{token}".encode(), hashlib.sha256).hexdigest()
        assert SecurityGuard.verify_webhook(secret, token, str(t), sig, max_age_seconds=0)
        event = name.split(",")[0]
        extra = ',"url":"https:\\/\\/x.test\\/?a=1\\u0026b=2"' if n == 1 else ""
        body = (f'{{"signature":{{"timestamp":"{t}","token":"{token}","signature":"{sig}"}},'
                f'"event-data":{{"id":"{event_id}","event":"{event}","timestamp":{t}.529{extra}}}}}')
        if n == 2:
            body += "\r\n"
        cases.append(case("mailgun", name, secret, t, body, {}))
    return cases


def hubspot_cases():
    """HubSpot v3 batches signed by hubspot-api-client's Signature, checked with is_valid."""
    event = ('{{"eventId":{n},"subscriptionId":2881778,"portalId":62515,"appId":1160452,'
             '"occurredAt":1699999990123,"subscriptionType":"{kind}","attemptNumber":0,'
             '"objectId":{obj},"changeFlag":"NEW","changeSource":"CRM","sourceId":"userId:1"}}')
    inputs = [
        ("batch of two", "hs-client-secret-0f1e2d3c", 1700000000, 1700000000123,
         "https://example.com/webhooks/hubspot", None,
         "[" + event.format(n=100, kind="contact.creation", obj=123) + ","
         + event.format(n=101, kind="contact.propertyChange", obj=123) + "]"),
        ("escaped JSON as sent", "hs-client-secret-escaped", 1700000321, 1700000321999,
         "https://hooks.example.com/webhooks/hs?portal=62515", None,
         '[{"eventId":7,"subscriptionType":"deal.creation","attemptNumber":1,'
         '"propertyValue":"https:\\/\\/x\\u0026y"}]'),
        ("pretty-printed with CRLF", "hs-client-secret-crlf", 1735689600, 1735689600000,
         "https://hooks.example.com:8443/webhooks/hubspot", None,
         '[\r\n  {"eventId": 1, "subscriptionType": "company.deletion", "attemptNumber": 0},\r\n'
         '  {"eventId": 2, "subscriptionType": "company.creation", "attemptNumber": 2}\r\n]\r\n'),
        ("percent-escapes decoded in the signed URI", "hs-client-secret-escapes", 1700000500,
         1700000500500, "https://example.com/webhooks/hubspot?next=%2Fdone%3Fok",
         "https://example.com/webhooks/hubspot?next=/done?ok",
         "[" + event.format(n=300, kind="ticket.creation", obj=9) + "]"),
    ]
    cases = []
    real = hubspot.utils.signature.datetime
    for name, secret, t, t_ms, url, signed_uri, body in inputs:
        signed_uri = signed_uri or url
        signature = HubSpotSignature.get_signature(secret, body, "v3", signed_uri, "POST",
                                                   str(t_ms))

        class Frozen(datetime):
            @classmethod
            def now(cls, tz=None, _t=t):
                return datetime.fromtimestamp(_t, tz=tz)

        hubspot.utils.signature.datetime = Frozen
        try:
            assert HubSpotSignature.is_valid(signature, secret, body, signed_uri, "POST", "v3",
                                             str(t_ms)), name
        finally:
            hubspot.utils.signature.datetime = real
        entry = case("hubspot", name, secret, t, body, {
            "Content-Type": "application/json",
            "X-HubSpot-Signature-v3": signature,
            "X-HubSpot-Request-Timestamp": str(t_ms),
        })
        entry["url"] = url
        cases.append(entry)
    return cases


def mandrill_signature(key, url, params):
    """Mandrill's documented signature: the URL, then each name and value sorted by name."""
    signed = url + "".join(name + value for name, value in sorted(params.items()))
    digest = hmac.new(key.encode(), signed.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def mandrill_cases():
    """Mandrill batches signed per its docs with Python's hmac."""
    inputs = [
        ("send and open", "mdr-webhook-key-0a1b2c", "https://example.com/webhooks/mandrill",
         '[{"event":"send","_id":"exampleaaaaaaaaaaaaaaaaaaaaaaaaa","ts":1700000000,'
         '"msg":{"email":"a@example.com","subject":"Hi","state":"sent"}},'
         '{"event":"open","_id":"exampleaaaaaaaaaaaaaaaaaaaaaaaaa","ts":1700000050,'
         '"msg":{"email":"a@example.com","subject":"Hi","state":"sent"},"ip":"192.0.2.1"}]'),
        ("escaped JSON as sent", "mdr-webhook-key-escaped",
         "https://hooks.example.com/webhooks/mdr?list=7",
         '[{"event":"click","_id":"e-escaped","ts":1700000100,'
         '"url":"https:\\/\\/x\\u0026y","msg":{"subject":"caf\\u00e9"}}]'),
        ("sync event, pretty-printed with CRLF", "mdr-webhook-key-crlf",
         "https://hooks.example.com:8443/webhooks/mandrill",
         '[\r\n  {"type": "blacklist", "action": "add", "ts": 1700000200,\r\n'
         '   "reject": {"email": "b@example.com", "reason": "hard-bounce"}}\r\n]\r\n'),
    ]
    cases = []
    for name, key, url, events in inputs:
        params = {"mandrill_events": events}
        entry = case("mandrill", name, key, 1700000000, urlencode(params), {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Mandrill-Signature": mandrill_signature(key, url, params),
        })
        entry["url"] = url
        cases.append(entry)
    return cases


def adyen_item(psp, event_code, success, value, reference, key):
    """One NotificationRequestItem, signed by the Adyen library, checked by it."""
    item = {
        "amount": {"currency": "EUR", "value": value},
        "eventCode": event_code,
        "eventDate": "2023-11-14T22:13:20+01:00",
        "merchantAccountCode": "HookwallTestMerchant",
        "merchantReference": reference,
        "originalReference": "",
        "pspReference": psp,
        "reason": "",
        "success": success,
    }
    item["additionalData"] = {"hmacSignature": generate_notification_sig(item, key).decode()}
    assert is_valid_hmac_notification(item, key), psp
    return item


def adyen_cases():
    """Adyen notification batches signed and checked item by item with the Adyen library."""
    key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
    wrap = lambda items: [{"NotificationRequestItem": i} for i in items]
    two = {"live": "false", "notificationItems": wrap([
        adyen_item("7914073381342284", "AUTHORISATION", "true", 1130, "order-1", key),
        adyen_item("7914073381342285", "CAPTURE", "false", 1130, "order-1", key),
    ])}
    escaped_item = adyen_item("8815000000000001", "REFUND", "true", 500, "a/b&c", key)
    escaped = json.dumps({"live": "false", "notificationItems": wrap([escaped_item])},
                         separators=(",", ":")).replace("a/b&c", "a\\/b\\u0026c")
    crlf_item = adyen_item("8815000000000002", "AUTHORISATION", "true", 0, "order-2", key)
    crlf = json.dumps({"live": "false", "notificationItems": wrap([crlf_item])},
                      indent=2).replace("\n", "\r\n") + "\r\n"
    inputs = [
        ("batch of two", json.dumps(two, separators=(",", ":"))),
        ("escaped JSON in a signed field", escaped),
        ("pretty-printed with CRLF", crlf),
    ]
    cases = []
    for name, body in inputs:
        parsed = json.loads(body)
        for element in parsed["notificationItems"]:
            assert is_valid_hmac_notification(element["NotificationRequestItem"], key), name
        cases.append(case("adyen", name, key, 1700000000, body,
                          {"Content-Type": "application/json"}))
    return cases


def adyen_header_cases():
    """Adyen Balance Platform / Management API webhooks: the HmacSignature header over the raw
    body, made with the Adyen library's generate_payload_sig, checked with is_valid_hmac_payload."""
    key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
    holder = json.dumps({
        "data": {"balancePlatform": "HookwallPlatform",
                 "accountHolder": {"id": "AH3227C223222C5GXQXF658WB", "status": "active",
                                   "description": "Liable account holder"}},
        "environment": "test", "timestamp": "2023-11-14T22:13:20+01:00",
        "type": "balancePlatform.accountHolder.updated"}, separators=(",", ":"))
    transfer = json.dumps({
        "data": {"id": "48TYZO5ZVURJ2FCW", "sequenceNumber": 2, "status": "booked",
                 "reference": "a/b&c", "amount": {"currency": "EUR", "value": 1000}},
        "environment": "test", "timestamp": "2023-11-14T22:13:21+01:00",
        "type": "balancePlatform.transfer.updated"}, separators=(",", ":")
    ).replace("a/b&c", "a\\/b\\u0026c")
    merchant = json.dumps({
        "createdAt": "2023-11-14T22:13:22+01:00",
        "data": {"merchantId": "HookwallMerchant", "status": "Active"},
        "environment": "test", "type": "merchant.updated"}, indent=2).replace("\n", "\r\n") + "\r\n"
    inputs = [
        ("header HMAC, balance platform configuration webhook", holder),
        ("header HMAC, transfer webhook with escaped JSON", transfer),
        ("header HMAC, Management API webhook pretty-printed with CRLF", merchant),
    ]
    cases = []
    for name, body in inputs:
        signature = generate_payload_sig(body.encode("utf-8"), key).decode()
        assert is_valid_hmac_payload(signature, key, body.encode("utf-8")), name
        cases.append(case("adyen", name, key, 1700000000, body,
                          {"Content-Type": "application/json", "HmacSignature": signature},
                          source_toml='hmac_signature = "header"'))
    return cases


def at(unix_s):
    """The datetime standardwebhooks' sign() takes for a Unix timestamp."""
    return datetime.fromtimestamp(unix_s, tz=timezone.utc)


def case(provider, name, secret, timestamp, body, headers, source_toml=None, timestamped=None):
    out = {
        "provider": provider,
        "name": name,
        "secret": secret,
        "timestamp": timestamp,
        "body": body,
        "headers": headers,
    }
    # Per-source scheme options (TOML lines of the [[source]]), and whether such a source
    # signs a timestamp (the generic hmac scheme decides per source).
    if source_toml is not None:
        out["source_toml"] = source_toml
    if timestamped is not None:
        out["timestamped"] = timestamped
    return out


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    versions = {}
    for package in ("stripe", "standardwebhooks", "svix", "PyNaCl", "slack_sdk",
                    "paddle-python-sdk", "twilio", "squareup", "sendgrid", "cryptography",
                    "discord-interactions", "coinbase-commerce", "mailgun", "hubspot-api-client", "Adyen"):
        versions[package] = version(package) if version else "unknown"
    document = {
        "generated_by": "tests/vectors/gen_vectors.py",
        "libraries": versions,
        "cases": stripe_cases() + standard_cases() + standard_v1a_cases() + svix_cases()
        + slack_cases() + shopify_cases() + paddle_cases() + twitch_cases() + typeform_cases()
        + gitlab_cases() + segment_cases() + pagerduty_cases() + woocommerce_cases()
        + bitbucket_cases() + twilio_cases() + square_cases() + sendgrid_cases()
        + discord_cases() + github_legacy_cases() + hmac_generic_cases()
        + linear_cases() + intercom_cases() + postmark_cases() + calendly_cases()
        + coinbase_cases() + zoom_cases() + mailgun_cases() + hubspot_cases()
        + mandrill_cases() + adyen_cases() + adyen_header_cases(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(document['cases'])} cases to {out}")


if __name__ == "__main__":
    main()

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
  secret after its ``whsec_`` prefix, over ``"{id}.{ts}.{body}"``).

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

import standardwebhooks
import stripe
from standardwebhooks.webhooks import Webhook

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
    for name, secret, msg_id, t, body in inputs:
        signature = Webhook(secret).sign(msg_id, at(t), body)
        cases.append(case("standard", name, secret, t, body, {
            "webhook-id": msg_id,
            "webhook-timestamp": str(t),
            "webhook-signature": signature,
        }))

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


def at(unix_s):
    """The datetime standardwebhooks' sign() takes for a Unix timestamp."""
    return datetime.fromtimestamp(unix_s, tz=timezone.utc)


def case(provider, name, secret, timestamp, body, headers):
    return {
        "provider": provider,
        "name": name,
        "secret": secret,
        "timestamp": timestamp,
        "body": body,
        "headers": headers,
    }


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    versions = {}
    for package in ("stripe", "standardwebhooks"):
        versions[package] = version(package) if version else "unknown"
    document = {
        "generated_by": "tests/vectors/gen_vectors.py",
        "libraries": versions,
        "cases": stripe_cases() + standard_cases(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(document['cases'])} cases to {out}")


if __name__ == "__main__":
    main()

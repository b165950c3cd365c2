//! The URL a URL-signing provider signed (Twilio, Square, HubSpot; SPEC §4, issue 3): the
//! address the provider posted to, as the provider saw it, which hookwall behind a TLS-terminating proxy or
//! a port-mapping load balancer does not see directly.
//!
//! The rule, in order:
//! 1. A source with `public_url` signs against it: `public_url` (written without a query, as the
//!    provider's dashboard shows the endpoint) followed by the request's own query, if any
//!    (Twilio's `bodySHA256`, or parameters the operator put in the dashboard URL).
//! 2. Otherwise the URL is rebuilt from the request: scheme `https` when hookwall terminated TLS
//!    itself, else `http`; authority from `Host` (or from an absolute-form request target,
//!    which RFC 9112 §3.2.2 says wins over `Host`); path and query exactly as in the request
//!    target (no decoding or normalising: the provider signed the bytes it sent).
//! 3. `X-Forwarded-Proto` and `X-Forwarded-Host` replace the scheme and the authority only when
//!    the connection's peer address is inside one of `server.trusted_proxies`; from any other
//!    peer they are ignored (a client cannot choose the URL it is checked against). When a
//!    header lists several hops (`https, http`), the first is the client-facing one and is used.
//!
//! Pure: no IO; the caller passes the peer and whether TLS was terminated.

use std::net::IpAddr;

use crate::http::Request;

/// `X-Forwarded-Proto` (lowercase, as [`Request`] stores names).
pub const FORWARDED_PROTO_HEADER: &str = "x-forwarded-proto";
/// `X-Forwarded-Host`.
pub const FORWARDED_HOST_HEADER: &str = "x-forwarded-host";

/// How the request reached hookwall: what the connection knows and the request does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Origin {
    /// The connection's peer address, when the back end knows it.
    pub peer: Option<IpAddr>,
    /// Whether hookwall terminated TLS on this connection (`[server.tls]`).
    pub tls: bool,
}

/// `server.trusted_proxies`, parsed once per configuration: address ranges whose
/// `X-Forwarded-*` headers are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<(IpAddr, u8)>,
}

impl TrustedProxies {
    /// Parses CIDRs (`10.0.0.0/8`, `::1`, a bare address is a /32 or /128). Entries that do not
    /// parse are skipped: the config loader has already refused them with a precise error.
    pub fn parse(cidrs: &[String]) -> TrustedProxies {
        let ranges = cidrs
            .iter()
            .filter_map(|text| {
                let (addr, prefix) = match text.split_once('/') {
                    Some((addr, prefix)) => (addr, Some(prefix)),
                    None => (text.as_str(), None),
                };
                let ip: IpAddr = addr.parse().ok()?;
                let bits = if ip.is_ipv4() { 32 } else { 128 };
                let prefix = match prefix {
                    Some(p) => p.parse::<u8>().ok().filter(|n| *n <= bits)?,
                    None => bits,
                };
                Some((ip, prefix))
            })
            .collect();
        TrustedProxies { ranges }
    }

    /// Whether `peer` is inside one of the ranges (an IPv4-mapped IPv6 peer is compared as
    /// IPv4).
    pub fn contains(&self, peer: IpAddr) -> bool {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            v4 => v4,
        };
        self.ranges.iter().any(|(net, prefix)| match (net, peer) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                u32::from(*net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*prefix)).unwrap_or(0);
                u128::from(*net) & mask == u128::from(ip) & mask
            }
            _ => false,
        })
    }
}

/// The URL the provider signed for `req` (the rule of the module doc). `None` when it cannot
/// be known: no `public_url`, no usable `Host` and no absolute-form target.
pub fn signed_url(
    req: &Request,
    origin: Origin,
    proxies: &TrustedProxies,
    public_url: Option<&str>,
) -> Option<String> {
    let (authority, path_and_query) = split_target(&req.target);
    if let Some(base) = public_url {
        let query = path_and_query.split_once('?').map(|(_, q)| q);
        return Some(match query {
            Some(q) => format!("{base}?{q}"),
            None => base.to_owned(),
        });
    }
    let trusted = origin.peer.is_some_and(|peer| proxies.contains(peer));
    let forwarded = |name| trusted.then(|| first_hop(req, name)).flatten();
    let scheme = match forwarded(FORWARDED_PROTO_HEADER) {
        Some(proto) => proto.to_ascii_lowercase(),
        None if origin.tls => "https".to_owned(),
        None => "http".to_owned(),
    };
    let host = match forwarded(FORWARDED_HOST_HEADER) {
        Some(host) => host,
        None => match authority {
            Some(authority) => authority,
            None => crate::verify::unique_header(req, "host")
                .and_then(|h| std::str::from_utf8(h).ok())
                .map(str::trim)?,
        },
    };
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
        return None;
    }
    let slash = if path_and_query.starts_with('/') { "" } else { "/" };
    Some(format!("{scheme}://{host}{slash}{path_and_query}"))
}

/// The URL of `req` when nothing but the request is known (no TLS, no trusted proxy, no
/// `public_url`): what `hookwall verify` and the library's [`crate::verify::verify`] use.
pub fn request_url(req: &Request) -> Option<String> {
    signed_url(req, Origin::default(), &TrustedProxies::default(), None)
}

/// Splits a request target into the authority of an absolute-form target (if any) and the
/// path with its query (possibly empty, or only a query, for an absolute-form target).
fn split_target(target: &str) -> (Option<&str>, &str) {
    for scheme in ["http://", "https://"] {
        if target.len() > scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme) {
            let rest = &target[scheme.len()..];
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            return (Some(&rest[..end]), &rest[end..]);
        }
    }
    (None, target)
}

/// The first comma-separated element of the single header `name`, trimmed; `None` when the
/// header is absent, repeated, not UTF-8 or empty.
fn first_hop<'a>(req: &'a Request, name: &'a str) -> Option<&'a str> {
    let value = crate::verify::unique_header(req, name)?;
    let first = std::str::from_utf8(value).ok()?.split(',').next()?.trim();
    (!first.is_empty()).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::{signed_url, Origin, TrustedProxies};
    use crate::http::Request;

    fn req(target: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".to_owned(),
            target: target.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
                .collect(),
            body: Vec::new(),
            keep_alive: true,
        }
    }

    const PROXY: &str = "10.1.2.3";

    fn from(peer: &str, tls: bool) -> Origin {
        Origin { peer: Some(peer.parse().expect("ip")), tls }
    }

    /// A TLS-terminating proxy in front of plain-HTTP hookwall: https is restored only from a
    /// trusted peer; the same headers from anyone else are ignored.
    #[test]
    fn forwarded_headers_only_from_trusted_proxies() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".to_owned(), "::1".to_owned()]);
        let r = req(
            "/webhooks/tw?a=1",
            &[
                ("host", "127.0.0.1:8080"),
                ("x-forwarded-proto", "https, http"),
                ("x-forwarded-host", "hooks.example.com"),
            ],
        );
        let trusted = signed_url(&r, from(PROXY, false), &proxies, None);
        assert_eq!(trusted.as_deref(), Some("https://hooks.example.com/webhooks/tw?a=1"));
        let v6 = signed_url(&r, from("::1", false), &proxies, None);
        assert_eq!(v6.as_deref(), Some("https://hooks.example.com/webhooks/tw?a=1"));
        let mapped = signed_url(&r, from("::ffff:10.9.9.9", false), &proxies, None);
        assert_eq!(mapped.as_deref(), Some("https://hooks.example.com/webhooks/tw?a=1"));
        let stranger = signed_url(&r, from("192.0.2.7", false), &proxies, None);
        assert_eq!(stranger.as_deref(), Some("http://127.0.0.1:8080/webhooks/tw?a=1"));
        let unknown = signed_url(&r, Origin { peer: None, tls: true }, &proxies, None);
        assert_eq!(unknown.as_deref(), Some("https://127.0.0.1:8080/webhooks/tw?a=1"));
        let none = TrustedProxies::default();
        let untrusted = signed_url(&r, from(PROXY, false), &none, None);
        assert_eq!(untrusted.as_deref(), Some("http://127.0.0.1:8080/webhooks/tw?a=1"));
    }

    /// `public_url` wins over everything and keeps the request's query.
    #[test]
    fn public_url_takes_the_request_query() {
        let proxies = TrustedProxies::parse(&["0.0.0.0/0".to_owned()]);
        let public = Some("https://hooks.example.com/twilio");
        let r = req("/webhooks/tw?bodySHA256=ab", &[("host", "x"), ("x-forwarded-host", "y")]);
        let url = signed_url(&r, from(PROXY, false), &proxies, public);
        assert_eq!(url.as_deref(), Some("https://hooks.example.com/twilio?bodySHA256=ab"));
        let r = req("/webhooks/tw", &[]);
        let url = signed_url(&r, Origin::default(), &proxies, public);
        assert_eq!(url.as_deref(), Some("https://hooks.example.com/twilio"));
    }

    /// Absolute-form targets carry their authority; no Host and no target authority, no URL.
    #[test]
    fn absolute_form_and_missing_host() {
        let none = TrustedProxies::default();
        let r = req("http://Hooks.Example:81?x=1", &[("host", "ignored")]);
        let url = signed_url(&r, Origin::default(), &none, None);
        assert_eq!(url.as_deref(), Some("http://Hooks.Example:81/?x=1"));
        assert_eq!(signed_url(&req("/w", &[]), Origin::default(), &none, None), None);
        let two = req("/w", &[("host", "a"), ("host", "b")]);
        assert_eq!(signed_url(&two, Origin::default(), &none, None), None, "repeated Host");
    }

    #[test]
    fn cidr_edges() {
        let p = TrustedProxies::parse(&["192.168.4.0/22".to_owned(), "bad".to_owned()]);
        assert!(p.contains("192.168.7.255".parse().expect("ip")));
        assert!(!p.contains("192.168.8.0".parse().expect("ip")));
        assert!(!p.contains("::1".parse().expect("ip")));
        let all = TrustedProxies::parse(&["::/0".to_owned()]);
        assert!(all.contains("2001:db8::1".parse().expect("ip")));
    }
}

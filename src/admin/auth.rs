//! Authentication of `/admin/*` (SPEC §6): `Authorization: Bearer <token>` compared in constant
//! time with the token read from `admin.token_file` at start. The caller is identified in the
//! audit log by a token id (the first 8 hex digits of SHA-256 of the token), never the token.

// Errors here are the HTTP answer itself, built once per admin request, off the hot path.
#![allow(clippy::result_large_err)]

use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::StatusCode;
use subtle::ConstantTimeEq as _;

use super::api::error;
use crate::config::AdminToken;

/// Who made an authenticated admin request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// First 8 lower-case hex digits of SHA-256 of the bearer token (R20 "actor", R28).
    pub token_id: String,
}

/// The token id of `token`: the first 8 lower-case hex digits of its SHA-256.
pub fn token_id(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    hex::encode(&digest.as_ref()[..4])
}

/// Checks the request's bearer token against `expected`.
///
/// # Errors
/// The answer to send instead: 403 `admin_disabled` when no token is configured, 401
/// `unauthorized` (with `WWW-Authenticate: Bearer`) when the header is missing, repeated,
/// malformed or carries another token.
pub fn check(
    expected: Option<&AdminToken>,
    headers: &HeaderMap,
) -> Result<Caller, hyper::Response<http_body_util::Full<hyper::body::Bytes>>> {
    let Some(expected) = expected else {
        let message = "the admin API is disabled: no admin.token_file is configured";
        return Err(error(StatusCode::FORBIDDEN, "admin_disabled", message));
    };
    if headers.get_all(AUTHORIZATION).iter().nth(1).is_some() {
        // Which of two would count is up to each proxy and server on the way; refuse the
        // ambiguity rather than pick one (a bad-input review found the first one winning).
        return Err(unauthorized("more than one Authorization header"));
    }
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let Some(presented) = presented.filter(|t| !t.is_empty()) else {
        let message = if headers.contains_key(AUTHORIZATION) {
            "the Authorization header is not `Bearer <token>` in visible ASCII"
        } else {
            "an Authorization: Bearer <token> header is required"
        };
        return Err(unauthorized(message));
    };
    // Equal-length digests: the comparison time says nothing about the token's length or
    // how much of it matched.
    let sha = |t: &str| ring::digest::digest(&ring::digest::SHA256, t.as_bytes());
    let matches: bool = sha(presented).as_ref().ct_eq(sha(&expected.0).as_ref()).into();
    if !matches {
        return Err(unauthorized("the bearer token is not the admin token"));
    }
    Ok(Caller { token_id: token_id(presented) })
}

/// A 401, logged (the reason only — never the presented token) so that an operator locked out,
/// or someone guessing, shows in the log.
fn unauthorized(message: &str) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    tracing::warn!(
        code = "admin_unauthorized",
        reason = message,
        "An admin API request was refused (401)."
    );
    let mut reply = error(StatusCode::UNAUTHORIZED, "unauthorized", message);
    reply.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    reply
}

/// Whether `token` can travel as an `Authorization: Bearer` credential: non-empty, and only the
/// RFC 6750 `b64token` characters (ASCII letters, digits, `-._~+/`, trailing `=`) — a token a
/// client cannot send would lock every operator out, so the config and `hookwall dlq` refuse it.
pub fn is_token_text(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty() && body.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

#[cfg(test)]
mod token_text_tests {
    use super::is_token_text;

    /// Review finding: a token with a newline, a space or non-ASCII passed check-config, and no
    /// client could ever authenticate; only RFC 6750 b64token text is accepted now.
    #[test]
    fn only_bearer_token_characters_are_accepted() {
        for ok in ["test-admin-token-0123456789", "a.b_c~d+e/f==", "Zx9"] {
            assert!(is_token_text(ok), "{ok}");
        }
        for bad in ["", "two\nlines", "with space", "tökén", "==", "a=b", "tab\t"] {
            assert!(!is_token_text(bad), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(values: &[&str]) -> StatusCode {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(AUTHORIZATION, HeaderValue::from_str(v).expect("test header"));
        }
        let expected = AdminToken("right".to_owned());
        check(Some(&expected), &headers).map_or_else(|r| r.status(), |_| StatusCode::OK)
    }

    /// The right token alone passes; repeated, in either order with another, it does not.
    #[test]
    fn one_authorization_header_exactly() {
        assert_eq!(status(&["Bearer right"]), StatusCode::OK);
        assert_eq!(status(&["Bearer right", "Bearer wrong"]), StatusCode::UNAUTHORIZED);
        assert_eq!(status(&["Bearer wrong", "Bearer right"]), StatusCode::UNAUTHORIZED);
        assert_eq!(status(&["Bearer right", "Bearer right"]), StatusCode::UNAUTHORIZED);
        assert_eq!(status(&[]), StatusCode::UNAUTHORIZED);
    }
}

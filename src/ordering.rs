//! Delivery order per ordering key (R22, SPEC §2 `ordering_key`).
//!
//! Duplicate suppression says *whether* an event is delivered; ordering says *when*. A source
//! may name a JSON pointer (RFC 6901), e.g. `/data/object/id`. The value there is the event's
//! **ordering value**; events of one source and tenant with the same value form an **ordering
//! group**. The rule:
//!
//! * Within a group, events are attempted one at a time, in admission order: an event is
//!   attempted only when every event of its group admitted before it is settled (delivered,
//!   dead-lettered or dropped). A retry keeps its place: the events behind it wait through its
//!   backoff.
//! * Admission order is the order of the ledger's admission stamps (Unix µs, strictly
//!   increasing across shards; `Shared::next_order_stamp`): an event acknowledged before another
//!   was received always comes first. Copies racing each other, and the events of one batch
//!   delivery (SendGrid), are ordered as their claims were committed.
//! * Different groups, and events without an ordering value, are delivered in parallel.
//! * A dead-lettered or dropped event no longer holds its group back; replaying it later
//!   delivers it on its own, unordered (a replay must not block newer events behind an old one).
//! * The value is a JSON string, number or boolean, kept with its type (`s:` the string,
//!   `n:` / `b:` the JSON text), so `8` and `"8"` are different groups; `null`, an object, an
//!   array or no value at the pointer leaves the event unordered. Values longer than
//!   [`ORDERING_VALUE_BYTES_MAX`] are replaced by their SHA-256 (hex), so long values still
//!   group exactly.
//! * Operator actions do not break "one at a time": when the event in flight is dropped (or
//!   replayed), the group's next event waits until that attempt has finished.
//!
//! This is delivery order, not a version rule: hookwall does not reorder by the provider's
//! `created` time or drop stale versions; the destination still compares versions when the
//! provider does not guarantee send order (R22). The index behind it lives in the ledger
//! (`ord/` entries in `meta`, see ARCHITECTURE.md); on the PostgreSQL ledger, in the
//! `ordering_value` / `order_stamp` columns, and the lease statement leases only a group's head
//! (`docs/postgres.md`).

use simd_json::prelude::*;

use crate::limits::ORDERING_VALUE_BYTES_MAX;

/// A source's `ordering_key`: a parsed JSON pointer (RFC 6901).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingKey {
    /// The pointer as configured, e.g. `/data/object/id`.
    pub pointer: String,
    /// Its reference tokens, unescaped (`~1` → `/`, `~0` → `~`).
    tokens: Vec<String>,
}

impl OrderingKey {
    /// Parses a JSON pointer.
    ///
    /// # Errors
    /// A message for the config error when `pointer` is empty (the whole document is not an
    /// ordering value), does not start with `/`, has more than 32 tokens, or has a `~` not
    /// followed by `0` or `1`.
    pub fn parse(pointer: &str) -> Result<OrderingKey, String> {
        let Some(rest) = pointer.strip_prefix('/') else {
            return Err(format!("{pointer:?} is not a JSON pointer (RFC 6901: starts with /)"));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => token.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => token.push('~'),
                        Some('1') => token.push('/'),
                        _ => {
                            return Err(format!(
                                "{pointer:?}: `~` must be followed by 0 or 1 (RFC 6901)"
                            ))
                        }
                    },
                }
            }
            tokens.push(token);
        }
        if tokens.len() > 32 {
            return Err(format!("{pointer:?} has {} tokens; at most 32 are allowed", tokens.len()));
        }
        Ok(OrderingKey { pointer: pointer.to_owned(), tokens })
    }

    /// The ordering value of a JSON document, read from a scratch copy (simd-json rewrites its
    /// input, R1). `None` when the document does not parse or holds no string, number or
    /// boolean at the pointer (the event is then unordered).
    pub fn value_in(&self, mut scratch: Vec<u8>) -> Option<String> {
        let tape = crate::inspect::parse_tape(&mut scratch).ok()?;
        let mut value = tape.as_value();
        for token in &self.tokens {
            value = if let Some(object) = value.as_object() {
                // A repeated member is ambiguous: no value.
                let mut found = object.iter().filter(|(k, _)| *k == token.as_str());
                match (found.next(), found.next()) {
                    (Some((_, v)), None) => v,
                    _ => return None,
                }
            } else if let Some(array) = value.as_array() {
                let index: usize = token.parse().ok().filter(|_| !token.starts_with('+'))?;
                array.iter().nth(index)?
            } else {
                return None;
            };
        }
        let text = if let Some(s) = value.as_str() {
            format!("s:{s}")
        } else if value.is_bool() {
            format!("b:{}", value.encode())
        } else if value.is_number() {
            format!("n:{}", value.encode())
        } else {
            return None;
        };
        Some(bounded(text))
    }
}

/// `text`, or its SHA-256 in hex when longer than [`ORDERING_VALUE_BYTES_MAX`] bytes.
fn bounded(text: String) -> String {
    if text.len() <= ORDERING_VALUE_BYTES_MAX {
        return text;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut hex = String::from("sha256:");
    for b in digest.as_ref() {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(pointer: &str, json: &str) -> Option<String> {
        OrderingKey::parse(pointer).expect("a valid pointer").value_in(json.as_bytes().to_vec())
    }

    #[test]
    fn strings_numbers_and_booleans_are_values() {
        let doc = r#"{"data":{"object":{"id":"cus_1","n":42,"b":true,"f":1.5}}}"#;
        assert_eq!(value("/data/object/id", doc).as_deref(), Some("s:cus_1"));
        assert_eq!(value("/data/object/n", doc).as_deref(), Some("n:42"));
        assert_eq!(value("/data/object/b", doc).as_deref(), Some("b:true"));
        assert_eq!(value("/data/object/f", doc).as_deref(), Some("n:1.5"));
        // A number and the string of its digits are different groups.
        let mixed = r#"{"a":8,"b":"8","c":true,"d":"true"}"#;
        assert_ne!(value("/a", mixed), value("/b", mixed));
        assert_ne!(value("/c", mixed), value("/d", mixed));
    }

    #[test]
    fn null_objects_arrays_absent_and_repeated_members_are_unordered() {
        let doc = r#"{"a":null,"o":{},"l":[1],"r":1,"r":2}"#;
        for p in ["/a", "/o", "/l", "/missing", "/a/b", "/r"] {
            assert_eq!(value(p, doc), None, "{p}");
        }
        assert_eq!(value("/x", "not json"), None);
    }

    #[test]
    fn pointer_escapes_and_array_indexes() {
        let doc = r#"{"a/b":{"m~n":"v"},"list":[{"id":"first"},{"id":"second"}]}"#;
        assert_eq!(value("/a~1b/m~0n", doc).as_deref(), Some("s:v"));
        assert_eq!(value("/list/1/id", doc).as_deref(), Some("s:second"));
        assert_eq!(value("/list/2/id", doc), None);
        assert_eq!(value("/list/-1/id", doc), None);
        assert_eq!(value("/list/+1/id", doc), None);
    }

    #[test]
    fn malformed_pointers_are_refused_with_the_reason() {
        assert!(OrderingKey::parse("data/id").expect_err("refused").contains("starts with /"));
        assert!(OrderingKey::parse("").expect_err("refused").contains("starts with /"));
        assert!(OrderingKey::parse("/a~2").expect_err("refused").contains("~"));
        assert!(OrderingKey::parse(&"/a".repeat(33)).expect_err("refused").contains("at most 32"));
    }

    #[test]
    fn long_values_group_by_their_digest() {
        let long = "x".repeat(ORDERING_VALUE_BYTES_MAX + 1);
        let a = value("/k", &format!(r#"{{"k":"{long}"}}"#)).expect("a value");
        let b = value("/k", &format!(r#"{{"k":"{long}y"}}"#)).expect("a value");
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64, "{a}");
        assert_ne!(a, b);
        assert_eq!(a, value("/k", &format!(r#"{{"k":"{long}"}}"#)).expect("a value"));
    }
}

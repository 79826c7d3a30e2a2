//! The signature of outgoing calls (webhook deliveries and handlers in
//! other services): `X-Qiwu-Signature: sha256=<hex HMAC-SHA256 of
//! "{timestamp}.{body}">`, keyed by a shared secret.
//!
//! To rotate a secret without downtime, the sender keeps the secrets it
//! replaced for a while: during that overlap the header lists one signature
//! per secret, the current one first, separated by `", "`
//! (`sha256=<current>, sha256=<previous>`). A receiver accepts the call when
//! any listed signature matches a secret it knows, so receivers can move to
//! the new secret one by one.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// What separates the signatures of one header.
pub const SEPARATOR: &str = ", ";

/// `sha256=` followed by the hex HMAC-SHA256 of `{timestamp}.{body}`.
pub fn signature(secret: &str, timestamp: &str, body: &str) -> String {
    // HMAC takes keys of any length, so this cannot fail; an empty MAC
    // would only make the receiver reject the call.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + digest.len() * 2);
    out.push_str("sha256=");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The secret calls are signed with, and the previous ones still signed
/// with during a rotation.
#[derive(Clone)]
pub struct SigningSecrets {
    current: String,
    previous: Vec<String>,
}

impl SigningSecrets {
    pub fn new(current: String, previous: Vec<String>) -> SigningSecrets {
        SigningSecrets { current, previous }
    }

    /// How many previous secrets are still signed with.
    pub fn previous_count(&self) -> usize {
        self.previous.len()
    }

    /// The `X-Qiwu-Signature` value: the current secret's signature, then
    /// one per previous secret.
    pub fn header_value(&self, timestamp: &str, body: &str) -> String {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .map(|secret| signature(secret, timestamp, body))
            .collect::<Vec<_>>()
            .join(SEPARATOR)
    }
}

impl From<String> for SigningSecrets {
    fn from(current: String) -> SigningSecrets {
        SigningSecrets::new(current, Vec::new())
    }
}

impl From<&str> for SigningSecrets {
    fn from(current: &str) -> SigningSecrets {
        SigningSecrets::from(current.to_owned())
    }
}

// Secrets never reach a log through Debug.
impl std::fmt::Debug for SigningSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningSecrets")
            .field("previous", &self.previous.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_signature_per_secret_current_first() {
        let (ts, body) = ("1700000000", "{\"a\":1}");
        let alone = SigningSecrets::from("current-secret-0123");
        assert_eq!(
            alone.header_value(ts, body),
            signature("current-secret-0123", ts, body)
        );
        let rotating = SigningSecrets::new(
            "current-secret-0123".into(),
            vec!["previous-secret-0123".into(), "older-secret-0123".into()],
        );
        assert_eq!(rotating.previous_count(), 2);
        let value = rotating.header_value(ts, body);
        let parts: Vec<&str> = value.split(SEPARATOR).collect();
        assert_eq!(
            parts,
            [
                signature("current-secret-0123", ts, body),
                signature("previous-secret-0123", ts, body),
                signature("older-secret-0123", ts, body),
            ]
        );
        assert!(!format!("{rotating:?}").contains("secret-0123"));
    }
}

//! The bearer tokens of signed-in people: HS256 JWTs, their claims, and
//! the secrets that sign and verify them. `AppState` holds the keys and
//! the `Principal` extractor reads them, so they live apart from both.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// The claims of our tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Claims {
    pub sub: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub perms: Vec<String>,
    #[serde(default, rename = "superAdmin")]
    pub super_admin: bool,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
}

/// The signing secret, shared by every instance, and the secrets it
/// replaced: tokens are signed with the current one and accepted when any
/// of them verifies, so a secret can be rotated without signing anyone out.
#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    /// The current secret's key first, then each previous one.
    decoding: Vec<DecodingKey>,
}

impl JwtKeys {
    /// Keys for a shared secret; an empty secret is refused.
    pub fn from_secret(secret: &[u8]) -> Result<JwtKeys, jsonwebtoken::errors::Error> {
        Ok(JwtKeys {
            encoding: EncodingKey::from_secret(secret)?,
            decoding: vec![DecodingKey::from_secret(secret)?],
        })
    }

    /// Also accepts tokens signed with each of `previous` (never signs with
    /// them); an empty secret is refused.
    pub fn with_previous<S: AsRef<[u8]>>(
        mut self,
        previous: &[S],
    ) -> Result<JwtKeys, jsonwebtoken::errors::Error> {
        for secret in previous {
            self.decoding
                .push(DecodingKey::from_secret(secret.as_ref())?);
        }
        Ok(self)
    }

    pub fn mint(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
    }

    /// The claims of a token signed with the current or a previous secret.
    /// When no secret verifies the signature, that is the error; when one
    /// does but the claims fail (expired), the claims' error is returned.
    pub fn verify(&self, token: &str) -> Result<Claims, jsonwebtoken::errors::Error> {
        use jsonwebtoken::errors::ErrorKind as J;
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 30;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let mut first_error = None;
        for key in &self.decoding {
            match jsonwebtoken::decode::<Claims>(token, key, &validation) {
                Ok(data) => return Ok(data.claims),
                // Another secret may still verify it.
                Err(e) if matches!(e.kind(), J::InvalidSignature) => {
                    first_error.get_or_insert(e);
                }
                // The signature matched (or the token is malformed, which
                // no other key changes): this is the answer.
                Err(e) => return Err(e),
            }
        }
        Err(first_error.unwrap_or_else(|| J::InvalidSignature.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn mint_and_verify() {
        let keys = JwtKeys::from_secret(b"secret").expect("keys");
        let claims = Claims {
            sub: "alice".into(),
            name: "Alice".into(),
            perms: vec!["scheduler.task.browse".into()],
            super_admin: false,
            exp: chrono::Utc::now().timestamp() + 60,
        };
        let token = keys.mint(&claims).expect("mint");
        assert_eq!(keys.verify(&token).expect("verify"), claims);
        let other = JwtKeys::from_secret(b"other").expect("keys");
        assert!(other.verify(&token).is_err());
        let expired = Claims {
            exp: chrono::Utc::now().timestamp() - 3600,
            ..claims
        };
        let token = keys.mint(&expired).expect("mint");
        assert!(keys.verify(&token).is_err());
    }

    #[test]
    fn previous_secrets_verify_but_never_sign() {
        use jsonwebtoken::errors::ErrorKind as J;
        let claims = |exp_offset: i64| Claims {
            sub: "alice".into(),
            name: "Alice".into(),
            perms: vec![],
            super_admin: false,
            exp: chrono::Utc::now().timestamp() + exp_offset,
        };
        let old = JwtKeys::from_secret(b"old-secret-0123456789").expect("keys");
        let older = JwtKeys::from_secret(b"older-secret-0123456789").expect("keys");
        let rotated = JwtKeys::from_secret(b"new-secret-0123456789")
            .expect("keys")
            .with_previous(&["old-secret-0123456789", "older-secret-0123456789"])
            .expect("previous");
        let fresh = JwtKeys::from_secret(b"new-secret-0123456789").expect("keys");

        // Signed with a previous secret: accepted, in any position.
        for keys in [&old, &older] {
            let token = keys.mint(&claims(60)).expect("mint");
            assert_eq!(rotated.verify(&token).expect("verify").sub, "alice");
        }
        // New tokens are signed with the current secret only.
        let token = rotated.mint(&claims(60)).expect("mint");
        assert!(fresh.verify(&token).is_ok());
        assert!(old.verify(&token).is_err());
        // Expired under a previous secret: reported as expired.
        let token = old.mint(&claims(-3600)).expect("mint");
        let e = rotated.verify(&token).expect_err("expired");
        assert!(matches!(e.kind(), J::ExpiredSignature), "{e:?}");
        // Signed with none of them: a bad signature.
        let stranger = JwtKeys::from_secret(b"stranger-0123456789").expect("keys");
        let token = stranger.mint(&claims(60)).expect("mint");
        let e = rotated.verify(&token).expect_err("stranger");
        assert!(matches!(e.kind(), J::InvalidSignature), "{e:?}");
        // Without previous secrets, a rotated-away token is refused.
        let token = old.mint(&claims(60)).expect("mint");
        assert!(fresh.verify(&token).is_err());
    }
}

//! API keys of service accounts (SPEC §9): stored hashed, scoped to
//! permission codes, revocable. [`ApiKeyRepo`] creates them, checks a
//! presented key, lists and revokes them.
//!
//! A key reads `qk_<prefix>_<secret>`. The prefix (8 random alphanumerics)
//! is stored in clear under a unique index and finds the row; the secret
//! (32 random bytes, base64url) is stored only as its SHA-256 hash. A
//! 256-bit random secret needs no salt or slow hash: there is nothing to
//! guess from a dictionary, and a lookup must stay cheap because it happens
//! on every request.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ActiveValue::NotSet, ActiveValue::Set, ColumnTrait, Condition, EntityTrait,
    QueryFilter, QueryOrder,
};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::entity::api_key::{self, Column};
use crate::error::is_unique_violation;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// What every key starts with, so that a bearer token is told from a JWT
/// at a glance (and secret scanners can recognise a leaked key).
pub const API_KEY_MARK: &str = "qk_";
/// Length of the lookup prefix.
const PREFIX_CHARS: usize = 8;
/// Random bytes of the secret (256 bits).
const SECRET_BYTES: usize = 32;
/// Longest secret worth hashing; ours are 43 characters.
const MAX_SECRET_CHARS: usize = 256;
/// `last_used_at` is written at most this often per key, so that a busy
/// service account does not cost a write per request.
const LAST_USED_EVERY_MS: i64 = 60_000;
/// Width of the `created_by` column (see the migration).
const CREATED_BY_CHARS: usize = 128;
/// A new prefix is drawn again when one is taken; with 62^8 prefixes a
/// second clash in a row means something else is wrong.
const CREATE_ATTEMPTS: usize = 3;

/// A stored key. The secret's hash never leaves this crate.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    pub id: i64,
    pub name: String,
    /// The lookup part of the key, shown so a person can tell keys apart.
    pub prefix: String,
    /// Permission codes, as given at creation.
    pub perms: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Last successful authentication, to the minute.
    pub last_used_at: Option<DateTime<Utc>>,
}

impl ApiKeyRecord {
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }
}

impl TryFrom<api_key::Model> for ApiKeyRecord {
    type Error = StorageError;

    fn try_from(m: api_key::Model) -> Result<Self, Self::Error> {
        let perms = serde_json::from_str(&m.perms).map_err(|e| {
            StorageError::Corrupt(format!(
                "api key {}: perms are not a JSON list of strings: {e}",
                m.id
            ))
        })?;
        Ok(ApiKeyRecord {
            id: m.id,
            name: m.name,
            prefix: m.prefix,
            perms,
            created_at: from_millis(m.created_at)?,
            created_by: m.created_by,
            revoked_at: m.revoked_at.map(from_millis).transpose()?,
            last_used_at: m.last_used_at.map(from_millis).transpose()?,
        })
    }
}

impl Store {
    pub fn api_keys(&self) -> ApiKeyRepo<'_> {
        ApiKeyRepo { store: self }
    }
}

/// The `api_keys` table; obtained from [`Store::api_keys`].
pub struct ApiKeyRepo<'a> {
    store: &'a Store,
}

impl ApiKeyRepo<'_> {
    /// Creates a key and returns it with its plaintext, which is not
    /// stored and cannot be shown again. Name and perms are validated by
    /// the caller.
    pub async fn create(
        &self,
        name: &str,
        perms: &[String],
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<(ApiKeyRecord, String), StorageError> {
        let perms_json = serde_json::to_string(perms)
            .map_err(|e| StorageError::Corrupt(format!("perms cannot be serialised: {e}")))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (prefix, secret) = fresh_key_parts();
            let row = api_key::ActiveModel {
                id: NotSet,
                name: Set(name.to_owned()),
                prefix: Set(prefix.clone()),
                secret_hash: Set(hash_secret(&secret)),
                perms: Set(perms_json.clone()),
                created_at: Set(to_millis(now)),
                created_by: Set(cut(actor, CREATED_BY_CHARS)),
                revoked_at: Set(None),
                last_used_at: Set(None),
            };
            match row.insert(self.store.connection()).await {
                Ok(m) => {
                    let key = format!("{API_KEY_MARK}{prefix}_{secret}");
                    return Ok((ApiKeyRecord::try_from(m)?, key));
                }
                // The prefix is the only unique key: draw another.
                Err(e) if is_unique_violation(&e) && attempt < CREATE_ATTEMPTS => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Every key, revoked ones included, newest first.
    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, StorageError> {
        api_key::Entity::find()
            .order_by_desc(Column::Id)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(ApiKeyRecord::try_from)
            .collect()
    }

    pub async fn get(&self, id: i64) -> Result<Option<ApiKeyRecord>, StorageError> {
        api_key::Entity::find_by_id(id)
            .one(self.store.connection())
            .await?
            .map(ApiKeyRecord::try_from)
            .transpose()
    }

    /// Revokes a key from `now` on. Returns the key and whether this call
    /// revoked it: a key already revoked keeps its first `revoked_at`.
    /// `NotFound` when there is no such key.
    pub async fn revoke(
        &self,
        id: i64,
        now: DateTime<Utc>,
    ) -> Result<(ApiKeyRecord, bool), StorageError> {
        let db = self.store.connection();
        let changed = api_key::Entity::update_many()
            .col_expr(Column::RevokedAt, Expr::val(to_millis(now)))
            .filter(Column::Id.eq(id))
            .filter(Column::RevokedAt.is_null())
            .exec(db)
            .await?
            .rows_affected;
        let key = self.get(id).await?.ok_or(StorageError::NotFound)?;
        Ok((key, changed > 0))
    }

    /// The key a caller presented, if it is well formed, exists, is not
    /// revoked and its secret matches; `None` otherwise (the caller cannot
    /// tell which, and needs not). Records the use, at most once a minute.
    pub async fn authenticate(
        &self,
        presented: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<ApiKeyRecord>, StorageError> {
        let Some((prefix, secret)) = parse_key(presented) else {
            return Ok(None);
        };
        let db = self.store.connection();
        let Some(row) = api_key::Entity::find()
            .filter(Column::Prefix.eq(prefix))
            .one(db)
            .await?
        else {
            return Ok(None);
        };
        let presented_hash = hash_secret(secret);
        let matches: bool = presented_hash
            .as_bytes()
            .ct_eq(row.secret_hash.as_bytes())
            .into();
        if !matches || row.revoked_at.is_some() {
            return Ok(None);
        }
        let mut key = ApiKeyRecord::try_from(row)?;
        let now_ms = to_millis(now);
        let due = key
            .last_used_at
            .is_none_or(|t| to_millis(t) <= now_ms - LAST_USED_EVERY_MS);
        if due {
            // Conditional, so that concurrent requests of one key in the same
            // minute write once between them.
            let written = api_key::Entity::update_many()
                .col_expr(Column::LastUsedAt, Expr::val(now_ms))
                .filter(Column::Id.eq(key.id))
                .filter(
                    Condition::any()
                        .add(Column::LastUsedAt.is_null())
                        .add(Column::LastUsedAt.lte(now_ms - LAST_USED_EVERY_MS)),
                )
                .exec(db)
                .await?
                .rows_affected;
            if written > 0 {
                key.last_used_at = Some(from_millis(now_ms)?);
            }
        }
        Ok(Some(key))
    }
}

/// A new random prefix and secret.
fn fresh_key_parts() -> (String, String) {
    use base64::Engine as _;
    use rand::{Rng, RngCore};
    // ThreadRng is a CSPRNG seeded from the operating system.
    let mut rng = rand::rng();
    let prefix: String = (&mut rng)
        .sample_iter(rand::distr::Alphanumeric)
        .take(PREFIX_CHARS)
        .map(char::from)
        .collect();
    let mut bytes = [0u8; SECRET_BYTES];
    rng.fill_bytes(&mut bytes);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    (prefix, secret)
}

/// `qk_<prefix>_<secret>` split into prefix and secret. The prefix has a
/// fixed length, so a `_` inside the (base64url) secret is no problem.
fn parse_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(API_KEY_MARK)?;
    let prefix = rest.get(..PREFIX_CHARS)?;
    let secret = rest.get(PREFIX_CHARS..)?.strip_prefix('_')?;
    let well_formed = prefix.bytes().all(|b| b.is_ascii_alphanumeric())
        && !secret.is_empty()
        && secret.len() <= MAX_SECRET_CHARS;
    well_formed.then_some((prefix, secret))
}

/// Lower-case hex SHA-256 of the secret.
fn hash_secret(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first `max` characters of `s`.
fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_keys_parse_back() {
        for _ in 0..200 {
            let (prefix, secret) = fresh_key_parts();
            assert_eq!(prefix.len(), PREFIX_CHARS);
            assert_eq!(secret.len(), 43, "32 bytes in unpadded base64url");
            let key = format!("{API_KEY_MARK}{prefix}_{secret}");
            assert_eq!(parse_key(&key), Some((prefix.as_str(), secret.as_str())));
        }
    }

    #[test]
    fn malformed_keys_are_refused() {
        for key in [
            "",
            "qk_",
            "qk_abcdefgh",
            "qk_abcdefgh_",
            "qk_abcdefghXsecret",
            "qk_abc_defg_secret",
            "qk_abcdéfg_secret",
            "xx_abcdefgh_secret",
            "eyJhbGciOiJIUzI1NiJ9.e30.sig",
        ] {
            assert_eq!(parse_key(key), None, "{key}");
        }
        let long = format!("qk_abcdefgh_{}", "s".repeat(MAX_SECRET_CHARS + 1));
        assert_eq!(parse_key(&long), None);
        // A multi-byte character across the prefix boundary is no panic.
        assert_eq!(parse_key("qk_abcdefg長_secret"), None);
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

//! The coordination crate's single error type.

/// Everything a Redis operation can fail with. Every one means the same to
/// a caller: Redis could not be used this time (the database stays the
/// ledger, so the caller skips, fails the run or retries later).
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error("redis error")]
    Redis(#[from] redis::RedisError),
    #[error("redis pool error: {0}")]
    Pool(String),
    #[error("redis did not answer: {0}")]
    Timeout(&'static str),
    #[error("cannot encode a change")]
    Encode(#[source] serde_json::Error),
}

impl CoordError {
    /// The connection the command went on cannot be used again (closed,
    /// reset, or the client says to reconnect); a timeout or an error
    /// answer from Redis leaves it usable.
    pub(crate) fn is_broken_connection(&self) -> bool {
        match self {
            CoordError::Redis(e) => e.is_unrecoverable_error() || e.is_connection_dropped(),
            CoordError::Pool(_) | CoordError::Timeout(_) | CoordError::Encode(_) => false,
        }
    }
}

//! The storage crate's single error type.

use sea_orm::{DbErr, SqlErr};

/// Everything a repository can fail with. Conflicts the caller must turn into
/// 404/409 answers have their own variants; the rest is a database fault.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("database error")]
    Db(#[from] DbErr),
    #[error("not found")]
    NotFound,
    #[error("stale version: current is {current}")]
    StaleVersion { current: i64 },
    #[error("name already taken")]
    NameTaken,
    #[error("already exists")]
    AlreadyExists,
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("cannot open database: {0}")]
    Open(String),
    #[error("redis error")]
    Redis(#[from] redis::RedisError),
    #[error("redis pool error: {0}")]
    RedisPool(String),
    /// A paging cursor that none of our lists handed out (the API answers 400).
    #[error("invalid cursor")]
    InvalidCursor,
}

/// True when the database rejected a write because of a unique key or primary
/// key (SQLite 1555/2067, PostgreSQL 23505, MySQL 1062 and friends).
pub(crate) fn is_unique_violation(err: &DbErr) -> bool {
    matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

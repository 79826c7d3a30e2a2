//! The storage crate's single error type.

use sea_orm::{DbErr, SqlErr};

/// Everything a repository can fail with. Conflicts the caller must turn into
/// 404/409 answers have their own variants; the rest is a database fault.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("database error")]
    Db(#[source] DbErr),
    #[error("not found")]
    NotFound,
    #[error("stale version: current is {current}")]
    StaleVersion { current: i64 },
    #[error("name already taken")]
    NameTaken,
    #[error("already exists")]
    AlreadyExists,
    /// A row others refer to: the ids of those that do (the jobs naming
    /// a calendar).
    #[error("in use by {0:?}")]
    InUse(Vec<i64>),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("cannot open database: {0}")]
    Open(String),
    /// A paging cursor that none of our lists handed out (the API answers 400).
    #[error("invalid cursor")]
    InvalidCursor,
}

impl From<DbErr> for StorageError {
    fn from(e: DbErr) -> StorageError {
        // Counted here, the one door every database error passes.
        if matches!(
            e,
            DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout)
        ) {
            crate::stats::db_acquire_timeout();
        }
        StorageError::Db(e)
    }
}

/// True when the database rejected a write because of a unique key or primary
/// key (SQLite 1555/2067, PostgreSQL 23505, MySQL 1062 and friends).
pub(crate) fn is_unique_violation(err: &DbErr) -> bool {
    matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

impl StorageError {
    /// True when the database could not be reached or did not answer
    /// (down, restarting, a broken connection, an exhausted pool): the
    /// same request may well succeed later. False when the database
    /// answered and refused the request itself.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StorageError::Db(e) => db_unavailable(e),
            StorageError::Open(_) => true,
            _ => false,
        }
    }

    /// True when the database aborted the transaction to break a deadlock
    /// (or a serialization failure): running it again is the remedy.
    pub fn is_deadlock(&self) -> bool {
        let StorageError::Db(e) = self else {
            return false;
        };
        let text = e.to_string();
        // PostgreSQL 40P01/40001, MySQL 1213/1205, SQLite busy.
        [
            "40P01",
            "40001",
            "1213",
            "Deadlock",
            "deadlock",
            "database is locked",
        ]
        .iter()
        .any(|needle| text.contains(needle))
    }
}

fn db_unavailable(e: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    use sea_orm::sqlx::Error as Sqlx;
    let runtime = match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => return true,
        DbErr::Exec(r) | DbErr::Query(r) => r,
        _ => return false,
    };
    match runtime {
        RuntimeErr::SqlxError(err) => match err.as_ref() {
            Sqlx::Io(_)
            | Sqlx::PoolTimedOut
            | Sqlx::PoolClosed
            | Sqlx::WorkerCrashed
            | Sqlx::Tls(_)
            | Sqlx::Protocol(_) => true,
            // SQLite: another connection holds the file (busy/locked).
            Sqlx::Database(db) => {
                let code = db.code().map(|c| c.to_string()).unwrap_or_default();
                // SQLITE_BUSY (5), SQLITE_LOCKED (6); PostgreSQL admin
                // shutdown (57P01), cannot connect now (57P03), crash (57P02).
                matches!(
                    code.as_str(),
                    "5" | "6" | "517" | "57P01" | "57P02" | "57P03"
                ) || db.message().contains("database is locked")
            }
            _ => false,
        },
        RuntimeErr::Internal(text) => text.contains("connection") || text.contains("Connection"),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

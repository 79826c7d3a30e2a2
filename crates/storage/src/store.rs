//! [`Store`]: the connection pool, migrations, and the entry point to the
//! repositories.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_migrations::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectOptions, Database, DatabaseConnection,
    DatabaseTransaction, DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

use crate::entity::seed_marker;
use crate::error::is_unique_violation;
use crate::timestamp::to_millis;
use crate::{GroupRepo, JobRepo, StorageError};

/// How long an SQLite connection waits for another writer before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// WAL lets readers run beside the single writer; a few connections suffice.
const SQLITE_FILE_POOL: u32 = 8;

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

impl Backend {
    /// The backend a connection URL names, by its scheme.
    fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split_once(':')?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            "mysql" => Some(Backend::MySql),
            _ => None,
        }
    }
}

/// A cheap-to-clone handle on the connection pool.
#[derive(Clone)]
pub struct Store {
    db: DatabaseConnection,
    backend: Backend,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens a connection pool. For sqlite URLs (`sqlite://path` or
    /// `sqlite:path`), creates the parent directory and the file if missing
    /// (mode=rwc), enables WAL and a busy timeout (5 s) so concurrent writers
    /// wait instead of failing.
    pub async fn connect(url: &str) -> Result<Store, StorageError> {
        let backend = Backend::from_url(url).ok_or_else(|| {
            StorageError::Open(
                "unsupported database URL: expected sqlite:, postgres:// or mysql://".to_owned(),
            )
        })?;
        let mut opts = ConnectOptions::new(url);
        // Statement logging through `log` at INFO would flood the service log.
        opts.sqlx_logging(false);
        bound_waits(&mut opts);
        if backend == Backend::Sqlite {
            prepare_sqlite(url, &mut opts).await?;
        }
        match Database::connect(opts).await {
            Ok(db) => Ok(Store { db, backend }),
            Err(e) => {
                let mut msg = e.to_string();
                if let Some(cause) = probe(backend, url).await
                    && !msg.contains(&cause)
                {
                    msg = format!("{msg} ({cause})");
                }
                Err(StorageError::Open(msg))
            }
        }
    }

    /// Opens a pool that connects on first use: a process that must wait
    /// for its database (a worker started before it) starts anyway.
    pub async fn open_lazy(url: &str) -> Result<Store, StorageError> {
        let backend = Backend::from_url(url).ok_or_else(|| {
            StorageError::Open(
                "unsupported database URL: expected sqlite:, postgres:// or mysql://".to_owned(),
            )
        })?;
        let mut opts = ConnectOptions::new(url);
        opts.sqlx_logging(false).connect_lazy(true);
        bound_waits(&mut opts);
        let db = Database::connect(opts).await?;
        Ok(Store { db, backend })
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StorageError> {
        Migrator::up(&self.db, None).await?;
        Ok(())
    }

    /// How many of this build's migrations the database has not applied.
    /// Reads the migrations table without creating it (a worker never
    /// touches the schema); a database that answers but has no such table
    /// has applied none.
    pub async fn pending_migrations(&self) -> Result<usize, StorageError> {
        use sea_orm::{ConnectionTrait, Statement};
        let known: Vec<String> = Migrator::migrations()
            .iter()
            .map(|m| m.name().to_string())
            .collect();
        let sql = Statement::from_string(
            self.db.get_database_backend(),
            "SELECT version FROM seaql_migrations",
        );
        match self.db.query_all_raw(sql).await {
            Ok(rows) => {
                let mut applied = std::collections::HashSet::new();
                for row in rows {
                    applied.insert(row.try_get::<String>("", "version")?);
                }
                Ok(known.iter().filter(|k| !applied.contains(*k)).count())
            }
            Err(e) => {
                self.ping().await?;
                tracing::debug!(error = %e, "no migrations table yet");
                Ok(known.len())
            }
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Calls `callback` with the SQL of every statement this handle (and
    /// its later clones) sends; used by the benchmark and metrics. Set it
    /// before cloning the store.
    pub fn on_statement(
        &mut self,
        callback: impl Fn(&str, std::time::Duration) + Send + Sync + 'static,
    ) {
        self.db
            .set_metric_callback(move |info| callback(&info.statement.sql, info.elapsed));
    }

    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Checks that the database answers (used by `/readyz`).
    pub async fn ping(&self) -> Result<(), StorageError> {
        self.db.ping().await?;
        Ok(())
    }

    pub fn jobs(&self) -> JobRepo<'_> {
        JobRepo::new(self)
    }

    pub fn groups(&self) -> GroupRepo<'_> {
        GroupRepo::new(self)
    }

    /// Marks a one-time seed; returns true if this call applied it (insert
    /// into seed_markers; unique violation → false). Used so built-in data is
    /// seeded once, ever.
    pub async fn mark_seed_once(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StorageError> {
        let marker = seed_marker::ActiveModel {
            key: Set(key.to_owned()),
            applied_at: Set(to_millis(now)),
        };
        match marker.insert(&self.db).await {
            Ok(_) => Ok(true),
            Err(e) if is_unique_violation(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Starts a transaction that will write. On SQLite it takes the write lock
    /// at `BEGIN` (IMMEDIATE): a deferred transaction that reads first and
    /// writes later fails with SQLITE_BUSY at once when another connection
    /// wrote in between, instead of waiting out the busy timeout.
    pub(crate) async fn begin_write(&self) -> Result<DatabaseTransaction, DbErr> {
        self.db
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..TransactionOptions::default()
            })
            .await
    }

    /// Starts a claim transaction: a writer on SQLite (as `begin_write`),
    /// READ COMMITTED on MySQL, whose default (REPEATABLE READ) would take
    /// gap locks on the ledger's keys and make concurrent claimers of
    /// different fires deadlock.
    pub(crate) async fn begin_claim(&self) -> Result<DatabaseTransaction, DbErr> {
        let isolation_level =
            (self.backend == Backend::MySql).then_some(sea_orm::IsolationLevel::ReadCommitted);
        self.db
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                isolation_level,
                ..TransactionOptions::default()
            })
            .await
    }
}

/// How long a query waits for a connection (and a connection for the
/// server): a database that is down fails requests within seconds, so
/// readiness, the engine and the API report it instead of hanging.
const POOL_WAIT: Duration = Duration::from_secs(5);

fn bound_waits(opts: &mut ConnectOptions) {
    opts.acquire_timeout(POOL_WAIT).connect_timeout(POOL_WAIT);
}

/// Why a server cannot be reached. The pool retries refused connections
/// until its timeout and then reports only "pool timed out"; one direct
/// attempt recovers the cause (refused, unknown host, bad password, ...).
async fn probe(backend: Backend, url: &str) -> Option<String> {
    use sea_orm::sqlx::{Connection, MySqlConnection, PgConnection};
    const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
    let outcome = match backend {
        Backend::Postgres => {
            tokio::time::timeout(PROBE_TIMEOUT, async {
                PgConnection::connect(url).await?.close().await
            })
            .await
        }
        Backend::MySql => {
            tokio::time::timeout(PROBE_TIMEOUT, async {
                MySqlConnection::connect(url).await?.close().await
            })
            .await
        }
        Backend::Sqlite => return None,
    };
    match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {} s", PROBE_TIMEOUT.as_secs())),
    }
}

/// SQLite specifics: directory, file creation, WAL, busy timeout, pool size.
async fn prepare_sqlite(url: &str, opts: &mut ConnectOptions) -> Result<(), StorageError> {
    let parsed = SqliteConnectOptions::from_str(url)
        .map_err(|e| StorageError::Open(format!("invalid SQLite URL: {e}")))?;
    let in_memory = is_in_memory(url, parsed.get_filename());
    if !in_memory {
        if let Some(dir) = parsed.get_filename().parent()
            && !dir.as_os_str().is_empty()
        {
            tokio::fs::create_dir_all(dir).await.map_err(|e| {
                StorageError::Open(format!("cannot create directory {}: {e}", dir.display()))
            })?;
        }
        opts.max_connections(SQLITE_FILE_POOL);
    }
    // An in-memory database lives in one shared-cache connection; more
    // connections would meet table locks that the busy timeout does not cover.
    opts.map_sqlx_sqlite_opts(move |o| {
        let o = o.busy_timeout(SQLITE_BUSY_TIMEOUT);
        if in_memory {
            o
        } else {
            o.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
        }
    });
    Ok(())
}

fn is_in_memory(url: &str, filename: &Path) -> bool {
    url.contains(":memory:")
        || url.contains("mode=memory")
        || filename.as_os_str().is_empty()
        || filename
            .to_string_lossy()
            .starts_with("file:sqlx-in-memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_from_scheme() {
        assert_eq!(Backend::from_url("sqlite:data/x.db"), Some(Backend::Sqlite));
        assert_eq!(
            Backend::from_url("sqlite://data/x.db?mode=rwc"),
            Some(Backend::Sqlite)
        );
        assert_eq!(
            Backend::from_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::from_url("mysql://root@h/db"), Some(Backend::MySql));
        assert_eq!(Backend::from_url("redis://h"), None);
        assert_eq!(Backend::from_url("nonsense"), None);
    }

    #[tokio::test]
    async fn unsupported_scheme_is_an_open_error() {
        let err = Store::connect("oracle://x").await.unwrap_err();
        assert!(matches!(err, StorageError::Open(_)), "{err:?}");
    }
}

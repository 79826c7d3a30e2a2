//! What `/metrics` reads from the database at a scrape: each enabled job's
//! last success and last run status, the run-once backlog, the webhook
//! outbox backlog, runs left `running` past their timeout, and the pool.
//! Every query here is an index seek or a small range, so a scrape stays
//! cheap at millions of runs.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Value};

use crate::store::Backend;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// One enabled job as the per-job metrics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobHealth {
    pub id: i64,
    pub name: String,
    pub cron: String,
    /// When the job's current schedule (cron, zone, enabled) began.
    pub schedule_from: DateTime<Utc>,
    /// The end of its latest successful run, if any.
    pub last_success: Option<DateTime<Utc>>,
    /// The status of its latest run row (`running`, `success`, …), if any.
    pub last_status: Option<String>,
}

/// The connection pool right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections open.
    pub size: u32,
    /// Open connections not lent out.
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
}

/// The monitoring reads.
pub struct MonitorRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn monitor(&self) -> MonitorRepo<'_> {
        MonitorRepo { store: self }
    }

    /// The pool's size and use.
    pub fn pool_stats(&self) -> PoolStats {
        let db = self.connection();
        let (size, idle, max) = match self.backend() {
            Backend::Postgres => {
                let p = db.get_postgres_connection_pool();
                (p.size(), p.num_idle(), p.options().get_max_connections())
            }
            Backend::MySql => {
                let p = db.get_mysql_connection_pool();
                (p.size(), p.num_idle(), p.options().get_max_connections())
            }
            Backend::Sqlite => {
                let p = db.get_sqlite_connection_pool();
                (p.size(), p.num_idle(), p.options().get_max_connections())
            }
        };
        PoolStats {
            size,
            idle: u32::try_from(idle).unwrap_or(u32::MAX),
            max,
        }
    }
}

fn statement(store: &Store, sql: &str, values: Vec<Value>) -> sea_orm::Statement {
    let backend = store.connection().get_database_backend();
    let sql = match store.backend() {
        // `?` placeholders become `$1, $2…` on PostgreSQL.
        Backend::Postgres => {
            let mut out = String::with_capacity(sql.len() + 8);
            let mut n = 0;
            for c in sql.chars() {
                if c == '?' {
                    n += 1;
                    out.push_str(&format!("${n}"));
                } else {
                    out.push(c);
                }
            }
            out
        }
        _ => sql.to_string(),
    };
    sea_orm::Statement::from_sql_and_values(backend, sql, values)
}

impl MonitorRepo<'_> {
    /// Every enabled job with its last success and last run status: two
    /// index seeks per job (`idx_runs_job_status_started`,
    /// `idx_runs_job_started`). Soft-deleted runs count: they did happen.
    pub async fn job_health(&self) -> Result<Vec<JobHealth>, StorageError> {
        let sql = "SELECT j.id AS id, j.name AS name, j.cron AS cron, j.schedule_from AS schedule_from, \
             (SELECT r.finished_at FROM runs r WHERE r.job_id = j.id AND r.status = 'success' \
              ORDER BY r.started_at DESC LIMIT 1) AS last_success, \
             (SELECT r.status FROM runs r WHERE r.job_id = j.id \
              ORDER BY r.started_at DESC, r.id DESC LIMIT 1) AS last_status \
             FROM jobs j WHERE j.enabled = ? ORDER BY j.id";
        let rows = self
            .store
            .connection()
            .query_all_raw(statement(self.store, sql, vec![Value::from(true)]))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(JobHealth {
                id: row.try_get("", "id")?,
                name: row.try_get("", "name")?,
                cron: row.try_get("", "cron")?,
                schedule_from: from_millis(row.try_get("", "schedule_from")?)?,
                last_success: row
                    .try_get::<Option<i64>>("", "last_success")?
                    .map(from_millis)
                    .transpose()?,
                last_status: row.try_get("", "last_status")?,
            });
        }
        Ok(out)
    }

    /// Run-once requests still waiting for a worker.
    pub async fn pending_run_once(&self) -> Result<i64, StorageError> {
        let sql = "SELECT COUNT(*) AS n FROM fires WHERE state = 'pending'";
        self.count(sql, vec![]).await
    }

    /// Webhook deliveries not yet done (`pending` or `sending`) and the
    /// creation time of the oldest.
    pub async fn outbox_backlog(&self) -> Result<(i64, Option<DateTime<Utc>>), StorageError> {
        let sql = "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox \
                   WHERE status IN ('pending', 'sending')";
        let row = self
            .store
            .connection()
            .query_one_raw(statement(self.store, sql, vec![]))
            .await?;
        let Some(row) = row else {
            return Ok((0, None));
        };
        let n: i64 = row.try_get("", "n")?;
        let oldest = row
            .try_get::<Option<i64>>("", "oldest")?
            .map(from_millis)
            .transpose()?;
        Ok((n, oldest))
    }

    /// Runs still `running` more than `grace` past their job's timeout (a
    /// job without a timeout never counts): stuck runs.
    pub async fn overdue_runs(
        &self,
        now: DateTime<Utc>,
        grace: chrono::Duration,
    ) -> Result<i64, StorageError> {
        let sql = "SELECT COUNT(*) AS n FROM runs r JOIN jobs j ON j.id = r.job_id \
                   WHERE r.status = 'running' AND j.timeout_ms > 0 \
                   AND r.started_at + j.timeout_ms < ?";
        let limit = to_millis(now - grace);
        self.count(sql, vec![Value::from(limit)]).await
    }

    async fn count(&self, sql: &str, values: Vec<Value>) -> Result<i64, StorageError> {
        let row = self
            .store
            .connection()
            .query_one_raw(statement(self.store, sql, values))
            .await?;
        match row {
            Some(row) => Ok(row.try_get("", "n")?),
            None => Ok(0),
        }
    }
}

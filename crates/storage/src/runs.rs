//! The run log as the API reads it: [`RunRecord`], filters, cursor paging
//! and soft deletion through [`RunRepo`]. Rows with `deleted_at` set are
//! invisible to every method here; `audit.purge` removes them for good later.
//! (The execution engine writes runs; it does not go through this module.)

use chrono::{DateTime, Utc};
use qiwu_domain::{RunStatus, Trigger};
use sea_orm::sea_query::{Expr, Func};
use sea_orm::{
    ColumnTrait, Condition, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect,
};

use crate::entity::run::{self, Column};
use crate::entity::run_job_name;
use crate::grams::{GramTable, Narrowed};
use crate::keyset::{self, Key};
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// Ids per `IN (...)` list, well under every backend's bind-parameter limit.
const IN_CHUNK: usize = 500;

/// The most job ids a `jobName` filter hands the database (as `job_id IN
/// (...)`, within every backend's bind-parameter limit); a filter naming
/// more walks the run log in time order.
const NAMED_JOBS_MAX: usize = 5_000;

/// The most named jobs whose runs MySQL seeks job by job (see
/// [`RunRepo::seek_each`]); more go as one `job_id IN (...)`.
const PER_JOB_SEEKS_MAX: usize = 128;

/// What a `jobName` filter names.
enum Named {
    /// At most [`NAMED_JOBS_MAX`] jobs (possibly none).
    Jobs(Vec<i64>),
    /// No name filter, or a name shared by many jobs.
    Many,
}

/// Characters of `error` an export row carries; the detail has the rest.
pub const EXPORT_ERROR_CHARS: u32 = 1000;

/// One stored run, every column.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: i64,
    pub fire_id: i64,
    pub job_id: i64,
    /// As the job was named when it ran; kept after the job is deleted.
    pub job_name: String,
    pub handler: String,
    pub trigger: Trigger,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: i32,
    pub status: RunStatus,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    pub instance: String,
    pub output: String,
    pub error: String,
    /// Always `None` for what this module returns.
    pub deleted_at: Option<DateTime<Utc>>,
    /// The attempt's trace, when it was traced and sampled.
    pub trace_id: Option<String>,
    /// Who asked to cancel the run, once someone did.
    pub cancelled_by: Option<String>,
}

impl TryFrom<run::Model> for RunRecord {
    type Error = StorageError;

    fn try_from(m: run::Model) -> Result<Self, Self::Error> {
        let trigger =
            Trigger::parse(&m.trigger).ok_or_else(|| corrupt(m.id, "trigger", &m.trigger))?;
        let status =
            RunStatus::parse(&m.status).ok_or_else(|| corrupt(m.id, "status", &m.status))?;
        Ok(RunRecord {
            id: m.id,
            fire_id: m.fire_id,
            job_id: m.job_id,
            job_name: m.job_name,
            handler: m.handler,
            trigger,
            scheduled_at: from_millis(m.scheduled_at)?,
            attempt: m.attempt,
            status,
            started_at: from_millis(m.started_at)?,
            finished_at: m.finished_at.map(from_millis).transpose()?,
            duration_ms: m.duration_ms,
            instance: m.instance,
            output: m.output,
            error: m.error,
            deleted_at: m.deleted_at.map(from_millis).transpose()?,
            trace_id: m.trace_id,
            cancelled_by: m.cancelled_by,
        })
    }
}

/// A stored value no release writes: logged once here, with the row's id,
/// and answered as `Corrupt` (never replaced by a default).
fn corrupt(id: i64, column: &str, value: &str) -> StorageError {
    tracing::error!(run = id, column, value, "stored run value does not parse");
    StorageError::Corrupt(format!("run {id}: {column} {value:?} does not parse"))
}

/// What became of a request to cancel a run.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelRequest {
    /// The run is running and now marked to be cancelled; `first` is false
    /// when someone had asked already (their request is kept).
    Requested {
        run: RunRecord,
        first: bool,
    },
    /// The run has ended already: nothing to cancel.
    Finished(RunRecord),
    NotFound,
}

/// A run as a spreadsheet row: every column but `output` (up to 16 000
/// characters each, too much to hold for 100 000 rows), with `error` cut to
/// [`EXPORT_ERROR_CHARS`].
#[derive(Debug, Clone, PartialEq)]
pub struct RunExportRow {
    pub id: i64,
    pub fire_id: i64,
    pub job_id: i64,
    pub job_name: String,
    pub handler: String,
    pub trigger: String,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: i32,
    pub status: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    pub instance: String,
    pub error: String,
}

/// The columns [`RunRepo::export`] reads.
#[derive(Debug, FromQueryResult)]
struct ExportModel {
    id: i64,
    fire_id: i64,
    job_id: i64,
    job_name: String,
    handler: String,
    trigger: String,
    scheduled_at: i64,
    attempt: i32,
    status: String,
    started_at: i64,
    finished_at: Option<i64>,
    duration_ms: Option<i64>,
    instance: String,
    error: String,
}

impl TryFrom<ExportModel> for RunExportRow {
    type Error = StorageError;

    fn try_from(m: ExportModel) -> Result<Self, Self::Error> {
        Ok(RunExportRow {
            id: m.id,
            fire_id: m.fire_id,
            job_id: m.job_id,
            job_name: m.job_name,
            handler: m.handler,
            trigger: m.trigger,
            scheduled_at: from_millis(m.scheduled_at)?,
            attempt: m.attempt,
            status: m.status,
            started_at: from_millis(m.started_at)?,
            finished_at: m.finished_at.map(from_millis).transpose()?,
            duration_ms: m.duration_ms,
            instance: m.instance,
            error: m.error,
        })
    }
}

/// Filters of the run list and export; `None` means "any".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub job_id: Option<i64>,
    /// Case-insensitive substring of the job name; `%` and `_` match literally.
    pub job_name: Option<String>,
    /// The exact, full handler name.
    pub handler: Option<String>,
    pub status: Option<String>,
    /// `schedule`, `manual`, `misfire` or `backfill`.
    pub trigger: Option<String>,
    /// Inclusive lower bound of `started_at`.
    pub started_from: Option<DateTime<Utc>>,
    /// Inclusive upper bound of `started_at`.
    pub started_to: Option<DateTime<Utc>>,
}

/// Where the next page of the run list starts: the key of the last run of
/// the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCursor {
    pub started_at_ms: i64,
    pub id: i64,
}

impl RunCursor {
    /// An opaque, URL-safe string.
    pub fn encode(&self) -> String {
        self.key().encode()
    }

    /// Reads [`RunCursor::encode`]'s output; anything else is
    /// [`StorageError::InvalidCursor`].
    pub fn decode(s: &str) -> Result<RunCursor, StorageError> {
        let key = Key::decode(s)?;
        Ok(RunCursor {
            started_at_ms: key.time_ms,
            id: key.id,
        })
    }

    fn key(&self) -> Key {
        Key {
            time_ms: self.started_at_ms,
            id: self.id,
        }
    }

    fn of(run: &RunRecord) -> RunCursor {
        RunCursor {
            started_at_ms: to_millis(run.started_at),
            id: run.id,
        }
    }
}

impl Store {
    pub fn runs(&self) -> RunRepo<'_> {
        RunRepo { store: self }
    }
}

/// Read and soft-delete access to the run log; obtained from [`Store::runs`].
pub struct RunRepo<'a> {
    store: &'a Store,
}

impl RunRepo<'_> {
    /// At most `limit` visible runs matching `filter`, newest first by
    /// (started_at, id), starting after `cursor`. The second value is the
    /// cursor of the next page, `None` on the last one.
    pub async fn list(
        &self,
        filter: &RunFilter,
        limit: u64,
        cursor: Option<RunCursor>,
    ) -> Result<(Vec<RunRecord>, Option<RunCursor>), StorageError> {
        if limit == 0 {
            return Ok((Vec::new(), None));
        }
        let mut cond = filter_condition(filter);
        let mut keys = key_condition(filter);
        if let Some(c) = cursor {
            let after = keyset::after(Column::StartedAt, Column::Id, c.key());
            cond = cond.add(after.clone());
            keys = keys.map(|k| k.add(after));
        }
        // One row more than asked tells whether another page exists.
        let fetch = limit.saturating_add(1);
        let rows = match self.named_jobs(filter).await? {
            Named::Jobs(ids) if ids.is_empty() => Vec::new(),
            // The ids let the database estimate how many runs match (it
            // cannot for a substring) and choose between the job index and
            // walking the log by time; the name condition stays, so only
            // runs whose own copy of the name matches are returned.
            // MySQL reads every run of the listed jobs to sort them; a few
            // jobs are cheaper as one newest-first seek each, merged.
            Named::Jobs(ids)
                if self.store.backend() == crate::Backend::MySql
                    && ids.len() <= PER_JOB_SEEKS_MAX =>
            {
                match keys {
                    Some(keys) => self.seek_keys_first(&cond, keys, &ids, fetch).await?,
                    None => self.seek_each(&cond, &ids, fetch).await?,
                }
            }
            Named::Jobs(ids) => self.seek(cond.add(Column::JobId.is_in(ids)), fetch).await?,
            Named::Many => self.seek(cond, fetch).await?,
        };
        let mut items = rows
            .into_iter()
            .map(RunRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let more = items.len() as u64 > limit;
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next = if more {
            items.last().map(RunCursor::of)
        } else {
            None
        };
        Ok((items, next))
    }

    /// The newest `fetch` runs meeting `cond`, walking the run log by
    /// (started_at, id).
    async fn seek(&self, cond: Condition, fetch: u64) -> Result<Vec<run::Model>, StorageError> {
        Ok(run::Entity::find()
            .filter(cond)
            .order_by_desc(Column::StartedAt)
            .order_by_desc(Column::Id)
            .limit(fetch)
            .all(self.store.connection())
            .await?)
    }

    /// [`RunRepo::seek_each`] in two cheap steps (MySQL): the newest `fetch`
    /// keys of the jobs' runs meeting `keys` (time range and cursor), each
    /// job's read from `idx_runs_job_started` alone (InnoDB keeps the id in
    /// it), then those rows by id with the whole condition. When every one
    /// of them meets it (no run among them hidden or carrying another name)
    /// they are the page; otherwise the rows are sought job by job.
    async fn seek_keys_first(
        &self,
        cond: &Condition,
        keys: Condition,
        ids: &[i64],
        fetch: u64,
    ) -> Result<Vec<run::Model>, StorageError> {
        use sea_orm::ConnectionTrait;
        let union = newest_of_each(ids, fetch, |id| {
            run::Entity::find()
                .select_only()
                .column(Column::Id)
                .column(Column::StartedAt)
                .filter(keys.clone().add(Column::JobId.eq(id)))
        });
        let found = self
            .store
            .connection()
            .query_all_raw(union)
            .await?
            .iter()
            .map(|row| row.try_get::<i64>("", "id"))
            .collect::<Result<Vec<_>, _>>()?;
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .seek(
                cond.clone().add(Column::Id.is_in(found.iter().copied())),
                fetch,
            )
            .await?;
        if rows.len() == found.len() {
            return Ok(rows);
        }
        self.seek_each(cond, ids, fetch).await
    }

    /// [`RunRepo::seek`] for each job in `ids` (one statement, MySQL): each
    /// job's newest `fetch` runs meeting `cond` through its own index range,
    /// then the newest `fetch` of those.
    async fn seek_each(
        &self,
        cond: &Condition,
        ids: &[i64],
        fetch: u64,
    ) -> Result<Vec<run::Model>, StorageError> {
        let union = newest_of_each(ids, fetch, |id| {
            run::Entity::find().filter(cond.clone().add(Column::JobId.eq(id)))
        });
        Ok(run::Entity::find()
            .from_raw_sql(union)
            .all(self.store.connection())
            .await?)
    }

    /// Which jobs a `jobName` filter can match: the ids of jobs whose runs
    /// carry a name containing it (from `run_job_names`, a row per job and
    /// name), when there are at most [`NAMED_JOBS_MAX`]. With more, or
    /// without a name filter, the run log is walked in time order: a name
    /// that many jobs share matches often enough that a page comes early.
    /// On MySQL the needle's trigrams (`run_name_grams`) first narrow the
    /// names to check to the jobs holding them, when they are few enough.
    async fn named_jobs(&self, filter: &RunFilter) -> Result<Named, StorageError> {
        let Some(name) = &filter.job_name else {
            return Ok(Named::Many);
        };
        // On MySQL, the jobs holding the needle's pieces: their names are
        // checked instead of every name.
        let narrowed = match crate::grams::narrow(self.store, GramTable::Runs, name).await? {
            Narrowed::Jobs(ids) if ids.is_empty() => return Ok(Named::Jobs(Vec::new())),
            Narrowed::Jobs(ids) => Some(ids),
            Narrowed::NotLookedUp | Narrowed::Common => None,
        };
        let mut query = run_job_name::Entity::find()
            .select_only()
            .column(run_job_name::Column::JobId)
            .distinct()
            .filter(keyset::lowered_contains_ci(
                run_job_name::Column::NameLower,
                name,
            ));
        if let Some(job_id) = filter.job_id {
            query = query.filter(run_job_name::Column::JobId.eq(job_id));
        }
        if let Some(candidates) = narrowed {
            query = query.filter(run_job_name::Column::JobId.is_in(candidates));
        }
        let ids: Vec<i64> = query
            .order_by_asc(run_job_name::Column::JobId)
            .limit(NAMED_JOBS_MAX as u64 + 1)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        Ok(if ids.len() > NAMED_JOBS_MAX {
            Named::Many
        } else {
            Named::Jobs(ids)
        })
    }

    /// A visible run.
    /// Asks to cancel a running run: the first request is kept (who and
    /// when); the instance running it sees it and stops the handler. A run
    /// that is not running is [`CancelRequest::Finished`].
    pub async fn request_cancel(
        &self,
        id: i64,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<CancelRequest, StorageError> {
        let db = self.store.connection();
        let asked = run::Entity::update_many()
            .col_expr(Column::CancelRequestedAt, Some(to_millis(now)).into())
            .col_expr(
                Column::CancelledBy,
                Some(crate::fires::storable(by).into_owned()).into(),
            )
            .filter(Column::Id.eq(id))
            .filter(Column::Status.eq("running"))
            .filter(Column::DeletedAt.is_null())
            .filter(Column::CancelRequestedAt.is_null())
            .exec(db)
            .await?
            .rows_affected
            == 1;
        let Some(run) = self.get(id).await? else {
            return Ok(CancelRequest::NotFound);
        };
        Ok(if run.status == RunStatus::Running {
            CancelRequest::Requested { run, first: asked }
        } else {
            CancelRequest::Finished(run)
        })
    }

    pub async fn get(&self, id: i64) -> Result<Option<RunRecord>, StorageError> {
        run::Entity::find_by_id(id)
            .filter(Column::DeletedAt.is_null())
            .one(self.store.connection())
            .await?
            .map(RunRecord::try_from)
            .transpose()
    }

    /// The `n` latest visible runs of a job, newest first.
    pub async fn recent_for_job(
        &self,
        job_id: i64,
        n: u64,
    ) -> Result<Vec<RunRecord>, StorageError> {
        let filter = RunFilter {
            job_id: Some(job_id),
            ..RunFilter::default()
        };
        Ok(self.list(&filter, n, None).await?.0)
    }

    /// Hides a run; false when it does not exist or is already hidden.
    pub async fn soft_delete(&self, id: i64, now: DateTime<Utc>) -> Result<bool, StorageError> {
        Ok(self.soft_delete_many(&[id], now).await? > 0)
    }

    /// Hides the listed runs in one transaction; returns how many were
    /// visible and are now hidden (duplicates and unknown ids count nothing).
    pub async fn soft_delete_many(
        &self,
        ids: &[i64],
        now: DateTime<Utc>,
    ) -> Result<u64, StorageError> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Ok(0);
        }
        let now = to_millis(now);
        let txn = self.store.begin_write().await?;
        let mut hidden = 0;
        for chunk in ids.chunks(IN_CHUNK) {
            hidden += run::Entity::update_many()
                .col_expr(Column::DeletedAt, Expr::val(now))
                .filter(Column::Id.is_in(chunk.iter().copied()))
                .filter(Column::DeletedAt.is_null())
                .exec(&txn)
                .await?
                .rows_affected;
        }
        txn.commit().await?;
        Ok(hidden)
    }

    /// Hides every visible run in one statement; returns how many.
    pub async fn clear(&self, now: DateTime<Utc>) -> Result<u64, StorageError> {
        Ok(run::Entity::update_many()
            .col_expr(Column::DeletedAt, Expr::val(to_millis(now)))
            .filter(Column::DeletedAt.is_null())
            .exec(self.store.connection())
            .await?
            .rows_affected)
    }

    /// At most `max_rows` visible runs matching `filter`, newest first, as
    /// export rows (see [`RunExportRow`]).
    pub async fn export(
        &self,
        filter: &RunFilter,
        max_rows: u64,
    ) -> Result<Vec<RunExportRow>, StorageError> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        // SUBSTR counts characters (not bytes) on all three backends. The
        // arguments are 32-bit: PostgreSQL has no substr(text, int, bigint).
        let error_excerpt = Func::cust("SUBSTR")
            .arg(Expr::col((run::Entity, Column::Error)))
            .arg(1i32)
            .arg(i32::try_from(EXPORT_ERROR_CHARS).unwrap_or(i32::MAX));
        let rows = run::Entity::find()
            .select_only()
            .columns([
                Column::Id,
                Column::FireId,
                Column::JobId,
                Column::JobName,
                Column::Handler,
                Column::Trigger,
                Column::ScheduledAt,
                Column::Attempt,
                Column::Status,
                Column::StartedAt,
                Column::FinishedAt,
                Column::DurationMs,
                Column::Instance,
            ])
            .expr_as(error_excerpt, "error")
            .filter(filter_condition(filter))
            .order_by_desc(Column::StartedAt)
            .order_by_desc(Column::Id)
            .limit(max_rows)
            .into_model::<ExportModel>()
            .all(self.store.connection())
            .await?;
        rows.into_iter().map(RunExportRow::try_from).collect()
    }
}

/// One MySQL statement: for each job in `ids`, the newest `fetch` rows of
/// `select(job)` by (started_at, id), each through its own index range;
/// then the newest `fetch` of them all.
fn newest_of_each(
    ids: &[i64],
    fetch: u64,
    select: impl Fn(i64) -> sea_orm::Select<run::Entity>,
) -> sea_orm::Statement {
    use sea_orm::QueryTrait;
    let mut sql = String::new();
    let mut values = Vec::new();
    for id in ids {
        let one = select(*id)
            .order_by_desc(Column::StartedAt)
            .order_by_desc(Column::Id)
            .limit(fetch)
            .build(sea_orm::DbBackend::MySql);
        if !sql.is_empty() {
            sql.push_str(" UNION ALL ");
        }
        sql.push('(');
        sql.push_str(&one.sql);
        sql.push(')');
        values.extend(one.values.map(|v| v.0).unwrap_or_default());
    }
    sql.push_str(&format!(" ORDER BY started_at DESC, id DESC LIMIT {fetch}"));
    sea_orm::Statement::from_sql_and_values(sea_orm::DbBackend::MySql, sql, values)
}

/// The part of `filter` that `idx_runs_job_started` answers for one job
/// (its time range), or `None` when the filter also needs other columns
/// of the rows.
fn key_condition(filter: &RunFilter) -> Option<Condition> {
    if filter.handler.is_some() || filter.status.is_some() || filter.trigger.is_some() {
        return None;
    }
    Some(range_condition(filter, Condition::all()))
}

/// `cond` with the filter's bounds of `started_at`.
fn range_condition(filter: &RunFilter, mut cond: Condition) -> Condition {
    if let Some(from) = filter.started_from {
        cond = cond.add(Column::StartedAt.gte(to_millis(from)));
    }
    if let Some(to) = filter.started_to {
        cond = cond.add(Column::StartedAt.lte(to_millis(to)));
    }
    cond
}

/// The filter plus "not deleted".
fn filter_condition(filter: &RunFilter) -> Condition {
    let mut cond = Condition::all().add(Column::DeletedAt.is_null());
    if let Some(job_id) = filter.job_id {
        cond = cond.add(Column::JobId.eq(job_id));
    }
    if let Some(name) = &filter.job_name {
        cond = cond.add(keyset::contains_ci(Column::JobName, name));
    }
    if let Some(handler) = &filter.handler {
        cond = cond.add(keyset::text_eq(Column::Handler, handler));
    }
    if let Some(status) = &filter.status {
        cond = cond.add(keyset::text_eq(Column::Status, status));
    }
    if let Some(trigger) = &filter.trigger {
        cond = cond.add(keyset::text_eq(Column::Trigger, trigger));
    }
    range_condition(filter, cond)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::{DbBackend, QueryTrait};

    #[test]
    fn cursor_round_trips_and_rejects_junk() {
        let c = RunCursor {
            started_at_ms: 1_764_000_000_123,
            id: 7,
        };
        assert_eq!(RunCursor::decode(&c.encode()).unwrap(), c);
        assert!(matches!(
            RunCursor::decode("not-a-cursor"),
            Err(StorageError::InvalidCursor)
        ));
    }

    #[test]
    fn keyset_condition_is_portable() {
        let cond = keyset::after(
            Column::StartedAt,
            Column::Id,
            Key {
                time_ms: 100,
                id: 5,
            },
        );
        let sql = run::Entity::find()
            .filter(cond)
            .build(DbBackend::MySql)
            .to_string();
        assert!(
            sql.contains(
                "`runs`.`started_at` <= 100 AND (`runs`.`started_at` < 100 OR (`runs`.`started_at` = 100 AND `runs`.`id` < 5))"
            ),
            "{sql}"
        );
    }

    #[test]
    fn job_name_filter_is_case_insensitive_like() {
        let filter = RunFilter {
            job_name: Some("A_%".into()),
            ..RunFilter::default()
        };
        let sql = run::Entity::find()
            .filter(filter_condition(&filter))
            .build(DbBackend::Postgres)
            .to_string();
        assert!(
            sql.contains(r#"LOWER("runs"."job_name") LIKE LOWER('%A!_!%%') ESCAPE '!'"#),
            "{sql}"
        );
        assert!(sql.contains(r#""runs"."deleted_at" IS NULL"#), "{sql}");
    }
}

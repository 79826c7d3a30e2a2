//! Jobs: records, filters and the [`JobRepo`] repository.
//!
//! Every write of a job has an `_audited` form that inserts the audit
//! entries describing it in the write's own transaction, so that a job
//! change is never committed without its audit row (the API's writes use
//! these); the plain forms write no entry (seeding, tests).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::calendar::CalendarRule;
use qiwu_domain::{CronExpr, MisfirePolicy, OverlapPolicy, TimeRules};
use sea_orm::sea_query::{Alias, BinOper, Expr, ExprTrait, Func};
use sea_orm::{
    ActiveModelTrait, ActiveValue::NotSet, ActiveValue::Set, ColumnTrait, Condition,
    ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};

use qiwu_domain::alert::{AlertPolicy, AlertState};
use qiwu_domain::pause::PauseRequest;

use crate::entity::job::{self, Column};
use crate::error::is_unique_violation;
use crate::grams::{GramTable, Narrowed};
use crate::timestamp::{from_millis, to_millis};
use crate::{NewAudit, StorageError, Store};

/// Escape character for LIKE patterns. Not a backslash: MySQL string literals
/// treat it specially while PostgreSQL's do not, so `ESCAPE '\'` is not portable.
pub(crate) const LIKE_ESCAPE: char = '!';

/// Ids per `IN (...)` list, well under every backend's bind-parameter limit.
const IN_CHUNK: usize = 500;

/// Input for create/update; already validated by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub name: String,
    pub group: String,
    pub handler: String,
    pub params: serde_json::Value,
    pub cron: String,
    pub timezone: Option<String>,
    pub enabled: bool,
    pub retry_count: i32,
    pub retry_interval_ms: i64,
    pub timeout_ms: i64,
    pub allow_concurrent: bool,
    pub misfire_policy: String,
    pub remark: String,
    /// Calendar, active window, jitter, catch-up window and run limit
    /// (issue 11); the default is none of them.
    pub time_rules: TimeRules,
    /// `fixed` or `exponential`.
    pub retry_backoff: String,
    pub retry_max_interval_ms: i64,
    pub retry_jitter: bool,
    /// `skip`, `allow`, `queue_one` or `replace`.
    pub overlap_policy: String,
    /// Only used by create; update never changes it.
    pub builtin_key: Option<String>,
    /// The alert policy (issue 10).
    pub alert: AlertPolicy,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: i64,
    pub name: String,
    pub group: String,
    pub handler: String,
    pub params: serde_json::Value,
    /// Shared with every record of the same expression read by this
    /// process (see [`cron_of`]).
    pub cron: Arc<CronExpr>,
    /// `None`: the service's `QIWU_TIMEZONE`.
    pub timezone: Option<Tz>,
    pub enabled: bool,
    pub retry_count: i32,
    pub retry_interval_ms: i64,
    pub timeout_ms: i64,
    pub allow_concurrent: bool,
    pub misfire_policy: MisfirePolicy,
    pub remark: String,
    pub time_rules: TimeRules,
    /// Successful scheduled fires so far, counted towards `maxRuns`.
    pub scheduled_successes: i64,
    /// `fixed` or `exponential`.
    pub retry_backoff: String,
    pub retry_max_interval_ms: i64,
    pub retry_jitter: bool,
    pub overlap_policy: OverlapPolicy,
    pub version: i64,
    /// When the current schedule (cron, zone, enabled, time rules, or the
    /// calendar's dates) took effect: timers
    /// armed from another schedule claim nothing, and no fire time at or
    /// before it is ever claimed.
    pub schedule_from: DateTime<Utc>,
    pub builtin_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    pub alert: AlertPolicy,
    /// What the engine remembers between fires; not part of `version`.
    pub alert_state: AlertState,
    /// Who disabled the job and when, why, and until when; all `None`
    /// while the job is enabled.
    pub pause: Pause,
}

/// The pause of a disabled job (issue 10 part 3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pause {
    pub reason: Option<String>,
    pub by: Option<String>,
    pub at: Option<DateTime<Utc>>,
    /// When the cluster enables the job again.
    pub until: Option<DateTime<Utc>>,
}

/// Which jobs a batch enable or disable touches.
#[derive(Debug, Clone, Copy)]
pub enum JobSelection<'a> {
    Ids(&'a [i64]),
    Group(&'a str),
}

/// What a single enable or disable did: the job before and after (equal
/// when nothing changed).
#[derive(Debug, Clone, PartialEq)]
pub struct EnabledOutcome {
    pub before: JobRecord,
    pub after: JobRecord,
}

impl EnabledOutcome {
    pub fn changed(&self) -> bool {
        self.before.version != self.after.version
    }
}

/// What a batch enable or disable did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchEnabled {
    /// The jobs written, before and after, by id.
    pub changed: Vec<EnabledOutcome>,
    /// Jobs that already were as asked, by id.
    pub unchanged: Vec<i64>,
    /// Requested ids that name no job, ascending.
    pub not_found: Vec<i64>,
}

impl JobRecord {
    /// A fire of this job waits for the running one instead of being
    /// skipped (`queue_one`, `replace`).
    pub fn waits_its_turn(&self) -> bool {
        matches!(
            self.overlap_policy,
            OverlapPolicy::QueueOne | OverlapPolicy::Replace
        )
    }
}

impl TryFrom<job::Model> for JobRecord {
    type Error = StorageError;

    fn try_from(m: job::Model) -> Result<Self, Self::Error> {
        let params = serde_json::from_str(&m.params).map_err(|e| {
            StorageError::Corrupt(format!("job {}: params are not valid JSON: {e}", m.id))
        })?;
        let time_rules = time_rules_of(
            m.id,
            StoredRules {
                calendar: m.calendar_code,
                rule: m.calendar_rule,
                active_from: m.active_from,
                active_until: m.active_until,
                jitter_ms: m.jitter_ms,
                misfire_grace_ms: m.misfire_grace_ms,
                max_runs: m.max_runs,
            },
        )?;
        let cron = cron_of(m.id, &m.cron)?;
        let timezone = zone_of(m.id, m.timezone.as_deref())?;
        let misfire_policy = MisfirePolicy::parse(&m.misfire_policy)
            .ok_or_else(|| corrupt(m.id, "misfire_policy", &m.misfire_policy))?;
        let overlap_policy = overlap_of(m.id, &m.overlap_policy)?;
        Ok(JobRecord {
            time_rules,
            scheduled_successes: m.scheduled_successes,
            id: m.id,
            name: m.name,
            group: m.group_code,
            handler: m.handler,
            params,
            cron,
            timezone,
            enabled: m.enabled,
            retry_count: m.retry_count,
            retry_interval_ms: m.retry_interval_ms,
            timeout_ms: m.timeout_ms,
            allow_concurrent: m.allow_concurrent,
            misfire_policy,
            remark: m.remark,
            retry_backoff: m.retry_backoff,
            retry_max_interval_ms: m.retry_max_interval_ms,
            retry_jitter: m.retry_jitter,
            overlap_policy,
            version: m.version,
            schedule_from: from_millis(m.schedule_from)?,
            builtin_key: m.builtin_key,
            created_at: from_millis(m.created_at)?,
            created_by: m.created_by,
            updated_at: from_millis(m.updated_at)?,
            updated_by: m.updated_by,
            alert: AlertPolicy {
                on_failure: m.alert_on_failure,
                after_consecutive_failures: u32::try_from(m.alert_after_failures).unwrap_or(0),
                on_recovery: m.alert_on_recovery,
                channels: channel_ids(m.id, m.alert_channels.as_deref())?,
            },
            alert_state: AlertState {
                failed_in_a_row: u32::try_from(m.alert_streak).unwrap_or(0),
                alerted: m.alert_alerted,
            },
            pause: Pause {
                reason: m.paused_reason,
                by: m.paused_by,
                at: m.paused_at.map(from_millis).transpose()?,
                until: m.paused_until.map(from_millis).transpose()?,
            },
        })
    }
}

/// A stored value no release writes: logged once here, with the row's id,
/// and answered as `Corrupt` (never replaced by a default).
fn corrupt(id: i64, column: &str, value: &str) -> StorageError {
    tracing::error!(job = id, column, value, "stored job value does not parse");
    StorageError::Corrupt(format!("job {id}: {column} {value:?} does not parse"))
}

/// Distinct expressions [`cron_of`] keeps; past this the cache starts over
/// (an installation has far fewer, so this only bounds odd input).
const CRON_CACHE_MAX: usize = 4096;

/// The stored expression, parsed once per process: every claim reads its
/// jobs' records, and parsing a cron (croner allocates a byte per possible
/// year) cost more than the rest of the record. Parsing is deterministic,
/// so a cached value is the one a fresh parse would give.
fn cron_of(id: i64, text: &str) -> Result<Arc<CronExpr>, StorageError> {
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<CronExpr>>>> = LazyLock::new(Default::default);
    // A panic elsewhere while the lock was held left a map that is still
    // whole (inserts and clears do not panic half-way).
    let cached = CACHE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(text)
        .cloned();
    if let Some(cron) = cached {
        return Ok(cron);
    }
    let cron = Arc::new(CronExpr::parse(text).map_err(|_| corrupt(id, "cron", text))?);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= CRON_CACHE_MAX {
        cache.clear();
    }
    cache.insert(text.to_owned(), Arc::clone(&cron));
    Ok(cron)
}

/// The job's zone; `None` (no zone stored) is the service's zone.
fn zone_of(id: i64, name: Option<&str>) -> Result<Option<Tz>, StorageError> {
    name.map(|name| {
        name.parse::<Tz>()
            .map_err(|_| corrupt(id, "timezone", name))
    })
    .transpose()
}

fn overlap_of(id: i64, text: &str) -> Result<OverlapPolicy, StorageError> {
    OverlapPolicy::parse(text).ok_or_else(|| corrupt(id, "overlap_policy", text))
}

/// The channel ids stored as a JSON array (null: none).
fn channel_ids(job: i64, raw: Option<&str>) -> Result<Vec<i64>, StorageError> {
    match raw {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            StorageError::Corrupt(format!(
                "job {job}: alert_channels is not a list of ids: {e}"
            ))
        }),
    }
}

/// The part of a job its timers need: a compact entry, so a worker can keep
/// every enabled job of a large installation in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSchedule {
    pub id: i64,
    /// Bumped by every change of the job: a fire claimed ahead of its time
    /// from an older version is taken back and claimed again.
    pub version: i64,
    pub enabled: bool,
    /// The stored text: the engine parses each distinct expression once
    /// and shares it between the jobs that use it.
    pub cron: String,
    /// `None`: the service's `QIWU_TIMEZONE`.
    pub timezone: Option<Tz>,
    pub schedule_from: DateTime<Utc>,
    pub allow_concurrent: bool,
    /// What the schedule needs of the time rules (calendar, window,
    /// jitter); the others are read with the job at a claim.
    pub time_rules: TimeRules,
    pub overlap_policy: OverlapPolicy,
    /// The job's group and handler, which freeze windows name.
    pub group: String,
    pub handler: String,
}

/// The time-rule columns as stored.
struct StoredRules {
    calendar: Option<String>,
    rule: Option<String>,
    active_from: Option<i64>,
    active_until: Option<i64>,
    jitter_ms: i64,
    misfire_grace_ms: i64,
    max_runs: Option<i64>,
}

/// Reads the stored time rules; `Corrupt` for a rule or time no release
/// writes.
fn time_rules_of(id: i64, r: StoredRules) -> Result<TimeRules, StorageError> {
    let calendar_rule = match r.rule {
        None => None,
        Some(text) => Some(CalendarRule::parse(&text).ok_or_else(|| {
            StorageError::Corrupt(format!("job {id}: unknown calendar rule {text:?}"))
        })?),
    };
    Ok(TimeRules {
        calendar: r.calendar,
        calendar_rule,
        misfire_grace_ms: r.misfire_grace_ms,
        active_from: r.active_from.map(from_millis).transpose()?,
        active_until: r.active_until.map(from_millis).transpose()?,
        max_runs: r.max_runs,
        jitter_ms: r.jitter_ms,
    })
}

#[derive(sea_orm::FromQueryResult)]
struct ScheduleRow {
    id: i64,
    version: i64,
    enabled: bool,
    cron: String,
    timezone: Option<String>,
    schedule_from: i64,
    allow_concurrent: bool,
    calendar_code: Option<String>,
    calendar_rule: Option<String>,
    active_from: Option<i64>,
    active_until: Option<i64>,
    jitter_ms: i64,
    misfire_grace_ms: i64,
    max_runs: Option<i64>,
    overlap_policy: String,
    group_code: String,
    handler: String,
}

fn schedule_of(row: ScheduleRow) -> Result<JobSchedule, StorageError> {
    let time_rules = time_rules_of(
        row.id,
        StoredRules {
            calendar: row.calendar_code,
            rule: row.calendar_rule,
            active_from: row.active_from,
            active_until: row.active_until,
            jitter_ms: row.jitter_ms,
            misfire_grace_ms: row.misfire_grace_ms,
            max_runs: row.max_runs,
        },
    )?;
    Ok(JobSchedule {
        id: row.id,
        version: row.version,
        enabled: row.enabled,
        timezone: zone_of(row.id, row.timezone.as_deref())?,
        overlap_policy: overlap_of(row.id, &row.overlap_policy)?,
        cron: row.cron,
        schedule_from: from_millis(row.schedule_from)?,
        allow_concurrent: row.allow_concurrent,
        time_rules,
        group: row.group_code,
        handler: row.handler,
    })
}

fn schedule_query() -> sea_orm::Select<job::Entity> {
    job::Entity::find()
        .select_only()
        .column(Column::Id)
        .column(Column::Version)
        .column(Column::Enabled)
        .column(Column::Cron)
        .column(Column::Timezone)
        .column(Column::ScheduleFrom)
        .column(Column::AllowConcurrent)
        .column(Column::CalendarCode)
        .column(Column::CalendarRule)
        .column(Column::ActiveFrom)
        .column(Column::ActiveUntil)
        .column(Column::JitterMs)
        .column(Column::MisfireGraceMs)
        .column(Column::MaxRuns)
        .column(Column::OverlapPolicy)
        .column(Column::GroupCode)
        .column(Column::Handler)
}

/// The most jobs a name filter may match for the job list to read their
/// ids in one go (80 KB); a broader name counts and pages in the database.
const NAME_MATCHES_MAX: u64 = 10_000;

/// Filters of the job list; `None` means "any".
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Case-insensitive substring of the name; `%` and `_` match literally.
    pub name: Option<String>,
    pub group: Option<String>,
    pub handler: Option<String>,
    pub enabled: Option<bool>,
}

/// Jobs table access; obtained from [`Store::jobs`].
pub struct JobRepo<'a> {
    pub(crate) store: &'a Store,
}

impl<'a> JobRepo<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        JobRepo { store }
    }
}

impl JobRepo<'_> {
    /// name = case-insensitive substring (`%` and `_` match literally), group
    /// and handler exact, enabled exact. Ordered by id ascending. `page` is
    /// 1-based (0 is read as 1). Returns (items, total matching).
    pub async fn list(
        &self,
        filter: &JobFilter,
        page: u64,
        page_size: u64,
    ) -> Result<(Vec<JobRecord>, u64), StorageError> {
        let db = self.store.connection();
        let query = job::Entity::find().filter(filter_condition(filter, self.store.backend()));
        // Offsets past i64::MAX are rejected by PostgreSQL; nothing is there anyway.
        let offset = page.saturating_sub(1).saturating_mul(page_size);
        // A substring filter reads the whole name index where no trigram
        // index serves it (MySQL/MariaDB, SQLite): a name that matches few
        // jobs is read once, its ids giving both the total and the page,
        // instead of a count and a page query that each read the index.
        let (ids, total) = match self.few_named(filter, &query).await? {
            Some(mut all) => {
                all.sort_unstable();
                let total = all.len() as u64;
                let skip = usize::try_from(offset).unwrap_or(usize::MAX);
                let take = usize::try_from(page_size).unwrap_or(usize::MAX);
                (all.into_iter().skip(skip).take(take).collect(), total)
            }
            None => {
                // A plain `COUNT(*)`: `PaginatorTrait::count` wraps the
                // query (every column) in a derived table, which MariaDB
                // merges but still counts ~50% slower (9 → 14 ms for
                // 100 000 jobs).
                let total: i64 = query
                    .clone()
                    .select_only()
                    .expr(Expr::cust("COUNT(*)"))
                    .into_tuple()
                    .one(db)
                    .await?
                    .unwrap_or(0);
                let total = u64::try_from(total).unwrap_or(0);
                if page_size == 0 || offset >= total {
                    return Ok((Vec::new(), total));
                }
                // The page's ids first, from the narrowest index that serves
                // the filter, then those rows only.
                let ids: Vec<i64> = query
                    .select_only()
                    .column(Column::Id)
                    .order_by_asc(Column::Id)
                    .offset(offset)
                    .limit(page_size)
                    .into_tuple()
                    .all(db)
                    .await?;
                (ids, total)
            }
        };
        if ids.is_empty() {
            return Ok((Vec::new(), total));
        }
        // A job deleted between the two reads leaves the page one short,
        // as if it had been deleted just before the request.
        let rows = job::Entity::find()
            .filter(Column::Id.is_in(ids))
            .order_by_asc(Column::Id)
            .all(db)
            .await?;
        let items = rows
            .into_iter()
            .map(JobRecord::try_from)
            .collect::<Result<_, _>>()?;
        Ok((items, total))
    }

    /// Every job id a name filter matches, when there are at most
    /// [`NAME_MATCHES_MAX`]; `None` without a name filter, with more, or on
    /// PostgreSQL.
    /// Unordered, so the database reads the narrow name index (ordered by
    /// id, MySQL would rather walk every job row looking for a page). On
    /// MySQL the needle's trigrams first narrow it to the jobs holding them
    /// (`job_name_grams`), when they are few enough.
    async fn few_named(
        &self,
        filter: &JobFilter,
        query: &sea_orm::Select<job::Entity>,
    ) -> Result<Option<Vec<i64>>, StorageError> {
        // PostgreSQL's trigram index serves the substring: counting and
        // paging there is cheaper than reading a broad name's ids.
        let Some(name) = &filter.name else {
            return Ok(None);
        };
        if self.store.backend() == crate::Backend::Postgres {
            return Ok(None);
        }
        let mut query = query.clone();
        // On MySQL, the jobs holding the needle's pieces (the gram table
        // is exact for jobs): only their names are checked. When every
        // piece is common the name likely is too: counting and paging in
        // the database reads the name index once, as reading the ids would.
        match crate::grams::narrow(self.store, GramTable::Jobs, name).await? {
            Narrowed::Jobs(ids) if ids.is_empty() => return Ok(Some(Vec::new())),
            Narrowed::Jobs(ids) => query = query.filter(Column::Id.is_in(ids)),
            Narrowed::Common => return Ok(None),
            Narrowed::NotLookedUp => {}
        }
        let ids: Vec<i64> = query
            .select_only()
            .column(Column::Id)
            .limit(NAME_MATCHES_MAX + 1)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        Ok((ids.len() as u64 <= NAME_MATCHES_MAX).then_some(ids))
    }

    pub async fn get(&self, id: i64) -> Result<Option<JobRecord>, StorageError> {
        find(self.store.connection(), id).await
    }

    /// Jobs by id (missing ones are left out).
    pub async fn get_many(
        &self,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, JobRecord>, StorageError> {
        crate::fires::jobs_by_id(self.store.connection(), ids).await
    }

    /// Enabled jobs' schedules with an id above `after_id`, by id: one page
    /// of the timers' initial load.
    pub async fn schedules(
        &self,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<JobSchedule>, StorageError> {
        let rows: Vec<ScheduleRow> = schedule_query()
            .filter(Column::Id.gt(after_id))
            .filter(Column::Enabled.eq(true))
            .order_by_asc(Column::Id)
            .limit(limit)
            .into_model()
            .all(self.store.connection())
            .await?;
        rows.into_iter().map(schedule_of).collect()
    }

    /// The schedules of jobs changed at or after `since` (enabled or not)
    /// with an id above `after_id`, by id, at most `limit`: one page of
    /// what a reconciliation reads, instead of every job.
    pub async fn schedules_changed_since(
        &self,
        since: DateTime<Utc>,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<JobSchedule>, StorageError> {
        let rows: Vec<ScheduleRow> = schedule_query()
            .filter(Column::UpdatedAt.gte(to_millis(since)))
            .filter(Column::Id.gt(after_id))
            .order_by_asc(Column::Id)
            .limit(limit)
            .into_model()
            .all(self.store.connection())
            .await?;
        rows.into_iter().map(schedule_of).collect()
    }

    /// One job's schedule, or `None` when it was deleted.
    pub async fn schedule(&self, id: i64) -> Result<Option<JobSchedule>, StorageError> {
        let row: Option<ScheduleRow> = schedule_query()
            .filter(Column::Id.eq(id))
            .into_model()
            .one(self.store.connection())
            .await?;
        row.map(schedule_of).transpose()
    }

    /// Version starts at 1; created_* and updated_* are (actor, now). A taken
    /// name → `NameTaken`; a taken `builtin_key` → `AlreadyExists`.
    pub async fn create(
        &self,
        job: &NewJob,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<JobRecord, StorageError> {
        self.create_audited(job, actor, now, |_| Vec::new()).await
    }

    /// [`JobRepo::create`] with the audit entries `audit` builds from the
    /// created job (its id is known only then), inserted in the same
    /// transaction: both are committed, or neither.
    pub async fn create_audited(
        &self,
        job: &NewJob,
        actor: &str,
        now: DateTime<Utc>,
        audit: impl FnOnce(&JobRecord) -> Vec<NewAudit>,
    ) -> Result<JobRecord, StorageError> {
        let at = now;
        let txn = self.store.begin_write().await?;
        let now = to_millis(now);
        let row = job::ActiveModel {
            id: NotSet,
            version: Set(1),
            schedule_from: Set(now),
            scheduled_successes: Set(0),
            builtin_key: Set(job.builtin_key.clone()),
            created_at: Set(now),
            created_by: Set(actor.to_owned()),
            ..editable_fields(job, actor, now)
        };
        let created = match row.insert(&txn).await {
            Ok(m) => JobRecord::try_from(m)?,
            Err(e) if is_unique_violation(&e) => {
                // The failed insert aborted the transaction (PostgreSQL):
                // end it before reading which key clashed.
                txn.rollback().await?;
                return Err(self.create_conflict(job).await?);
            }
            Err(e) => return Err(e.into()),
        };
        crate::audit::insert_many(&txn, &audit(&created), at).await?;
        txn.commit().await?;
        Ok(created)
    }

    /// Which unique key a failed insert hit: the built-in marker when a row
    /// holds it, else the name (the only other unique key).
    async fn create_conflict(&self, job: &NewJob) -> Result<StorageError, StorageError> {
        if let Some(key) = &job.builtin_key
            && self.find_by_builtin_key(key).await?.is_some()
        {
            return Ok(StorageError::AlreadyExists);
        }
        Ok(StorageError::NameTaken)
    }

    /// Atomic optimistic update (`... WHERE id = ? AND version = ?`, bumping
    /// the version). No row changed: `NotFound` if the id does not exist, else
    /// `StaleVersion { current }`. Name clash → `NameTaken`. Keeps
    /// `builtin_key` and created_*.
    pub async fn update(
        &self,
        id: i64,
        expected_version: i64,
        job: &NewJob,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<JobRecord, StorageError> {
        self.update_audited(id, expected_version, job, actor, now, |_, _| Vec::new())
            .await
    }

    /// [`JobRepo::update`] with the audit entries `audit` builds from the
    /// job before (the row the version was checked against) and after,
    /// inserted in the same transaction: both are committed, or neither.
    pub async fn update_audited(
        &self,
        id: i64,
        expected_version: i64,
        job: &NewJob,
        actor: &str,
        now: DateTime<Utc>,
        audit: impl FnOnce(&JobRecord, &JobRecord) -> Vec<NewAudit>,
    ) -> Result<JobRecord, StorageError> {
        let at = now;
        let txn = self.store.begin_write().await?;
        let now = to_millis(now);
        // A new schedule starts when cron, zone, enabled, the calendar, the
        // active window or the jitter change; other edits leave armed
        // timers valid.
        // A locking read: concurrent edits queue here, and the version
        // compared is the latest committed one.
        let current = job::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or(StorageError::NotFound)?;
        if current.version != expected_version {
            return Err(StorageError::StaleVersion {
                current: current.version,
            });
        }
        let before = JobRecord::try_from(current.clone())?;
        let rules = &job.time_rules;
        let schedule_from = if current.cron != job.cron
            || current.timezone != job.timezone
            || current.enabled != job.enabled
            || current.calendar_code != rules.calendar
            || current.calendar_rule.as_deref() != rules.calendar_rule.map(CalendarRule::as_str)
            || current.active_from != rules.active_from.map(to_millis)
            || current.active_until != rules.active_until.map(to_millis)
            || current.jitter_ms != rules.jitter_ms
        {
            next_schedule_from(current.schedule_from, now)
        } else {
            current.schedule_from
        };
        // A new limit counts from zero.
        let successes = if current.max_runs != rules.max_runs {
            Expr::val(0_i64)
        } else {
            Expr::col(Column::ScheduledSuccesses)
        };
        let mut write = job::Entity::update_many().set(editable_fields(job, actor, now));
        if current.enabled != job.enabled {
            // An edit that flips `enabled` pauses without a note, or ends
            // the pause.
            write = pause_columns(write, job.enabled, None, None, actor, now);
        }
        let changed = write
            .col_expr(Column::ScheduledSuccesses, successes)
            .col_expr(Column::ScheduleFrom, Expr::val(schedule_from))
            .col_expr(Column::Version, Expr::col(Column::Version).add(1))
            .filter(Column::Id.eq(id))
            .filter(Column::Version.eq(expected_version))
            .exec(&txn)
            .await;
        let changed = match changed {
            Ok(res) => res.rows_affected,
            // `builtin_key` is not written, so the name is the only key that can clash.
            Err(e) if is_unique_violation(&e) => return Err(StorageError::NameTaken),
            Err(e) => return Err(e.into()),
        };
        if changed == 0 {
            // Raw row: a stale caller learns the version even if params are corrupt.
            let row = job::Entity::find_by_id(id)
                .one(&txn)
                .await?
                .ok_or(StorageError::NotFound)?;
            return Err(StorageError::StaleVersion {
                current: row.version,
            });
        }
        let updated = find(&txn, id).await?.ok_or(StorageError::NotFound)?;
        crate::audit::insert_many(&txn, &audit(&before, &updated), at).await?;
        txn.commit().await?;
        Ok(updated)
    }

    /// Sets `enabled`; bumps version and updated_* only when the value
    /// changes (returns the unchanged record otherwise). With
    /// `expected_version`, a stale version → `StaleVersion`. `NotFound` when
    /// missing. Disabling notes who and when (a pause without a reason or
    /// an end); enabling clears the pause.
    pub async fn set_enabled(
        &self,
        id: i64,
        enabled: bool,
        expected_version: Option<i64>,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<JobRecord, StorageError> {
        let request = PauseRequest {
            enabled,
            reason: None,
            until: None,
        };
        Ok(self
            .pause(id, &request, expected_version, actor, now)
            .await?
            .after)
    }

    /// Enables a job, or disables it with an optional reason and end (a
    /// pause), as checked by `qiwu_domain::pause::validate`. A disabled
    /// job paused again with a reason or an end gets the new pause; a bare
    /// request for the state the job has changes nothing (same version).
    /// With `expected_version`, a stale version → `StaleVersion`;
    /// `NotFound` when missing.
    pub async fn pause(
        &self,
        id: i64,
        request: &PauseRequest,
        expected_version: Option<i64>,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<EnabledOutcome, StorageError> {
        self.pause_audited(id, request, expected_version, actor, now, |_| Vec::new())
            .await
    }

    /// [`JobRepo::pause`] with the audit entries `audit` builds from the
    /// job before and after, inserted in the same transaction; called only
    /// when the job changed (a request for the state it has audits
    /// nothing).
    pub async fn pause_audited(
        &self,
        id: i64,
        request: &PauseRequest,
        expected_version: Option<i64>,
        actor: &str,
        now: DateTime<Utc>,
        audit: impl FnOnce(&EnabledOutcome) -> Vec<NewAudit>,
    ) -> Result<EnabledOutcome, StorageError> {
        let txn = self.store.begin_write().await?;
        // A locking read: concurrent writers queue here and each decides
        // on the latest committed row.
        let row = job::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or(StorageError::NotFound)?;
        if let Some(expected) = expected_version
            && expected != row.version
        {
            return Err(StorageError::StaleVersion {
                current: row.version,
            });
        }
        let outcome = write_enabled(&txn, row, request, actor, to_millis(now)).await?;
        if outcome.changed() {
            crate::audit::insert_many(&txn, &audit(&outcome), now).await?;
        }
        txn.commit().await?;
        Ok(outcome)
    }

    /// [`JobRepo::pause`] for many jobs in one transaction, without
    /// version checks: by ids (missing ones reported) or every job of a
    /// group.
    pub async fn pause_many(
        &self,
        selection: JobSelection<'_>,
        request: &PauseRequest,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<BatchEnabled, StorageError> {
        self.pause_many_audited(selection, request, actor, now, |_| Vec::new())
            .await
    }

    /// [`JobRepo::pause_many`] with the audit entries `audit` builds from
    /// each job changed, before and after, inserted in the same
    /// transaction (jobs left as they were audit nothing).
    pub async fn pause_many_audited(
        &self,
        selection: JobSelection<'_>,
        request: &PauseRequest,
        actor: &str,
        now: DateTime<Utc>,
        audit: impl Fn(&EnabledOutcome) -> Vec<NewAudit>,
    ) -> Result<BatchEnabled, StorageError> {
        let at = now;
        let now = to_millis(now);
        let txn = self.store.begin_write().await?;
        let mut rows = Vec::new();
        let mut not_found = Vec::new();
        match selection {
            JobSelection::Ids(ids) => {
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                ids.dedup();
                for chunk in ids.chunks(IN_CHUNK) {
                    let found = job::Entity::find()
                        .filter(Column::Id.is_in(chunk.iter().copied()))
                        .order_by_asc(Column::Id)
                        .lock_exclusive()
                        .all(&txn)
                        .await?;
                    not_found.extend(
                        chunk
                            .iter()
                            .filter(|id| !found.iter().any(|r| r.id == **id)),
                    );
                    rows.extend(found);
                }
            }
            JobSelection::Group(code) => {
                rows = job::Entity::find()
                    .filter(crate::keyset::text_eq(Column::GroupCode, code))
                    .order_by_asc(Column::Id)
                    .lock_exclusive()
                    .all(&txn)
                    .await?;
            }
        }
        let mut batch = BatchEnabled {
            not_found,
            ..BatchEnabled::default()
        };
        for row in rows {
            let id = row.id;
            let outcome = write_enabled(&txn, row, request, actor, now).await?;
            if outcome.changed() {
                batch.changed.push(outcome);
            } else {
                batch.unchanged.push(id);
            }
        }
        let entries: Vec<NewAudit> = batch.changed.iter().flat_map(&audit).collect();
        crate::audit::insert_many(&txn, &entries, at).await?;
        txn.commit().await?;
        Ok(batch)
    }

    /// The earliest end of a pause still to come (or overdue): when the
    /// engine next has a job to enable. Reads `idx_jobs_paused_until`.
    pub async fn next_resume(&self) -> Result<Option<DateTime<Utc>>, StorageError> {
        let next: Option<Option<i64>> = job::Entity::find()
            .select_only()
            .column_as(Column::PausedUntil.min(), "next")
            .filter(Column::Enabled.eq(false))
            .filter(Column::PausedUntil.is_not_null())
            .into_tuple()
            .one(self.store.connection())
            .await?;
        next.flatten().map(from_millis).transpose()
    }

    /// Paused jobs whose end is at or before `now`, earliest first, at most
    /// `limit`: (id, the end), what [`JobRepo::resume`] takes.
    pub async fn due_resumes(
        &self,
        now: DateTime<Utc>,
        limit: u64,
    ) -> Result<Vec<(i64, DateTime<Utc>)>, StorageError> {
        let rows: Vec<(i64, i64)> = job::Entity::find()
            .select_only()
            .column(Column::Id)
            .column(Column::PausedUntil)
            .filter(Column::Enabled.eq(false))
            .filter(Column::PausedUntil.lte(to_millis(now)))
            .order_by_asc(Column::PausedUntil)
            .order_by_asc(Column::Id)
            .limit(limit)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        rows.into_iter()
            .map(|(id, until)| Ok((id, from_millis(until)?)))
            .collect()
    }

    /// Ends the pause of job `id` that was to end at `until`: enables it
    /// as `actor` (the system), its new schedule starting at `until` (so
    /// no time of the paused period is ever fired or caught up), and
    /// writes the audit entry (`job.enable`, `summary` given the job's
    /// name) in the same transaction. Exactly one caller wins: the write
    /// is conditional on the job still being disabled with that same end.
    /// Returns the enabled job, or `None` when someone else resumed,
    /// re-paused, enabled or deleted it first.
    pub async fn resume(
        &self,
        id: i64,
        until: DateTime<Utc>,
        actor: &str,
        summary: impl Fn(&str) -> String,
        now: DateTime<Utc>,
    ) -> Result<Option<JobRecord>, StorageError> {
        let until_ms = to_millis(until);
        let txn = self.store.begin_write().await?;
        let Some(row) = job::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            return Ok(None);
        };
        if row.enabled || row.paused_until != Some(until_ms) {
            return Ok(None);
        }
        let before = JobRecord::try_from(row.clone())?;
        let write = pause_columns(
            job::Entity::update_many(),
            true,
            None,
            None,
            actor,
            to_millis(now),
        );
        let changed = write
            .col_expr(Column::Enabled, Expr::val(true))
            .col_expr(
                Column::ScheduleFrom,
                Expr::val(next_schedule_from(row.schedule_from, until_ms)),
            )
            .col_expr(Column::UpdatedAt, Expr::val(to_millis(now)))
            .col_expr(Column::UpdatedBy, Expr::val(actor))
            .col_expr(Column::Version, Expr::col(Column::Version).add(1))
            .filter(Column::Id.eq(id))
            .filter(Column::Enabled.eq(false))
            .filter(Column::PausedUntil.eq(until_ms))
            .exec(&txn)
            .await?
            .rows_affected;
        if changed != 1 {
            return Ok(None);
        }
        let after = find(&txn, id).await?.ok_or(StorageError::NotFound)?;
        let entry = crate::NewAudit {
            actor: actor.to_owned(),
            action: "job.enable".to_owned(),
            target_type: "job".to_owned(),
            target_id: Some(id.to_string()),
            summary: summary(&after.name),
            before: Some(pause_json(&before)),
            after: Some(pause_json(&after)),
        };
        crate::audit::insert(&txn, &entry, now).await?;
        txn.commit().await?;
        Ok(Some(after))
    }

    /// Counts one more successful scheduled fire of a job with a `maxRuns`
    /// limit and, when that reaches the limit, disables the job as
    /// `actor` (the system) in the same transaction, with its audit entry
    /// (`job.disable`). Returns the job disabled now, if it was; `None`
    /// also when the job is gone.
    pub async fn count_scheduled_success(
        &self,
        id: i64,
        actor: &str,
        summary: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<JobRecord>, StorageError> {
        let txn = self.store.begin_write().await?;
        let now_ms = to_millis(now);
        job::Entity::update_many()
            .col_expr(
                Column::ScheduledSuccesses,
                Expr::col(Column::ScheduledSuccesses).add(1),
            )
            .filter(Column::Id.eq(id))
            .exec(&txn)
            .await?;
        let Some(row) = job::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            return Ok(None);
        };
        let reached = row
            .max_runs
            .is_some_and(|max| row.scheduled_successes >= max);
        if !reached || !row.enabled {
            txn.commit().await?;
            return Ok(None);
        }
        let before = JobRecord::try_from(row.clone())?;
        pause_columns(job::Entity::update_many(), false, None, None, actor, now_ms)
            .col_expr(Column::Enabled, Expr::val(false))
            .col_expr(
                Column::ScheduleFrom,
                Expr::val(next_schedule_from(row.schedule_from, now_ms)),
            )
            .col_expr(Column::UpdatedAt, Expr::val(now_ms))
            .col_expr(Column::UpdatedBy, Expr::val(actor))
            .col_expr(Column::Version, Expr::col(Column::Version).add(1))
            .filter(Column::Id.eq(id))
            .exec(&txn)
            .await?;
        let after = find(&txn, id).await?.ok_or(StorageError::NotFound)?;
        let entry = crate::NewAudit {
            actor: actor.to_owned(),
            action: "job.disable".to_owned(),
            target_type: "job".to_owned(),
            target_id: Some(id.to_string()),
            summary: summary.to_owned(),
            before: Some(limit_json(&before)),
            after: Some(limit_json(&after)),
        };
        crate::audit::insert(&txn, &entry, now).await?;
        txn.commit().await?;
        Ok(Some(after))
    }

    /// Returns the deleted record, or `None` when missing.
    pub async fn delete(&self, id: i64) -> Result<Option<JobRecord>, StorageError> {
        Ok(self.delete_many(&[id]).await?.pop())
    }

    /// [`JobRepo::delete`] with the audit entries `audit` builds from the
    /// deleted job, stamped `now`, inserted in the same transaction.
    pub async fn delete_audited(
        &self,
        id: i64,
        now: DateTime<Utc>,
        audit: impl Fn(&JobRecord) -> Vec<NewAudit>,
    ) -> Result<Option<JobRecord>, StorageError> {
        Ok(self.delete_many_audited(&[id], now, audit).await?.pop())
    }

    /// Deletes in one transaction; returns the records that existed and were
    /// deleted, by id ascending. Duplicate ids count once.
    pub async fn delete_many(&self, ids: &[i64]) -> Result<Vec<JobRecord>, StorageError> {
        self.delete_many_audited(ids, Utc::now(), |_| Vec::new())
            .await
    }

    /// [`JobRepo::delete_many`] with the audit entries `audit` builds from
    /// each deleted job, stamped `now`, inserted in the same transaction.
    pub async fn delete_many_audited(
        &self,
        ids: &[i64],
        now: DateTime<Utc>,
        audit: impl Fn(&JobRecord) -> Vec<NewAudit>,
    ) -> Result<Vec<JobRecord>, StorageError> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let txn = self.store.begin_write().await?;
        let mut deleted = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(IN_CHUNK) {
            // Lock the rows first so what we return is exactly what we delete.
            let rows = job::Entity::find()
                .filter(Column::Id.is_in(chunk.iter().copied()))
                .order_by_asc(Column::Id)
                .lock_exclusive()
                .all(&txn)
                .await?;
            if rows.is_empty() {
                continue;
            }
            let found: Vec<i64> = rows.iter().map(|r| r.id).collect();
            // Convert before deleting: a corrupt row aborts the whole batch
            // (rolled back) rather than vanish without an audit record.
            for row in rows {
                deleted.push(JobRecord::try_from(row)?);
            }
            job::Entity::delete_many()
                .filter(Column::Id.is_in(found))
                .exec(&txn)
                .await?;
        }
        let entries: Vec<NewAudit> = deleted.iter().flat_map(&audit).collect();
        crate::audit::insert_many(&txn, &entries, now).await?;
        txn.commit().await?;
        Ok(deleted)
    }

    pub async fn count_in_group(&self, code: &str) -> Result<u64, StorageError> {
        Ok(job::Entity::find()
            .filter(Column::GroupCode.eq(code))
            .count(self.store.connection())
            .await?)
    }

    pub async fn find_by_builtin_key(&self, key: &str) -> Result<Option<JobRecord>, StorageError> {
        job::Entity::find()
            .filter(Column::BuiltinKey.eq(key))
            .one(self.store.connection())
            .await?
            .map(JobRecord::try_from)
            .transpose()
    }
}

async fn find<C: ConnectionTrait>(db: &C, id: i64) -> Result<Option<JobRecord>, StorageError> {
    job::Entity::find_by_id(id)
        .one(db)
        .await?
        .map(JobRecord::try_from)
        .transpose()
}

/// What the audit entry of a job disabled by its limit keeps.
fn limit_json(job: &JobRecord) -> serde_json::Value {
    serde_json::json!({
        "id": job.id,
        "name": job.name,
        "enabled": job.enabled,
        "maxRuns": job.time_rules.max_runs,
        "scheduledSuccesses": job.scheduled_successes,
        "version": job.version,
    })
}

/// Writes a locked job's `enabled` and pause as `request` asks, when that
/// changes it; the job before and after.
async fn write_enabled<C: ConnectionTrait>(
    db: &C,
    row: job::Model,
    request: &PauseRequest,
    actor: &str,
    now: i64,
) -> Result<EnabledOutcome, StorageError> {
    let before = JobRecord::try_from(row.clone())?;
    if !request.changes(row.enabled) {
        return Ok(EnabledOutcome {
            after: before.clone(),
            before,
        });
    }
    let mut write = pause_columns(
        job::Entity::update_many(),
        request.enabled,
        request.reason.as_deref(),
        request.until.map(to_millis),
        actor,
        now,
    )
    .col_expr(Column::Enabled, Expr::val(request.enabled))
    .col_expr(Column::UpdatedAt, Expr::val(now))
    .col_expr(Column::UpdatedBy, Expr::val(actor))
    .col_expr(Column::Version, Expr::col(Column::Version).add(1))
    .filter(Column::Id.eq(row.id));
    if request.enabled != row.enabled {
        // Enabling starts a new schedule (re-enabled jobs continue from
        // the next time; the disabled period is never missed).
        write = write.col_expr(
            Column::ScheduleFrom,
            Expr::val(next_schedule_from(row.schedule_from, now)),
        );
    }
    write.exec(db).await?;
    let after = find(db, row.id).await?.ok_or(StorageError::NotFound)?;
    Ok(EnabledOutcome { before, after })
}

/// Sets the pause columns of an `enabled` write: cleared when enabling,
/// else the reason, the end, and who paused and when.
fn pause_columns(
    write: sea_orm::UpdateMany<job::Entity>,
    enabled: bool,
    reason: Option<&str>,
    until: Option<i64>,
    actor: &str,
    now: i64,
) -> sea_orm::UpdateMany<job::Entity> {
    let (reason, by, at, until) = if enabled {
        (None, None, None, None)
    } else {
        (reason, Some(actor), Some(now), until)
    };
    write
        .col_expr(Column::PausedReason, Expr::val(reason.map(str::to_owned)))
        .col_expr(Column::PausedBy, Expr::val(by.map(str::to_owned)))
        .col_expr(Column::PausedAt, Expr::val(at))
        .col_expr(Column::PausedUntil, Expr::val(until))
}

/// What the audit entry of a job the system resumed keeps.
fn pause_json(job: &JobRecord) -> serde_json::Value {
    serde_json::json!({
        "id": job.id,
        "name": job.name,
        "enabled": job.enabled,
        "pausedReason": job.pause.reason,
        "pausedBy": job.pause.by,
        "pausedAt": job.pause.at,
        "pausedUntil": job.pause.until,
        "version": job.version,
    })
}

/// The start of a new schedule: now, but always after the previous one, so
/// a timer armed from the old schedule can never match it.
fn next_schedule_from(previous: i64, now: i64) -> i64 {
    Ord::max(now, previous.saturating_add(1))
}

/// The columns both create and update write.
fn editable_fields(job: &NewJob, actor: &str, now: i64) -> job::ActiveModel {
    job::ActiveModel {
        id: NotSet,
        name: Set(job.name.clone()),
        group_code: Set(job.group.clone()),
        handler: Set(job.handler.clone()),
        params: Set(job.params.to_string()),
        cron: Set(job.cron.clone()),
        timezone: Set(job.timezone.clone()),
        enabled: Set(job.enabled),
        retry_count: Set(job.retry_count),
        retry_interval_ms: Set(job.retry_interval_ms),
        timeout_ms: Set(job.timeout_ms),
        allow_concurrent: Set(job.allow_concurrent),
        misfire_policy: Set(job.misfire_policy.clone()),
        remark: Set(job.remark.clone()),
        calendar_code: Set(job.time_rules.calendar.clone()),
        calendar_rule: Set(job.time_rules.calendar_rule.map(|r| r.as_str().to_owned())),
        active_from: Set(job.time_rules.active_from.map(to_millis)),
        active_until: Set(job.time_rules.active_until.map(to_millis)),
        jitter_ms: Set(job.time_rules.jitter_ms),
        misfire_grace_ms: Set(job.time_rules.misfire_grace_ms),
        max_runs: Set(job.time_rules.max_runs),
        scheduled_successes: NotSet,
        retry_backoff: Set(job.retry_backoff.clone()),
        retry_max_interval_ms: Set(job.retry_max_interval_ms),
        retry_jitter: Set(job.retry_jitter),
        overlap_policy: Set(job.overlap_policy.clone()),
        version: NotSet,
        schedule_from: NotSet,
        builtin_key: NotSet,
        created_at: NotSet,
        created_by: NotSet,
        updated_at: Set(now),
        updated_by: Set(actor.to_owned()),
        alert_on_failure: Set(job.alert.on_failure),
        alert_after_failures: Set(
            i32::try_from(job.alert.after_consecutive_failures).unwrap_or(i32::MAX)
        ),
        alert_on_recovery: Set(job.alert.on_recovery),
        alert_channels: Set((!job.alert.channels.is_empty())
            .then(|| serde_json::Value::from(job.alert.channels.clone()).to_string())),
        // The engine's state is never written by an edit.
        alert_streak: NotSet,
        alert_alerted: NotSet,
        // Written with `enabled` where it changes (`pause_columns`).
        paused_reason: NotSet,
        paused_by: NotSet,
        paused_at: NotSet,
        paused_until: NotSet,
    }
}

fn filter_condition(filter: &JobFilter, backend: crate::Backend) -> Condition {
    let mut cond = Condition::all();
    if let Some(name) = &filter.name {
        cond = cond.add(if crate::keyset::storable(name) {
            name_contains(name, backend)
        } else {
            crate::keyset::nothing()
        });
    }
    if let Some(group) = &filter.group {
        cond = cond.add(crate::keyset::text_eq(Column::GroupCode, group));
    }
    if let Some(handler) = &filter.handler {
        cond = cond.add(crate::keyset::text_eq(Column::Handler, handler));
    }
    if let Some(enabled) = filter.enabled {
        cond = cond.add(Column::Enabled.eq(enabled));
    }
    cond
}

/// `name_lower LIKE LOWER(?) ESCAPE '!'`, where `name_lower` is the
/// generated, indexed `LOWER(name)`. Both sides are lowered by the database
/// so they fold the same way (SQLite folds ASCII only; doing one side in
/// Rust would fold more than the other).
///
/// PostgreSQL gets the pattern as a literal (quoted by sea-query): bound,
/// the prepared statement soon runs a generic plan, which counts a name
/// that most jobs share through the trigram index and reads every job row
/// (78 ms at 100 000 jobs) where a plan for the pattern reads the name
/// index (20 ms).
fn name_contains(needle: &str, backend: crate::Backend) -> Expr {
    use sea_orm::sea_query::{PostgresQueryBuilder, QueryBuilder};
    let pattern = format!("%{}%", escape_like(needle));
    let pattern = match backend {
        crate::Backend::Postgres => {
            Expr::cust(PostgresQueryBuilder.value_to_string(&sea_orm::Value::from(pattern)))
        }
        crate::Backend::MySql | crate::Backend::Sqlite => Expr::val(pattern),
    };
    let lowered_pattern = Expr::Binary(
        Box::new(Func::lower(pattern).into()),
        BinOper::Escape,
        Box::new(Expr::Constant(LIKE_ESCAPE.into())),
    );
    Expr::col((job::Entity, Alias::new("name_lower"))).binary(BinOper::Like, lowered_pattern)
}

/// Makes `%`, `_` and the escape character itself match literally.
pub(crate) fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        if matches!(c, '%' | '_') || c == LIKE_ESCAPE {
            out.push(LIKE_ESCAPE);
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::{DbBackend, QueryTrait};

    #[test]
    fn a_cron_is_parsed_once_and_shared() {
        let a = cron_of(1, "0 15 2 * * 1-5").expect("valid");
        let b = cron_of(2, "0 15 2 * * 1-5").expect("valid");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*a, CronExpr::parse("0 15 2 * * 1-5").expect("valid"));
        let other = cron_of(3, "0 16 2 * * 1-5").expect("valid");
        assert!(!Arc::ptr_eq(&a, &other));
        // A stored text that does not parse is never cached as valid.
        for _ in 0..2 {
            assert!(matches!(
                cron_of(4, "61 * * * * *"),
                Err(StorageError::Corrupt(_))
            ));
        }
    }

    #[test]
    fn escapes_like_metacharacters() {
        assert_eq!(escape_like("a%b_c!d"), "a!%b!_c!!d");
        assert_eq!(escape_like("任务"), "任务");
    }

    #[test]
    fn name_filter_sql_on_each_backend() {
        let query = |backend| job::Entity::find().filter(name_contains("A_%", backend));
        let pg = query(crate::Backend::Postgres)
            .build(DbBackend::Postgres)
            .to_string();
        assert!(
            pg.contains(r#""jobs"."name_lower" LIKE LOWER('%A!_!%%') ESCAPE '!'"#),
            "{pg}"
        );
        // Bound there, inlined on PostgreSQL (and quoted: `'` doubled, a
        // backslash in an escape string).
        let pg_inlined = query(crate::Backend::Postgres).build(DbBackend::Postgres);
        assert!(
            pg_inlined.sql.contains("LOWER('%A!_!%%')"),
            "{}",
            pg_inlined.sql
        );
        assert!(pg_inlined.values.is_none_or(|v| v.0.is_empty()));
        let quoted = job::Entity::find()
            .filter(name_contains("it's a \\ $1 ?", crate::Backend::Postgres))
            .build(DbBackend::Postgres);
        assert!(
            quoted.sql.contains(r"LOWER(E'%it\'s a \\ $1 ?%')"),
            "{}",
            quoted.sql
        );
        let my_bound = query(crate::Backend::MySql).build(DbBackend::MySql);
        assert!(my_bound.sql.contains("LOWER(?)"), "{}", my_bound.sql);
        assert_eq!(my_bound.values.map(|v| v.0.len()), Some(1));
        let query = query(crate::Backend::MySql);
        let my = query.build(DbBackend::MySql).to_string();
        assert!(
            my.contains("`jobs`.`name_lower` LIKE LOWER('%A!_!%%') ESCAPE '!'"),
            "{my}"
        );
        let lite = query.build(DbBackend::Sqlite).to_string();
        assert!(
            lite.contains(r#""jobs"."name_lower" LIKE LOWER('%A!_!%%') ESCAPE '!'"#),
            "{lite}"
        );
    }
}

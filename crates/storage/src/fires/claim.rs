//! Claims, in batches: the fire times of many jobs (or many run-once
//! requests) are decided by one transaction, each by the ledger's unique
//! keys, together with their first run rows and the settings each fire runs
//! with.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, QuerySelect, Value,
};

use super::sql::Sql;
use super::{LANE_MANUAL, LANE_SCHEDULE, RunStatus, Trigger, jobs_by_id, storable};
use crate::entity::{fire, run};
use crate::store::Backend;
use crate::timestamp::{from_millis, to_millis};
use crate::{JobRecord, StorageError};

/// Most claims per statement: well under every backend's bind limit.
pub(crate) const MAX_BATCH: usize = 200;

/// What the first run row of a fire says.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstRun {
    /// `Running`, or a final status decided before the claim (a skip, a
    /// catch-up recorded by the `skip` policy).
    pub status: RunStatus,
    pub output: String,
    pub error: String,
    /// When a run claimed ahead of its time is to start: its `started_at`
    /// until the run's end writes when it really started. `None` (or a
    /// time already past): the claim's own time.
    pub starts_at: Option<DateTime<Utc>>,
}

impl FirstRun {
    pub fn running() -> FirstRun {
        FirstRun {
            status: RunStatus::Running,
            output: String::new(),
            error: String::new(),
            starts_at: None,
        }
    }

    pub fn skipped(output: impl Into<String>) -> FirstRun {
        FirstRun {
            status: RunStatus::Skipped,
            output: output.into(),
            error: String::new(),
            starts_at: None,
        }
    }

    /// The same first run, to start at `at` (a fire claimed ahead).
    pub fn starting_at(self, at: DateTime<Utc>) -> FirstRun {
        FirstRun {
            starts_at: Some(at),
            ..self
        }
    }

    /// The `started_at` of a run written with this status at `now`: a run
    /// claimed ahead starts at its time, anything decided at the claim
    /// (a skip, a failure) then and there.
    pub(super) fn started_at(&self, status: RunStatus, now: i64) -> i64 {
        match self.starts_at {
            Some(at) if status == RunStatus::Running => to_millis(at).max(now),
            _ => now,
        }
    }
}

/// One record on a job's schedule: a timer fire (`first_at ==
/// scheduled_at`), or a catch-up covering `first_at ..= scheduled_at`.
#[derive(Debug, Clone)]
pub struct TimeClaim {
    pub job_id: i64,
    pub trigger: Trigger,
    pub first_at: DateTime<Utc>,
    pub scheduled_at: DateTime<Utc>,
    /// The fire time this record follows: the cron's previous time for a
    /// timer fire, the chain's tip for a catch-up. The start of the job's
    /// current schedule (`schedule_from`) takes its place when it is later
    /// (a new chain starts with each schedule).
    pub after: Option<DateTime<Utc>>,
    /// The schedule the claimer armed (`JobRecord::schedule_from`).
    pub schedule_from: DateTime<Utc>,
    pub first: FirstRun,
    /// Another instance most likely recorded this time already (the
    /// claimer is the job's backup owner): the time is looked up first and
    /// attempted only when it has no record, so a healthy primary costs
    /// its backup one read per batch instead of a failed claim and a read.
    pub expect_taken: bool,
}

/// A run-once request to take.
#[derive(Debug, Clone)]
pub struct ManualClaim {
    pub fire_id: i64,
    pub first: FirstRun,
}

/// Texts and facts a batch of claims needs.
#[derive(Debug, Clone, Copy)]
pub struct ClaimContext<'a> {
    pub instance: &'a str,
    pub now: DateTime<Utc>,
    /// When set, a non-concurrent job that already has a run `running` on
    /// another instance is recorded `skipped` with this output instead
    /// (this instance's own runs are its local slots' business).
    pub running_elsewhere: Option<&'a str>,
    /// The error of a run-once request whose job was deleted meanwhile.
    pub job_deleted: &'a str,
}

/// A fire this instance now owns.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub fire_id: i64,
    pub run_id: i64,
    pub trigger: Trigger,
    pub scheduled_at: DateTime<Utc>,
    /// The first run's status as written: the claim's, or `Skipped` (or
    /// `Failed` for a deleted job) when decided here.
    pub status: RunStatus,
    /// The job as it was at the claim; `None` when it was deleted.
    pub job: Option<JobRecord>,
    /// The job had a run `running` on another instance at the claim
    /// (looked up only with [`ClaimContext::running_elsewhere`]). A fire
    /// claimed ahead is not skipped for it then: it checks the ledger
    /// again at its time.
    pub busy: bool,
}

/// What became of one claim.
#[derive(Debug, Clone)]
pub enum ClaimOutcome {
    Claimed(Box<Claimed>),
    /// Another record already covers this time (another instance won).
    Taken,
    /// The job is gone, disabled, or its schedule changed since it was
    /// armed: nothing is recorded and the caller re-reads the job.
    Stale,
    /// The time this claim names as its predecessor has no record: earlier
    /// times must be recorded (by the misfire policy) before this one can
    /// be claimed. `tip` is the latest time the job's records reach; when
    /// it lies between that predecessor and this time, a record standing
    /// for several times (a freeze window's, written under an earlier
    /// schedule) already covers the hole, and this time follows it.
    Gap {
        tip: Option<DateTime<Utc>>,
    },
}

/// A fire row just taken, before its first run is written.
pub(super) struct TakenFire {
    pub(super) fire_id: i64,
    pub(super) job_id: i64,
    pub(super) scheduled_at: i64,
    pub(super) trigger: Trigger,
    /// Index of the claim it answers.
    pub(super) index: usize,
}

impl FireRepo<'_> {
    /// Claims fire times on the jobs' schedules. Each claim needs its job
    /// enabled at the armed schedule, a time after that schedule began, and
    /// its predecessor recorded; the unique keys let one instance win. At
    /// most one claim per job in a batch. The outcomes are in claim order.
    pub async fn claim_times(
        &self,
        claims: &[TimeClaim],
        ctx: &ClaimContext<'_>,
    ) -> Result<Vec<ClaimOutcome>, StorageError> {
        let mut outcomes = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(MAX_BATCH) {
            let expected: Vec<usize> = (0..chunk.len())
                .filter(|&i| chunk[i].expect_taken)
                .collect();
            if expected.is_empty() {
                outcomes.extend(self.claim_chunk(chunk, ctx).await?);
                continue;
            }
            // Only a time with a record at or after it is answered without
            // a claim: a claim of it could not land (its key or its
            // predecessor's successor is taken), so `Taken` is what the
            // claim would have said. Everything else is claimed as usual.
            let recorded: HashSet<usize> = self
                .why_not_claimed(chunk, &expected)
                .await?
                .into_iter()
                .filter_map(|(i, outcome)| matches!(outcome, ClaimOutcome::Taken).then_some(i))
                .collect();
            let attempted: Vec<usize> =
                (0..chunk.len()).filter(|i| !recorded.contains(i)).collect();
            let mut answers = vec![ClaimOutcome::Taken; chunk.len()];
            if !attempted.is_empty() {
                let rest: Vec<TimeClaim> = attempted.iter().map(|&i| chunk[i].clone()).collect();
                for (i, outcome) in attempted
                    .into_iter()
                    .zip(self.claim_chunk(&rest, ctx).await?)
                {
                    answers[i] = outcome;
                }
            }
            outcomes.extend(answers);
        }
        Ok(outcomes)
    }

    /// One batch of at most [`MAX_BATCH`] claims, attempted; the outcomes
    /// in claim order.
    async fn claim_chunk(
        &self,
        chunk: &[TimeClaim],
        ctx: &ClaimContext<'_>,
    ) -> Result<Vec<ClaimOutcome>, StorageError> {
        let mut outcomes = Vec::with_capacity(chunk.len());
        let mut claimed = match self.store.backend() {
            Backend::Postgres => retry_deadlock(|| self.claim_times_postgres(chunk, ctx)).await?,
            Backend::MySql | Backend::Sqlite => {
                retry_deadlock(|| self.claim_times_once(chunk, ctx)).await?
            }
        };
        let missing: Vec<usize> = (0..chunk.len())
            .filter(|i| !claimed.contains_key(i))
            .collect();
        let mut why = self.why_not_claimed(chunk, &missing).await?;
        for i in 0..chunk.len() {
            outcomes.push(match claimed.remove(&i) {
                Some(c) => ClaimOutcome::Claimed(Box::new(c)),
                None => why.remove(&i).unwrap_or(ClaimOutcome::Taken),
            });
        }
        Ok(outcomes)
    }

    async fn claim_times_once(
        &self,
        claims: &[TimeClaim],
        ctx: &ClaimContext<'_>,
    ) -> Result<HashMap<usize, Claimed>, StorageError> {
        let backend = self.store.backend();
        let txn = self.store.begin_claim().await?;
        let mut sql = chain_insert(backend, claims, ctx);
        let inserted: Vec<(i64, i64, i64)> = match backend {
            Backend::MySql => {
                txn.execute_raw(sql.statement()).await?;
                fire::Entity::find()
                    .select_only()
                    .column(fire::Column::Id)
                    .column(fire::Column::JobId)
                    .column(fire::Column::ScheduledAt)
                    .filter(fire::Column::Lane.eq(LANE_SCHEDULE))
                    .filter(fire::Column::ClaimedBy.eq(ctx.instance))
                    .filter(fire::Column::ClaimedAt.eq(to_millis(ctx.now)))
                    .filter(fire::Column::JobId.is_in(claims.iter().map(|c| c.job_id)))
                    .into_tuple()
                    .all(&txn)
                    .await?
            }
            Backend::Postgres | Backend::Sqlite => {
                sql.push(" ON CONFLICT DO NOTHING RETURNING id, job_id, scheduled_at");
                let rows = txn.query_all_raw(sql.statement()).await?;
                rows.iter()
                    .map(|r| {
                        Ok((
                            r.try_get::<i64>("", "id")?,
                            r.try_get::<i64>("", "job_id")?,
                            r.try_get::<i64>("", "scheduled_at")?,
                        ))
                    })
                    .collect::<Result<_, StorageError>>()?
            }
        };
        let by_job: HashMap<i64, usize> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| (c.job_id, i))
            .collect();
        let taken: Vec<TakenFire> = inserted
            .into_iter()
            .filter_map(|(fire_id, job_id, at)| {
                let index = *by_job.get(&job_id)?;
                (to_millis(claims[index].scheduled_at) == at).then_some(TakenFire {
                    fire_id,
                    job_id,
                    scheduled_at: at,
                    trigger: claims[index].trigger,
                    index,
                })
            })
            .collect();
        let firsts: Vec<&FirstRun> = claims.iter().map(|c| &c.first).collect();
        let claimed = record_first_runs(&txn, taken, &firsts, ctx).await?;
        txn.commit().await?;
        Ok(claimed)
    }

    /// Why the claims at `missing` did not land: the job changed (stale),
    /// a record already covers the time (taken), or the chain has a hole.
    /// One query: each job's state and the tip of its chain.
    async fn why_not_claimed(
        &self,
        claims: &[TimeClaim],
        missing: &[usize],
    ) -> Result<HashMap<usize, ClaimOutcome>, StorageError> {
        if missing.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = missing
            .iter()
            .map(|&i| vec![Value::from(claims[i].job_id)])
            .collect();
        let mut sql = Sql::new(self.store.backend());
        sql.push(
            "SELECT u.job_id AS job_id, j.enabled AS enabled, j.schedule_from AS schedule_from, \
                  (SELECT f.scheduled_at FROM fires f WHERE f.job_id = u.job_id AND f.lane = ",
        )
        .param(LANE_SCHEDULE)
        .push(" ORDER BY f.scheduled_at DESC LIMIT 1) AS tip FROM ")
        .rows(&["job_id"], rows, "u")
        .push(" LEFT JOIN jobs j ON j.id = u.job_id");
        let found = self
            .store
            .connection()
            .query_all_raw(sql.statement())
            .await?;
        let mut state: HashMap<i64, (bool, i64, Option<i64>)> = HashMap::new();
        for row in found {
            let job_id: i64 = row.try_get("", "job_id")?;
            let Some(enabled) = row.try_get::<Option<bool>>("", "enabled")? else {
                continue;
            };
            let schedule_from = row
                .try_get::<Option<i64>>("", "schedule_from")?
                .unwrap_or(0);
            state.insert(job_id, (enabled, schedule_from, row.try_get("", "tip")?));
        }
        let mut out = HashMap::with_capacity(missing.len());
        for &i in missing {
            let claim = &claims[i];
            let armed = to_millis(claim.schedule_from);
            let outcome = match state.get(&claim.job_id) {
                Some(&(true, from, tip)) if from == armed && to_millis(claim.first_at) > from => {
                    match tip {
                        Some(tip) if tip >= to_millis(claim.scheduled_at) => ClaimOutcome::Taken,
                        _ => ClaimOutcome::Gap {
                            tip: tip.and_then(|t| from_millis(t).ok()),
                        },
                    }
                }
                _ => ClaimOutcome::Stale,
            };
            out.insert(i, outcome);
        }
        Ok(out)
    }

    /// Takes pending run-once requests (and released backfill fires,
    /// claimed alike). The outcomes are in claim order:
    /// `Claimed` (with `job: None` and a failed run when the job was
    /// deleted), or `Taken` when another instance took it first.
    pub async fn claim_manual(
        &self,
        claims: &[ManualClaim],
        ctx: &ClaimContext<'_>,
    ) -> Result<Vec<ClaimOutcome>, StorageError> {
        let mut outcomes = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(MAX_BATCH) {
            let mut claimed = retry_deadlock(|| self.claim_manual_once(chunk, ctx)).await?;
            for i in 0..chunk.len() {
                outcomes.push(match claimed.remove(&i) {
                    Some(c) => ClaimOutcome::Claimed(Box::new(c)),
                    None => ClaimOutcome::Taken,
                });
            }
        }
        Ok(outcomes)
    }

    async fn claim_manual_once(
        &self,
        claims: &[ManualClaim],
        ctx: &ClaimContext<'_>,
    ) -> Result<HashMap<usize, Claimed>, StorageError> {
        let txn = self.store.begin_claim().await?;
        let ids: Vec<i64> = claims.iter().map(|c| c.fire_id).collect();
        let now = to_millis(ctx.now);
        fire::Entity::update_many()
            .col_expr(fire::Column::State, "claimed".into())
            .col_expr(
                fire::Column::ClaimedBy,
                Some(ctx.instance.to_string()).into(),
            )
            .col_expr(fire::Column::ClaimedAt, Some(now).into())
            .filter(fire::Column::Id.is_in(ids.iter().copied()))
            .filter(fire::Column::State.eq("pending"))
            .exec(&txn)
            .await?;
        // Run-once requests, and the released fires of backfills (lane 0,
        // trigger `backfill`).
        let rows: Vec<(i64, i64, i64, String)> = fire::Entity::find()
            .select_only()
            .column(fire::Column::Id)
            .column(fire::Column::JobId)
            .column(fire::Column::ScheduledAt)
            .column(fire::Column::Trigger)
            .filter(fire::Column::Id.is_in(ids.iter().copied()))
            .filter(fire::Column::Lane.is_in([LANE_MANUAL, LANE_SCHEDULE]))
            .filter(fire::Column::ClaimedBy.eq(ctx.instance))
            .filter(fire::Column::ClaimedAt.eq(now))
            .into_tuple()
            .all(&txn)
            .await?;
        let index: HashMap<i64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let taken = rows
            .into_iter()
            .filter_map(|(fire_id, job_id, at, trigger)| {
                Some(TakenFire {
                    fire_id,
                    job_id,
                    scheduled_at: at,
                    trigger: if trigger == Trigger::Backfill.as_str() {
                        Trigger::Backfill
                    } else {
                        Trigger::Manual
                    },
                    index: *index.get(&fire_id)?,
                })
            })
            .collect();
        let firsts: Vec<&FirstRun> = claims.iter().map(|c| &c.first).collect();
        let claimed = record_first_runs(&txn, taken, &firsts, ctx).await?;
        txn.commit().await?;
        Ok(claimed)
    }
}

use super::FireRepo;

/// `INSERT INTO fires … SELECT …` of a batch of time claims (without the
/// conflict clause): each claim's job must be enabled at the armed
/// schedule, its time after that schedule began, and its predecessor
/// recorded (or the start of the job's current schedule).
fn chain_insert(backend: Backend, claims: &[TimeClaim], ctx: &ClaimContext<'_>) -> Sql {
    let mut order: Vec<usize> = (0..claims.len()).collect();
    // One order for every instance: concurrent batches lock keys alike.
    order.sort_by_key(|&i| claims[i].job_id);
    let rows = order
        .iter()
        .map(|&i| {
            let c = &claims[i];
            vec![
                Value::from(c.job_id),
                Value::from(c.trigger.as_str()),
                Value::from(to_millis(c.first_at)),
                Value::from(to_millis(c.scheduled_at)),
                Value::from(c.after.map(to_millis)),
                Value::from(to_millis(c.schedule_from)),
            ]
        })
        .collect();
    let mut sql = Sql::new(backend);
    sql.push(match backend {
        Backend::MySql => "INSERT IGNORE INTO fires ",
        _ => "INSERT INTO fires ",
    })
    .push(
        "(job_id, lane, \"trigger\", prev_at, first_at, scheduled_at, state, claimed_by, claimed_at, created_at) \
         SELECT c.job_id, ",
    )
    .param(LANE_SCHEDULE)
    .push(", c.trig, c.prev, c.first_at, c.at, 'claimed', ")
    .param(ctx.instance)
    .push(", ")
    .param(to_millis(ctx.now))
    .push(", ")
    .param(to_millis(ctx.now))
    // The chain: a record follows the start of the job's current schedule
    // when that is later than the time it names, and needs its predecessor
    // recorded. The start, not the job's last write: a pause's end is the
    // start of a schedule that the system's resume may commit later than
    // the first time after it, and a plain edit (a remark) does not restart
    // the chain, so a time missed before it still has to be recorded.
    .push(
        " FROM (SELECT u.job_id, u.trig, u.first_at, u.at, j.schedule_from AS anchor, \
         CASE WHEN u.after IS NULL OR u.after < j.schedule_from THEN j.schedule_from \
              ELSE u.after END AS prev FROM ",
    )
    .rows(
        &["job_id", "trig", "first_at", "at", "after", "armed"],
        rows,
        "u",
    )
    .push(
        " JOIN jobs j ON j.id = u.job_id \
         WHERE j.enabled AND j.schedule_from = u.armed AND u.first_at > j.schedule_from) c \
         WHERE (c.prev = c.anchor OR EXISTS (SELECT 1 FROM fires p \
           WHERE p.job_id = c.job_id AND p.lane = ",
    )
    .param(LANE_SCHEDULE)
    .push(" AND p.scheduled_at = c.prev)) ORDER BY c.job_id");
    sql
}

/// Writes the first run of each fire just taken, in the claim's
/// transaction, and reads the settings each fire runs with.
pub(super) async fn record_first_runs(
    txn: &DatabaseTransaction,
    taken: Vec<TakenFire>,
    firsts: &[&FirstRun],
    ctx: &ClaimContext<'_>,
) -> Result<HashMap<usize, Claimed>, StorageError> {
    if taken.is_empty() {
        return Ok(HashMap::new());
    }
    let job_ids: Vec<i64> = taken.iter().map(|t| t.job_id).collect();
    let jobs = jobs_by_id(txn, &job_ids).await?;
    let busy = match ctx.running_elsewhere {
        Some(_) => {
            let guarded: Vec<i64> = taken
                .iter()
                .filter(|t| firsts[t.index].status == RunStatus::Running)
                // Jobs whose fires wait their turn (`queue_one`,
                // `replace`) are claimed running; the fire waits.
                .filter(|t| {
                    jobs.get(&t.job_id)
                        .is_some_and(|j| !j.allow_concurrent && !j.waits_its_turn())
                })
                .map(|t| t.job_id)
                .collect();
            running_jobs(txn, &guarded, ctx.instance).await?
        }
        None => HashSet::new(),
    };
    let mut statuses = Vec::with_capacity(taken.len());
    let mut models = Vec::with_capacity(taken.len());
    for t in &taken {
        let (status, model) = first_run(t, jobs.get(&t.job_id), firsts[t.index], &busy, ctx);
        statuses.push(status);
        models.push(model);
    }
    run::Entity::insert_many(models).exec(txn).await?;
    let fire_ids: Vec<i64> = taken.iter().map(|t| t.fire_id).collect();
    let run_ids: HashMap<i64, i64> = run::Entity::find()
        .select_only()
        .column(run::Column::FireId)
        .column(run::Column::Id)
        .filter(run::Column::FireId.is_in(fire_ids))
        .filter(run::Column::Attempt.eq(1))
        .into_tuple::<(i64, i64)>()
        .all(txn)
        .await?
        .into_iter()
        .collect();
    let mut out = HashMap::with_capacity(taken.len());
    for (t, status) in taken.into_iter().zip(statuses) {
        let run_id = *run_ids.get(&t.fire_id).ok_or_else(|| {
            StorageError::Corrupt(format!("the first run of fire {} vanished", t.fire_id))
        })?;
        out.insert(
            t.index,
            Claimed {
                fire_id: t.fire_id,
                run_id,
                trigger: t.trigger,
                scheduled_at: from_millis(t.scheduled_at)?,
                status,
                job: jobs.get(&t.job_id).cloned(),
                busy: busy.contains(&t.job_id),
            },
        );
    }
    Ok(out)
}

/// The first run of a fire just taken: as the claim asked, a skip when its
/// non-concurrent job runs elsewhere, a failure when the job is gone.
fn first_run(
    t: &TakenFire,
    job: Option<&JobRecord>,
    asked: &FirstRun,
    busy: &HashSet<i64>,
    ctx: &ClaimContext<'_>,
) -> (RunStatus, run::ActiveModel) {
    let (status, output, error) = match job {
        None => (
            RunStatus::Failed,
            String::new(),
            ctx.job_deleted.to_string(),
        ),
        Some(_)
            if asked.status == RunStatus::Running
                && asked.starts_at.is_none()
                && busy.contains(&t.job_id) =>
        {
            (
                RunStatus::Skipped,
                ctx.running_elsewhere.unwrap_or_default().to_string(),
                String::new(),
            )
        }
        Some(_) => (asked.status, asked.output.clone(), asked.error.clone()),
    };
    let now = to_millis(ctx.now);
    let finished = status != RunStatus::Running;
    let started = asked.started_at(status, now);
    let model = run::ActiveModel {
        id: NotSet,
        fire_id: Set(t.fire_id),
        job_id: Set(t.job_id),
        job_name: Set(job
            .map(|j| storable(&j.name).into_owned())
            .unwrap_or_default()),
        handler: Set(job.map(|j| j.handler.clone()).unwrap_or_default()),
        trigger: Set(t.trigger.as_str().to_string()),
        scheduled_at: Set(t.scheduled_at),
        attempt: Set(1),
        status: Set(status.as_str().to_string()),
        started_at: Set(started),
        finished_at: Set(finished.then_some(now)),
        duration_ms: Set(finished.then_some(0)),
        instance: Set(ctx.instance.to_string()),
        output: Set(storable(&output).into_owned()),
        error: Set(storable(&error).into_owned()),
        swept_at: Set(None),
        deleted_at: Set(None),
        trace_id: Set(None),
        cancel_requested_at: Set(None),
        cancelled_by: Set(None),
    };
    (status, model)
}

/// The jobs among `ids` with a run `running` anywhere.
async fn running_jobs<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
    instance: &str,
) -> Result<HashSet<i64>, StorageError> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let rows: Vec<i64> = run::Entity::find()
        .select_only()
        .column(run::Column::JobId)
        .distinct()
        .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
        .filter(run::Column::JobId.is_in(ids.iter().copied()))
        // This instance's own runs hold its local slots, which decided
        // before the claim; its record of an end may still be on its way.
        .filter(run::Column::Instance.ne(instance))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows.into_iter().collect())
}

/// Runs a claim transaction again when the database broke a deadlock
/// between two instances' batches by aborting ours.
async fn retry_deadlock<T, F, Fut>(mut attempt: F) -> Result<T, StorageError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StorageError>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if tries < 3 && e.is_deadlock() => {
                tries += 1;
                tracing::debug!(error = %e, tries, "claim batch deadlocked; trying again");
            }
            other => return other,
        }
    }
}

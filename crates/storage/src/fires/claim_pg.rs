//! PostgreSQL claims a batch in one statement: the chain check, the fire
//! rows, the "running elsewhere" check, the first run rows and the job
//! rows each fire runs with, chained by data-modifying CTEs — one round
//! trip for the whole batch where the other databases need a transaction
//! of several.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult, Value};

use super::claim::{ClaimContext, Claimed, TimeClaim};
use super::sql::Sql;
use super::{FireRepo, LANE_SCHEDULE, RunStatus, storable};
use crate::entity::job;
use crate::store::Backend;
use crate::timestamp::to_millis;
use crate::{JobRecord, StorageError};

impl FireRepo<'_> {
    /// [`FireRepo::claim_times`]'s batch on PostgreSQL; the claimed fires by
    /// the index of their claim.
    pub(super) async fn claim_times_postgres(
        &self,
        claims: &[TimeClaim],
        ctx: &ClaimContext<'_>,
    ) -> Result<HashMap<usize, Claimed>, StorageError> {
        let found = self
            .store
            .connection()
            .query_all_raw(claim_statement(claims, ctx).statement())
            .await?;
        let by_job: HashMap<i64, usize> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| (c.job_id, i))
            .collect();
        let mut out = HashMap::with_capacity(found.len());
        for row in found {
            let record = JobRecord::try_from(job::Model::from_query_result(&row, "")?)?;
            let Some(&index) = by_job.get(&record.id) else {
                continue;
            };
            let status: String = row.try_get("", "run_status")?;
            let claim = &claims[index];
            out.insert(
                index,
                Claimed {
                    fire_id: row.try_get("", "fire_id")?,
                    run_id: row.try_get("", "run_id")?,
                    trigger: claim.trigger,
                    scheduled_at: claim.scheduled_at,
                    status: RunStatus::parse(&status)
                        .ok_or_else(|| StorageError::Corrupt(format!("run status {status:?}")))?,
                    job: Some(record),
                    busy: row.try_get("", "busy")?,
                },
            );
        }
        Ok(out)
    }
}

/// The one statement of a batch: the claims as rows `u`, the chain check
/// `c`, the fires inserted `f`, the jobs already running elsewhere `busy`
/// (returned too), the first runs `r`, and the job rows to run with.
fn claim_statement(claims: &[TimeClaim], ctx: &ClaimContext<'_>) -> Sql {
    let rows = claims
        .iter()
        .map(|c| {
            vec![
                Value::from(c.job_id),
                Value::from(c.trigger.as_str()),
                Value::from(to_millis(c.first_at)),
                Value::from(to_millis(c.scheduled_at)),
                Value::from(c.after.map(to_millis)),
                Value::from(to_millis(c.schedule_from)),
                Value::from(c.first.status.as_str()),
                Value::from(storable(&c.first.output).into_owned()),
                Value::from(storable(&c.first.error).into_owned()),
                Value::from(c.first.starts_at.map(to_millis)),
            ]
        })
        .collect();
    let now = to_millis(ctx.now);
    let mut sql = Sql::new(Backend::Postgres);
    sql.push("WITH u AS ")
            .rows(
                &[
                    "job_id", "trig", "first_at", "at", "after", "armed", "status", "output",
                    "error", "starts_at",
                ],
                rows,
                "",
            )
            // The chain: a record follows the start of the job's current
            // schedule when that is later than the time it names, and
            // needs its predecessor (`chain_insert` says why).
            .push(
                ", c AS (SELECT u.job_id, u.trig, u.first_at, u.at, j.schedule_from AS anchor, \
                 CASE WHEN u.after IS NULL OR u.after < j.schedule_from THEN j.schedule_from \
                      ELSE u.after END AS prev \
                 FROM u JOIN jobs j ON j.id = u.job_id \
                 WHERE j.enabled AND j.schedule_from = u.armed AND u.first_at > j.schedule_from), \
                 f AS (INSERT INTO fires (job_id, lane, \"trigger\", prev_at, first_at, scheduled_at, \
                   state, claimed_by, claimed_at, created_at) \
                 SELECT c.job_id, ",
            )
            .param(LANE_SCHEDULE)
            .push(", c.trig, c.prev, c.first_at, c.at, 'claimed', ")
            .param(ctx.instance)
            .push(", ")
            .param(now)
            .push(", ")
            .param(now)
            .push(
                " FROM c WHERE c.prev = c.anchor OR EXISTS (SELECT 1 FROM fires p \
                   WHERE p.job_id = c.job_id AND p.lane = ",
            )
            .param(LANE_SCHEDULE)
            .push(
                " AND p.scheduled_at = c.prev) ORDER BY c.job_id \
                 ON CONFLICT DO NOTHING RETURNING id, job_id, scheduled_at), \
                 busy AS (SELECT b.job_id FROM (SELECT DISTINCT job_id FROM f) b \
                   CROSS JOIN LATERAL (SELECT 1 FROM runs r WHERE r.job_id = b.job_id \
                     AND r.status = 'running' AND r.instance <> ",
            )
            .param(ctx.instance)
            // One index lookup per job (the `LIMIT` keeps it a lateral
            // probe): a semi-join would scan the whole `running` index,
            // whose entries of runs ended since the last vacuum the lookups
            // mark dead for the index to drop, and a scan of all of them
            // grew with every second of fires.
            .push(" LIMIT 1) x WHERE ")
            .param(ctx.running_elsewhere.is_some())
            .push(
                "), \
                 r AS (INSERT INTO runs (fire_id, job_id, job_name, handler, \"trigger\", scheduled_at, \
                   attempt, status, started_at, finished_at, duration_ms, instance, output, error, \
                   swept_at, deleted_at) \
                 SELECT f.id, f.job_id, j.name, j.handler, u.trig, f.scheduled_at, 1, s.status, \
                 CASE WHEN s.status = 'running' THEN GREATEST(COALESCE(u.starts_at, 0), ",
            )
            .param(now)
            // A run claimed ahead starts at its time (`FirstRun::started_at`).
            .push(") ELSE ")
            .param(now)
            .push(" END, CASE WHEN s.status = 'running' THEN NULL ELSE ")
            .param(now)
            .push(" END, CASE WHEN s.status = 'running' THEN NULL ELSE 0 END, ")
            .param(ctx.instance)
            .push(
                ", s.output, u.error, NULL, NULL \
                 FROM f JOIN jobs j ON j.id = f.job_id JOIN u ON u.job_id = f.job_id \
                 CROSS JOIN LATERAL (SELECT \
                   (u.status = 'running' AND u.starts_at IS NULL AND NOT j.allow_concurrent \
                    AND j.overlap_policy NOT IN ('queue_one', 'replace') \
                    AND EXISTS (SELECT 1 FROM busy b WHERE b.job_id = f.job_id)) AS elsewhere) e \
                 CROSS JOIN LATERAL (SELECT \
                   CASE WHEN e.elsewhere THEN 'skipped' ELSE u.status END AS status, \
                   CASE WHEN e.elsewhere THEN ",
            )
            .param(ctx.running_elsewhere.unwrap_or_default())
            .push(
                " ELSE u.output END AS output) s \
                 RETURNING id, fire_id, job_id, status) \
                 SELECT r.id AS run_id, r.fire_id AS fire_id, r.status AS run_status, \
                 EXISTS (SELECT 1 FROM busy b WHERE b.job_id = r.job_id) AS busy, j.* \
                 FROM r JOIN jobs j ON j.id = r.job_id",
            );
    sql
}

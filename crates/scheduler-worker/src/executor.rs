//! Execution of one fire: claim it, run its attempts with timeout, retry and
//! the stop signal, and record every attempt or skip.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_domain::params;
use qiwu_storage::{FireClaim, JobRecord, PendingFire, RunEnd, RunStart, RunStatus, Trigger};
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::context::{LogSink, MAX_ERROR_CHARS, RunContext, StopReason, cut, output_of, stop_pair};
use crate::engine::{Shared, TimeoutInfo};
use crate::error::WorkerError;

/// Where a fire comes from, and what its claim re-checks.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A timer armed at this job version; a backup owner waits `delay`
    /// before it claims.
    Scheduled { version: i64, delay: Duration },
    /// A catch-up at start; `skipped` holds the record's text for the
    /// `skip` policy.
    Misfire { skipped: Option<String> },
    /// A queued "run once" request.
    Manual { fire_id: i64 },
}

const SKIP_ELSEWHERE: &str = "另一个实例正在执行这个任务，且不允许并发执行，本次跳过。\nAnother instance is running this job and concurrent runs are not allowed: skipped.";
const LOCK_UNAVAILABLE: &str = "任务锁不可用（无法连接 Redis），为避免重复执行，本次不执行。\nThe job lock is unavailable (Redis unreachable); the fire did not run, to avoid overlapping runs.";
const LOCK_LOST: &str = "任务锁续期没有得到确认，已视为锁丢失并通知处理器停止；不重试。\nThe job lock renewal was not confirmed: the lock counts as lost, the handler was told to stop, and the attempt is not retried.";

const SKIP_OVERLAP: &str = "上一次执行还没有结束，且不允许并发执行，本次跳过。\nThe previous run has not finished and concurrent runs are not allowed: skipped.";

/// Why a job cannot run at all; such runs are `failed` and never retried.
fn cannot_run(shared: &Shared, job: &JobRecord) -> Result<Map<String, Value>, String> {
    let Some(descriptor) = shared.registry.catalog().get(&job.handler) else {
        return Err(format!(
            "处理器 {0} 不存在：只能选择系统已注册的处理器。请修改任务。\nHandler {0} does not exist: only registered handlers can be chosen. Edit the job.",
            job.handler
        ));
    };
    if shared.registry.get(&job.handler).is_none() {
        return Err(format!(
            "处理器 {0} 在本实例上没有实现。\nHandler {0} has no implementation on this instance.",
            job.handler
        ));
    }
    params::check(&descriptor.schema, Some(&job.params)).map_err(|errors| {
        let list = errors
            .iter()
            .map(|e| format!("{}: {}", e.field(), e.message(qiwu_domain::Lang::En)))
            .collect::<Vec<_>>()
            .join("; ");
        format!("参数不再符合处理器的规则，请修改任务：{list}\nParams no longer match the handler's schema; edit the job: {list}")
    })
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Runs one fire to its end. Returns early, having written nothing, when
/// another instance claimed it or the job changed since the timer was armed.
///
/// Only the claim's winner takes the cluster lock: a loser never writes, so
/// a lost race for the lock cannot turn a fire into a skip that nobody runs.
pub(crate) async fn execute(
    shared: Arc<Shared>,
    job: JobRecord,
    trigger: Trigger,
    scheduled_at: DateTime<Utc>,
    source: Source,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), WorkerError> {
    let instance = shared.config.instance.clone();
    if let Source::Scheduled { delay, .. } = source
        && !delay.is_zero()
    {
        // A backup owner: normally the primary has claimed by now, and one
        // indexed read saves the lock and claim round trips.
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = crate::context::shutting_down(&mut shutdown) => return Ok(()),
        }
        if shared
            .store
            .fires()
            .is_claimed(job.id, trigger, scheduled_at)
            .await?
        {
            return Ok(());
        }
    }
    let runnable = cannot_run(&shared, &job);
    let guard = if job.allow_concurrent {
        None
    } else {
        shared.try_busy(job.id)
    };
    let busy = !job.allow_concurrent && guard.is_none();
    let started_at = shared.clock.now();
    let (status, output, error) = match (&source, &runnable) {
        (
            Source::Misfire {
                skipped: Some(text),
            },
            _,
        ) => (RunStatus::Skipped, text.clone(), String::new()),
        _ if busy => (RunStatus::Skipped, SKIP_OVERLAP.to_string(), String::new()),
        (_, Err(reason)) => (
            RunStatus::Failed,
            String::new(),
            cut(reason, MAX_ERROR_CHARS),
        ),
        (_, Ok(_)) => (RunStatus::Running, String::new(), String::new()),
    };
    let first = RunStart {
        job_id: job.id,
        job_name: &job.name,
        handler: &job.handler,
        trigger,
        scheduled_at,
        attempt: 1,
        instance: &instance,
        started_at,
        status,
        output,
        error,
    };
    let fires = shared.store.fires();
    let claimed = match source {
        Source::Scheduled { version, .. } => {
            let claim = FireClaim {
                job_id: job.id,
                armed_version: Some(version),
                trigger,
                scheduled_at,
                instance: &instance,
                now: started_at,
            };
            fires.claim(&claim, &first).await?
        }
        Source::Misfire { .. } => {
            let claim = FireClaim {
                job_id: job.id,
                armed_version: None,
                trigger,
                scheduled_at,
                instance: &instance,
                now: started_at,
            };
            fires.claim(&claim, &first).await?
        }
        Source::Manual { fire_id } => {
            fires
                .claim_pending_with_run(fire_id, &instance, started_at, &first)
                .await?
        }
    };
    let Some((fire_id, first_run)) = claimed else {
        return Ok(());
    };
    if status != RunStatus::Running {
        return Ok(());
    }
    let Ok(params) = runnable else {
        return Ok(());
    };
    let lock = match cluster_lock(&shared, &job, first_run).await {
        Ok(lock) => lock,
        Err(end) => {
            finish_reliably(&shared, first_run, &end, &mut shutdown).await;
            return Ok(());
        }
    };
    run_attempts(
        &shared,
        &job,
        fire_id,
        first_run,
        &first,
        params,
        lock,
        guard,
        &mut shutdown,
    )
    .await
}

/// In a cluster, a non-concurrent job also needs the Redis lock, and no
/// other run of it may be going on anywhere (the database check covers the
/// lock's blind spot while Redis restarts). `Err` is how the already
/// claimed run must end instead.
async fn cluster_lock(
    shared: &Shared,
    job: &JobRecord,
    run_id: i64,
) -> Result<Option<qiwu_storage::JobLock>, RunEnd> {
    let Some(cluster) = &shared.config.cluster else {
        return Ok(None);
    };
    if job.allow_concurrent {
        return Ok(None);
    }
    let end = |status: RunStatus, output: &str, error: &str| RunEnd {
        status,
        finished_at: shared.clock.now(),
        duration_ms: 0,
        output: output.to_string(),
        error: error.to_string(),
    };
    match cluster
        .coord
        .try_lock(job.id, &shared.config.instance, cluster.lock_ttl)
        .await
    {
        Ok(Some(held)) => match shared.store.fires().has_other_running(job.id, run_id).await {
            Ok(false) => Ok(Some(held)),
            Ok(true) => {
                release(shared, Some(held)).await;
                Err(end(RunStatus::Skipped, SKIP_ELSEWHERE, ""))
            }
            Err(e) => {
                release(shared, Some(held)).await;
                tracing::warn!(job = job.id, error = %e, "cannot check for other runs");
                Err(end(RunStatus::Failed, "", LOCK_UNAVAILABLE))
            }
        },
        Ok(None) => Err(end(RunStatus::Skipped, SKIP_ELSEWHERE, "")),
        Err(e) => {
            tracing::warn!(job = job.id, error = %e, "job lock unavailable");
            Err(end(RunStatus::Failed, "", LOCK_UNAVAILABLE))
        }
    }
}

/// Writes a run's end, retrying a failing database until it answers or the
/// process stops (then the shutdown sweep closes the run): a run must never
/// stay `running` while its process lives.
async fn finish_reliably(
    shared: &Shared,
    run_id: i64,
    end: &RunEnd,
    shutdown: &mut watch::Receiver<bool>,
) {
    let mut delay = Duration::from_millis(500);
    loop {
        match shared.store.fires().finish_run(run_id, end).await {
            Ok(_) => return,
            Err(e) => {
                tracing::error!(run = run_id, error = %e, "cannot record the end of a run; retrying")
            }
        }
        if *shutdown.borrow() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = crate::context::shutting_down(shutdown) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

async fn release(shared: &Shared, lock: Option<qiwu_storage::JobLock>) {
    if let (Some(cluster), Some(lock)) = (&shared.config.cluster, lock)
        && let Err(e) = cluster.coord.release(&lock).await
    {
        tracing::warn!(job = lock.job_id, error = %e, "cannot release the job lock; it expires by itself");
    }
}

/// Keeps the lock alive every third of its TTL; flips `lost` when a
/// renewal is not confirmed, which happens before the TTL could run out.
async fn renew_lock(shared: Arc<Shared>, lock: qiwu_storage::JobLock, lost: watch::Sender<bool>) {
    let Some(cluster) = &shared.config.cluster else {
        return;
    };
    loop {
        tokio::time::sleep(cluster.lock_ttl / 3).await;
        match cluster.coord.renew(&lock, cluster.lock_ttl).await {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                tracing::error!(job = lock.job_id, token = lock.token, "job lock lost");
                let _ = lost.send(true);
                return;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_attempts(
    shared: &Arc<Shared>,
    job: &JobRecord,
    fire_id: i64,
    first_run: i64,
    first: &RunStart<'_>,
    params: Map<String, Value>,
    lock: Option<qiwu_storage::JobLock>,
    guard: Option<crate::engine::BusyGuard>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), WorkerError> {
    let fires = shared.store.fires();
    let started_at = first.started_at;
    let (lost_tx, mut lost) = watch::channel(false);
    let renewal = lock
        .clone()
        .map(|l| tokio::spawn(renew_lock(Arc::clone(shared), l, lost_tx)));
    let _renewal = AbortOnDrop(renewal);
    let has_lock = lock.is_some();
    let Some(handler) = shared.registry.get(&job.handler).cloned() else {
        release(shared, lock).await;
        return Ok(());
    };

    let tz = shared.zone_of(job);
    let attempts = u32::try_from(job.retry_count.max(0)).unwrap_or(0) + 1;
    let timeout = (job.timeout_ms > 0).then(|| Duration::from_millis(job.timeout_ms as u64));
    let mut run_id = first_run;
    let mut attempt_started = started_at;
    for attempt in 1..=attempts {
        if attempt > 1 {
            attempt_started = shared.clock.now();
            let start = RunStart {
                attempt: attempt as i32,
                started_at: attempt_started,
                status: RunStatus::Running,
                output: String::new(),
                error: String::new(),
                ..first.clone()
            };
            run_id = match fires.start_run(fire_id, &start).await {
                Ok(id) => id,
                Err(e) => {
                    release(shared, lock).await;
                    return Err(e.into());
                }
            };
        }
        let (stopper, stop) = stop_pair();
        let log = LogSink::default();
        let ctx = RunContext {
            job_id: job.id,
            job_name: job.name.clone(),
            fire_id,
            attempt,
            deadline: timeout
                .and_then(|t| chrono::Duration::from_std(t).ok())
                .map(|t| attempt_started + t),
            stop,
            log: log.clone(),
        };
        let clock_start = tokio::time::Instant::now();
        let mut task = tokio::spawn(handler.run(params.clone(), ctx));
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        enum Outcome {
            Done(Result<Result<String, String>, tokio::task::JoinError>),
            TimedOut,
            Shutdown,
            LockLost,
        }
        let outcome = tokio::select! {
            joined = &mut task => Outcome::Done(joined),
            () = deadline => Outcome::TimedOut,
            () = crate::context::shutting_down(shutdown) => Outcome::Shutdown,
            Ok(_) = lost.wait_for(|l| *l), if has_lock => Outcome::LockLost,
        };
        let finish = |status: RunStatus, output: String, error: String| RunEnd {
            status,
            finished_at: shared.clock.now(),
            duration_ms: ms(clock_start.elapsed()),
            output,
            error: cut(&error, MAX_ERROR_CHARS),
        };
        let retryable = match outcome {
            Outcome::Done(Ok(Ok(value))) => {
                finish_reliably(
                    shared,
                    run_id,
                    &finish(RunStatus::Success, output_of(&log, &value), String::new()),
                    shutdown,
                )
                .await;
                false
            }
            Outcome::Done(Ok(Err(message))) => {
                finish_reliably(
                    shared,
                    run_id,
                    &finish(RunStatus::Failed, output_of(&log, ""), message),
                    shutdown,
                )
                .await;
                true
            }
            Outcome::Done(Err(join)) => {
                let message = format!("处理器异常退出 / The handler panicked: {join}");
                finish_reliably(
                    shared,
                    run_id,
                    &finish(RunStatus::Failed, output_of(&log, ""), message),
                    shutdown,
                )
                .await;
                true
            }
            Outcome::TimedOut => {
                stopper.stop(StopReason::Timeout);
                let message = format!(
                    "执行超过超时时间 {0} 毫秒，已通知处理器停止。\nThe attempt ran past its timeout of {0} ms; the handler was told to stop.",
                    job.timeout_ms
                );
                finish_reliably(
                    shared,
                    run_id,
                    &finish(RunStatus::Timeout, output_of(&log, ""), message),
                    shutdown,
                )
                .await;
                (shared.config.on_timeout)(TimeoutInfo {
                    job_id: job.id,
                    job_name: job.name.clone(),
                    handler: job.handler.clone(),
                    timeout_ms: job.timeout_ms,
                    started_at: attempt_started,
                    attempt,
                    timezone: tz,
                })
                .await;
                if !job.allow_concurrent {
                    // The job's slot (and lock) stay taken until the handler
                    // really ends, so no new fire overlaps a handler that
                    // ignores the stop signal.
                    tokio::select! {
                        _ = &mut task => {}
                        () = crate::context::shutting_down(shutdown) => return Ok(()),
                        Ok(_) = lost.wait_for(|l| *l), if has_lock => {
                            // The lock is gone while the handler still runs:
                            // keep the local slot until it ends, never retry.
                            tokio::spawn(async move {
                                let _ = task.await;
                                drop(guard);
                            });
                            return Ok(());
                        }
                    }
                }
                true
            }
            Outcome::LockLost => {
                stopper.stop(StopReason::LockLost);
                finish_reliably(
                    shared,
                    run_id,
                    &finish(
                        RunStatus::Failed,
                        output_of(&log, ""),
                        LOCK_LOST.to_string(),
                    ),
                    shutdown,
                )
                .await;
                // This process's own slot stays taken until the handler
                // really ends. The lock is not released: if it is still ours
                // (Redis errors rather than expiry), freeing it would let
                // another worker overlap a handler that ignores its stop.
                tokio::spawn(async move {
                    let _ = task.await;
                    drop(guard);
                });
                return Ok(());
            }
            Outcome::Shutdown => {
                stopper.stop(StopReason::Shutdown);
                let joined = task.await;
                let (status, output, error) = match joined {
                    Ok(Ok(value)) => (RunStatus::Success, output_of(&log, &value), String::new()),
                    Ok(Err(message)) => (
                        RunStatus::Failed,
                        output_of(&log, ""),
                        format!("{}\n{message}", crate::engine::REASON_SHUTDOWN),
                    ),
                    Err(join) => (
                        RunStatus::Failed,
                        output_of(&log, ""),
                        format!("{}\n{join}", crate::engine::REASON_SHUTDOWN),
                    ),
                };
                finish_reliably(shared, run_id, &finish(status, output, error), shutdown).await;
                false
            }
        };
        if !retryable || attempt == attempts {
            break;
        }
        let interval = Duration::from_millis(job.retry_interval_ms.max(0) as u64);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = crate::context::shutting_down(shutdown) => break,
            Ok(_) = lost.wait_for(|l| *l), if has_lock => return Ok(()),
        }
    }
    release(shared, lock).await;
    drop(guard);
    Ok(())
}

/// Aborts the lock renewal when the fire is over.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }
}

/// A "run once" request whose job was deleted before it ran.
pub(crate) async fn record_orphan_manual(
    shared: &Shared,
    fire: PendingFire,
) -> Result<(), WorkerError> {
    let fires = shared.store.fires();
    let now = shared.clock.now();
    if !fires
        .claim_pending(fire.id, &shared.config.instance, now)
        .await?
    {
        return Ok(());
    }
    let start = RunStart {
        job_id: fire.job_id,
        job_name: "",
        handler: "",
        trigger: Trigger::Manual,
        scheduled_at: fire.scheduled_at,
        attempt: 1,
        instance: &shared.config.instance,
        started_at: now,
        status: RunStatus::Failed,
        output: String::new(),
        error: "任务在执行前已被删除。\nThe job was deleted before it could run.".to_string(),
    };
    fires.start_run(fire.id, &start).await?;
    Ok(())
}

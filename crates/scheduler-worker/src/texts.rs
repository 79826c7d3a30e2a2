//! Every text this crate writes into the run log, in one place. The run log
//! is read in both languages, so each text is Chinese, a line break, then
//! English.

pub(crate) const SKIP_OVERLAP: &str = "上一次执行还没有结束，且不允许并发执行，本次跳过。\nThe previous run has not finished and concurrent runs are not allowed: skipped.";
pub(crate) const SKIP_ELSEWHERE: &str = "另一个实例正在执行这个任务，且不允许并发执行，本次跳过。\nAnother instance is running this job and concurrent runs are not allowed: skipped.";
pub(crate) const NOT_TAKEN_BACK: &str = "本次触发提前认领后，任务在触发时间前已变更（或进程正在停止），且认领无法撤回：本次跳过。\nThis fire was claimed ahead of its time; the job changed (or the process was stopping) before the time came, and the claim could not be taken back: skipped.";
pub(crate) const LOCK_UNAVAILABLE: &str = "任务锁不可用（无法连接 Redis），为避免重复执行，本次不执行。\nThe job lock is unavailable (Redis unreachable); the fire did not run, to avoid overlapping runs.";
pub(crate) const LOCK_LOST: &str = "任务锁续期没有得到确认，已视为锁丢失并通知处理器停止；不重试。\nThe job lock renewal was not confirmed: the lock counts as lost, the handler was told to stop, and the attempt is not retried.";
pub(crate) const JOB_DELETED: &str =
    "任务在执行前已被删除。\nThe job was deleted before it could run.";

/// The error of runs a process finds left `running` by its earlier life.
pub const REASON_RESTART: &str = "实例在执行结束前停止（进程退出或崩溃）\nThe instance stopped before the run finished (exit or crash)";
/// The error of runs still going when the grace period ends.
pub const REASON_SHUTDOWN: &str =
    "服务正在关闭，执行被中断\nThe service shut down and interrupted the run";
/// The error of runs of an instance that stopped heart-beating.
pub(crate) const REASON_LOST: &str =
    "实例失联（停止心跳），执行被关闭\nInstance lost (stopped heart-beating); the run was closed";
/// The error of runs of an instance with no heart-beat row at all.
pub(crate) const REASON_ORPHAN: &str = "实例失联（没有心跳记录），执行被关闭\nInstance lost (no heart-beat record); the run was closed";

pub(crate) fn timed_out(timeout_ms: i64) -> String {
    format!(
        "执行超过超时时间 {timeout_ms} 毫秒，已通知处理器停止。\nThe attempt ran past its timeout of {timeout_ms} ms; the handler was told to stop."
    )
}

pub(crate) fn handler_missing(handler: &str) -> String {
    format!(
        "处理器 {handler} 不存在：只能选择系统已注册的处理器。请修改任务。\nHandler {handler} does not exist: only registered handlers can be chosen. Edit the job."
    )
}

pub(crate) fn handler_not_here(handler: &str) -> String {
    format!(
        "处理器 {handler} 在本实例上没有实现。\nHandler {handler} has no implementation on this instance."
    )
}

pub(crate) fn params_invalid(list: &str) -> String {
    format!(
        "参数不再符合处理器的规则，请修改任务：{list}\nParams no longer match the handler's schema; edit the job: {list}"
    )
}

/// Who the audit log names for what the engine itself decides.
pub const SYSTEM_ACTOR: &str = "system";

/// The audit summary of a job the system enabled at the end of its pause.
pub fn pause_ended(job_name: &str) -> String {
    format!("任务「{job_name}」暂停到期，系统自动启用")
}

/// The audit summary of a job that disabled itself at its `maxRuns`.
pub fn limit_reached(job_name: &str, max_runs: Option<i64>) -> String {
    let max = max_runs.unwrap_or_default();
    format!("任务「{job_name}」已成功执行 {max} 次，达到最大执行次数，自动停用")
}

pub(crate) const SKIP_QUEUE_FULL: &str = "已有一次执行在等待上一次结束（重叠策略 queue_one），本次跳过。\nA fire is already waiting for the running one (overlap policy queue_one): skipped.";

/// How a fire that replaces the running one names itself as its canceller.
const REPLACED_BY: &str = "replaced-by:";

pub(crate) fn replaced_by(at: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "{REPLACED_BY}{}",
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

pub(crate) fn waited(ms: u128) -> String {
    format!(
        "等待上一次执行结束 {ms} 毫秒后开始。\nStarted after waiting {ms} ms for the previous fire to end."
    )
}

/// A fire cancelled (or replaced) while it waited for its turn: its
/// handler never started.
pub(crate) fn cancelled_waiting(by: &str) -> String {
    if let Some(at) = by.strip_prefix(REPLACED_BY) {
        return format!(
            "等待轮到本次执行时被 {at} 的触发替换（重叠策略 replace），处理器从未启动；不重试。\nReplaced by the fire of {at} (overlap policy replace) while waiting for its turn: it never ran, and the fire is not retried."
        );
    }
    format!(
        "等待轮到本次执行时已被 {by} 取消，处理器从未启动；不重试。\nCancelled by {by} while waiting for its turn: it never ran, and the fire is not retried."
    )
}

pub(crate) fn cancelled(by: &str) -> String {
    if let Some(at) = by.strip_prefix(REPLACED_BY) {
        return format!(
            "执行被 {at} 的触发替换（重叠策略 replace），已通知处理器停止；不重试。\nReplaced by the fire of {at} (overlap policy replace): the handler was told to stop, and the fire is not retried."
        );
    }
    format!(
        "执行已被 {by} 取消，已通知处理器停止；不重试。\nCancelled by {by}: the handler was told to stop, and the fire is not retried."
    )
}

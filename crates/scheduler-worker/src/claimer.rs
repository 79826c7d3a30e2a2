//! Between the timers and the fires: the claimer takes what the engine
//! asks for (timer fires, catch-ups, run-once requests), claims it in
//! batches, and starts a [`Fire`] for each claimed run.
//!
//! It is also where nothing is lost. Its queue holds at most one entry per
//! job: a fire time that cannot be claimed in time (the database is down,
//! the clock disagrees with the database's, too many fires are in flight)
//! folds into a catch-up of that job, which records the missed times by
//! the job's misfire policy once claiming works again. A claim that finds
//! earlier times of its job unrecorded (a [`ClaimOutcome::Gap`]) catches
//! them up first. So every fire time ends with exactly one record, and
//! memory stays bounded by the number of jobs.
//!
//! Timer fires are claimed in several rounds at once (on PostgreSQL and
//! MySQL): the fires of one instant go out as a few smaller batches in
//! parallel, so the last of them waits about one round trip instead of
//! every batch before it. A job is in at most one round at a time, so its
//! fire times are still claimed in order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_domain::freeze::{Freeze, first_span, frozen_text};
use qiwu_domain::misfire::{missed_text, past_grace_text, within_grace};
use qiwu_domain::{MisfirePolicy, MissReason, Schedule};
use qiwu_storage::Backend;
use qiwu_storage::{
    ClaimContext, ClaimOutcome, Claimed, FirstRun, JobRecord, ManualClaim, RunStatus, StorageError,
    TimeClaim, Trigger,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::ahead::{AheadBook, Hold};
use crate::context::shutting_down;
use crate::engine::Shared;
use crate::fire::Fire;
use crate::lease::Slot;
use crate::schedules::{self, UserCalendars};
use crate::texts;
use crate::timer::Armed;

/// Claims per batch at most.
const BATCH: usize = 200;
/// How long an overload catch-up gathers its job's later missed times
/// while other fires are ready (see `Claimer::take_catch_ups`).
const RIPEN: Duration = Duration::from_secs(5);
/// Rounds of timer claims in flight at most (PostgreSQL, MySQL). SQLite
/// takes one writer at a time: one round there.
const ROUNDS: usize = 4;
/// The smallest batch of timer claims worth a round of its own while
/// other rounds are free (a round costs a transaction).
const MIN_BATCH: usize = 25;
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What the engine asks the claimer for.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// A timer fire of an armed job.
    Time { armed: Armed, at: DateTime<Utc> },
    /// Record the job's unrecorded fire times up to `through` by its
    /// misfire policy.
    CatchUp {
        job_id: i64,
        through: DateTime<Utc>,
        reason: MissReason,
    },
    /// A queued run-once request.
    Manual { fire_id: i64 },
    /// A freeze window that froze some of the job's times ended: its
    /// misfire policy applies (`crate::freezes`).
    FreezeEnded { job_id: i64, freeze: Freeze },
}

/// What the claimer tells the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feedback {
    /// The job changed since it was armed: read it again.
    Stale(i64),
    /// A backfill released its next fire: claim it.
    Released(i64),
    /// A fire claimed ahead of its time was taken back (`crate::ahead`):
    /// hand its time over again.
    Withdrawn { job_id: i64, at: DateTime<Utc> },
}

/// The queued work of one job: a catch-up, and timer fires in time order.
/// A fire time that waits past the misfire threshold folds into the
/// catch-up with everything before it, so a job queues at most the fire
/// times of one threshold.
#[derive(Debug, Default)]
struct JobWork {
    catch_up: Option<(DateTime<Utc>, MissReason)>,
    /// When the catch-up began to gather times.
    catch_up_since: Option<tokio::time::Instant>,
    times: VecDeque<(Armed, DateTime<Utc>)>,
}

impl JobWork {
    fn is_empty(&self) -> bool {
        self.catch_up.is_none() && self.times.is_empty()
    }

    /// Folds the queued times that were to start before `limit` into the
    /// catch-up (a jittered time starts after its nominal time).
    fn fold_older(&mut self, limit: DateTime<Utc>, reason: MissReason) {
        while let Some((armed, at)) = self.times.front() {
            if armed.start_at(*at) >= limit {
                break;
            }
            let at = *at;
            self.times.pop_front();
            fold(self, at, reason);
        }
    }
}

pub(crate) struct Claimer {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedReceiver<Request>,
    feedback: mpsc::UnboundedSender<Feedback>,
    stop: watch::Receiver<bool>,
    jobs: HashMap<i64, JobWork>,
    /// Jobs with queued work, oldest first.
    order: VecDeque<i64>,
    manual: VecDeque<i64>,
    manual_known: HashSet<i64>,
    /// Window ends to apply the misfire policy of (`crate::freezes`).
    freeze_ends: VecDeque<(i64, Freeze)>,
    /// Set after a failed batch: nothing is tried before it.
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
    /// The last batch could not reach the database.
    unreachable: bool,
    /// Timer claim rounds in flight.
    rounds: JoinSet<TimeRound>,
    /// The jobs of each round in flight, by task (to release them even
    /// when a round's task failed).
    round_jobs: HashMap<tokio::task::Id, Vec<i64>>,
    /// Jobs with a fire time in a round in flight: nothing else of theirs
    /// is claimed until it is back.
    busy: HashSet<i64>,
    /// Places promised to the fires of the rounds in flight.
    reserved: usize,
    max_rounds: usize,
    /// By job: (time, tip), a timer time that follows the chain's tip
    /// instead of its schedule's previous time, which a record reaching
    /// past it covers ([`ClaimOutcome::Gap`]). At most one per job; one
    /// left behind (its time folded into a catch-up) never matches a later
    /// time.
    follows: HashMap<i64, (DateTime<Utc>, DateTime<Utc>)>,
}

/// A round of timer claims, back from the database.
struct TimeRound {
    batch: Vec<(Armed, DateTime<Utc>)>,
    slots: Vec<Option<Slot>>,
    /// The holds of the fires claimed ahead of their time.
    holds: Vec<Option<Hold>>,
    claims: Vec<TimeClaim>,
    result: Result<Vec<ClaimOutcome>, StorageError>,
}

impl Claimer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        requests: mpsc::UnboundedReceiver<Request>,
        feedback: mpsc::UnboundedSender<Feedback>,
        stop: watch::Receiver<bool>,
    ) -> Claimer {
        Claimer {
            follows: HashMap::new(),
            max_rounds: match shared.store.backend() {
                Backend::Sqlite => 1,
                Backend::Postgres | Backend::MySql => ROUNDS,
            },
            shared,
            requests,
            feedback,
            stop,
            jobs: HashMap::new(),
            order: VecDeque::new(),
            manual: VecDeque::new(),
            manual_known: HashSet::new(),
            freeze_ends: VecDeque::new(),
            retry_at: None,
            backoff: FIRST_BACKOFF,
            unreachable: false,
            rounds: JoinSet::new(),
            round_jobs: HashMap::new(),
            busy: HashSet::new(),
            reserved: 0,
        }
    }

    /// Claims until the process stops.
    pub(crate) async fn run(mut self) {
        let mut stop = self.stop.clone();
        loop {
            // Looked at before every round, not only when idle: under load
            // there is always a round to start, and one started after the
            // stop would claim fires the shutdown has already stopped
            // waiting for (their runs closed under them, their ends lost).
            if *stop.borrow() {
                break;
            }
            let now = tokio::time::Instant::now();
            let waiting = self.retry_at.is_some_and(|t| t > now);
            if !waiting && self.ready() && self.room() > 0 && self.rounds.len() < self.max_rounds {
                self.round().await;
                self.take_queued();
                continue;
            }
            let retry_at = self.retry_at.unwrap_or(now);
            let permits = Arc::clone(&self.shared.permits);
            // With rounds in flight, their return is what frees places to
            // look at again.
            let watch_permits = !waiting && self.rounds.is_empty() && self.ready();
            tokio::select! {
                biased;
                () = shutting_down(&mut stop) => break,
                Some(done) = self.rounds.join_next_with_id(), if !self.rounds.is_empty() => self.finish(done),
                request = self.requests.recv() => match request {
                    Some(request) => self.add(request),
                    None => return,
                },
                () = tokio::time::sleep_until(retry_at), if waiting => self.retry_at = None,
                // A fire ended and freed a place: claim what waits.
                permit = permits.acquire_owned(), if watch_permits => drop(permit),
            }
            self.take_queued();
        }
        // Rounds already sent are seen through, as a round awaited in place
        // would be (the engine's stop bounds this wait).
        while let Some(done) = self.rounds.join_next_with_id().await {
            self.finish(done);
        }
    }

    /// Free places for fires, less those promised to rounds in flight.
    fn room(&self) -> usize {
        self.shared
            .permits
            .available_permits()
            .saturating_sub(self.reserved)
    }

    /// There is queued work that no round in flight holds.
    fn ready(&self) -> bool {
        !self.manual.is_empty()
            || !self.freeze_ends.is_empty()
            || self.order.iter().any(|id| !self.busy.contains(id))
    }

    fn take_queued(&mut self) {
        while let Ok(request) = self.requests.try_recv() {
            self.add(request);
        }
    }

    /// Queues a request.
    fn add(&mut self, request: Request) {
        match request {
            Request::Manual { fire_id } => {
                if self.manual_known.insert(fire_id) {
                    self.manual.push_back(fire_id);
                }
            }
            Request::Time { armed, at } => {
                let limit = self.late_limit();
                let reason = self.miss_reason();
                let work = self.work(armed.job_id);
                work.times.push_back((armed, at));
                work.fold_older(limit, reason);
            }
            Request::CatchUp {
                job_id,
                through,
                reason,
            } => fold(self.work(job_id), through, reason),
            Request::FreezeEnded { job_id, freeze } => self.freeze_ends.push_back((job_id, freeze)),
        }
    }

    fn work(&mut self, job_id: i64) -> &mut JobWork {
        if !self.jobs.contains_key(&job_id) {
            self.order.push_back(job_id);
        }
        self.jobs.entry(job_id).or_default()
    }

    /// One round: catch-ups first (they come before later times in each
    /// job's chain), then timer fires, then run-once requests.
    async fn round(&mut self) {
        if self.shared.skew_too_large() {
            tracing::error!(
                skew_ms = self.shared.skew_ms(),
                "clock skew against the database is too large: claiming nothing"
            );
            self.fold_all_times(MissReason::ClockSkew);
            self.fail_later();
            return;
        }
        if self.unreachable {
            // Everything queued while the database could not be reached
            // fell in the outage: one record per job stands for it (SPEC
            // §5's misfire rule), whether the database answers now or not.
            self.fold_all_times(MissReason::Outage);
        } else {
            self.fold_late();
        }
        let result = match self.take_catch_ups() {
            batch if !batch.is_empty() => self.catch_up(batch).await,
            _ if !self.freeze_ends.is_empty() => self.claim_freeze_ends().await,
            _ => match self.take_times() {
                batch if !batch.is_empty() => {
                    self.send_times(batch);
                    return;
                }
                _ => self.claim_manual().await,
            },
        };
        self.settle(result);
    }

    /// Notes how a round went: a failure holds claiming back a while.
    fn settle(&mut self, result: Result<(), StorageError>) {
        crate::observe::claim_queue(self.order.len() + self.manual.len());
        match result {
            Ok(()) => {
                self.unreachable = false;
                self.backoff = FIRST_BACKOFF;
            }
            Err(e) => {
                self.unreachable = e.is_unavailable();
                tracing::warn!(error = %e, queued = self.order.len(), "claiming failed; the queued fires are claimed or caught up when it works again");
                self.fail_later();
            }
        }
    }

    fn fail_later(&mut self) {
        self.retry_at = Some(tokio::time::Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Fire times before this are too late to claim as timer fires.
    fn late_limit(&self) -> DateTime<Utc> {
        let threshold = chrono::Duration::from_std(self.shared.config.misfire_threshold)
            .unwrap_or(chrono::Duration::seconds(5));
        self.shared.clock.now() - threshold
    }

    /// Why queued times are late: the database failed us, or places did.
    fn miss_reason(&self) -> MissReason {
        if self.unreachable {
            MissReason::Outage
        } else {
            MissReason::Overloaded
        }
    }

    /// Timer fires that waited past the misfire threshold become catch-ups.
    fn fold_late(&mut self) {
        let (limit, reason) = (self.late_limit(), self.miss_reason());
        for work in self.jobs.values_mut() {
            work.fold_older(limit, reason);
        }
    }

    fn fold_all_times(&mut self, reason: MissReason) {
        for work in self.jobs.values_mut() {
            work.fold_older(DateTime::<Utc>::MAX_UTC, reason);
        }
    }

    /// The catch-ups to claim now. While other jobs' fires are ready, an
    /// overload catch-up younger than [`RIPEN`] waits: its job's next
    /// times fold into it meanwhile, so past capacity one record stands
    /// for several times instead of each time costing a record of its own
    /// (which kept the claimer writing skips one by one and falling
    /// further behind).
    fn take_catch_ups(&mut self) -> Vec<(i64, DateTime<Utc>, MissReason)> {
        let now = tokio::time::Instant::now();
        let others_ready = self.order.iter().any(|id| self.has_ready_time(*id));
        let mut batch = Vec::new();
        for &job_id in &self.order {
            if batch.len() == BATCH {
                break;
            }
            if self.busy.contains(&job_id) {
                continue;
            }
            let Some(work) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            if ripening(others_ready, work.catch_up, work.catch_up_since, now) {
                continue;
            }
            if let Some((through, reason)) = work.catch_up.take() {
                work.catch_up_since = None;
                batch.push((job_id, through, reason));
            }
        }
        self.forget_done();
        batch
    }

    /// The next batch of timer fires: each job's earliest time, for jobs
    /// in no round and with no catch-up before it. While rounds are free,
    /// what is ready is split between them.
    fn take_times(&mut self) -> Vec<(Armed, DateTime<Utc>)> {
        let free_rounds = self.max_rounds.saturating_sub(self.rounds.len()).max(1);
        let ready = self
            .order
            .iter()
            .filter(|id| self.has_ready_time(**id))
            .count();
        let size = ready
            .div_ceil(free_rounds)
            .max(MIN_BATCH)
            .min(self.room())
            .min(BATCH);
        let mut batch = Vec::new();
        for &job_id in &self.order {
            if batch.len() >= size {
                break;
            }
            if self.busy.contains(&job_id) {
                continue;
            }
            if let Some(work) = self.jobs.get_mut(&job_id)
                && work.catch_up.is_none()
                && let Some(time) = work.times.pop_front()
            {
                batch.push(time);
            }
        }
        self.forget_done();
        batch
    }

    /// The job has a timer fire to claim now: in no round, and no
    /// catch-up before it.
    fn has_ready_time(&self, job_id: i64) -> bool {
        !self.busy.contains(&job_id)
            && self
                .jobs
                .get(&job_id)
                .is_some_and(|w| w.catch_up.is_none() && !w.times.is_empty())
    }

    fn forget_done(&mut self) {
        let jobs = &mut self.jobs;
        self.order.retain(|id| {
            let keep = jobs.get(id).is_some_and(|w| !w.is_empty());
            if !keep {
                jobs.remove(id);
            }
            keep
        });
    }

    fn context(&self) -> ClaimContext<'_> {
        context(&self.shared)
    }

    /// Sends a batch of timer fires to the database as a round of its own;
    /// [`Claimer::finish`] takes the outcomes when it is back.
    fn send_times(&mut self, batch: Vec<(Armed, DateTime<Utc>)>) {
        let (claims, slots) = self.timer_claims(&batch);
        // Taken before the claim reads the job: a change the loop applies
        // from then on reaches the fire (`crate::ahead`).
        let holds = claims
            .iter()
            .map(|c| {
                c.first
                    .starts_at
                    .map(|_| AheadBook::hold(&self.shared.ahead, c.job_id, self.feedback.clone()))
            })
            .collect();
        let jobs: Vec<i64> = batch.iter().map(|(armed, _)| armed.job_id).collect();
        self.busy.extend(jobs.iter().copied());
        self.reserved += batch.len();
        let shared = Arc::clone(&self.shared);
        let handle = self.rounds.spawn(async move {
            let result = shared
                .store
                .fires()
                .claim_times(&claims, &context(&shared))
                .await;
            TimeRound {
                batch,
                slots,
                holds,
                claims,
                result,
            }
        });
        self.round_jobs.insert(handle.id(), jobs);
        crate::observe::claim_queue(self.order.len() + self.manual.len());
    }

    /// Takes a round back: its jobs are free again and its outcomes are
    /// acted on. On an error every one of its fires is queued again.
    fn finish(&mut self, done: Result<(tokio::task::Id, TimeRound), tokio::task::JoinError>) {
        let id = match &done {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let jobs = self.round_jobs.remove(&id).unwrap_or_default();
        self.reserved = self.reserved.saturating_sub(jobs.len());
        for job_id in jobs {
            self.busy.remove(&job_id);
        }
        let round = match done {
            Ok((_, round)) => round,
            Err(e) => {
                // Its fires have no record here; the next claim of each job
                // finds the hole and catches it up.
                tracing::error!(error = %e, "a claim round did not finish");
                return;
            }
        };
        let result = self.claimed_times(round);
        self.settle(result);
    }

    /// Acts on the outcomes of a round of timer claims.
    fn claimed_times(&mut self, round: TimeRound) -> Result<(), StorageError> {
        let TimeRound {
            batch,
            slots,
            holds,
            claims,
            result,
        } = round;
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // Each was its job's earliest queued time: back to the front.
                for (armed, at) in batch {
                    self.work(armed.job_id).times.push_front((armed, at));
                }
                return Err(e);
            }
        };
        for ((((armed, at), slot), hold), (claim, outcome)) in batch
            .into_iter()
            .zip(slots)
            .zip(holds)
            .zip(claims.iter().zip(outcomes))
        {
            // What this time followed is spent; a gap below may set it anew.
            if self
                .follows
                .get(&armed.job_id)
                .is_some_and(|(time, _)| *time == at)
            {
                self.follows.remove(&armed.job_id);
            }
            // A fire claimed ahead is decided at its time: counted there.
            let ahead = hold.is_some()
                && matches!(&outcome, ClaimOutcome::Claimed(c) if c.status == RunStatus::Running);
            if !ahead {
                crate::observe::claimed(Trigger::Schedule, &outcome);
            }
            match outcome {
                ClaimOutcome::Claimed(claimed) => {
                    let start = armed.start_at(at);
                    self.start(*claimed, slot, hold, None, start)
                }
                ClaimOutcome::Taken => {}
                ClaimOutcome::Stale => {
                    let _ = self.feedback.send(Feedback::Stale(armed.job_id));
                }
                ClaimOutcome::Gap { tip } => {
                    let job_id = armed.job_id;
                    match (tip, claim.after) {
                        // A record reaching past this time's predecessor
                        // (a freeze window's, written under the schedule
                        // before) covers it: this time follows that record.
                        // A catch-up would find nothing to record.
                        (Some(tip), Some(after)) if tip >= after && tip < at => {
                            self.follows.insert(job_id, (at, tip));
                        }
                        // Earlier times have no record: catch them up,
                        // then claim this one.
                        _ => self.add(Request::CatchUp {
                            job_id,
                            through: claim.after.unwrap_or(at),
                            reason: MissReason::Downtime,
                        }),
                    }
                    self.work(job_id).times.push_front((armed, at));
                }
            }
        }
        Ok(())
    }

    /// The claims of timer fires, with the local slots of non-concurrent
    /// jobs taken (a busy slot makes the first run a skip). A fire claimed
    /// ahead of its time is claimed running and meets the overlap rule at
    /// its time (`crate::ahead`).
    fn timer_claims(
        &self,
        batch: &[(Armed, DateTime<Utc>)],
    ) -> (Vec<TimeClaim>, Vec<Option<Slot>>) {
        let mut slots = Vec::with_capacity(batch.len());
        let mut claims = Vec::with_capacity(batch.len());
        let now = self.shared.clock.now();
        for (armed, at) in batch {
            let start = armed.start_at(*at);
            let ahead = !armed.ahead.is_zero() && start > now;
            // A fire claimed ahead takes its slot at its time.
            let slot = (!armed.allow_concurrent && !ahead)
                .then(|| self.shared.slots.try_take(armed.job_id))
                .flatten();
            // A job whose fires wait their turn is claimed running; its
            // fire waits for the slot.
            let first = if ahead {
                FirstRun::running().starting_at(start)
            } else if !armed.allow_concurrent && !armed.waits && slot.is_none() {
                FirstRun::skipped(texts::SKIP_OVERLAP)
            } else {
                FirstRun::running()
            };
            slots.push(slot);
            claims.push(TimeClaim {
                job_id: armed.job_id,
                trigger: Trigger::Schedule,
                first_at: *at,
                scheduled_at: *at,
                after: self
                    .follows
                    .get(&armed.job_id)
                    .filter(|(time, _)| time == at)
                    .map(|(_, tip)| *tip)
                    .or_else(|| previous_time(&armed.schedule, *at)),
                schedule_from: armed.schedule_from,
                first,
                // A backup wakes after its primary should have claimed.
                expect_taken: !armed.delay.is_zero(),
            });
        }
        (claims, slots)
    }

    /// Records each job's missed times up to its `through` by its misfire
    /// policy: one skipped record, or one catch-up run.
    async fn catch_up(
        &mut self,
        batch: Vec<(i64, DateTime<Utc>, MissReason)>,
    ) -> Result<(), StorageError> {
        let ids: Vec<i64> = batch.iter().map(|(id, _, _)| *id).collect();
        let store = &self.shared.store;
        let read = async {
            let jobs = store.jobs().get_many(&ids).await?;
            let tips = store.fires().tips(&ids).await?;
            // Read after the jobs: a calendar edited in between moved the
            // jobs' schedule_from, so their claims come back stale.
            let calendars =
                schedules::user_calendars(store, jobs.values().map(|j| &j.time_rules)).await?;
            Ok::<_, StorageError>((jobs, tips, calendars))
        };
        let (jobs, tips, calendars) = match read.await {
            Ok(read) => read,
            Err(e) => {
                self.requeue_catch_ups(batch);
                return Err(e);
            }
        };
        let planned: Vec<Planned> = batch
            .into_iter()
            .filter_map(|(job_id, through, reason)| {
                let job = jobs.get(&job_id).filter(|j| j.enabled)?;
                self.plan(job, &calendars, tips.get(&job_id).copied(), through, reason)
            })
            .collect();
        if planned.is_empty() {
            return Ok(());
        }
        let claims: Vec<TimeClaim> = planned.iter().map(|p| p.claim.clone()).collect();
        let outcomes = match self
            .shared
            .store
            .fires()
            .claim_times(&claims, &self.context())
            .await
        {
            Ok(outcomes) => outcomes,
            Err(e) => {
                self.requeue_catch_ups(planned.into_iter().map(|p| p.asked).collect());
                return Err(e);
            }
        };
        for (outcome, planned) in outcomes.into_iter().zip(planned) {
            let (job_id, through, reason) = planned.asked;
            if planned.frozen {
                // Frozen times were not missed: counted as the schedule's.
                crate::observe::claimed(Trigger::Schedule, &outcome);
            } else {
                crate::observe::caught_up(&outcome, reason, planned.missed);
            }
            // A record that stopped at a freeze window (or stood for one)
            // leaves later times to the next record.
            if planned.more && matches!(outcome, ClaimOutcome::Claimed(_) | ClaimOutcome::Taken) {
                self.add(Request::CatchUp {
                    job_id,
                    through,
                    reason,
                });
            }
            match outcome {
                ClaimOutcome::Claimed(claimed) => {
                    let start = claimed.scheduled_at;
                    self.start(*claimed, None, None, planned.note, start)
                }
                ClaimOutcome::Taken => {}
                ClaimOutcome::Stale => {
                    let _ = self.feedback.send(Feedback::Stale(job_id));
                }
                // Another record extended the chain meanwhile: read again.
                ClaimOutcome::Gap { .. } => self.add(Request::CatchUp {
                    job_id,
                    through,
                    reason,
                }),
            }
        }
        Ok(())
    }

    /// The record standing for a job's times after its last record (or the
    /// start of its current schedule) up to `through`, by its misfire
    /// policy; `None` when it missed nothing. The start, not the job's last
    /// write: a pause resumed late, or an edit of its remark, leaves the
    /// times since the start to record.
    fn plan(
        &mut self,
        job: &JobRecord,
        calendars: &UserCalendars,
        tip: Option<DateTime<Utc>>,
        through: DateTime<Utc>,
        reason: MissReason,
    ) -> Option<Planned> {
        let tz = self.shared.zone_of(job.timezone);
        let schedule = schedules::build(job.id, job.cron.clone(), tz, &job.time_rules, calendars)?;
        let from = tip.map_or(job.schedule_from, |tip| tip.max(job.schedule_from));
        let freezes = self.shared.freezes.current();
        let (missed, freeze) = first_span(
            &schedule,
            &freezes,
            (job.id, &job.group, &job.handler),
            from,
            through,
        )?;
        let more = missed.last < through;
        if let Some(freeze) = freeze {
            // One skipped record for every time the window holds.
            tracing::info!(
                job = job.id,
                freeze = freeze.id,
                count = missed.count,
                "fire times frozen"
            );
            return Some(Planned {
                claim: TimeClaim {
                    job_id: job.id,
                    trigger: Trigger::Schedule,
                    first_at: missed.first,
                    scheduled_at: missed.last,
                    after: Some(from),
                    schedule_from: job.schedule_from,
                    first: FirstRun::skipped(frozen_text(freeze, &missed, tz)),
                    expect_taken: false,
                },
                note: None,
                asked: (job.id, through, reason),
                missed: missed.count,
                more,
                frozen: true,
            });
        }
        tracing::info!(job = job.id, count = missed.count, first = %missed.first, last = %missed.last, ?reason, "missed fires");
        let run_once = job.misfire_policy == MisfirePolicy::RunOnce;
        let grace = job.time_rules.misfire_grace_ms;
        // `misfireGraceMs`: a catch-up whose last missed time is older than
        // the window is one skipped record saying so.
        let late = run_once && !within_grace(&missed, grace, self.shared.clock.now());
        let run_once = run_once && !late;
        let first = if run_once {
            FirstRun::running()
        } else if late {
            FirstRun::skipped(past_grace_text(&missed, reason, tz, grace))
        } else {
            FirstRun::skipped(missed_text(&missed, reason, tz, false))
        };
        Some(Planned {
            claim: TimeClaim {
                job_id: job.id,
                trigger: Trigger::Misfire,
                first_at: missed.first,
                scheduled_at: missed.last,
                after: Some(from),
                schedule_from: job.schedule_from,
                first,
                expect_taken: false,
            },
            note: run_once.then(|| missed_text(&missed, reason, tz, true)),
            asked: (job.id, through, reason),
            missed: missed.count,
            more,
            frozen: false,
        })
    }

    fn requeue_catch_ups(&mut self, batch: Vec<(i64, DateTime<Utc>, MissReason)>) {
        for (job_id, through, reason) in batch {
            self.add(Request::CatchUp {
                job_id,
                through,
                reason,
            });
        }
    }

    /// Applies the misfire policy at the end of freeze windows
    /// (`crate::freezes`); on an error the batch is queued again.
    async fn claim_freeze_ends(&mut self) -> Result<(), StorageError> {
        let batch: Vec<(i64, Freeze)> = self.freeze_ends.drain(..).collect();
        let started = match crate::freezes::claim_end_catch_ups(
            &self.shared,
            &batch,
            &self.context(),
        )
        .await
        {
            Ok(started) => started,
            Err(e) => {
                self.freeze_ends.extend(batch);
                return Err(e);
            }
        };
        for (claimed, note) in started {
            let start = claimed.scheduled_at;
            self.start(claimed, None, None, Some(note), start);
        }
        Ok(())
    }

    /// Takes queued run-once requests while places are free.
    async fn claim_manual(&mut self) -> Result<(), StorageError> {
        let room = self.room().min(BATCH);
        let take = room.min(self.manual.len());
        if take == 0 {
            return Ok(());
        }
        let ids: Vec<i64> = self.manual.drain(..take).collect();
        let claims: Vec<ManualClaim> = ids
            .iter()
            .map(|&fire_id| ManualClaim {
                fire_id,
                first: FirstRun::running(),
            })
            .collect();
        let outcomes = match self
            .shared
            .store
            .fires()
            .claim_manual(&claims, &self.context())
            .await
        {
            Ok(outcomes) => outcomes,
            Err(e) => {
                for id in ids.into_iter().rev() {
                    self.manual.push_front(id);
                }
                return Err(e);
            }
        };
        for (id, outcome) in ids.into_iter().zip(outcomes) {
            self.manual_known.remove(&id);
            let trigger = match &outcome {
                ClaimOutcome::Claimed(claimed) => claimed.trigger,
                _ => Trigger::Manual,
            };
            crate::observe::claimed(trigger, &outcome);
            if let ClaimOutcome::Claimed(claimed) = outcome {
                let start = claimed.scheduled_at;
                self.start(*claimed, None, None, None, start);
            }
        }
        Ok(())
    }

    /// Starts the fire of a claimed run that is to run (a skip or a failure
    /// decided at the claim is already recorded). A time claim was sized to
    /// the free places; a catch-up run beyond them waits for one. `due` is
    /// when it was to start (a timer fire's nominal time plus its jitter).
    fn start(
        &mut self,
        claimed: Claimed,
        slot: Option<Slot>,
        ahead: Option<Hold>,
        note: Option<String>,
        due: DateTime<Utc>,
    ) {
        // A run-once fire ended at its claim reports that end; a backfill's
        // lets the next one go.
        let manual = claimed.trigger == Trigger::Manual;
        let backfill = claimed.trigger == Trigger::Backfill;
        let Some(job) = claimed.job else {
            crate::observe::ended_at_claim(None, claimed.status);
            if manual {
                crate::callbacks::report(&self.shared, claimed.fire_id);
            }
            if backfill {
                crate::backfill::fire_ended(&self.shared, &self.feedback, claimed.fire_id);
            }
            return;
        };
        if claimed.status != RunStatus::Running {
            crate::observe::ended_at_claim(Some(&job.handler), claimed.status);
            if manual {
                crate::callbacks::report(&self.shared, claimed.fire_id);
            }
            if backfill {
                crate::backfill::fire_ended(&self.shared, &self.feedback, claimed.fire_id);
            }
            return;
        }
        if backfill {
            self.shared.backfill_fires.add(claimed.fire_id);
        }
        let feedback = self.feedback.clone();
        let shared = Arc::clone(&self.shared);
        let permit = Arc::clone(&shared.permits).try_acquire_owned().ok();
        let stop = self.stop.clone();
        self.shared.tracker.spawn(async move {
            let permit = match permit {
                Some(permit) => permit,
                None => match Arc::clone(&shared.permits).acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let fire = Fire {
                shared,
                job,
                fire_id: claimed.fire_id,
                trigger: claimed.trigger,
                scheduled_at: claimed.scheduled_at,
                due,
                run_id: claimed.run_id,
                attempt: 1,
                note,
                slot,
                lock: None,
                ahead,
                busy_at_claim: claimed.busy,
                _permit: permit,
            };
            // Boxed: it may read the database (a run-once fire's trace
            // parent), and this task would otherwise keep room for that
            // read while the fire waits and runs.
            let span = Box::pin(crate::observe::fire_span(&fire)).await;
            let ended = backfill.then(|| (Arc::clone(&fire.shared), fire.fire_id));
            fire.run(stop).instrument(span).await;
            if let Some((shared, fire_id)) = ended {
                crate::backfill::fire_ended(&shared, &feedback, fire_id);
            }
        });
    }
}

/// What a claim says about this instance and its texts.
fn context(shared: &Shared) -> ClaimContext<'_> {
    ClaimContext {
        instance: &shared.config.instance,
        now: shared.clock.now(),
        running_elsewhere: shared
            .config
            .cluster
            .as_ref()
            .map(|_| texts::SKIP_ELSEWHERE),
        job_deleted: texts::JOB_DELETED,
    }
}

/// A catch-up ready to claim.
struct Planned {
    claim: TimeClaim,
    /// The first log line of a `run_once` catch-up run.
    note: Option<String>,
    /// The request it answers, to queue again when the claim fails.
    asked: (i64, DateTime<Utc>, MissReason),
    /// How many fire times it stands for.
    missed: usize,
    /// It stops before `through` (at a freeze window, or standing for
    /// one): the rest is caught up next.
    more: bool,
    /// It is a freeze window's record, not a miss.
    frozen: bool,
}

/// A catch-up that waits to gather more times: an `overloaded` one younger
/// than [`RIPEN`], while other jobs' fires are ready to claim (with nothing
/// else to do, waiting would only delay the record).
fn ripening(
    others_ready: bool,
    catch_up: Option<(DateTime<Utc>, MissReason)>,
    since: Option<tokio::time::Instant>,
    now: tokio::time::Instant,
) -> bool {
    others_ready
        && catch_up.is_some_and(|(_, reason)| reason == MissReason::Overloaded)
        && since.is_some_and(|since| now.saturating_duration_since(since) < RIPEN)
}

/// Folds a fire time into the job's catch-up.
fn fold(work: &mut JobWork, through: DateTime<Utc>, reason: MissReason) {
    work.catch_up = Some(match work.catch_up {
        Some((earlier, first_reason)) => (earlier.max(through), first_reason),
        None => {
            work.catch_up_since = Some(tokio::time::Instant::now());
            (through, reason)
        }
    });
}

/// The schedule's fire time before `at` (the predecessor of a timer fire):
/// the calendar's days and the active window count, so the chain a timer
/// claim extends is the one catch-ups write.
fn previous_time(schedule: &Schedule, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    schedule.last_at_or_before(at - chrono::Duration::milliseconds(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_catch_ups_wait_to_gather() {
        let now = tokio::time::Instant::now();
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let young = Some(now);
        let old = now.checked_sub(RIPEN);
        let cases = [
            // (others ready, reason, since, waits)
            (true, MissReason::Overloaded, young, true),
            (true, MissReason::Overloaded, old, false),
            (false, MissReason::Overloaded, young, false),
            (true, MissReason::Outage, young, false),
            (true, MissReason::Downtime, young, false),
            (true, MissReason::ClockSkew, young, false),
            (true, MissReason::Stalled, young, false),
            (true, MissReason::Overloaded, None, false),
        ];
        for (others, reason, since, waits) in cases {
            assert_eq!(
                ripening(others, Some((at, reason)), since, now),
                waits,
                "{others} {reason:?} {since:?}"
            );
        }
        assert!(!ripening(true, None, young, now));
    }

    #[test]
    fn a_catch_up_gathers_from_its_first_fold() {
        let mut work = JobWork::default();
        let t = |s: i64| DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::seconds(s);
        fold(&mut work, t(1), MissReason::Overloaded);
        let since = work.catch_up_since;
        assert!(since.is_some());
        fold(&mut work, t(3), MissReason::Outage);
        fold(&mut work, t(2), MissReason::Overloaded);
        // Later folds widen it; its reason and start stay the first's.
        assert_eq!(work.catch_up, Some((t(3), MissReason::Overloaded)));
        assert_eq!(work.catch_up_since, since);
    }
}

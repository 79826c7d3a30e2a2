//! Cluster mode: membership by heart-beats in the database, job ownership
//! by rendezvous hashing, the database clock as the one clock, and the
//! instance-lost sweep.
//!
//! Each job is armed on its top [`ClusterConfig::replicas`] live workers by
//! rendezvous score, so the work per fire does not grow with the number of
//! workers; the backup claims a little later and usually finds the fire
//! taken. When a worker dies, the backup keeps firing its jobs at once, and
//! the unique claim keeps doubles out during any hand-over.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_coord::Coord;
use qiwu_storage::Store;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::error::WorkerError;
use crate::texts;

/// How the cluster part of a worker behaves.
#[derive(Clone)]
pub struct ClusterConfig {
    pub coord: Coord,
    /// The system clock corrected to the database's; give it to the engine.
    pub clock: Arc<DbClock>,
    /// Lock TTL; renewals happen every third of it.
    pub lock_ttl: Duration,
    pub heartbeat_every: Duration,
    /// A worker silent for this long is dead: its runs are closed.
    pub dead_after: Duration,
    /// How many workers arm each job (primary plus backups).
    pub replicas: usize,
    /// How long a backup waits before it tries to claim.
    pub backup_delay: Duration,
    /// Beyond this clock skew against the database the worker claims nothing.
    pub max_skew: Duration,
    /// How often pending "run once" fires are looked for, in case a message
    /// was lost.
    pub pending_every: Duration,
}

impl ClusterConfig {
    pub fn new(coord: Coord) -> ClusterConfig {
        ClusterConfig {
            coord,
            clock: Arc::new(DbClock::default()),
            lock_ttl: Duration::from_secs(10),
            heartbeat_every: Duration::from_secs(3),
            dead_after: Duration::from_secs(15),
            replicas: 2,
            backup_delay: Duration::from_millis(400),
            max_skew: Duration::from_secs(2),
            pending_every: Duration::from_secs(5),
        }
    }
}

/// Who is alive, as this worker last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    /// Live worker ids, sorted.
    pub live: Vec<String>,
}

/// FNV-1a over the instance id and the job id: a hash every build of the
/// worker computes alike (std's `DefaultHasher` may change between Rust
/// releases, and workers built apart must agree on owners).
fn score(instance: &str, job_id: i64) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut h = OFFSET;
    for b in instance.bytes().chain([0xff]).chain(job_id.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    // A final mix spreads FNV's weak low bits.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl Membership {
    /// This instance's rank for a job: 0 primary, 1 first backup…; `None`
    /// when it is not among the job's owners.
    pub fn rank(&self, instance: &str, job_id: i64, replicas: usize) -> Option<usize> {
        if self.live.is_empty() {
            // Alone and not yet registered: own everything.
            return Some(0);
        }
        self.owners(job_id, replicas)
            .iter()
            .position(|i| *i == instance)
    }

    /// The job's owners among the live workers, primary first.
    pub fn owners(&self, job_id: i64, replicas: usize) -> Vec<&str> {
        let mut ranked: Vec<(u64, &str)> = self
            .live
            .iter()
            .map(|i| (score(i, job_id), i.as_str()))
            .collect();
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        ranked
            .into_iter()
            .take(replicas.max(1))
            .map(|(_, i)| i)
            .collect()
    }
}

/// The system clock corrected by the measured offset to the database's.
#[derive(Debug, Default)]
pub struct DbClock {
    offset_ms: AtomicI64,
}

impl DbClock {
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }
}

impl Clock for DbClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.offset_ms())
    }
}

/// Measures this machine's clock against the database's: local minus
/// database, with the query's round trip split evenly; answers the skew
/// and the round trip (ms), which bounds the skew's error.
async fn measure_skew(store: &Store) -> Result<Sample, WorkerError> {
    let before = Utc::now();
    let db = store.cluster().database_now().await?;
    let after = Utc::now();
    let midpoint = before + (after - before) / 2;
    Ok(Sample {
        skew_ms: (midpoint - db).num_milliseconds(),
        round_trip_ms: (after - before).num_milliseconds(),
    })
}

/// One skew measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub skew_ms: i64,
    pub round_trip_ms: i64,
}

/// How many beats' samples the skew estimate looks at.
const SKEW_SAMPLES: usize = 8;

/// The skew estimate: the sample with the shortest round trip among the
/// last few beats. On a loaded machine a slow answer splits unevenly
/// (tens of ms), and taking each sample as it came made the clock jump
/// between beats: a fire then started or ended early by its own clock.
/// A real clock step is still followed within [`SKEW_SAMPLES`] beats.
#[derive(Debug, Default)]
pub(crate) struct SkewFilter {
    samples: std::collections::VecDeque<Sample>,
}

impl SkewFilter {
    /// Adds a sample; answers the estimate.
    pub(crate) fn add(&mut self, sample: Sample) -> i64 {
        if self.samples.len() == SKEW_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.samples
            .iter()
            .min_by_key(|s| s.round_trip_ms)
            .map_or(sample.skew_ms, |s| s.skew_ms)
    }
}

/// Everything the heart-beat loop needs.
pub(crate) struct Heartbeat {
    pub store: Store,
    pub config: ClusterConfig,
    pub instance: String,
    pub timezone: String,
    pub skew_ms: Arc<AtomicI64>,
    pub membership: watch::Sender<Membership>,
}

/// Runs heart-beats until `shutdown`: records this instance, measures the
/// skew, publishes the live set, and closes the runs of dead instances.
pub(crate) async fn heartbeat_loop(hb: Heartbeat, mut shutdown: watch::Receiver<bool>) {
    let started = Utc::now();
    let mut sight = Sight::default();
    let mut skews = SkewFilter::default();
    loop {
        match beat(&hb, started, &sight, &mut skews).await {
            Ok(now) => {
                sight.saw(now, hb.config.heartbeat_every);
                let live = hb.membership.borrow().live.len();
                crate::observe::heartbeat(true, hb.skew_ms.load(Ordering::Relaxed), Some(live));
            }
            Err(e) => {
                crate::observe::heartbeat(false, 0, None);
                sight.lost();
                tracing::warn!(error = %e, "heart-beat failed");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(hb.config.heartbeat_every) => {}
            () = crate::context::shutting_down(&mut shutdown) => break,
        }
    }
    // The engine unregisters this instance once its runs are closed.
}

/// How long this worker has been heart-beating without a break, on the
/// database's clock: it judges others lost only after it has itself been
/// seen for longer than the loss threshold, so an outage that silenced
/// everyone does not make everyone dead.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sight {
    since: Option<DateTime<Utc>>,
    last: Option<DateTime<Utc>>,
}

impl Sight {
    /// A beat landed at `now` (database time). Beats further apart than
    /// twice the period (a stalled process) start a new streak.
    pub(crate) fn saw(&mut self, now: DateTime<Utc>, every: Duration) {
        let limit = chrono::Duration::from_std(every * 2).unwrap_or(chrono::Duration::seconds(6));
        match self.last {
            Some(last) if now - last <= limit => {}
            _ => self.since = Some(now),
        }
        self.last = Some(now);
    }

    pub(crate) fn lost(&mut self) {
        *self = Sight::default();
    }

    /// True once the streak is longer than `dead_after` at `now`.
    pub(crate) fn may_judge(&self, now: DateTime<Utc>, dead_after: chrono::Duration) -> bool {
        self.since.is_some_and(|since| now - since > dead_after)
    }
}

/// One heart-beat; returns its database time.
async fn beat(
    hb: &Heartbeat,
    started: DateTime<Utc>,
    sight: &Sight,
    skews: &mut SkewFilter,
) -> Result<DateTime<Utc>, WorkerError> {
    let (store, config, clock) = (&hb.store, &hb.config, &hb.config.clock);
    let skew = skews.add(measure_skew(store).await?);
    hb.skew_ms.store(skew, Ordering::Relaxed);
    clock.offset_ms.store(-skew, Ordering::Relaxed);
    let now = clock.now();
    let cluster = store.cluster();
    cluster
        .heartbeat(&hb.instance, "worker", &hb.timezone, started, now)
        .await?;
    let dead_after =
        chrono::Duration::from_std(config.dead_after).unwrap_or(chrono::Duration::seconds(15));
    let since = now - dead_after;
    if sight.may_judge(now, dead_after) {
        close_lost(store, since, now).await?;
    }
    let mut live: Vec<String> = cluster
        .live(since)
        .await?
        .into_iter()
        .filter(|i| i.role == "worker")
        .map(|i| i.id)
        .collect();
    live.sort();
    hb.membership.send_if_modified(|current| {
        if current.live == live {
            false
        } else {
            current.live = live;
            true
        }
    });
    Ok(now)
}

/// Closes the runs of instances silent since `since`, and of instances with
/// no heart-beat row at all, marking them swept (a real end still wins).
async fn close_lost(
    store: &Store,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), WorkerError> {
    let cluster = store.cluster();
    let dead = cluster.dead(since).await?;
    if !dead.is_empty() {
        let ids: Vec<String> = dead.iter().map(|d| d.id.clone()).collect();
        let closed = store
            .fires()
            .close_running(Some(&ids), texts::REASON_LOST, now, true)
            .await?;
        if closed > 0 {
            crate::callbacks::swept(store, Some(&ids), texts::REASON_LOST, now).await;
        }
        for id in &ids {
            cluster.remove(id).await?;
        }
        tracing::warn!(instances = ?ids, closed, "closed the runs of lost instances");
    }
    let live_ids: Vec<String> = cluster
        .live(since)
        .await?
        .into_iter()
        .map(|i| i.id)
        .collect();
    let orphans = store
        .fires()
        .close_orphans(&live_ids, since, texts::REASON_ORPHAN, now)
        .await?;
    if orphans > 0 {
        crate::callbacks::swept(store, None, texts::REASON_ORPHAN, now).await;
        tracing::warn!(
            closed = orphans,
            "closed runs of instances without a heart-beat"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skew_follows_the_shortest_round_trip_of_the_last_beats() {
        let sample = |skew_ms, round_trip_ms| Sample {
            skew_ms,
            round_trip_ms,
        };
        let mut filter = SkewFilter::default();
        // (sample, estimate after it)
        let steps = [
            (sample(3, 4), 3),
            // A slow, uneven answer does not move the clock.
            (sample(-45, 90), 3),
            (sample(1, 2), 1),
            (sample(20, 30), 1),
        ];
        for (at, (s, want)) in steps.into_iter().enumerate() {
            assert_eq!(filter.add(s), want, "step {at}");
        }
        // A real step of the clock wins once the better samples aged out.
        let mut last = 0;
        for _ in 0..SKEW_SAMPLES {
            last = filter.add(sample(500, 5));
        }
        assert_eq!(last, 500);
    }

    #[test]
    fn each_job_has_exactly_the_replicas_as_owners() {
        let m = Membership {
            live: vec!["a".into(), "b".into(), "c".into(), "d".into()],
        };
        let mut primaries = std::collections::HashMap::new();
        for job in 0..1000 {
            let ranks: Vec<Option<usize>> = m.live.iter().map(|i| m.rank(i, job, 2)).collect();
            assert_eq!(
                ranks.iter().filter(|r| **r == Some(0)).count(),
                1,
                "job {job}"
            );
            assert_eq!(
                ranks.iter().filter(|r| **r == Some(1)).count(),
                1,
                "job {job}"
            );
            assert_eq!(ranks.iter().filter(|r| r.is_none()).count(), 2, "job {job}");
            let primary = m
                .live
                .iter()
                .find(|i| m.rank(i, job, 2) == Some(0))
                .cloned();
            *primaries.entry(primary).or_insert(0) += 1;
        }
        // The load spreads over every worker.
        assert_eq!(primaries.len(), 4);
        assert!(primaries.values().all(|n| *n > 150), "{primaries:?}");
    }

    #[test]
    fn losing_a_worker_moves_only_its_jobs() {
        let before = Membership {
            live: vec!["a".into(), "b".into(), "c".into()],
        };
        let after = Membership {
            live: vec!["a".into(), "c".into()],
        };
        for job in 0..500 {
            let owner_before = before
                .live
                .iter()
                .find(|i| before.rank(i, job, 1) == Some(0))
                .cloned();
            let owner_after = after
                .live
                .iter()
                .find(|i| after.rank(i, job, 1) == Some(0))
                .cloned();
            if owner_before.as_deref() != Some("b") {
                assert_eq!(owner_before, owner_after, "job {job} moved needlessly");
            }
        }
        // Alone and unregistered, a worker owns everything.
        assert_eq!(Membership::default().rank("x", 7, 2), Some(0));
    }

    #[test]
    fn a_worker_judges_others_only_after_being_seen_long_enough() {
        let t0 = DateTime::from_timestamp(1_764_000_000, 0).expect("time");
        let s = |secs: i64| t0 + chrono::Duration::seconds(secs);
        let every = Duration::from_secs(3);
        let dead_after = chrono::Duration::seconds(15);
        let mut sight = Sight::default();
        assert!(!sight.may_judge(s(0), dead_after));
        for beat in 0..=5 {
            sight.saw(s(beat * 3), every);
        }
        assert!(
            !sight.may_judge(s(15), dead_after),
            "15 s seen is not more than 15 s"
        );
        sight.saw(s(18), every);
        assert!(sight.may_judge(s(18), dead_after));
        // An outage breaks the streak: it starts again from the next beat.
        sight.lost();
        sight.saw(s(40), every);
        assert!(!sight.may_judge(s(50), dead_after));
        // So does a stall between two beats that both landed.
        let mut stalled = Sight::default();
        stalled.saw(s(0), every);
        stalled.saw(s(3), every);
        stalled.saw(s(30), every);
        assert!(!stalled.may_judge(s(40), dead_after));
        assert!(stalled.may_judge(s(46), dead_after));
    }
}

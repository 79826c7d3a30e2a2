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
use qiwu_storage::{Coord, Store};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::error::WorkerError;

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
        let mut ranked: Vec<(u64, &str)> = self
            .live
            .iter()
            .map(|i| (score(i, job_id), i.as_str()))
            .collect();
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        ranked
            .iter()
            .take(replicas.max(1))
            .position(|(_, i)| *i == instance)
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
/// database, with the query's round trip split evenly.
async fn measure_skew(store: &Store) -> Result<i64, WorkerError> {
    let before = Utc::now();
    let db = store.cluster().database_now().await?;
    let after = Utc::now();
    let midpoint = before + (after - before) / 2;
    Ok((midpoint - db).num_milliseconds())
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
    loop {
        if let Err(e) = beat(&hb, started).await {
            tracing::warn!(error = %e, "heart-beat failed");
        }
        tokio::select! {
            () = tokio::time::sleep(hb.config.heartbeat_every) => {}
            () = crate::context::shutting_down(&mut shutdown) => break,
        }
    }
    // The engine unregisters this instance once its runs are closed.
}

async fn beat(hb: &Heartbeat, started: DateTime<Utc>) -> Result<(), WorkerError> {
    let (store, config, clock) = (&hb.store, &hb.config, &hb.config.clock);
    let (instance, timezone, skew_ms, membership) =
        (&hb.instance, &hb.timezone, &hb.skew_ms, &hb.membership);
    let skew = measure_skew(store).await?;
    skew_ms.store(skew, Ordering::Relaxed);
    clock.offset_ms.store(-skew, Ordering::Relaxed);
    let now = clock.now();
    let cluster = store.cluster();
    cluster
        .heartbeat(instance, "worker", timezone, started, now)
        .await?;
    let dead_after =
        chrono::Duration::from_std(config.dead_after).unwrap_or(chrono::Duration::seconds(15));
    let since = now - dead_after;
    let dead = cluster.dead(since).await?;
    if !dead.is_empty() {
        let ids: Vec<String> = dead.iter().map(|d| d.id.clone()).collect();
        let closed = store
            .fires()
            .close_running(
                Some(&ids),
                "实例失联（停止心跳），执行被关闭 / Instance lost (stopped heart-beating); the run was closed",
                now,
            )
            .await?;
        for id in &ids {
            cluster.remove(id).await?;
        }
        tracing::warn!(instances = ?ids, closed, "closed the runs of lost instances");
    }
    let live_all = cluster.live(since).await?;
    // Runs of instances with no heart-beat row at all (gone after
    // unregistering, or from an older id) are closed too.
    let live_ids: Vec<String> = live_all.iter().map(|i| i.id.clone()).collect();
    let orphans = store
        .fires()
        .close_orphans(
            &live_ids,
            since,
            "实例失联（没有心跳记录），执行被关闭 / Instance lost (no heart-beat record); the run was closed",
            now,
        )
        .await?;
    if orphans > 0 {
        tracing::warn!(
            closed = orphans,
            "closed runs of instances without a heart-beat"
        );
    }
    let mut live: Vec<String> = live_all
        .into_iter()
        .filter(|i| i.role == "worker")
        .map(|i| i.id)
        .collect();
    live.sort();
    membership.send_if_modified(|current| {
        if current.live == live {
            false
        } else {
            current.live = live;
            true
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

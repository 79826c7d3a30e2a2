//! Coordination over Redis between the processes of a cluster: change
//! messages on a channel, and job locks with a TTL, renewal and a fencing
//! token.
//!
//! Redis is an accelerator and a guard, never the ledger: a lost message is
//! repaired by reconciliation against the database, and a fire is still
//! claimed exactly once by the database's unique key. Nothing here reads
//! or writes the database: this crate knows Redis only.

mod error;
pub mod stats;

use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use deadpool_redis::{Config, Pool, Runtime};
use futures_util::StreamExt;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};

pub use error::CoordError;

/// The channel every worker listens on.
pub const CHANGES_CHANNEL: &str = "qiwu:changes";
const LOCK_PREFIX: &str = "qiwu:lock:job:";
const FENCE_PREFIX: &str = "qiwu:fence:job:";
/// How long one Redis command may take before it counts as failed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// A change another process must apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum Change {
    /// A job was created, edited, enabled, disabled or deleted.
    Job(i64),
    /// A "run once" fire was queued.
    Fire(i64),
    /// Someone asked to cancel this running run: its instance checks the
    /// database (which holds the request) and stops it.
    Cancel(i64),
    /// A freeze window was created, edited or deleted: workers read the
    /// freezes again.
    Freeze(i64),
}

/// A held job lock. `token` increases with every acquisition of the job's
/// lock (a fencing token): a holder with a smaller token is stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLock {
    pub job_id: i64,
    pub token: i64,
    key: String,
    value: String,
}

/// A connection pool plus the client that opens pub/sub connections.
#[derive(Clone)]
pub struct Coord {
    pool: Pool,
    client: redis::Client,
    /// One connection taken from the pool and shared by every command: it
    /// multiplexes, so concurrent commands go out together. Checking one
    /// out per command cost a round trip of its own (the pool pings a
    /// connection each time it hands it out), doubling Redis's work per
    /// job lock. Dropped when a command finds it broken (after a Redis
    /// restart, say) or it has answered nothing for [`SILENT_LIMIT`], so the
    /// next command checks a fresh one out. A command that merely timed out
    /// keeps it: under load one slow answer used to drop the connection
    /// every other command in flight was waiting on, and each of them
    /// failed with it.
    shared: Arc<Mutex<Option<SharedConn>>>,
}

/// The shared connection and when it last answered.
struct SharedConn {
    conn: MultiplexedConnection,
    last_ok: std::time::Instant,
}

/// A shared connection that has answered nothing for this long, while
/// commands time out on it, is replaced (a peer gone without a reset).
const SILENT_LIMIT: Duration = Duration::from_secs(5);

impl std::fmt::Debug for Coord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coord").finish_non_exhaustive()
    }
}

/// A command bounded by [`COMMAND_TIMEOUT`]. The command's future is boxed
/// here, at the call: the client's futures take kilobytes, and a caller's
/// own future (a fire waiting for its time holds one) would otherwise
/// reserve that room for as long as it lives.
fn bounded<T>(
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> impl Future<Output = Result<T, CoordError>> {
    let fut = Box::pin(fut);
    async move {
        let result = match tokio::time::timeout(COMMAND_TIMEOUT, fut).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(CoordError::Timeout("no answer within 1 s")),
        };
        if result.is_err() {
            stats::redis_error();
        }
        result
    }
}

/// Takes the next fencing token and, with it, the lock if nobody holds it
/// or if it still holds `ARGV[3]` (a lock of the same owner being handed
/// over; empty for none); answers the token, or 0 when the lock is held.
const ACQUIRE: &str = r"
local token = redis.call('INCR', KEYS[2])
local value = ARGV[1] .. '#' .. token
if ARGV[3] ~= '' and redis.call('GET', KEYS[1]) == ARGV[3] then
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  return token
end
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return token
end
return 0";

/// Extends every lock `KEYS[i]` that still holds `ARGV[i + 1]` to
/// `ARGV[1]` ms; answers 1 or 0 for each.
const RENEW: &str = r"
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    renewed[i] = redis.call('PEXPIRE', key, ARGV[1])
  else
    renewed[i] = 0
  end
end
return renewed";

/// Deletes every lock `KEYS[i]` that still holds `ARGV[i]`.
const RELEASE: &str = r"
local released = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    released = released + redis.call('DEL', key)
  end
end
return released";

/// Most locks a caller should renew or release in one
/// [`Coord::renew_many`] or [`Coord::release_many`] call: a busy second's
/// worth in a few round trips, without one script holding Redis for long.
pub const LOCKS_PER_CALL: usize = 500;

/// The scripts, hashed once (`invoke_async` sends `EVALSHA`, and the script
/// itself only when Redis does not know it yet).
static ACQUIRE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ACQUIRE));
static RENEW_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW));
static RELEASE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE));

impl Coord {
    /// Opens the pool and checks that Redis answers.
    pub async fn connect(url: &str) -> Result<Coord, CoordError> {
        let client = redis::Client::open(url)?;
        let pool = Config::from_url(url)
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| CoordError::Pool(e.to_string()))?;
        let coord = Coord {
            pool,
            client,
            shared: Arc::default(),
        };
        coord.ping().await?;
        Ok(coord)
    }

    /// The shared connection, checked out of the pool when there is none.
    async fn conn(&self) -> Result<MultiplexedConnection, CoordError> {
        if let Some(shared) = self.slot().as_ref() {
            return Ok(shared.conn.clone());
        }
        // Boxed: rarely taken, and the pool's future would otherwise size
        // every command's.
        let mut conn = match Box::pin(self.checkout()).await {
            Ok(conn) => deadpool_redis::Connection::take(conn),
            Err(e) => {
                stats::redis_error();
                return Err(e);
            }
        };
        // Every command is bounded by `COMMAND_TIMEOUT` here; the client's
        // own shorter limit (500 ms) would fail commands before it.
        conn.set_response_timeout(COMMAND_TIMEOUT);
        // Two tasks may both have checked one out: the last one stays.
        *self.slot() = Some(SharedConn {
            conn: conn.clone(),
            last_ok: std::time::Instant::now(),
        });
        Ok(conn)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<SharedConn>> {
        // The guarded value is a plain handle and an instant: never
        // half-written.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes a command's result on, and judges the shared connection by
    /// it: a broken connection is dropped, and so is one silent for
    /// [`SILENT_LIMIT`]; a success marks it alive.
    fn checked<T>(&self, result: Result<T, CoordError>) -> Result<T, CoordError> {
        let mut slot = self.slot();
        match &result {
            Ok(_) => {
                if let Some(shared) = slot.as_mut() {
                    shared.last_ok = std::time::Instant::now();
                }
            }
            Err(e) if e.is_broken_connection() => *slot = None,
            Err(_) => {
                if slot
                    .as_ref()
                    .is_some_and(|shared| shared.last_ok.elapsed() > SILENT_LIMIT)
                {
                    *slot = None;
                }
            }
        }
        drop(slot);
        result
    }

    async fn checkout(&self) -> Result<deadpool_redis::Connection, CoordError> {
        match tokio::time::timeout(COMMAND_TIMEOUT, self.pool.get()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(CoordError::Pool(e.to_string())),
            Err(_) => Err(CoordError::Timeout("no connection within 1 s")),
        }
    }

    pub async fn ping(&self) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        let _: String = self.checked(bounded(redis::cmd("PING").query_async(&mut conn)).await)?;
        Ok(())
    }

    /// Tells every worker about a committed change.
    pub async fn publish(&self, change: Change) -> Result<(), CoordError> {
        let payload = serde_json::to_string(&change).map_err(CoordError::Encode)?;
        let mut conn = self.conn().await?;
        let _: i64 = self.checked(bounded(conn.publish(CHANGES_CHANNEL, payload)).await)?;
        Ok(())
    }

    /// Subscribes on a connection of its own; the stream ends when the
    /// connection drops (the caller re-subscribes and reconciles).
    pub async fn subscribe(
        &self,
    ) -> Result<impl futures_util::Stream<Item = Change> + Send + 'static, CoordError> {
        let mut pubsub = tokio::time::timeout(COMMAND_TIMEOUT * 5, self.client.get_async_pubsub())
            .await
            .map_err(|_| CoordError::Timeout("no pub/sub connection within 5 s"))??;
        pubsub.subscribe(CHANGES_CHANNEL).await?;
        Ok(pubsub.into_on_message().filter_map(|msg| async move {
            let payload: String = msg.get_payload().ok()?;
            serde_json::from_str::<Change>(&payload).ok()
        }))
    }

    /// Takes a job's lock for `ttl` unless someone holds it.
    pub async fn try_lock(
        &self,
        job_id: i64,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<JobLock>, CoordError> {
        self.try_lock_after(job_id, owner, ttl, None).await
    }

    /// Takes a job's lock for `ttl` unless someone holds it, or, with
    /// `previous`, while `previous` still holds it: the lock then passes
    /// from one holder to the next without a moment free (a release of
    /// `previous` still on its way finds it no longer ours and does
    /// nothing). For a caller that knows `previous` is done with it.
    pub async fn try_lock_after(
        &self,
        job_id: i64,
        owner: &str,
        ttl: Duration,
        previous: Option<&JobLock>,
    ) -> Result<Option<JobLock>, CoordError> {
        let mut conn = self.conn().await?;
        let key = format!("{LOCK_PREFIX}{job_id}");
        // One round trip: the next fencing token, and the lock if free.
        let token: i64 = self.checked(
            bounded(
                ACQUIRE_SCRIPT
                    .key(&key)
                    .key(format!("{FENCE_PREFIX}{job_id}"))
                    .arg(owner)
                    .arg(ttl.as_millis() as u64)
                    .arg(previous.map_or("", |lock| lock.value.as_str()))
                    .invoke_async(&mut conn),
            )
            .await,
        )?;
        Ok((token > 0).then(|| JobLock {
            job_id,
            token,
            value: format!("{owner}#{token}"),
            key,
        }))
    }

    /// Extends a held lock; false when it is no longer ours.
    pub async fn renew(&self, lock: &JobLock, ttl: Duration) -> Result<bool, CoordError> {
        let renewed = self.renew_many(std::slice::from_ref(lock), ttl).await?;
        Ok(renewed.first().copied().unwrap_or(false))
    }

    /// Extends held locks in one script call (at most about
    /// [`LOCKS_PER_CALL`] at a time, please): for each, whether it was
    /// still ours (and is now extended).
    pub async fn renew_many(
        &self,
        locks: &[JobLock],
        ttl: Duration,
    ) -> Result<Vec<bool>, CoordError> {
        let mut conn = self.conn().await?;
        let mut script = RENEW_SCRIPT.prepare_invoke();
        script.arg(ttl.as_millis() as u64);
        for lock in locks {
            script.key(&lock.key).arg(&lock.value);
        }
        let renewed: Vec<i64> = self.checked(bounded(script.invoke_async(&mut conn)).await)?;
        Ok(renewed.into_iter().map(|r| r == 1).collect())
    }

    /// Gives a lock back, if it is still ours.
    pub async fn release(&self, lock: &JobLock) -> Result<(), CoordError> {
        self.release_many(std::slice::from_ref(lock)).await
    }

    /// Gives locks back (those still ours) in one script call (at most
    /// about [`LOCKS_PER_CALL`] at a time, please).
    pub async fn release_many(&self, locks: &[JobLock]) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        let mut script = RELEASE_SCRIPT.prepare_invoke();
        for lock in locks {
            script.key(&lock.key).arg(&lock.value);
        }
        let _: i64 = self.checked(bounded(script.invoke_async(&mut conn)).await)?;
        Ok(())
    }
}

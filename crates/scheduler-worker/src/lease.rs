//! What a fire holds while it runs, as guards released on every path: the
//! job's local non-concurrency slot, and in a cluster the job's Redis lock,
//! renewed and given back in batches by [`Locks`]. A lock this process gives back is handed over to its
//! job's next fire here if that one asks before the release lands
//! ([`Handovers`]), so a job that runs every second on one instance never
//! finds its own lock still held.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use qiwu_coord::{Coord, CoordError, JobLock};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// The non-concurrent jobs executing in this process, and a signal each
/// time one is freed (fires that wait their turn listen to it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Slots(Arc<(Mutex<HashSet<i64>>, tokio::sync::Notify)>);

/// A job's local slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Slots,
    job_id: i64,
}

impl Slots {
    /// Waits for the job's slot (woken whenever a slot is freed).
    pub(crate) async fn take(&self, job_id: i64) -> Slot {
        loop {
            let freed = self.0.1.notified();
            let mut freed = std::pin::pin!(freed);
            // Registered before trying, so a slot freed in between wakes us.
            freed.as_mut().enable();
            if let Some(slot) = self.try_take(job_id) {
                return slot;
            }
            freed.await;
        }
    }

    /// Takes the job's slot, or `None` while a fire of it still runs here.
    pub(crate) fn try_take(&self, job_id: i64) -> Option<Slot> {
        let mut busy = self.0.0.lock().ok()?;
        busy.insert(job_id).then(|| Slot {
            slots: self.clone(),
            job_id,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut busy) = self.slots.0.0.lock() {
            busy.remove(&self.job_id);
        }
        self.slots.0.1.notify_waiters();
    }
}

/// The job locks this process is giving back (their release is a round
/// trip still on its way), by job. The next fire of the job here takes
/// such a lock over instead of waiting for the release: that fire holds
/// the job's slot, so the fire before it is done with the lock, and the
/// lock passes between them without a moment free for another instance.
#[derive(Debug, Default)]
struct Handovers(Mutex<HashMap<i64, JobLock>>);

impl Handovers {
    fn put(&self, lock: &JobLock) {
        if let Ok(mut locks) = self.0.lock() {
            locks.insert(lock.job_id, lock.clone());
        }
    }

    fn take(&self, job_id: i64) -> Option<JobLock> {
        self.0.lock().ok()?.remove(&job_id)
    }

    /// Forgets a lock once its release has landed (unless a newer one of
    /// the job took its place meanwhile).
    fn released(&self, lock: &JobLock) {
        if let Ok(mut locks) = self.0.lock()
            && locks.get(&lock.job_id) == Some(lock)
        {
            locks.remove(&lock.job_id);
        }
    }
}

/// This process's side of the cluster's job locks: taking one, renewing
/// every held lock from one task (each a third of the TTL after its last
/// renewal, those falling due together in one round trip), and giving
/// locks back from another, everything given back meanwhile in one round
/// trip. A busy second (thousands of fires, each with its job's lock) so
/// costs a handful of Redis calls and no task per lock.
#[derive(Clone)]
pub(crate) struct Locks(Arc<LocksInner>);

struct LocksInner {
    coord: Coord,
    ttl: Duration,
    handovers: Handovers,
    held: Mutex<Held>,
    /// Wakes the renewer when a lock is held where none was; its closing
    /// (the last `Locks` gone) ends the renewer.
    wake: mpsc::UnboundedSender<()>,
    /// To the releaser; its closing ends the releaser once it is drained.
    releases: mpsc::UnboundedSender<Release>,
}

/// The locks held, and the order their renewals fall due in: every lock
/// has the same TTL, so a lock taken or renewed later is due later, and
/// the queue stays in order by pushing at its back.
#[derive(Default)]
struct Held {
    next_id: u64,
    locks: HashMap<u64, HeldLock>,
    due: VecDeque<(Instant, u64)>,
}

struct HeldLock {
    lock: JobLock,
    lost: watch::Sender<bool>,
    /// The fire's span: its renewals and a loss are its events.
    span: tracing::Span,
}

enum Release {
    Lock(JobLock),
    /// Answered once every release sent before it was tried.
    Flush(oneshot::Sender<()>),
}

/// Renewals this close to being due go with the ones that are.
fn renew_together(ttl: Duration) -> Duration {
    ttl / 6
}

impl Locks {
    /// Starts the renewer and the releaser; both end once every handle
    /// (and every lease) is gone. They are not stopped by the shutdown
    /// signal: handlers finishing in the grace period still hold locks that
    /// must be renewed and given back.
    pub(crate) fn start(coord: Coord, ttl: Duration) -> Locks {
        let (wake, woken) = mpsc::unbounded_channel();
        let (releases, to_release) = mpsc::unbounded_channel();
        let inner = Arc::new(LocksInner {
            coord,
            ttl,
            handovers: Handovers::default(),
            held: Mutex::new(Held::default()),
            wake,
            releases,
        });
        tokio::spawn(renew_loop(Arc::downgrade(&inner), woken));
        tokio::spawn(release_loop(
            inner.coord.clone(),
            Arc::downgrade(&inner),
            to_release,
        ));
        Locks(inner)
    }

    /// Waits (at most `limit`) until every lock given back so far was
    /// released: at shutdown, so the job's next owner finds it free.
    pub(crate) async fn flush(&self, limit: Duration) {
        let (done, flushed) = oneshot::channel();
        if self.0.releases.send(Release::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(limit, flushed).await;
        }
    }

    /// Counts a lock just taken as held (renewed from now on): its id in
    /// [`Held`], and the signal of its loss.
    fn hold(&self, lock: JobLock) -> (u64, watch::Receiver<bool>) {
        let (lost_tx, lost) = watch::channel(false);
        let mut held = self.0.held();
        let id = held.next_id;
        held.next_id += 1;
        held.locks.insert(
            id,
            HeldLock {
                lock,
                lost: lost_tx,
                span: tracing::Span::current(),
            },
        );
        let first = held.due.is_empty();
        held.due.push_back((Instant::now() + self.0.ttl / 3, id));
        drop(held);
        if first {
            let _ = self.0.wake.send(());
        }
        (id, lost)
    }
}

impl LocksInner {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // Plain maps and a queue, each change whole: never half-written.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the locks due now (and those due soon after) out of the
    /// renewal queue.
    fn take_due(&self) -> Vec<(u64, JobLock)> {
        let horizon = Instant::now() + renew_together(self.ttl);
        let mut held = self.held();
        let mut batch = Vec::new();
        while held.due.front().is_some_and(|(at, _)| *at <= horizon) {
            let Some((_, id)) = held.due.pop_front() else {
                break;
            };
            // A lock given back meanwhile left its place in the queue.
            if let Some(h) = held.locks.get(&id) {
                batch.push((id, h.lock.clone()));
            }
        }
        batch
    }

    /// Renews a batch, [`qiwu_coord::LOCKS_PER_CALL`] locks to a call, the
    /// calls at once (each bounded by the client's timeout), and counts
    /// the locks a call did not confirm as lost: only its own.
    async fn renew(&self, batch: Vec<(u64, JobLock)>) {
        let chunks: Vec<&[(u64, JobLock)]> = batch.chunks(qiwu_coord::LOCKS_PER_CALL).collect();
        let calls = chunks.iter().map(|chunk| {
            let locks: Vec<JobLock> = chunk.iter().map(|(_, lock)| lock.clone()).collect();
            async move { self.coord.renew_many(&locks, self.ttl).await }
        });
        let results = futures_util::future::join_all(calls).await;
        let mut held = self.held();
        let next = Instant::now() + self.ttl / 3;
        for (chunk, renewed) in chunks.iter().zip(results) {
            for (i, (id, _)) in chunk.iter().enumerate() {
                let confirmed = matches!(&renewed, Ok(r) if r.get(i) == Some(&true));
                if confirmed {
                    if let Some(h) = held.locks.get(id) {
                        h.span.in_scope(|| {
                            crate::observe::lock_event("lock.renewed", h.lock.job_id, h.lock.token)
                        });
                        held.due.push_back((next, *id));
                    }
                } else if let Some(h) = held.locks.remove(id) {
                    h.span.in_scope(|| {
                        tracing::error!(job = h.lock.job_id, token = h.lock.token, "job lock lost");
                        crate::observe::lock_event("lock.lost", h.lock.job_id, h.lock.token);
                    });
                    let _ = h.lost.send(true);
                }
            }
        }
    }
}

/// Renews held locks as they fall due; sleeps while none is held. Each
/// due batch is renewed in a task of its own, so a batch waiting on a
/// slow Redis (up to its timeout) never holds back the next one: a loss
/// is signalled within a third of the TTL plus one call's timeout of the
/// last renewal, as when each lock renewed itself.
async fn renew_loop(locks: Weak<LocksInner>, mut woken: mpsc::UnboundedReceiver<()>) {
    let mut batches = tokio::task::JoinSet::new();
    loop {
        let next = match locks.upgrade() {
            Some(locks) => locks.held().due.front().map(|(at, _)| *at),
            None => return,
        };
        tokio::select! {
            () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let Some(locks) = locks.upgrade() else {
                    return;
                };
                let batch = locks.take_due();
                if !batch.is_empty() {
                    batches.spawn(async move { locks.renew(batch).await });
                }
            }
            Some(_) = batches.join_next(), if !batches.is_empty() => {}
            woke = woken.recv() => {
                if woke.is_none() {
                    return;
                }
            }
        }
    }
}

/// Gives back, in one round trip per [`qiwu_coord::LOCKS_PER_CALL`] locks
/// (the calls at once), every lock released since the last time.
/// A weak handle: the loop must not keep alive the sender whose closing
/// ends it.
async fn release_loop(
    coord: Coord,
    locks: Weak<LocksInner>,
    mut requests: mpsc::UnboundedReceiver<Release>,
) {
    while let Some(first) = requests.recv().await {
        let mut batch = Vec::new();
        let mut flushed = Vec::new();
        let mut next = Some(first);
        while let Some(request) = next {
            match request {
                Release::Lock(lock) => batch.push(lock),
                Release::Flush(done) => flushed.push(done),
            }
            next = requests.try_recv().ok();
        }
        let calls = batch.chunks(qiwu_coord::LOCKS_PER_CALL).map(|chunk| {
            let coord = &coord;
            async move { (chunk, coord.release_many(chunk).await) }
        });
        for (chunk, released) in futures_util::future::join_all(calls).await {
            match released {
                Ok(()) => {
                    if let Some(locks) = locks.upgrade() {
                        for lock in chunk {
                            locks.handovers.released(lock);
                        }
                    }
                }
                // Still ours until they expire: the jobs' next fires here
                // may take them over meanwhile.
                Err(e) => {
                    tracing::warn!(locks = chunk.len(), error = %e, "cannot release job locks; they expire by themselves");
                }
            }
        }
        for done in flushed {
            let _ = done.send(());
        }
    }
}

/// A held cluster lock, renewed by [`Locks`]. Dropping it gives the lock
/// back, unless [`LockLease::keep_until_expiry`] said otherwise.
pub(crate) struct LockLease {
    locks: Locks,
    /// Its entry in [`Held`].
    id: u64,
    lock: JobLock,
    lost: watch::Receiver<bool>,
    release: bool,
}

impl LockLease {
    /// Takes the job's lock. `Ok(None)` while another instance holds it: a
    /// holder that is just ending releases it within moments, so a few
    /// short retries come first.
    pub(crate) async fn acquire(
        locks: &Locks,
        job_id: i64,
        instance: &str,
    ) -> Result<Option<LockLease>, CoordError> {
        for wait in [50, 100, 200, 0] {
            if let Some(lease) = Self::try_acquire(locks, job_id, instance).await? {
                return Ok(Some(lease));
            }
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
        Ok(None)
    }

    /// Takes the job's lock if it is free now, or still held by the fire
    /// of it here before, in one round trip. Only for a fire holding the
    /// job's slot (see [`Handovers`]).
    pub(crate) async fn try_acquire(
        locks: &Locks,
        job_id: i64,
        instance: &str,
    ) -> Result<Option<LockLease>, CoordError> {
        let inner = &locks.0;
        let previous = inner.handovers.take(job_id);
        let taken = inner
            .coord
            .try_lock_after(job_id, instance, inner.ttl, previous.as_ref())
            .await;
        let lock = match taken {
            Ok(Some(lock)) => lock,
            Ok(None) => return Ok(None),
            Err(e) => {
                // Its release may still be on its way: the next try may
                // take it over.
                if let Some(previous) = previous {
                    inner.handovers.put(&previous);
                }
                return Err(e);
            }
        };
        let (id, lost) = locks.hold(lock.clone());
        Ok(Some(LockLease {
            locks: locks.clone(),
            id,
            lock,
            lost,
            release: true,
        }))
    }

    /// Whether a renewal already went unconfirmed.
    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves once a renewal was not confirmed: the lock must count as
    /// lost before its TTL could run out.
    pub(crate) async fn lost(&self) {
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|l| *l).await;
    }

    /// Leaves the lock to expire instead of releasing it: if it is still
    /// ours (Redis errors rather than expiry), freeing it would let another
    /// instance overlap a handler that ignores its stop signal.
    pub(crate) fn keep_until_expiry(&mut self) {
        self.release = false;
    }

    pub(crate) fn token(&self) -> i64 {
        self.lock.token
    }
}

impl Drop for LockLease {
    fn drop(&mut self) {
        let inner = &self.locks.0;
        // No longer renewed; its place in the renewal queue is skipped.
        inner.held().locks.remove(&self.id);
        if !self.release {
            return;
        }
        crate::observe::lock_event("lock.released", self.lock.job_id, self.lock.token);
        inner.handovers.put(&self.lock);
        // The releaser ends only once every lease is gone.
        let _ = inner.releases.send(Release::Lock(self.lock.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_taken_once_and_freed_on_drop() {
        let slots = Slots::default();
        let first = slots.try_take(7);
        assert!(first.is_some());
        assert!(slots.try_take(7).is_none());
        assert!(slots.try_take(8).is_some());
        drop(first);
        assert!(slots.try_take(7).is_some());
    }
}

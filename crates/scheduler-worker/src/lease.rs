//! What a fire holds while it runs, as guards released on every path: the
//! job's local non-concurrency slot, and in a cluster the job's Redis lock
//! with its renewal. A lock this process gives back is handed over to its
//! job's next fire here if that one asks before the release lands
//! ([`Handovers`]), so a job that runs every second on one instance never
//! finds its own lock still held.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qiwu_coord::{Coord, CoordError, JobLock};
use tokio::sync::watch;

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
#[derive(Debug, Clone, Default)]
pub(crate) struct Handovers(Arc<Mutex<HashMap<i64, JobLock>>>);

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

/// A held cluster lock, renewed every third of its TTL. Dropping it stops
/// the renewal and releases the lock, unless [`LockLease::keep_until_expiry`]
/// said otherwise.
pub(crate) struct LockLease {
    coord: Coord,
    handovers: Handovers,
    lock: JobLock,
    renewal: tokio::task::JoinHandle<()>,
    lost: watch::Receiver<bool>,
    release: bool,
}

impl LockLease {
    /// Takes the job's lock. `Ok(None)` while another instance holds it: a
    /// holder that is just ending releases it within moments, so a few
    /// short retries come first.
    pub(crate) async fn acquire(
        coord: &Coord,
        handovers: &Handovers,
        job_id: i64,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<LockLease>, CoordError> {
        for wait in [50, 100, 200, 0] {
            if let Some(lease) = Self::try_acquire(coord, handovers, job_id, instance, ttl).await? {
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
        coord: &Coord,
        handovers: &Handovers,
        job_id: i64,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<LockLease>, CoordError> {
        let previous = handovers.take(job_id);
        let taken = coord
            .try_lock_after(job_id, instance, ttl, previous.as_ref())
            .await;
        let lock = match taken {
            Ok(Some(lock)) => lock,
            Ok(None) => return Ok(None),
            Err(e) => {
                // Its release may still be on its way: the next try may
                // take it over.
                if let Some(previous) = previous {
                    handovers.put(&previous);
                }
                return Err(e);
            }
        };
        let (lost_tx, lost) = watch::channel(false);
        // In the fire's span: renewals and a loss are its events.
        let renewal = tokio::spawn(tracing::Instrument::in_current_span(renew(
            coord.clone(),
            lock.clone(),
            ttl,
            lost_tx,
        )));
        Ok(Some(LockLease {
            coord: coord.clone(),
            handovers: handovers.clone(),
            lock,
            renewal,
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
        self.renewal.abort();
        if !self.release {
            return;
        }
        crate::observe::lock_event("lock.released", self.lock.job_id, self.lock.token);
        let (coord, lock) = (self.coord.clone(), self.lock.clone());
        // Releasing needs a round trip; outside a runtime (process exit)
        // the lock simply expires.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let handovers = self.handovers.clone();
            handovers.put(&lock);
            runtime.spawn(async move {
                match coord.release(&lock).await {
                    Ok(()) => handovers.released(&lock),
                    // Still ours until it expires: the job's next fire
                    // here may take it over meanwhile.
                    Err(e) => {
                        tracing::warn!(job = lock.job_id, error = %e, "cannot release the job lock; it expires by itself");
                    }
                }
            });
        }
    }
}

/// Renews the lock every third of its TTL; flips `lost` when a renewal is
/// not confirmed.
async fn renew(coord: Coord, lock: JobLock, ttl: Duration, lost: watch::Sender<bool>) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        match coord.renew(&lock, ttl).await {
            Ok(true) => crate::observe::lock_event("lock.renewed", lock.job_id, lock.token),
            Ok(false) | Err(_) => {
                tracing::error!(job = lock.job_id, token = lock.token, "job lock lost");
                crate::observe::lock_event("lock.lost", lock.job_id, lock.token);
                let _ = lost.send(true);
                return;
            }
        }
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

//! Counters of this process's database use that no query can answer
//! afterwards, read by `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

static DB_ACQUIRE_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// Database operations that gave up waiting for a pooled connection.
pub fn db_acquire_timeouts() -> u64 {
    DB_ACQUIRE_TIMEOUTS.load(Ordering::Relaxed)
}

pub(crate) fn db_acquire_timeout() {
    DB_ACQUIRE_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
}

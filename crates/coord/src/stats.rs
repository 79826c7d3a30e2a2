//! The count of this process's failed Redis commands, which no query can
//! answer afterwards, read by `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

static REDIS_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Redis commands (and connection checkouts) that failed or timed out.
pub fn redis_command_errors() -> u64 {
    REDIS_ERRORS.load(Ordering::Relaxed)
}

pub(crate) fn redis_error() {
    REDIS_ERRORS.fetch_add(1, Ordering::Relaxed);
}

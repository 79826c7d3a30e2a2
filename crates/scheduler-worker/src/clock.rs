//! Where the engine reads the time: the system clock in production, tokio's
//! (pausable) clock in tests, so timer logic is tested without waiting.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// A source of "now" that timers sleep against.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A wall clock driven by tokio's clock: it starts at `origin` and advances
/// with `tokio::time`, including when time is paused and auto-advanced.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: DateTime<Utc>,
    started: tokio::time::Instant,
}

impl TokioClock {
    pub fn starting_at(origin: DateTime<Utc>) -> TokioClock {
        TokioClock {
            origin,
            started: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed =
            chrono::Duration::from_std(self.started.elapsed()).unwrap_or(chrono::Duration::MAX);
        self.origin + elapsed
    }
}

/// Longest single sleep: a wall clock that is stepped (not slewed) is
/// noticed within this bound.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long to sleep from `now` until `due`, at most [`MAX_SLEEP`].
pub fn sleep_for(now: DateTime<Utc>, due: DateTime<Utc>) -> Duration {
    (due - now)
        .to_std()
        .unwrap_or(Duration::ZERO)
        .min(MAX_SLEEP)
}

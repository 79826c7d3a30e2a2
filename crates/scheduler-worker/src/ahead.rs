//! Fires claimed ahead of their time (`QIWU_CLAIM_AHEAD_MS`).
//!
//! A job's primary owner claims each timer fire a little before it is due,
//! so the database work of a busy second is done by the time it starts and
//! the fire only waits for its instant. What may change in between is
//! judged at the instant, as if the claim had come then:
//!
//! - the job: the loop tells the [`AheadBook`] every version of a job it
//!   applies while one of its fires waits ([`AheadBook::seen`]); a fire
//!   whose job changed (or is gone) since its claim is taken back
//!   (`FireRepo::withdraw`) and its time handed back to the loop
//!   ([`crate::claimer::Feedback::Withdrawn`]), which claims it afresh with
//!   the job as it is now, or not at all;
//! - a freeze window that now holds the time: taken back the same way (the
//!   loop then records the window as usual);
//! - the overlap rule: a fire takes its job's slot (and, in a cluster, its
//!   lock) while it waits if they are free then; one claimed while they
//!   were taken waits for its instant before it looks at them again;
//! - a shutdown before the instant: taken back, so the next owner (the
//!   backup, or this process after its restart) decides the time.
//!
//! A hold is taken before the claim is sent, so a change applied between
//! the claim's read of the job and the fire's start is never missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use crate::claimer::Feedback;

/// The latest version of a job the loop applied while fires of it wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Latest {
    /// Nothing applied since the first hold.
    Unknown,
    Version(i64),
    /// Disabled, deleted, or no longer schedulable.
    Gone,
}

#[derive(Debug)]
struct Entry {
    holders: usize,
    latest: Latest,
}

/// The jobs with fires claimed ahead, and what the loop has seen of them
/// since. Holds only jobs with a fire waiting, so it stays as small as the
/// fires in flight.
#[derive(Debug, Default)]
pub(crate) struct AheadBook {
    jobs: Mutex<HashMap<i64, Entry>>,
}

/// One fire's hold on the book, from before its claim until it starts or
/// is taken back.
#[derive(Debug)]
pub(crate) struct Hold {
    book: Arc<AheadBook>,
    job_id: i64,
    /// Where a taken-back time goes (the loop).
    feedback: mpsc::UnboundedSender<Feedback>,
}

impl AheadBook {
    /// Holds the job's news for a fire about to be claimed ahead.
    pub(crate) fn hold(
        book: &Arc<AheadBook>,
        job_id: i64,
        feedback: mpsc::UnboundedSender<Feedback>,
    ) -> Hold {
        if let Ok(mut jobs) = book.jobs.lock() {
            jobs.entry(job_id)
                .or_insert(Entry {
                    holders: 0,
                    latest: Latest::Unknown,
                })
                .holders += 1;
        }
        Hold {
            book: Arc::clone(book),
            job_id,
            feedback,
        }
    }

    /// The loop applied the job: `Some(version)` while it is enabled and
    /// schedulable, `None` when it is not. Only jobs with a fire waiting
    /// are noted.
    pub(crate) fn seen(&self, job_id: i64, version: Option<i64>) {
        let Ok(mut jobs) = self.jobs.lock() else {
            return;
        };
        if let Some(entry) = jobs.get_mut(&job_id) {
            entry.latest = next_latest(entry.latest, version);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.jobs.lock().map(|j| j.len()).unwrap_or_default()
    }
}

/// What the book says after the loop applied `version` (`None`: gone). A
/// job once gone stays gone for the fires waiting (enabling it again is a
/// newer version than theirs), and an older version than one already seen
/// changes nothing.
fn next_latest(latest: Latest, version: Option<i64>) -> Latest {
    match (latest, version) {
        (Latest::Gone, _) | (_, None) => Latest::Gone,
        (Latest::Version(seen), Some(v)) if v < seen => latest,
        (_, Some(v)) => Latest::Version(v),
    }
}

/// Whether a fire claimed from version `claimed` may still run.
fn still_current(latest: Latest, claimed: i64) -> bool {
    match latest {
        Latest::Unknown => true,
        Latest::Version(v) => v <= claimed,
        Latest::Gone => false,
    }
}

impl Hold {
    /// True while the job is still the version the fire was claimed with,
    /// as far as this process has seen.
    pub(crate) fn current(&self, claimed_version: i64) -> bool {
        let latest = self
            .book
            .jobs
            .lock()
            .ok()
            .and_then(|jobs| jobs.get(&self.job_id).map(|e| e.latest))
            .unwrap_or(Latest::Unknown);
        still_current(latest, claimed_version)
    }

    /// Hands a taken-back time to the loop, to be claimed afresh.
    pub(crate) fn hand_back(self, at: DateTime<Utc>) {
        // The loop ends only at shutdown, when nothing is claimed anymore.
        let _ = self.feedback.send(Feedback::Withdrawn {
            job_id: self.job_id,
            at,
        });
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Ok(mut jobs) = self.book.jobs.lock() else {
            return;
        };
        if let Some(entry) = jobs.get_mut(&self.job_id) {
            entry.holders = entry.holders.saturating_sub(1);
            if entry.holders == 0 {
                jobs.remove(&self.job_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_news_keeps_a_fire_claimed_ahead() {
        use Latest::*;
        // (latest before, applied, claimed version, may run)
        let cases = [
            (Unknown, Some(3), 3, true),
            (Unknown, Some(4), 3, false),
            (Unknown, None, 3, false),
            (Version(5), Some(4), 5, true),
            (Version(5), Some(4), 4, false),
            (Gone, Some(3), 3, false),
            (Version(3), None, 3, false),
        ];
        for (before, applied, claimed, runs) in cases {
            let latest = next_latest(before, applied);
            assert_eq!(
                still_current(latest, claimed),
                runs,
                "{before:?} + {applied:?}, claimed {claimed}"
            );
        }
        assert!(still_current(Unknown, 1));
    }

    #[test]
    fn the_book_holds_only_jobs_with_a_fire_waiting() {
        let book = Arc::new(AheadBook::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        // News of a job nobody holds is not kept.
        book.seen(7, Some(9));
        assert_eq!(book.len(), 0);
        let first = AheadBook::hold(&book, 7, tx.clone());
        let second = AheadBook::hold(&book, 7, tx);
        assert!(first.current(1));
        book.seen(7, Some(2));
        assert!(!first.current(1));
        assert!(second.current(2));
        drop(first);
        assert_eq!(book.len(), 1);
        let at = DateTime::<Utc>::UNIX_EPOCH;
        second.hand_back(at);
        assert_eq!(book.len(), 0);
        assert_eq!(
            rx.try_recv().ok(),
            Some(Feedback::Withdrawn { job_id: 7, at })
        );
    }
}

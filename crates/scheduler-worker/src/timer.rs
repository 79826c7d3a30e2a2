//! The timer queue: every armed job's next fire time in a priority queue.
//! The engine sleeps until the earliest entry; nothing polls on a tick.
//!
//! Entries are never removed from the heap in place: re-arming or disarming
//! a job bumps its generation, and stale entries are dropped when they reach
//! the top.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::CronExpr;

/// What the queue needs to know about a job.
#[derive(Debug, Clone)]
pub struct Armed {
    pub job_id: i64,
    /// The job version the timer was armed at; the claim re-checks it.
    pub version: i64,
    pub cron: CronExpr,
    pub tz: Tz,
}

/// One fire that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub job_id: i64,
    pub version: i64,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Default)]
pub struct Timers {
    /// (due, job, generation), earliest first.
    heap: BinaryHeap<Reverse<(DateTime<Utc>, i64, u64)>>,
    jobs: HashMap<i64, (Armed, u64)>,
    next_generation: u64,
}

impl Timers {
    pub fn new() -> Timers {
        Timers::default()
    }

    /// Arms (or re-arms) a job at its first fire time strictly after `after`.
    pub fn arm(&mut self, job: Armed, after: DateTime<Utc>) {
        self.next_generation += 1;
        let generation = self.next_generation;
        if let Some(next) = job.cron.next_after(after, job.tz) {
            self.heap.push(Reverse((next, job.job_id, generation)));
        }
        self.jobs.insert(job.job_id, (job, generation));
    }

    /// Forgets a job (deleted or disabled).
    pub fn disarm(&mut self, job_id: i64) {
        self.jobs.remove(&job_id);
    }

    pub fn is_armed(&self, job_id: i64) -> bool {
        self.jobs.contains_key(&job_id)
    }

    pub fn armed(&self, job_id: i64) -> Option<&Armed> {
        self.jobs.get(&job_id).map(|(a, _)| a)
    }

    /// The earliest live entry.
    pub fn next_due(&mut self) -> Option<DateTime<Utc>> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Takes every entry due at or before `now`, re-arming each job at its
    /// following fire time.
    pub fn pop_due(&mut self, now: DateTime<Utc>) -> Vec<Due> {
        let mut due = Vec::new();
        loop {
            self.drop_stale();
            let Some(Reverse((at, job_id, _))) = self.heap.peek().copied() else {
                break;
            };
            if at > now {
                break;
            }
            self.heap.pop();
            let Some((armed, _)) = self.jobs.get(&job_id) else {
                continue;
            };
            let armed = armed.clone();
            due.push(Due {
                job_id,
                version: armed.version,
                at,
            });
            self.arm(armed, at);
        }
        due
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((_, job_id, generation))) = self.heap.peek() {
            match self.jobs.get(job_id) {
                Some((_, current)) if current == generation => break,
                _ => {
                    self.heap.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::{Clock, TokioClock, sleep_for};

    fn armed(job_id: i64, version: i64, cron: &str) -> Armed {
        Armed {
            job_id,
            version,
            cron: CronExpr::parse(cron).expect("cron"),
            tz: chrono_tz::UTC,
        }
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    /// Drives the queue the way the engine does: sleep until the earliest
    /// entry, pop what is due, repeat until `end`.
    async fn drive(
        timers: &mut Timers,
        clock: &dyn Clock,
        end: DateTime<Utc>,
    ) -> Vec<(Due, DateTime<Utc>)> {
        let mut fired = Vec::new();
        while let Some(next) = timers.next_due() {
            if next > end {
                break;
            }
            let now = clock.now();
            if next > now {
                tokio::time::sleep(sleep_for(now, next)).await;
                continue;
            }
            for due in timers.pop_due(clock.now()) {
                fired.push((due, clock.now()));
            }
        }
        fired
    }

    #[tokio::test(start_paused = true)]
    async fn every_second_fires_once_per_second_on_time() {
        let clock = TokioClock::starting_at(t("2026-11-29T10:00:00.250Z"));
        let mut timers = Timers::new();
        timers.arm(armed(1, 1, "* * * * * *"), clock.now());
        timers.arm(armed(2, 1, "*/5 * * * * *"), clock.now());
        let fired = drive(&mut timers, &clock, t("2026-11-29T10:00:10Z")).await;
        let job1: Vec<DateTime<Utc>> = fired
            .iter()
            .filter(|(d, _)| d.job_id == 1)
            .map(|(d, _)| d.at)
            .collect();
        let want: Vec<DateTime<Utc>> = (1..=10)
            .map(|s| t("2026-11-29T10:00:00Z") + chrono::Duration::seconds(s))
            .collect();
        assert_eq!(job1, want);
        let job2: Vec<DateTime<Utc>> = fired
            .iter()
            .filter(|(d, _)| d.job_id == 2)
            .map(|(d, _)| d.at)
            .collect();
        assert_eq!(job2, [t("2026-11-29T10:00:05Z"), t("2026-11-29T10:00:10Z")]);
        // Each fire was taken exactly at its time (no lag, no early fire).
        assert!(fired.iter().all(|(d, taken)| *taken == d.at), "{fired:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn rearming_and_disarming_take_effect_at_once() {
        let clock = Arc::new(TokioClock::starting_at(t("2026-11-29T10:00:00Z")));
        let mut timers = Timers::new();
        timers.arm(armed(1, 1, "* * * * * *"), clock.now());
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let due = timers.pop_due(clock.now());
        assert_eq!(due.len(), 2);
        // Edited: only the new version's schedule counts from now on.
        timers.arm(armed(1, 2, "0 * * * * *"), clock.now());
        let fired = drive(&mut timers, clock.as_ref(), t("2026-11-29T10:01:00Z")).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(
            fired[0].0,
            Due {
                job_id: 1,
                version: 2,
                at: t("2026-11-29T10:01:00Z")
            }
        );
        timers.disarm(1);
        assert_eq!(timers.next_due(), None);
        assert!(!timers.is_armed(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_wake_up_takes_every_due_fire_in_order() {
        let clock = TokioClock::starting_at(t("2026-11-29T10:00:00Z"));
        let mut timers = Timers::new();
        timers.arm(armed(1, 1, "* * * * * *"), clock.now());
        // The process stalls for 3.5 s: the three missed seconds are due.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let due: Vec<DateTime<Utc>> = timers
            .pop_due(clock.now())
            .into_iter()
            .map(|d| d.at)
            .collect();
        assert_eq!(
            due,
            [
                t("2026-11-29T10:00:01Z"),
                t("2026-11-29T10:00:02Z"),
                t("2026-11-29T10:00:03Z")
            ]
        );
        assert_eq!(timers.next_due(), Some(t("2026-11-29T10:00:04Z")));
    }

    #[test]
    fn sleeps_are_bounded() {
        let now = t("2026-11-29T10:00:00Z");
        assert_eq!(
            sleep_for(now, now - chrono::Duration::seconds(5)),
            Duration::ZERO
        );
        assert_eq!(
            sleep_for(now, now + chrono::Duration::milliseconds(1500)),
            Duration::from_millis(1500)
        );
        assert_eq!(
            sleep_for(now, now + chrono::Duration::days(1)),
            crate::clock::MAX_SLEEP
        );
    }
}

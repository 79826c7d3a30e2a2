//! The timer queue: every armed job's next fire time in a priority queue.
//! The engine sleeps until the earliest entry; nothing polls on a tick.
//!
//! Entries are never removed from the heap in place: re-arming or disarming
//! a job bumps its generation and the old entry goes stale. Stale entries
//! are dropped when they reach the top, and the heap is rebuilt when they
//! outnumber the live ones (a yearly job edited daily would otherwise keep
//! one stale entry per edit until its date).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_domain::Schedule;

/// What the queue (and the claim) needs to know about an armed job: a
/// compact entry, not the whole record.
#[derive(Debug, Clone)]
pub struct Armed {
    pub job_id: i64,
    /// The schedule the timer was armed from; the claim re-checks it.
    pub schedule_from: DateTime<Utc>,
    /// The cron in the job's zone with its calendar and active window:
    /// every fire time, and each one's predecessor, comes from here.
    pub schedule: Arc<Schedule>,
    pub allow_concurrent: bool,
    /// A fire waits for the running one instead of being skipped
    /// (`queue_one`, `replace`).
    pub waits: bool,
    /// How long after each fire time this instance claims it (0 for the
    /// job's primary owner, later for its backup).
    pub delay: Duration,
    /// How long before each fire's start this instance claims it (the
    /// primary of a job whose fires can be claimed ahead, `crate::ahead`;
    /// zero otherwise).
    pub ahead: Duration,
}

/// One fire that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub job_id: i64,
    /// The nominal fire time.
    pub at: DateTime<Utc>,
}

impl Armed {
    /// When the fire at nominal time `at` starts: `at` plus the job's
    /// jitter delay, which every worker derives alike from the job id and
    /// `at` (no jitter: `at`).
    pub fn start_at(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        self.schedule.start_at(self.job_id, at)
    }
}

/// A heap entry: (wake-up time, job, generation, nominal fire time).
type Entry = Reverse<(DateTime<Utc>, i64, u64, DateTime<Utc>)>;

#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Entry>,
    /// Each armed job, its generation and its next nominal fire time.
    jobs: HashMap<i64, (Armed, u64, Option<DateTime<Utc>>)>,
    next_generation: u64,
}

/// The instant a fire time wakes this instance up: its start (the nominal
/// time plus the job's jitter), plus this instance's backup delay, less
/// how far ahead it claims.
fn wake_at(armed: &Armed, at: DateTime<Utc>) -> DateTime<Utc> {
    let span = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::zero());
    armed.start_at(at) + span(armed.delay) - span(armed.ahead)
}

impl Timers {
    pub fn new() -> Timers {
        Timers::default()
    }

    /// Arms (or re-arms) a job at its first fire time strictly after `after`.
    pub fn arm(&mut self, job: Armed, after: DateTime<Utc>) {
        self.next_generation += 1;
        let generation = self.next_generation;
        let next = job.schedule.next_after(after);
        if let Some(at) = next {
            self.heap
                .push(Reverse((wake_at(&job, at), job.job_id, generation, at)));
        }
        self.jobs.insert(job.job_id, (job, generation, next));
        self.compact();
    }

    /// Forgets a job (deleted, disabled, or owned by others now).
    pub fn disarm(&mut self, job_id: i64) {
        self.jobs.remove(&job_id);
        self.compact();
    }

    pub fn armed(&self, job_id: i64) -> Option<&Armed> {
        self.jobs.get(&job_id).map(|(a, _, _)| a)
    }

    /// Every armed job.
    pub fn all(&self) -> impl Iterator<Item = &Armed> {
        self.jobs.values().map(|(a, _, _)| a)
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// When the earliest live entry wakes this instance up.
    pub fn next_wake(&mut self) -> Option<DateTime<Utc>> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((wake, _, _, _))| *wake)
    }

    /// Takes every entry whose wake-up time is at or before `now`, re-arming
    /// each job at its following fire time. A job whose instance slept past
    /// several of its times yields each of them, in order.
    pub fn pop_due(&mut self, now: DateTime<Utc>) -> Vec<Due> {
        let mut due = Vec::new();
        loop {
            self.drop_stale();
            let Some(Reverse((wake, job_id, _, at))) = self.heap.peek().copied() else {
                break;
            };
            if wake > now {
                break;
            }
            self.heap.pop();
            let Some((armed, _, _)) = self.jobs.get(&job_id) else {
                continue;
            };
            let armed = armed.clone();
            due.push(Due { job_id, at });
            self.arm(armed, at);
        }
        due
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((_, job_id, generation, _))) = self.heap.peek() {
            match self.jobs.get(job_id) {
                Some((_, current, _)) if current == generation => break,
                _ => {
                    self.heap.pop();
                }
            }
        }
    }

    /// Rebuilds the heap from the live entries once stale ones dominate.
    fn compact(&mut self) {
        if self.heap.len() <= 2 * self.jobs.len() + 64 {
            return;
        }
        self.heap = self
            .jobs
            .iter()
            .filter_map(|(job_id, (armed, generation, next))| {
                next.map(|at| Reverse((wake_at(armed, at), *job_id, *generation, at)))
            })
            .collect();
    }

    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, TokioClock, sleep_for};
    use qiwu_domain::CronExpr;
    use qiwu_domain::calendar::{CalendarRule, builtin};

    fn armed(job_id: i64, cron: &str) -> Armed {
        Armed {
            job_id,
            schedule_from: t("2026-11-29T00:00:00Z"),
            schedule: Arc::new(Schedule::new(
                CronExpr::parse(cron).expect("cron"),
                chrono_tz::UTC,
            )),
            allow_concurrent: false,
            waits: false,
            delay: Duration::ZERO,
            ahead: Duration::ZERO,
        }
    }

    /// A working-days job sleeps over the Spring Festival 2026: from
    /// Friday 13 February it wakes on the make-up Saturday 14 February,
    /// then not before Tuesday 24 February.
    #[test]
    fn a_calendar_decides_the_days_the_timer_wakes_on() {
        let tz: chrono_tz::Tz = "Asia/Shanghai".parse().expect("tz");
        let schedule = Schedule::new(CronExpr::parse("0 0 9 * * *").expect("cron"), tz)
            .with_calendar(builtin::cn_workdays().clone(), CalendarRule::Workdays)
            .expect("schedule");
        let mut timers = Timers::new();
        timers.arm(
            Armed {
                schedule: Arc::new(schedule),
                ..armed(1, "* * * * * *")
            },
            t("2026-02-13T02:00:00Z"),
        );
        let mut woke = Vec::new();
        while let Some(wake) = timers.next_wake() {
            if wake > t("2026-03-03T00:00:00Z") {
                break;
            }
            woke.extend(timers.pop_due(wake).into_iter().map(|d| d.at));
        }
        let want: Vec<DateTime<Utc>> = [
            "2026-02-14T01:00:00Z",
            "2026-02-24T01:00:00Z",
            "2026-02-25T01:00:00Z",
            "2026-02-26T01:00:00Z",
            "2026-02-27T01:00:00Z",
            "2026-02-28T01:00:00Z",
            "2026-03-02T01:00:00Z",
        ]
        .into_iter()
        .map(t)
        .collect();
        assert_eq!(woke, want);
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
        while let Some(next) = timers.next_wake() {
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
        timers.arm(armed(1, "* * * * * *"), clock.now());
        timers.arm(armed(2, "*/5 * * * * *"), clock.now());
        let fired = drive(&mut timers, &clock, t("2026-11-29T10:00:10Z")).await;
        let of = |job: i64| -> Vec<DateTime<Utc>> {
            fired
                .iter()
                .filter(|(d, _)| d.job_id == job)
                .map(|(d, _)| d.at)
                .collect()
        };
        let want: Vec<DateTime<Utc>> = (1..=10)
            .map(|s| t("2026-11-29T10:00:00Z") + chrono::Duration::seconds(s))
            .collect();
        assert_eq!(of(1), want);
        assert_eq!(
            of(2),
            [t("2026-11-29T10:00:05Z"), t("2026-11-29T10:00:10Z")]
        );
        // Each fire was taken exactly at its time (no lag, no early fire).
        assert!(fired.iter().all(|(d, taken)| *taken == d.at), "{fired:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_backup_wakes_up_after_its_delay_with_the_nominal_time() {
        let clock = TokioClock::starting_at(t("2026-11-29T10:00:00Z"));
        let mut timers = Timers::new();
        let backup = Armed {
            delay: Duration::from_millis(400),
            ..armed(1, "* * * * * *")
        };
        timers.arm(backup, clock.now());
        assert_eq!(timers.next_wake(), Some(t("2026-11-29T10:00:01.400Z")));
        let fired = drive(&mut timers, &clock, t("2026-11-29T10:00:02.500Z")).await;
        let got: Vec<(DateTime<Utc>, DateTime<Utc>)> =
            fired.iter().map(|(d, taken)| (d.at, *taken)).collect();
        assert_eq!(
            got,
            [
                (t("2026-11-29T10:00:01Z"), t("2026-11-29T10:00:01.400Z")),
                (t("2026-11-29T10:00:02Z"), t("2026-11-29T10:00:02.400Z")),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_primary_claiming_ahead_wakes_up_that_early_with_the_nominal_time() {
        let clock = TokioClock::starting_at(t("2026-11-29T10:00:00.700Z"));
        let mut timers = Timers::new();
        let ahead = Armed {
            ahead: Duration::from_millis(500),
            ..armed(1, "* * * * * *")
        };
        timers.arm(ahead, clock.now());
        // 10:00:01 is already within reach: due at once.
        assert_eq!(timers.next_wake(), Some(t("2026-11-29T10:00:00.500Z")));
        let fired = drive(&mut timers, &clock, t("2026-11-29T10:00:02.600Z")).await;
        let got: Vec<(DateTime<Utc>, DateTime<Utc>)> =
            fired.iter().map(|(d, taken)| (d.at, *taken)).collect();
        assert_eq!(
            got,
            [
                (t("2026-11-29T10:00:01Z"), t("2026-11-29T10:00:00.700Z")),
                (t("2026-11-29T10:00:02Z"), t("2026-11-29T10:00:01.500Z")),
                (t("2026-11-29T10:00:03Z"), t("2026-11-29T10:00:02.500Z")),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rearming_and_disarming_take_effect_at_once() {
        let clock = TokioClock::starting_at(t("2026-11-29T10:00:00Z"));
        let mut timers = Timers::new();
        timers.arm(armed(1, "* * * * * *"), clock.now());
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(timers.pop_due(clock.now()).len(), 2);
        // Edited: only the new schedule counts from now on.
        timers.arm(armed(1, "0 * * * * *"), clock.now());
        let fired = drive(&mut timers, &clock, t("2026-11-29T10:01:00Z")).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(
            fired[0].0,
            Due {
                job_id: 1,
                at: t("2026-11-29T10:01:00Z")
            }
        );
        timers.disarm(1);
        assert_eq!(timers.next_wake(), None);
        assert!(timers.armed(1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_wake_up_takes_every_due_fire_in_order() {
        let clock = TokioClock::starting_at(t("2026-11-29T10:00:00Z"));
        let mut timers = Timers::new();
        timers.arm(armed(1, "* * * * * *"), clock.now());
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
        assert_eq!(timers.next_wake(), Some(t("2026-11-29T10:00:04Z")));
    }

    #[test]
    fn stale_entries_of_rearmed_jobs_are_compacted() {
        let mut timers = Timers::new();
        let now = t("2026-11-29T10:00:00Z");
        // A yearly job re-armed every day for years keeps one live entry.
        for _ in 0..10_000 {
            timers.arm(armed(1, "0 0 0 1 1 *"), now);
            timers.arm(armed(2, "0 0 0 1 1 *"), now);
        }
        assert!(timers.heap_len() <= 2 * 2 + 64 + 1, "{}", timers.heap_len());
        assert_eq!(timers.next_wake(), Some(t("2027-01-01T00:00:00Z")));
        assert_eq!(timers.len(), 2);
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

//! Backfill (issue 11, part 3): which fire times of a job's schedule in a
//! range a backfill fires. A time fires when no record covers it and the
//! job's schedule will not record it itself (it lies at or before the
//! start of the job's current schedule, or the job is disabled); the
//! others are listed, never fired twice.

use chrono::{DateTime, Utc};

use crate::Schedule;

/// Most times one backfill may fire (`maxFires` may only lower it).
pub const MAX_FIRES: u32 = 1000;

/// Most fire times a range may hold, recorded ones included: a wider range
/// is refused rather than walked.
pub const MAX_SCAN: usize = 100_000;

/// What a backfill does with one fire time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeState {
    /// No record: the backfill fires it.
    Missing,
    /// A record (a run, a skip, or a catch-up standing for it) exists.
    Recorded,
    /// After the start of the job's current schedule while the job is
    /// enabled: the schedule itself records it (or is about to).
    Scheduled,
}

impl TimeState {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeState::Missing => "missing",
            TimeState::Recorded => "recorded",
            TimeState::Scheduled => "scheduled",
        }
    }
}

/// One fire time of the range and what the backfill does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedTime {
    pub at: DateTime<Utc>,
    pub state: TimeState,
}

/// Why a backfill request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackfillError {
    /// `from` is after `to`.
    EmptyRange,
    /// `to` lies in the future: a backfill only fires times already past.
    InFuture,
    /// `maxFires` is not within `1..=MAX_FIRES`.
    MaxFires(i64),
    /// The range holds more than [`MAX_SCAN`] fire times.
    RangeTooWide,
    /// More missing times than `maxFires`.
    TooMany { count: usize, max: u32 },
}

/// The request's fields, before any time is computed.
pub fn check_request(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    max_fires: i64,
) -> Vec<BackfillError> {
    let mut errors = Vec::new();
    if from > to {
        errors.push(BackfillError::EmptyRange);
    }
    if to > now {
        errors.push(BackfillError::InFuture);
    }
    if !(1..=i64::from(MAX_FIRES)).contains(&max_fires) {
        errors.push(BackfillError::MaxFires(max_fires));
    }
    errors
}

/// The fire times of `schedule` in `from ..= to`, oldest first, each with
/// what the backfill does with it. `covered` are the records of the job's
/// schedule as `(first, last)` time spans (a catch-up covers several
/// times); `schedule_owns_after` is the start of the job's current
/// schedule when the job is enabled (`None` when it is disabled).
pub fn plan(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    max_fires: u32,
    covered: &[(DateTime<Utc>, DateTime<Utc>)],
    schedule_owns_after: Option<DateTime<Utc>>,
) -> Result<Vec<PlannedTime>, BackfillError> {
    let (times, more) = schedule.between(from, to, MAX_SCAN);
    if more {
        return Err(BackfillError::RangeTooWide);
    }
    let mut spans = covered.to_vec();
    spans.sort_unstable();
    let mut out = Vec::with_capacity(times.len());
    let mut missing = 0;
    for at in times {
        let state = if is_covered(&spans, at) {
            TimeState::Recorded
        } else if schedule_owns_after.is_some_and(|start| at > start) {
            TimeState::Scheduled
        } else {
            missing += 1;
            TimeState::Missing
        };
        out.push(PlannedTime { at, state });
    }
    if missing > max_fires as usize {
        return Err(BackfillError::TooMany {
            count: missing,
            max: max_fires,
        });
    }
    Ok(out)
}

/// Whether a span of the sorted `spans` covers `at`.
fn is_covered(spans: &[(DateTime<Utc>, DateTime<Utc>)], at: DateTime<Utc>) -> bool {
    // Spans never overlap (one record per time), so the last one starting
    // at or before `at` is the only candidate.
    let i = spans.partition_point(|(first, _)| *first <= at);
    i > 0 && spans[i - 1].1 >= at
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use chrono_tz::Asia::Shanghai;

    use super::*;
    use crate::calendar::builtin;
    use crate::{CalendarRule, CronExpr};

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("RFC 3339")
            .with_timezone(&Utc)
    }

    fn hourly() -> Schedule {
        Schedule::new(CronExpr::parse("0 0 * * * *").expect("cron"), Shanghai)
    }

    #[test]
    fn requests() {
        let now = t("2026-01-10T00:00:00Z");
        let cases: Vec<(&str, &str, i64, Vec<BackfillError>)> = vec![
            ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", 10, vec![]),
            ("2026-01-01T00:00:00Z", "2026-01-10T00:00:00Z", 1000, vec![]),
            (
                "2026-01-03T00:00:00Z",
                "2026-01-02T00:00:00Z",
                10,
                vec![BackfillError::EmptyRange],
            ),
            (
                "2026-01-01T00:00:00Z",
                "2026-01-10T00:00:01Z",
                10,
                vec![BackfillError::InFuture],
            ),
            (
                "2026-01-01T00:00:00Z",
                "2026-01-02T00:00:00Z",
                0,
                vec![BackfillError::MaxFires(0)],
            ),
            (
                "2026-01-01T00:00:00Z",
                "2026-01-02T00:00:00Z",
                1001,
                vec![BackfillError::MaxFires(1001)],
            ),
        ];
        for (from, to, max, want) in cases {
            assert_eq!(
                check_request(t(from), t(to), now, max),
                want,
                "{from} {to} {max}"
            );
        }
    }

    #[test]
    fn states() {
        let from = t("2026-01-01T00:00:00Z");
        let to = t("2026-01-01T05:00:00Z");
        // 00:00 has a run; 01:00–02:00 one catch-up record.
        let covered = [
            (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:00Z")),
            (t("2026-01-01T01:00:00Z"), t("2026-01-01T02:00:00Z")),
        ];
        type Case = (Option<&'static str>, Vec<(&'static str, TimeState)>);
        let cases: Vec<Case> = vec![
            (
                None,
                vec![
                    ("00", TimeState::Recorded),
                    ("01", TimeState::Recorded),
                    ("02", TimeState::Recorded),
                    ("03", TimeState::Missing),
                    ("04", TimeState::Missing),
                    ("05", TimeState::Missing),
                ],
            ),
            (
                Some("2026-01-01T04:00:00Z"),
                vec![
                    ("00", TimeState::Recorded),
                    ("01", TimeState::Recorded),
                    ("02", TimeState::Recorded),
                    ("03", TimeState::Missing),
                    ("04", TimeState::Missing),
                    ("05", TimeState::Scheduled),
                ],
            ),
        ];
        for (owns, want) in cases {
            let got = plan(&hourly(), from, to, 1000, &covered, owns.map(t)).expect("plan");
            let want: Vec<PlannedTime> = want
                .into_iter()
                .map(|(h, state)| PlannedTime {
                    at: t(&format!("2026-01-01T{h}:00:00Z")),
                    state,
                })
                .collect();
            assert_eq!(got, want, "{owns:?}");
        }
    }

    #[test]
    fn limits() {
        let from = t("2026-01-01T00:00:00Z");
        let to = t("2026-01-01T09:00:00Z");
        assert_eq!(
            plan(&hourly(), from, to, 9, &[], None),
            Err(BackfillError::TooMany { count: 10, max: 9 })
        );
        assert_eq!(
            plan(&hourly(), from, to, 10, &[], None).map(|p| p.len()),
            Ok(10)
        );
        // Recorded times do not count towards maxFires.
        let covered = [(from, from)];
        assert!(plan(&hourly(), from, to, 9, &covered, None).is_ok());
        let every_second = Schedule::new(CronExpr::parse("* * * * * *").expect("cron"), Shanghai);
        assert_eq!(
            plan(
                &every_second,
                from,
                t("2026-01-03T00:00:00Z"),
                1000,
                &[],
                None
            ),
            Err(BackfillError::RangeTooWide)
        );
    }

    #[test]
    fn calendar_days() {
        // The 2026 Spring Festival: 15–23 February are days off, Saturday
        // 14 February and Saturday 28 February are make-up working days.
        let schedule = Schedule::new(CronExpr::parse("0 0 9 * * *").expect("cron"), Shanghai)
            .with_calendar(Arc::clone(builtin::cn_workdays()), CalendarRule::Workdays)
            .expect("rule fits");
        let got = plan(
            &schedule,
            t("2026-02-13T00:00:00Z"),
            t("2026-02-25T00:00:00Z"),
            1000,
            &[],
            None,
        )
        .expect("plan");
        let days: Vec<String> = got
            .iter()
            .map(|p| p.at.with_timezone(&Shanghai).format("%m-%d").to_string())
            .collect();
        assert_eq!(days, ["02-13", "02-14", "02-24"]);
    }
}

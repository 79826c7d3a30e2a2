//! Missed fire times: which times a job missed between two instants, and
//! the text of the one record that stands for all of them (SPEC §5: "however
//! many were missed: one record or one run").

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::job::period_text;
use crate::{Lang, Schedule};

/// How many missed fire times a record counts exactly.
pub const COUNT_CAP: usize = 10_000;

/// What a job missed.
#[derive(Debug, Clone, PartialEq)]
pub struct Missed {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    /// Exact up to [`COUNT_CAP`]; `capped` says there were more.
    pub count: usize,
    pub capped: bool,
}

/// Why fire times were missed; the record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MissReason {
    /// No instance was running (or none owned the job).
    Downtime,
    /// The database could not be reached to claim them.
    Outage,
    /// They waited for a free slot past the misfire threshold.
    Overloaded,
    /// The process was paused or the clock jumped forward.
    Stalled,
    /// The instance's clock disagreed with the database's.
    ClockSkew,
}

impl MissReason {
    /// "while …" in Chinese and in English.
    fn while_texts(self) -> (&'static str, &'static str) {
        match self {
            MissReason::Downtime => ("服务停机期间", "while no instance was running"),
            MissReason::Outage => ("数据库不可用期间", "while the database was unreachable"),
            MissReason::Overloaded => (
                "实例负载过高、未能按时开始期间",
                "while the instances were overloaded and could not start them in time",
            ),
            MissReason::Stalled => (
                "进程暂停或系统时钟跳变期间",
                "while the process was paused or the clock jumped",
            ),
            MissReason::ClockSkew => (
                "实例时钟与数据库偏差过大期间",
                "while this instance's clock disagreed with the database's",
            ),
        }
    }
}

/// The fire times of `schedule` (its calendar and active window included)
/// strictly after `from` and at or before `until`.
pub fn missed_between(
    schedule: &Schedule,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<Missed> {
    let first = schedule.next_after(from).filter(|t| *t <= until)?;
    let last = schedule
        .last_at_or_before(until)
        .filter(|t| *t >= first)
        .unwrap_or(first);
    let mut count = 1;
    let mut cursor = first;
    while cursor < last && count < COUNT_CAP {
        match schedule.next_after(cursor) {
            Some(t) if t <= last => {
                count += 1;
                cursor = t;
            }
            _ => break,
        }
    }
    Some(Missed {
        first,
        last,
        count,
        capped: cursor < last,
    })
}

/// The `output` of the record that stands for missed times, under the
/// `skip` policy (`caught_up` false) or as the note of a catch-up run.
pub fn missed_text(missed: &Missed, reason: MissReason, tz: Tz, caught_up: bool) -> String {
    if caught_up {
        texts(
            missed,
            reason,
            tz,
            "错过策略为补跑一次，现在补做。",
            "misfire policy is run once: caught up now.",
        )
    } else {
        texts(
            missed,
            reason,
            tz,
            "错过策略为跳过，不补做。",
            "misfire policy is skip.",
        )
    }
}

/// The record's two lines: what was missed, why, and what the policy did.
fn texts(missed: &Missed, reason: MissReason, tz: Tz, zh_policy: &str, en_policy: &str) -> String {
    let fmt = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .format("%Y-%m-%d %H:%M:%S %:z")
            .to_string()
    };
    let count = if missed.capped {
        format!("{}+", missed.count)
    } else {
        missed.count.to_string()
    };
    let (zh_while, en_while) = reason.while_texts();
    if missed.count == 1 && !missed.capped {
        let at = fmt(missed.first);
        format!(
            "{zh_while}错过了 1 次执行：{at}；{zh_policy}\nMissed 1 fire time {en_while}: {at}; {en_policy}"
        )
    } else {
        let (first, last) = (fmt(missed.first), fmt(missed.last));
        format!(
            "{zh_while}错过了 {count} 次执行：{first} 至 {last}；{zh_policy}\nMissed {count} fire times {en_while}: {first} to {last}; {en_policy}"
        )
    }
}

/// Whether a `run_once` catch-up may still run at `now`: always with no
/// window (`grace_ms` 0), else only when the last missed time is at most
/// `grace_ms` old (a 03:30 report does not run at 15:00 after an outage).
pub fn within_grace(missed: &Missed, grace_ms: i64, now: DateTime<Utc>) -> bool {
    grace_ms <= 0 || (now - missed.last).num_milliseconds() <= grace_ms
}

/// The `output` of the skipped record standing for missed times that a
/// `run_once` job does not catch up because the last of them is older
/// than its `misfireGraceMs`.
pub fn past_grace_text(missed: &Missed, reason: MissReason, tz: Tz, grace_ms: i64) -> String {
    let (zh, en) = (
        period_text(grace_ms, Lang::Zh),
        period_text(grace_ms, Lang::En),
    );
    texts(
        missed,
        reason,
        tz,
        &format!("错过策略为补跑一次，但最后一次错过已超过补跑时限 {zh}，不补做。"),
        &format!(
            "misfire policy is run once, but the last missed time is older than the catch-up window of {en}: not caught up."
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CronExpr;
    use crate::calendar::{CalendarRule, builtin};

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn missed_table() {
        let utc = chrono_tz::UTC;
        let cases = [
            // (cron, from, until, expected (first, last, count, capped))
            (
                "0 30 3 * * *",
                "2026-05-01T03:30:00Z",
                "2026-05-01T12:00:00Z",
                None,
            ),
            (
                "0 30 3 * * *",
                "2026-05-01T03:30:00Z",
                "2026-05-02T03:30:00Z",
                Some(("2026-05-02T03:30:00Z", "2026-05-02T03:30:00Z", 1, false)),
            ),
            (
                "0 30 3 * * *",
                "2026-05-01T00:00:00Z",
                "2026-05-04T12:00:00Z",
                Some(("2026-05-01T03:30:00Z", "2026-05-04T03:30:00Z", 4, false)),
            ),
            (
                "* * * * * *",
                "2026-05-01T00:00:00Z",
                "2026-05-01T00:00:10.500Z",
                Some(("2026-05-01T00:00:01Z", "2026-05-01T00:00:10Z", 10, false)),
            ),
            (
                "* * * * * *",
                "2026-05-01T00:00:00Z",
                "2026-05-02T00:00:00Z",
                Some((
                    "2026-05-01T00:00:01Z",
                    "2026-05-02T00:00:00Z",
                    COUNT_CAP,
                    true,
                )),
            ),
        ];
        for (expr, from, until, want) in cases {
            let cron = CronExpr::parse(expr).expect("cron");
            let got = missed_between(&Schedule::new(cron, utc), t(from), t(until));
            let want = want.map(|(first, last, count, capped)| Missed {
                first: t(first),
                last: t(last),
                count,
                capped,
            });
            assert_eq!(got, want, "{expr} from {from} until {until}");
        }
    }

    /// Misses follow the calendar: over the Spring Festival 2026 a daily
    /// 09:00 job on working days missed only the working days, the make-up
    /// Saturday 14 February included.
    #[test]
    fn missed_times_follow_the_calendar() {
        let tz: Tz = "Asia/Shanghai".parse().expect("tz");
        let cron = CronExpr::parse("0 0 9 * * *").expect("cron");
        let schedule = Schedule::new(cron, tz)
            .with_calendar(builtin::cn_workdays().clone(), CalendarRule::Workdays)
            .expect("schedule");
        let cases = [
            // (from, until, first, last, count): Beijing times.
            // 13 Feb (Fri) to 24 Feb (Tue): 14 Feb (make-up Saturday),
            // then the holiday 15–23 Feb, then 24 Feb.
            (
                "2026-02-13T09:00:00+08:00",
                "2026-02-24T12:00:00+08:00",
                "2026-02-14T09:00:00+08:00",
                "2026-02-24T09:00:00+08:00",
                2,
            ),
            // Inside the holiday nothing is missed after the Saturday.
            (
                "2026-02-14T09:00:00+08:00",
                "2026-02-23T23:00:00+08:00",
                "",
                "",
                0,
            ),
            // 28 Feb 2026 is a make-up Saturday too.
            (
                "2026-02-27T10:00:00+08:00",
                "2026-03-02T10:00:00+08:00",
                "2026-02-28T09:00:00+08:00",
                "2026-03-02T09:00:00+08:00",
                2,
            ),
        ];
        for (from, until, first, last, count) in cases {
            let got = missed_between(&schedule, t(from), t(until));
            if count == 0 {
                assert_eq!(got, None, "{from} to {until}");
                continue;
            }
            let want = Missed {
                first: t(first),
                last: t(last),
                count,
                capped: false,
            };
            assert_eq!(got, Some(want), "{from} to {until}");
        }
    }

    #[test]
    fn a_catch_up_runs_only_within_its_grace() {
        let missed = Missed {
            first: t("2026-05-01T03:30:00Z"),
            last: t("2026-05-02T03:30:00Z"),
            count: 2,
            capped: false,
        };
        let cases = [
            // (grace ms, now, runs)
            (0, "2026-06-01T00:00:00Z", true),
            (3_600_000, "2026-05-02T04:30:00Z", true),
            (3_600_000, "2026-05-02T04:30:00.001Z", false),
            (1, "2026-05-02T03:30:00Z", true),
        ];
        for (grace, now, runs) in cases {
            assert_eq!(within_grace(&missed, grace, t(now)), runs, "{grace} {now}");
        }
        let tz: Tz = "Asia/Shanghai".parse().expect("tz");
        let text = past_grace_text(&missed, MissReason::Outage, tz, 3_600_000);
        assert!(
            text.contains("数据库不可用期间错过了 2 次执行：2026-05-01 11:30:00 +08:00 至 2026-05-02 11:30:00 +08:00；错过策略为补跑一次，但最后一次错过已超过补跑时限 1 小时，不补做。"),
            "{text}"
        );
        assert!(
            text.contains("Missed 2 fire times while the database was unreachable: 2026-05-01 11:30:00 +08:00 to 2026-05-02 11:30:00 +08:00; misfire policy is run once, but the last missed time is older than the catch-up window of 1 hour: not caught up."),
            "{text}"
        );
    }

    #[test]
    fn texts_name_the_times_the_reason_and_the_policy() {
        let missed = Missed {
            first: t("2026-05-01T03:30:00Z"),
            last: t("2026-05-04T03:30:00Z"),
            count: 4,
            capped: false,
        };
        let tz: Tz = "Asia/Shanghai".parse().expect("tz");
        let cases = [
            (
                MissReason::Downtime,
                false,
                "服务停机期间错过了 4 次执行：2026-05-01 11:30:00 +08:00 至 2026-05-04 11:30:00 +08:00；错过策略为跳过",
                "Missed 4 fire times while no instance was running",
            ),
            (
                MissReason::Outage,
                false,
                "数据库不可用期间错过了 4 次执行",
                "while the database was unreachable",
            ),
            (
                MissReason::Overloaded,
                true,
                "现在补做",
                "instances were overloaded",
            ),
            (MissReason::Stalled, false, "进程暂停", "process was paused"),
            (MissReason::ClockSkew, false, "时钟", "clock disagreed"),
        ];
        for (reason, caught_up, zh, en) in cases {
            let text = missed_text(&missed, reason, tz, caught_up);
            assert!(text.contains(zh), "{reason:?}: {text}");
            assert!(text.contains(en), "{reason:?}: {text}");
        }
        let one = Missed {
            count: 1,
            last: missed.first,
            ..missed
        };
        let text = missed_text(&one, MissReason::Downtime, tz, false);
        assert!(
            text.contains("错过了 1 次执行：2026-05-01 11:30:00 +08:00；"),
            "{text}"
        );
    }
}

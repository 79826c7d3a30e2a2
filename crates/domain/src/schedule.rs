//! A job's schedule (issue 11): its cron expression in its zone, an optional
//! calendar with a rule, an active window and a jitter.
//!
//! The cron says the times of day in the job's zone; the calendar decides
//! the days, by the date of each nominal fire time in that zone. Fire times
//! are nominal: `scheduledAt` is always one of them. A jittered job *starts*
//! a little later ([`Schedule::start_at`]), by a delay every worker derives
//! alike from the job id and the nominal time.
//!
//! Everything here is pure: the current time is always a parameter.

use std::sync::Arc;

use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use crate::calendar::{Calendar, CalendarRule, DayKind, Label};
use crate::cron::CronExpr;
use crate::lang::Lang;

/// Most consecutive days a calendar may rule out before the search for the
/// next fire time gives up (about 137 years: far beyond any calendar's data,
/// after which every rule falls back to the plain week and fires again).
const MAX_SKIPPED_DAYS: u32 = 50_000;

/// How far ahead a schedule looks for years its calendar has no data for:
/// from 1 December on, a missing next year is reported.
pub const NOTICE_LOOKAHEAD_DAYS: i64 = 31;

/// The largest jitter accepted whatever the period (one day).
pub const MAX_JITTER_MS: i64 = 86_400_000;

/// Why a schedule cannot be built as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// `workdays` and `holidays` decide the weekdays themselves; a cron that
    /// restricts them would silently drop make-up working days.
    #[error("calendar rule {rule} needs a cron whose day-of-week field allows every day")]
    RuleNeedsEveryWeekday { rule: CalendarRule },
    #[error("activeUntil is before activeFrom")]
    WindowReversed,
    #[error("jitter must be between 0 and {max_ms} ms")]
    JitterOutOfRange { max_ms: i64 },
    /// The jitter must stay below the cron's shortest period, so that a
    /// delayed start never passes the next nominal time.
    #[error("jitter {jitter_ms} ms is not less than the cron's shortest period {period_ms} ms")]
    JitterTooLong { jitter_ms: i64, period_ms: i64 },
}

/// The calendar part of a schedule.
#[derive(Debug, Clone, PartialEq)]
struct CalendarPart {
    calendar: Arc<Calendar>,
    rule: CalendarRule,
}

/// When a job fires: cron, zone, calendar and rule, active window, jitter.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Shared: a parsed cron is several kilobytes (croner keeps a byte per
    /// possible year), and a worker holds a schedule per armed job, most
    /// of them with one of a few expressions.
    cron: Arc<CronExpr>,
    tz: Tz,
    calendar: Option<CalendarPart>,
    active_from: Option<DateTime<Utc>>,
    active_until: Option<DateTime<Utc>>,
    jitter_ms: i64,
}

/// A year the calendar has no data for, within the lookahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarNotice {
    /// The calendar's code.
    pub calendar: String,
    pub year: i32,
    pub rule: CalendarRule,
}

impl CalendarNotice {
    /// The job detail's `notice`: what is missing and what happens meanwhile.
    pub fn message(&self, lang: Lang) -> String {
        let (code, year) = (&self.calendar, self.year);
        let fallback_zh = match self.rule {
            CalendarRule::Workdays => "只在周一至周五触发",
            CalendarRule::Holidays => "只在周六、周日触发",
            CalendarRule::Exclude => "不排除任何日期",
        };
        let fallback_en = match self.rule {
            CalendarRule::Workdays => "fires Monday to Friday only",
            CalendarRule::Holidays => "fires on Saturdays and Sundays only",
            CalendarRule::Exclude => "excludes no date",
        };
        match lang {
            Lang::Zh => format!(
                "日历 {code} 还没有 {year} 年的数据：在补上之前，这个任务在 {year} 年{fallback_zh}，节假日和调休都不生效。请在节假日安排公布后更新日历。"
            ),
            Lang::En => format!(
                "Calendar {code} has no data for {year} yet: until it does, this job {fallback_en} in {year}, with no holidays or make-up working days. Update the calendar once the year's holidays are published."
            ),
        }
    }
}

/// One date where the calendar changed what the plain week would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayEffect {
    pub date: NaiveDate,
    pub kind: DayKind,
    pub name: Label,
}

/// What the calendar did in a range of fire times, measured against the
/// same rule over the plain week (a calendar that lists nothing).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CalendarEffect {
    /// Dates the job would fire on by the plain week, and does not: a
    /// holiday on a weekday (`workdays`, `exclude`), a make-up working day
    /// on a weekend (`holidays`).
    pub removed: Vec<DayEffect>,
    /// Dates the job fires on that the plain week would not give: a make-up
    /// working day on a weekend (`workdays`), a holiday on a weekday
    /// (`holidays`).
    pub added: Vec<DayEffect>,
    /// Years in the range the calendar has no data for (there the plain
    /// week applies).
    pub missing_years: Vec<i32>,
}

impl Schedule {
    /// The cron alone, in zone `tz`.
    pub fn new(cron: impl Into<Arc<CronExpr>>, tz: Tz) -> Schedule {
        Schedule {
            cron: cron.into(),
            tz,
            calendar: None,
            active_from: None,
            active_until: None,
            jitter_ms: 0,
        }
    }

    /// Lets `calendar` decide the days by `rule`.
    pub fn with_calendar(
        mut self,
        calendar: Arc<Calendar>,
        rule: CalendarRule,
    ) -> Result<Schedule, ScheduleError> {
        check_rule(&self.cron, rule)?;
        self.calendar = Some(CalendarPart { calendar, rule });
        Ok(self)
    }

    /// No fire time before `from` or after `until` (both included).
    pub fn with_active_window(
        mut self,
        from: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Schedule, ScheduleError> {
        check_window(from, until)?;
        self.active_from = from;
        self.active_until = until;
        Ok(self)
    }

    /// Starts each fire up to `jitter_ms` − 1 ms after its nominal time.
    pub fn with_jitter_ms(mut self, jitter_ms: i64) -> Result<Schedule, ScheduleError> {
        check_jitter(&self.cron, jitter_ms)?;
        self.jitter_ms = jitter_ms;
        Ok(self)
    }

    pub fn cron(&self) -> &CronExpr {
        &self.cron
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    pub fn calendar(&self) -> Option<(&Arc<Calendar>, CalendarRule)> {
        self.calendar.as_ref().map(|c| (&c.calendar, c.rule))
    }

    pub fn active_from(&self) -> Option<DateTime<Utc>> {
        self.active_from
    }

    pub fn active_until(&self) -> Option<DateTime<Utc>> {
        self.active_until
    }

    pub fn jitter_ms(&self) -> i64 {
        self.jitter_ms
    }

    /// The date of instant `t` in the job's zone: the day the calendar rules on.
    pub fn local_date(&self, t: DateTime<Utc>) -> NaiveDate {
        t.with_timezone(&self.tz).date_naive()
    }

    /// Whether the calendar lets the job fire on `date` (always, without one).
    pub fn allows_date(&self, date: NaiveDate) -> bool {
        match &self.calendar {
            None => true,
            Some(c) => c.calendar.allows(c.rule, date),
        }
    }

    /// The first fire time strictly after `after`.
    ///
    /// `None` past `activeUntil`, or when no time can be found (past year
    /// 5000, or a calendar that rules out more than [`MAX_SKIPPED_DAYS`]
    /// days in a row).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = after;
        if let Some(from) = self.active_from {
            // One millisecond before, so a fire time exactly at `from` counts.
            cursor = cursor.max(from - TimeDelta::milliseconds(1));
        }
        let mut skipped = 0u32;
        loop {
            let t = self.cron.next_after(cursor, self.tz)?;
            if self.active_until.is_some_and(|until| t > until) {
                return None;
            }
            let date = self.local_date(t);
            if self.allows_date(date) {
                return Some(t);
            }
            skipped += 1;
            if skipped > MAX_SKIPPED_DAYS {
                return None;
            }
            // Nothing else on this date can fire: go to the end of it.
            cursor = day_start(date.succ_opt()?, self.tz)? - TimeDelta::milliseconds(1);
        }
    }

    /// The next `count` fire times strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(count);
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    /// Every fire time `t` with `from <= t <= to`, oldest first, at most
    /// `limit` of them; the flag is true when more were left out (backfill's
    /// `maxFires`).
    pub fn between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        limit: usize,
    ) -> (Vec<DateTime<Utc>>, bool) {
        let mut out = Vec::new();
        let mut cursor = from - TimeDelta::milliseconds(1);
        while let Some(t) = self.next_after(cursor) {
            if t > to {
                break;
            }
            if out.len() == limit {
                return (out, true);
            }
            out.push(t);
            cursor = t;
        }
        (out, false)
    }

    /// The last fire time at or before `at` (to name the latest missed fire
    /// without walking every one of them). `None` before `activeFrom`, or
    /// when none can be found.
    pub fn last_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = match self.active_until {
            Some(until) => at.min(until),
            None => at,
        };
        let mut skipped = 0u32;
        loop {
            let t = self.cron.last_at_or_before(cursor, self.tz)?;
            if self.active_from.is_some_and(|from| t < from) {
                return None;
            }
            let date = self.local_date(t);
            if self.allows_date(date) {
                return Some(t);
            }
            skipped += 1;
            if skipped > MAX_SKIPPED_DAYS {
                return None;
            }
            // Nothing else on this date can fire: go to the day before.
            cursor = day_start(date, self.tz)? - TimeDelta::milliseconds(1);
        }
    }

    /// The delay, in milliseconds, a fire at `nominal` of job `job_id` waits
    /// before it starts: in `0..jitterMs`, the same on every worker and in
    /// every release (a fixed mix of the two numbers, not a library hash).
    pub fn jitter_delay_ms(&self, job_id: i64, nominal: DateTime<Utc>) -> i64 {
        if self.jitter_ms <= 0 {
            return 0;
        }
        let mixed = mix64(mix64(job_id as u64) ^ nominal.timestamp_millis() as u64);
        // `jitter_ms` is positive and at most MAX_JITTER_MS, so both
        // conversions are exact.
        (mixed % self.jitter_ms as u64) as i64
    }

    /// When the fire at `nominal` starts: `nominal` plus its jitter delay,
    /// kept strictly before the next nominal fire time. The cron's shortest
    /// period already bounds the jitter on the wall clock; the cap matters
    /// only where a clock change makes one real interval shorter (a daily
    /// 01:30 job in New York is 23 hours from the Sunday the clocks spring
    /// forward to the Monday).
    pub fn start_at(&self, job_id: i64, nominal: DateTime<Utc>) -> DateTime<Utc> {
        let mut delay = self.jitter_delay_ms(job_id, nominal);
        if delay > 0
            && let Some(next) = self.next_after(nominal)
        {
            delay = delay.min((next - nominal).num_milliseconds() - 1).max(0);
        }
        nominal + TimeDelta::milliseconds(delay)
    }

    /// The first year, from today through [`NOTICE_LOOKAHEAD_DAYS`] ahead
    /// (dates in the job's zone), that the calendar has no data for and the
    /// active window reaches; `None` without a calendar or when every such
    /// year is covered.
    pub fn calendar_notice(&self, now: DateTime<Utc>) -> Option<CalendarNotice> {
        self.calendar_notice_within(now, NOTICE_LOOKAHEAD_DAYS)
    }

    /// [`Self::calendar_notice`] with an explicit lookahead in days.
    pub fn calendar_notice_within(
        &self,
        now: DateTime<Utc>,
        lookahead_days: i64,
    ) -> Option<CalendarNotice> {
        let part = self.calendar.as_ref()?;
        let today = self.local_date(now);
        let horizon = today + TimeDelta::days(lookahead_days.max(0));
        (today.year()..=horizon.year())
            .filter(|&year| !part.calendar.covers(year))
            .find(|&year| self.window_reaches_year(year))
            .map(|year| CalendarNotice {
                calendar: part.calendar.code().to_string(),
                year,
                rule: part.rule,
            })
    }

    /// True when the active window overlaps `year` in the job's zone.
    fn window_reaches_year(&self, year: i32) -> bool {
        let start = NaiveDate::from_ymd_opt(year, 1, 1).and_then(|d| day_start(d, self.tz));
        let end = NaiveDate::from_ymd_opt(year + 1, 1, 1).and_then(|d| day_start(d, self.tz));
        let before_until = match (self.active_until, start) {
            (Some(until), Some(start)) => until >= start,
            _ => true,
        };
        let after_from = match (self.active_from, end) {
            (Some(from), Some(end)) => from < end,
            _ => true,
        };
        before_until && after_from
    }

    /// Which dates the calendar removed or added among the fire times `t`
    /// with `from < t <= to` (a preview's range: strictly after its start,
    /// through its last listed time), compared with the same rule over the
    /// plain week. `None` without a calendar.
    ///
    /// Only listed dates can differ from the plain week, so only those are
    /// probed: the cost follows the calendar's entries in the range, not
    /// the number of fire times.
    pub fn calendar_effect(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Option<CalendarEffect> {
        let part = self.calendar.as_ref()?;
        let mut effect = CalendarEffect::default();
        let from = match self.active_from {
            Some(active) => from.max(active - TimeDelta::milliseconds(1)),
            None => from,
        };
        let to = match self.active_until {
            Some(until) => to.min(until),
            None => to,
        };
        if to <= from {
            return Some(effect);
        }
        let (first, last) = (self.local_date(from), self.local_date(to));
        for (date, entry) in part.calendar.dates_between(first, last) {
            let with_calendar = part.calendar.allows(part.rule, date);
            if with_calendar == part.rule.allows_plain(date) || !self.cron.matches_date(date) {
                continue;
            }
            if !self.cron_fires_on(date, from, to) {
                continue;
            }
            let day = DayEffect {
                date,
                kind: entry.kind,
                name: entry.name.clone(),
            };
            if with_calendar {
                effect.added.push(day);
            } else {
                effect.removed.push(day);
            }
        }
        effect.missing_years = (first.year()..=last.year())
            .filter(|&y| !part.calendar.covers(y))
            .collect();
        Some(effect)
    }

    /// True when the cron alone has a time on `date` (in the job's zone)
    /// within `from < t <= to`.
    fn cron_fires_on(&self, date: NaiveDate, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        let (Some(start), Some(end)) = (
            day_start(date, self.tz),
            date.succ_opt().and_then(|d| day_start(d, self.tz)),
        ) else {
            return false;
        };
        let after = from.max(start - TimeDelta::milliseconds(1));
        self.cron
            .next_after(after, self.tz)
            .is_some_and(|t| t < end && t <= to)
    }
}

/// `workdays` and `holidays` need a cron that allows every weekday.
pub fn check_rule(cron: &CronExpr, rule: CalendarRule) -> Result<(), ScheduleError> {
    if rule.decides_weekdays() && !cron.every_weekday() {
        return Err(ScheduleError::RuleNeedsEveryWeekday { rule });
    }
    Ok(())
}

/// `until` must not be before `from`.
pub fn check_window(
    from: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<(), ScheduleError> {
    match (from, until) {
        (Some(f), Some(u)) if u < f => Err(ScheduleError::WindowReversed),
        _ => Ok(()),
    }
}

/// `0 <= jitter <= MAX_JITTER_MS`, and less than the cron's shortest period.
pub fn check_jitter(cron: &CronExpr, jitter_ms: i64) -> Result<(), ScheduleError> {
    if !(0..=MAX_JITTER_MS).contains(&jitter_ms) {
        return Err(ScheduleError::JitterOutOfRange {
            max_ms: MAX_JITTER_MS,
        });
    }
    if jitter_ms == 0 {
        return Ok(());
    }
    let period_ms = cron.shortest_period_secs().saturating_mul(1000);
    if jitter_ms >= period_ms {
        return Err(ScheduleError::JitterTooLong {
            jitter_ms,
            period_ms,
        });
    }
    Ok(())
}

/// The first instant of `date` in `tz`. Where a clock change skips
/// midnight, the first minute that exists.
pub fn day_start(date: NaiveDate, tz: Tz) -> Option<DateTime<Utc>> {
    let midnight = date.and_hms_opt(0, 0, 0)?;
    (0..=24 * 60).find_map(|minute| {
        tz.from_local_datetime(&(midnight + TimeDelta::minutes(minute)))
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

/// SplitMix64's finaliser: a fixed, well-spread mix of 64 bits. Written out
/// here (rather than a std hasher, whose output may change between
/// releases) because every worker, of every version, must agree on it.
pub(crate) fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;

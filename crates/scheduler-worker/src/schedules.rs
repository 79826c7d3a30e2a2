//! A job's schedule as the engine uses it: its cron in its zone with its
//! time rules (issue 11), the calendar it names looked up among the
//! built-in ones first, then among the user calendars in the database.
//!
//! A calendar edit moves the `schedule_from` of every job naming it (in
//! the edit's transaction), so a job's schedule is rebuilt, and its timers
//! re-armed, whenever its calendar's dates change.

use std::collections::HashMap;
use std::sync::Arc;

use chrono_tz::Tz;
use qiwu_domain::calendar::builtin;
use qiwu_domain::{Calendar, CronExpr, Schedule, TimeRules};
use qiwu_storage::{StorageError, Store};

/// User calendars by code, as read for a batch of jobs.
pub(crate) type UserCalendars = HashMap<String, Arc<Calendar>>;

/// Reads the user calendars that the given time rules name (built-in ones
/// need no reading). A code with no calendar is left out: the jobs naming
/// it are not armed (see [`build`]).
pub(crate) async fn user_calendars<'a>(
    store: &Store,
    rules: impl IntoIterator<Item = &'a TimeRules>,
) -> Result<UserCalendars, StorageError> {
    let mut codes: Vec<&str> = rules
        .into_iter()
        .filter_map(|r| r.calendar.as_deref())
        .filter(|code| !builtin::is_builtin(code))
        .collect();
    codes.sort_unstable();
    codes.dedup();
    let mut out = HashMap::with_capacity(codes.len());
    for code in codes {
        let Some(record) = store.calendars().get(code).await? else {
            continue;
        };
        match record.to_calendar() {
            Ok(calendar) => {
                out.insert(code.to_string(), Arc::new(calendar));
            }
            Err(e) => {
                tracing::error!(calendar = code, error = %e, "a stored calendar is invalid; the jobs naming it are not armed")
            }
        }
    }
    Ok(out)
}

/// The job's schedule, or `None` (logged) when it cannot be built: a
/// calendar that is gone, or rules a stored row should never hold.
pub(crate) fn build(
    job_id: i64,
    cron: impl Into<Arc<CronExpr>>,
    tz: Tz,
    rules: &TimeRules,
    calendars: &UserCalendars,
) -> Option<Schedule> {
    let calendar = match rules.calendar.as_deref() {
        None => None,
        Some(code) => match builtin::find(code).or_else(|| calendars.get(code).cloned()) {
            Some(calendar) => Some(calendar),
            None => {
                tracing::error!(
                    job = job_id,
                    calendar = code,
                    "the job's calendar is gone; the job is not armed until it names another"
                );
                return None;
            }
        },
    };
    match rules.schedule(cron, tz, calendar) {
        Ok(schedule) => Some(schedule),
        Err(e) => {
            tracing::error!(job = job_id, error = %e, "a stored schedule is invalid; the job is not armed");
            None
        }
    }
}

//! The alert that a job's calendar runs out of data (issue 11): when the
//! engine arms a job or one of its times falls due, a calendar without data
//! for a year the schedule reaches within the notice's lookahead raises
//! one alert (`alerts::raise_calendar_alert`, remembered durably per job,
//! calendar and year). This process asks the database once per job and
//! year; the check itself is pure and costs nothing for jobs without a
//! calendar.

use std::collections::HashSet;
use std::sync::Arc;

use chrono_tz::Tz;
use qiwu_domain::Schedule;

use crate::engine::Shared;

/// The (job, year) pairs this process has already handled.
#[derive(Debug, Default)]
pub(crate) struct CalendarWatch {
    handled: HashSet<(i64, i32)>,
}

impl CalendarWatch {
    /// Raises the job's calendar alert in the background if its calendar
    /// lacks a coming year and this process has not handled that year yet.
    pub(crate) fn check(&mut self, shared: &Arc<Shared>, job_id: i64, schedule: &Schedule) {
        let now = shared.clock.now();
        let Some(notice) = schedule.calendar_notice(now) else {
            return;
        };
        if !self.handled.insert((job_id, notice.year)) {
            return;
        }
        let store = shared.store.clone();
        let tz: Tz = schedule.timezone();
        shared.tracker.spawn(async move {
            match crate::alerts::raise_calendar_alert(&store, job_id, &notice, tz, now).await {
                Ok(Some(n)) => {
                    tracing::warn!(job = job_id, calendar = %notice.calendar, year = notice.year, notification = n.id, "the job's calendar has no data for a coming year: alert raised")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(job = job_id, calendar = %notice.calendar, year = notice.year, error = %e, "cannot raise the calendar alert")
                }
            }
        });
    }
}

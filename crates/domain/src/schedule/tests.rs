//! Schedules: calendars deciding the days, active windows, jitter.

//! User calendars (issue 11): a `calendars` row and its `calendar_dates`,
//! always written together in one transaction.
//!
//! What a valid calendar is belongs to the domain
//! (`qiwu_domain::calendar::user`); this file stores a spec that passed it.
//! The built-in `cn-workdays` is compiled in and never stored.

use chrono::{DateTime, NaiveDate, Utc};
use qiwu_domain::calendar::user::{UserCalendarSpec, parse_date};
use qiwu_domain::calendar::{Calendar, CalendarDate, DayKind, Label, Years};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter,
    QueryOrder, QuerySelect,
};

use crate::entity::{calendar, calendar_date, job};
use crate::error::is_unique_violation;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// Rows per multi-row insert: 4 columns each stays far below every
/// backend's limit on bound parameters.
const INSERT_CHUNK: usize = 500;

/// One listed date of a stored calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarDateRecord {
    pub date: NaiveDate,
    pub kind: DayKind,
    pub name: String,
}

/// A stored user calendar with its dates, by date.
#[derive(Debug, Clone, PartialEq)]
pub struct CalendarRecord {
    pub code: String,
    pub name: String,
    pub description: String,
    pub first_year: Option<i32>,
    pub last_year: Option<i32>,
    pub dates: Vec<CalendarDateRecord>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl CalendarRecord {
    /// The calendar a schedule uses. `Corrupt` when the stored years do not
    /// hold the stored dates (never written by us).
    pub fn to_calendar(&self) -> Result<Calendar, StorageError> {
        let years = match (self.first_year, self.last_year) {
            (None, None) => None,
            (Some(first), Some(last)) => Some(Years::new(first, last).ok_or_else(|| {
                StorageError::Corrupt(format!(
                    "calendar {}: years {first}–{last} are not valid",
                    self.code
                ))
            })?),
            _ => {
                return Err(StorageError::Corrupt(format!(
                    "calendar {}: only one of first_year and last_year is set",
                    self.code
                )));
            }
        };
        let dates = self
            .dates
            .iter()
            .map(|d| {
                (
                    d.date,
                    CalendarDate {
                        kind: d.kind,
                        name: Label::same(d.name.clone()),
                    },
                )
            })
            .collect();
        Calendar::new(
            self.code.clone(),
            Label::same(self.name.clone()),
            years,
            dates,
        )
        .map_err(|e| StorageError::Corrupt(format!("calendar {}: {e}", self.code)))
    }
}

/// A stored user calendar without its dates, for lists.
#[derive(Debug, Clone, PartialEq)]
pub struct CalendarSummary {
    pub code: String,
    pub name: String,
    pub description: String,
    pub first_year: Option<i32>,
    pub last_year: Option<i32>,
    pub date_count: u64,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

fn summary(row: calendar::Model, date_count: u64) -> Result<CalendarSummary, StorageError> {
    Ok(CalendarSummary {
        created_at: from_millis(row.created_at)?,
        updated_at: from_millis(row.updated_at)?,
        code: row.code,
        name: row.name,
        description: row.description,
        first_year: row.first_year,
        last_year: row.last_year,
        date_count,
        version: row.version,
        created_by: row.created_by,
        updated_by: row.updated_by,
    })
}

fn record(
    row: calendar::Model,
    dates: Vec<calendar_date::Model>,
) -> Result<CalendarRecord, StorageError> {
    let mut out = Vec::with_capacity(dates.len());
    for d in dates {
        let date = parse_date(&d.date).ok_or_else(|| {
            StorageError::Corrupt(format!("calendar {}: date {:?}", row.code, d.date))
        })?;
        let kind = DayKind::parse(&d.kind).ok_or_else(|| {
            StorageError::Corrupt(format!("calendar {}: kind {:?}", row.code, d.kind))
        })?;
        out.push(CalendarDateRecord {
            date,
            kind,
            name: d.name,
        });
    }
    // Sorted here: the column is `YYYY-MM-DD`, but PostgreSQL would order
    // text by its locale.
    out.sort_by_key(|d| d.date);
    Ok(CalendarRecord {
        created_at: from_millis(row.created_at)?,
        updated_at: from_millis(row.updated_at)?,
        code: row.code,
        name: row.name,
        description: row.description,
        first_year: row.first_year,
        last_year: row.last_year,
        dates: out,
        version: row.version,
        created_by: row.created_by,
        updated_by: row.updated_by,
    })
}

#[derive(FromQueryResult)]
struct DateCount {
    calendar_code: String,
    n: i64,
}

/// Calendar table access; obtained from [`Store::calendars`].
pub struct CalendarRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn calendars(&self) -> CalendarRepo<'_> {
        CalendarRepo { store: self }
    }
}

async fn find(
    conn: &impl ConnectionTrait,
    code: &str,
) -> Result<Option<CalendarRecord>, StorageError> {
    let Some(row) = calendar::Entity::find_by_id(code.to_owned())
        .one(conn)
        .await?
    else {
        return Ok(None);
    };
    let dates = calendar_date::Entity::find()
        .filter(calendar_date::Column::CalendarCode.eq(code))
        .all(conn)
        .await?;
    record(row, dates).map(Some)
}

/// Like [`find`], holding the calendar's row lock until the transaction
/// ends (SQLite's write transaction already excludes other writers).
async fn locked(
    conn: &impl ConnectionTrait,
    code: &str,
) -> Result<Option<CalendarRecord>, StorageError> {
    let Some(row) = calendar::Entity::find_by_id(code.to_owned())
        .lock_exclusive()
        .one(conn)
        .await?
    else {
        return Ok(None);
    };
    let dates = calendar_date::Entity::find()
        .filter(calendar_date::Column::CalendarCode.eq(code))
        .all(conn)
        .await?;
    record(row, dates).map(Some)
}

async fn insert_dates(
    conn: &impl ConnectionTrait,
    spec: &UserCalendarSpec,
) -> Result<(), StorageError> {
    let rows: Vec<calendar_date::ActiveModel> = spec
        .dates
        .iter()
        .map(|(date, entry)| calendar_date::ActiveModel {
            calendar_code: Set(spec.code.clone()),
            date: Set(date.format("%Y-%m-%d").to_string()),
            kind: Set(entry.kind.as_str().to_owned()),
            name: Set(entry.name.zh.clone()),
        })
        .collect();
    for chunk in rows.chunks(INSERT_CHUNK) {
        calendar_date::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

impl CalendarRepo<'_> {
    /// Every user calendar with its number of dates, by code (byte order
    /// on every backend).
    pub async fn list(&self) -> Result<Vec<CalendarSummary>, StorageError> {
        let conn = self.store.connection();
        let rows = calendar::Entity::find()
            .order_by_asc(calendar::Column::Code)
            .all(conn)
            .await?;
        let counts: Vec<DateCount> = calendar_date::Entity::find()
            .select_only()
            .column(calendar_date::Column::CalendarCode)
            .column_as(calendar_date::Column::Date.count(), "n")
            .group_by(calendar_date::Column::CalendarCode)
            .into_model::<DateCount>()
            .all(conn)
            .await?;
        let mut out = rows
            .into_iter()
            .map(|row| {
                let n = counts
                    .iter()
                    .find(|c| c.calendar_code == row.code)
                    .map_or(0, |c| u64::try_from(c.n).unwrap_or(0));
                summary(row, n)
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.code.cmp(&b.code));
        Ok(out)
    }

    /// The codes of every user calendar (for job validation).
    pub async fn codes(&self) -> Result<Vec<String>, StorageError> {
        let mut codes: Vec<String> = calendar::Entity::find()
            .select_only()
            .column(calendar::Column::Code)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        codes.sort();
        Ok(codes)
    }

    pub async fn get(&self, code: &str) -> Result<Option<CalendarRecord>, StorageError> {
        find(self.store.connection(), code).await
    }

    /// Stores a new calendar with its dates, version 1; `AlreadyExists`
    /// when the code is taken.
    pub async fn create(
        &self,
        spec: &UserCalendarSpec,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<CalendarRecord, StorageError> {
        let now = to_millis(now);
        let txn = self.store.begin_write().await?;
        let row = calendar::ActiveModel {
            code: Set(spec.code.clone()),
            name: Set(spec.name.clone()),
            description: Set(spec.description.clone()),
            first_year: Set(spec.years.map(Years::first)),
            last_year: Set(spec.years.map(Years::last)),
            version: Set(1),
            created_at: Set(now),
            created_by: Set(actor.to_owned()),
            updated_at: Set(now),
            updated_by: Set(actor.to_owned()),
        };
        match calendar::Entity::insert(row)
            .exec_without_returning(&txn)
            .await
        {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(StorageError::AlreadyExists),
            Err(e) => return Err(e.into()),
        }
        insert_dates(&txn, spec).await?;
        let created = find(&txn, &spec.code)
            .await?
            .ok_or(StorageError::NotFound)?;
        txn.commit().await?;
        Ok(created)
    }

    /// Replaces a calendar's name, description, years and dates when its
    /// version is still `expected_version`, and bumps the version. Returns
    /// the calendar before and after (callers audit both) and the ids of
    /// the jobs naming it. `NotFound` when missing, `StaleVersion` when
    /// changed meanwhile.
    ///
    /// Those jobs start a new schedule in the same transaction (their
    /// `schedule_from` and `updated_at` move to now, their version and
    /// fields stay): the dates decide their fire times, so timers armed
    /// from the old dates claim nothing and the ledger's chain restarts
    /// from the edit, as after an edit of the job.
    pub async fn update(
        &self,
        expected_version: i64,
        spec: &UserCalendarSpec,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<(CalendarRecord, CalendarRecord, Vec<i64>), StorageError> {
        let txn = self.store.begin_write().await?;
        // Locked until commit, so the dates read and replaced below belong
        // to the version checked here.
        let before = locked(&txn, &spec.code)
            .await?
            .ok_or(StorageError::NotFound)?;
        if before.version != expected_version {
            return Err(StorageError::StaleVersion {
                current: before.version,
            });
        }
        calendar::Entity::update_many()
            .col_expr(calendar::Column::Name, Expr::val(spec.name.as_str()))
            .col_expr(
                calendar::Column::Description,
                Expr::val(spec.description.as_str()),
            )
            .col_expr(
                calendar::Column::FirstYear,
                Expr::val(spec.years.map(Years::first)),
            )
            .col_expr(
                calendar::Column::LastYear,
                Expr::val(spec.years.map(Years::last)),
            )
            .col_expr(calendar::Column::UpdatedAt, Expr::val(to_millis(now)))
            .col_expr(calendar::Column::UpdatedBy, Expr::val(actor))
            .col_expr(
                calendar::Column::Version,
                Expr::col(calendar::Column::Version).add(1),
            )
            .filter(calendar::Column::Code.eq(spec.code.as_str()))
            .exec(&txn)
            .await?;
        calendar_date::Entity::delete_many()
            .filter(calendar_date::Column::CalendarCode.eq(spec.code.as_str()))
            .exec(&txn)
            .await?;
        insert_dates(&txn, spec).await?;
        let jobs = restart_schedules(&txn, &spec.code, to_millis(now)).await?;
        let after = find(&txn, &spec.code)
            .await?
            .ok_or(StorageError::NotFound)?;
        txn.commit().await?;
        Ok((before, after, jobs))
    }

    /// Deletes a calendar and its dates; returns what was deleted (callers
    /// audit it), or `None` when missing. `InUse` with the jobs' ids when
    /// jobs name it (checked under the calendar's lock).
    pub async fn delete(&self, code: &str) -> Result<Option<CalendarRecord>, StorageError> {
        let txn = self.store.begin_write().await?;
        let Some(existing) = locked(&txn, code).await? else {
            return Ok(None);
        };
        let users = jobs_naming(&txn, code).await?;
        if !users.is_empty() {
            return Err(StorageError::InUse(users));
        }
        calendar_date::Entity::delete_many()
            .filter(calendar_date::Column::CalendarCode.eq(code))
            .exec(&txn)
            .await?;
        calendar::Entity::delete_by_id(code.to_owned())
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(Some(existing))
    }
}

/// The ids of the jobs naming calendar `code`, by id.
async fn jobs_naming(conn: &impl ConnectionTrait, code: &str) -> Result<Vec<i64>, StorageError> {
    Ok(job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        .filter(job::Column::CalendarCode.eq(code))
        .order_by_asc(job::Column::Id)
        .into_tuple()
        .all(conn)
        .await?)
}

/// Starts a new schedule for every job naming calendar `code`: its
/// `schedule_from` moves to `now` (always forward) and `updated_at` to
/// `now`, so reconciliation re-reads it. Returns their ids.
async fn restart_schedules(
    conn: &impl ConnectionTrait,
    code: &str,
    now: i64,
) -> Result<Vec<i64>, StorageError> {
    let ids = jobs_naming(conn, code).await?;
    if ids.is_empty() {
        return Ok(ids);
    }
    // `GREATEST(schedule_from + 1, now)`, written portably.
    let starts = Expr::case(
        Expr::col(job::Column::ScheduleFrom).gte(now),
        Expr::col(job::Column::ScheduleFrom).add(1),
    )
    .finally(Expr::val(now));
    job::Entity::update_many()
        .col_expr(job::Column::ScheduleFrom, starts.into())
        .col_expr(job::Column::UpdatedAt, Expr::val(now))
        .filter(job::Column::CalendarCode.eq(code))
        .exec(conn)
        .await?;
    Ok(ids)
}

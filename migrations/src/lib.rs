//! Database migrations for Qiwu Scheduler, written with the sea-orm-migration
//! schema builder so that one definition runs on SQLite, PostgreSQL and
//! MySQL/MariaDB.
//!
//! Conventions every migration follows:
//! - timestamps are `BIGINT` milliseconds since the Unix epoch (UTC), never a
//!   database time type (MySQL `TIMESTAMP` ends in 2038 and zone handling differs);
//! - indexed strings are `VARCHAR(n)`, long text is `TEXT`;
//! - on MySQL, tables are utf8mb4 with the binary collation so that string keys
//!   compare case- and accent-sensitively, exactly as on PostgreSQL and SQLite.

use sea_orm_migration::prelude::*;

/// Re-exported so callers can run `Migrator::up` without depending on sea-orm-migration.
pub use sea_orm_migration::MigratorTrait;

mod m20251129_000001_initial;
mod m20261130_000002_calendars;
mod m20261130_000003_fire_chain;
mod m20261130_000005_trace_ids;
mod m20261201_000006_query_indexes;
mod m20261201_000007_run_control;
mod m20261201_000008_time_rules;
mod m20261201_000009_alerts;
mod m20261201_000010_freezes;
mod m20261201_000011_backfill;
mod m20261201_000012_run_callbacks;
mod m20261202_000013_name_grams;

/// Applies the schema; used by `qiwu-scheduler migrate` and by `Store::migrate`.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20251129_000001_initial::Migration),
            Box::new(m20261130_000002_calendars::Migration),
            Box::new(m20261130_000003_fire_chain::Migration),
            Box::new(m20261130_000005_trace_ids::Migration),
            Box::new(m20261201_000006_query_indexes::Migration),
            Box::new(m20261201_000007_run_control::Migration),
            Box::new(m20261201_000008_time_rules::Migration),
            Box::new(m20261201_000009_alerts::Migration),
            Box::new(m20261201_000010_freezes::Migration),
            Box::new(m20261201_000011_backfill::Migration),
            Box::new(m20261201_000012_run_callbacks::Migration),
            Box::new(m20261202_000013_name_grams::Migration),
        ]
    }
}

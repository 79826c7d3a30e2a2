//! Initial schema: every table of the service, plus the two built-in job groups.
//!
//! The migration is re-runnable after a partial failure (tables use
//! `IF NOT EXISTS`, indexes are created only when missing, seed rows ignore
//! conflicts) because MySQL cannot roll DDL back: a crash half-way through must
//! not leave a database that the next `migrate` refuses to finish.

use std::time::{SystemTime, UNIX_EPOCH};

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    big_integer, big_integer_null, boolean, integer, string_len, string_len_null, text, text_null,
};
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// MySQL collation for string keys: byte-wise, so `Abc` and `abc` (or `e` and
/// `é`) are different keys, as they are on PostgreSQL and SQLite.
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

/// Tables in creation order; `down` drops them in reverse.
const TABLES: [&str; 12] = [
    "job_groups",
    "jobs",
    "fires",
    "runs",
    "audit_logs",
    "notification_templates",
    "notifications",
    "outbox",
    "settings",
    "api_keys",
    "seed_markers",
    "instances",
];

/// Backend-specific pieces of DDL.
#[derive(Clone, Copy)]
struct Dialect {
    mysql: bool,
}

impl Dialect {
    fn table(self, name: &'static str) -> TableCreateStatement {
        let mut stmt = Table::create();
        stmt.table(name).if_not_exists();
        if self.mysql {
            // The table default makes every string column byte-wise too, so
            // comparisons (and joins between columns) behave as on the other two.
            stmt.engine("InnoDB")
                .character_set("utf8mb4")
                .collate(MYSQL_BIN_COLLATION);
        }
        stmt
    }

    /// A unique/primary string key; spelled out explicitly on MySQL so it stays
    /// byte-wise even if someone changes the table default later.
    fn key(self, name: &'static str, len: u32) -> ColumnDef {
        let mut col = string_len(name, len);
        if self.mysql {
            col.extra(format!("COLLATE {MYSQL_BIN_COLLATION}"));
        }
        col
    }
}

fn id(name: &'static str) -> ColumnDef {
    ColumnDef::new(name)
        .big_integer()
        .not_null()
        .auto_increment()
        .primary_key()
        .take()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| <i64 as TryFrom<u128>>::try_from(d.as_millis()).ok())
        .unwrap_or(0)
}

/// One index definition: (name, table, columns, unique).
type IndexDef = (&'static str, &'static str, &'static [&'static str], bool);

const INDEXES: &[IndexDef] = &[
    ("ux_jobs_name", "jobs", &["name"], true),
    ("ux_jobs_builtin_key", "jobs", &["builtin_key"], true),
    ("idx_jobs_group_code", "jobs", &["group_code"], false),
    ("idx_jobs_handler", "jobs", &["handler"], false),
    ("idx_jobs_enabled", "jobs", &["enabled"], false),
    (
        "ux_fires_job_trigger_scheduled",
        "fires",
        &["job_id", "trigger", "scheduled_at"],
        true,
    ),
    ("idx_fires_state", "fires", &["state"], false),
    (
        "ux_runs_fire_attempt",
        "runs",
        &["fire_id", "attempt"],
        true,
    ),
    ("idx_runs_started", "runs", &["started_at", "id"], false),
    (
        "idx_runs_job_started",
        "runs",
        &["job_id", "started_at"],
        false,
    ),
    (
        "idx_runs_status_started",
        "runs",
        &["status", "started_at"],
        false,
    ),
    (
        "idx_runs_handler_started",
        "runs",
        &["handler", "started_at"],
        false,
    ),
    ("idx_audit_logs_at", "audit_logs", &["at"], false),
    (
        "idx_notifications_recipient_created",
        "notifications",
        &["recipient", "created_at"],
        false,
    ),
    (
        "idx_outbox_status_next",
        "outbox",
        &["status", "next_attempt_at"],
        false,
    ),
    ("ux_api_keys_prefix", "api_keys", &["prefix"], true),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let d = Dialect {
            mysql: manager.get_database_backend() == DbBackend::MySql,
        };

        for table in tables(d) {
            manager.create_table(table).await?;
        }

        for &(name, table, cols, unique) in INDEXES {
            if manager.has_index(table, name).await? {
                continue;
            }
            let mut idx = Index::create();
            idx.name(name).table(table);
            for &col in cols {
                idx.col(col);
            }
            if unique {
                idx.unique();
            }
            manager.create_index(idx).await?;
        }

        seed_groups(manager).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for name in TABLES.iter().rev() {
            manager
                .drop_table(Table::drop().table(*name).if_exists().take())
                .await?;
        }
        Ok(())
    }

    // SQLite and PostgreSQL can roll DDL back, so a failure leaves nothing
    // behind; on MySQL this is harmless (DDL commits implicitly).
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

fn tables(d: Dialect) -> Vec<TableCreateStatement> {
    vec![
        d.table("job_groups")
            .col(d.key("code", 64).primary_key())
            .col(string_len("label_zh", 64))
            .col(string_len("label_en", 64))
            .col(boolean("builtin"))
            .col(big_integer("created_at"))
            .take(),
        d.table("jobs")
            .col(id("id"))
            .col(d.key("name", 64))
            .col(d.key("group_code", 64))
            .col(string_len("handler", 128))
            .col(text("params"))
            .col(string_len("cron", 255))
            .col(string_len_null("timezone", 64))
            .col(boolean("enabled"))
            .col(integer("retry_count"))
            .col(big_integer("retry_interval_ms"))
            .col(big_integer("timeout_ms"))
            .col(boolean("allow_concurrent"))
            .col(string_len("misfire_policy", 16))
            .col(text("remark"))
            .col(big_integer("version"))
            .col(string_len_null("builtin_key", 160))
            .col(big_integer("created_at"))
            .col(string_len("created_by", 128))
            .col(big_integer("updated_at"))
            .col(string_len("updated_by", 128))
            .take(),
        d.table("fires")
            .col(id("id"))
            .col(big_integer("job_id"))
            .col(string_len("trigger", 16))
            .col(big_integer("scheduled_at"))
            .col(string_len("state", 16))
            .col(string_len_null("claimed_by", 128))
            .col(big_integer_null("claimed_at"))
            .col(big_integer("created_at"))
            .take(),
        d.table("runs")
            .col(id("id"))
            .col(big_integer("fire_id"))
            .col(big_integer("job_id"))
            .col(string_len("job_name", 64))
            .col(string_len("handler", 128))
            .col(string_len("trigger", 16))
            .col(big_integer("scheduled_at"))
            .col(integer("attempt"))
            .col(string_len("status", 16))
            .col(big_integer("started_at"))
            .col(big_integer_null("finished_at"))
            .col(big_integer_null("duration_ms"))
            .col(string_len("instance", 128))
            .col(text("output"))
            .col(text("error"))
            .col(big_integer_null("deleted_at"))
            .take(),
        d.table("audit_logs")
            .col(id("id"))
            .col(big_integer("at"))
            .col(string_len("actor", 128))
            .col(string_len("action", 64))
            .col(string_len("target_type", 32))
            .col(string_len_null("target_id", 64))
            .col(text("summary"))
            .col(text_null("before_json"))
            .col(text_null("after_json"))
            .take(),
        d.table("notification_templates")
            .col(d.key("code", 64).primary_key())
            .col(text("title_zh"))
            .col(text("body_zh"))
            .col(text("title_en"))
            .col(text("body_en"))
            .col(big_integer("updated_at"))
            .col(string_len("updated_by", 128))
            .take(),
        d.table("notifications")
            .col(id("id"))
            .col(string_len("recipient", 128))
            .col(string_len("template_code", 64))
            .col(text("title"))
            .col(text("body"))
            .col(big_integer("created_at"))
            .col(big_integer_null("read_at"))
            .take(),
        d.table("outbox")
            .col(id("id"))
            .col(big_integer("notification_id"))
            .col(text("payload"))
            .col(string_len("status", 16))
            .col(integer("attempts"))
            .col(big_integer("next_attempt_at"))
            .col(text_null("last_error"))
            .col(big_integer("created_at"))
            .col(big_integer_null("sent_at"))
            .take(),
        d.table("settings")
            .col(d.key("key", 128).primary_key())
            .col(text("value"))
            .col(big_integer("updated_at"))
            .col(string_len("updated_by", 128))
            .take(),
        d.table("api_keys")
            .col(id("id"))
            .col(string_len("name", 64))
            .col(d.key("prefix", 16))
            .col(string_len("secret_hash", 128))
            .col(text("perms"))
            .col(big_integer("created_at"))
            .col(string_len("created_by", 128))
            .col(big_integer_null("revoked_at"))
            .col(big_integer_null("last_used_at"))
            .take(),
        d.table("seed_markers")
            .col(d.key("key", 160).primary_key())
            .col(big_integer("applied_at"))
            .take(),
        d.table("instances")
            .col(d.key("id", 128).primary_key())
            .col(string_len("role", 16))
            .col(string_len("timezone", 64))
            .col(big_integer("started_at"))
            .col(big_integer("heartbeat_at"))
            .take(),
    ]
}

/// The two groups the service cannot work without; ignored when already there.
async fn seed_groups(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let now = now_ms();
    let mut insert = Query::insert();
    insert.into_table("job_groups").columns([
        "code",
        "label_zh",
        "label_en",
        "builtin",
        "created_at",
    ]);
    for (code, zh, en) in [("default", "默认", "Default"), ("system", "系统", "System")] {
        insert
            .values([code.into(), zh.into(), en.into(), true.into(), now.into()])
            .map_err(|e| DbErr::Migration(format!("seed job_groups: {e}")))?;
    }
    insert.on_conflict(
        OnConflict::column("code")
            .do_nothing_on(["code"])
            .to_owned(),
    );
    manager.exec_stmt(insert).await
}

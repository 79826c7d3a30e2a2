//! Seeding of the built-in jobs of SPEC §7 and of the notification
//! templates, once ever, on first initialisation.
//!
//! Each built-in job has its own seed marker `builtin-job:{key}`, where the
//! key is handler plus original Chinese name. The marker is written after
//! the job, so a crash in between is repaired at the next start; once it is
//! there the job is never created again, so a deleted built-in stays
//! deleted and an edited one is never overwritten. Built-ins whose handler
//! is not registered here are left for the release that registers it.

use chrono::{DateTime, Utc};
use qiwu_domain::HandlerCatalog;
use qiwu_domain::builtin::{BUILTIN_JOBS, BuiltinJob};
use qiwu_storage::{NewJob, StorageError, Store};
use serde_json::Value;

use crate::WorkerError;

/// Who built-in jobs are created by.
pub const SEED_ACTOR: &str = "system";
/// How many `name (n)` variants to try when a user's job holds the name.
const MAX_NAME_SUFFIX: u32 = 100;

/// The seed marker of a built-in job.
pub fn marker(job: &BuiltinJob) -> String {
    format!("builtin-job:{}", job.key())
}

/// Seeds the notification templates, then every built-in job whose handler
/// is in `catalog` and that was never seeded before. Returns the names of
/// the jobs this call created.
pub async fn seed_builtin_jobs(
    store: &Store,
    catalog: &HandlerCatalog,
    now: DateTime<Utc>,
) -> Result<Vec<String>, WorkerError> {
    for code in store.templates().seed_defaults(now).await? {
        tracing::info!(template = %code, "notification template seeded");
    }
    let mut created = Vec::new();
    for job in BUILTIN_JOBS.iter() {
        let Some(handler) = catalog.get(job.handler) else {
            continue;
        };
        let marker = marker(job);
        if store.is_seeded(&marker).await? {
            continue;
        }
        let key = job.key();
        // Seeded before the markers existed, or by an instance that crashed
        // before writing the marker: the job is there, only mark it.
        if store.jobs().find_by_builtin_key(&key).await?.is_none()
            && let Some(name) =
                create(store, job, Value::Object(handler.default_params()), now).await?
        {
            created.push(name);
        }
        store.mark_seed_once(&marker, now).await?;
    }
    Ok(created)
}

/// Creates one built-in job under its Chinese name, or `name (2)`, `name
/// (3)`… when a user's job already holds it. `None` when another instance
/// created it at the same moment.
async fn create(
    store: &Store,
    job: &BuiltinJob,
    params: Value,
    now: DateTime<Utc>,
) -> Result<Option<String>, WorkerError> {
    let key = job.key();
    let mut spec = NewJob {
        time_rules: Default::default(),
        name: job.name_zh.to_owned(),
        group: job.group.to_owned(),
        handler: job.handler.to_owned(),
        params,
        cron: job.cron.to_owned(),
        timezone: None,
        enabled: job.enabled,
        retry_count: 0,
        retry_interval_ms: 1000,
        retry_backoff: "fixed".into(),
        retry_max_interval_ms: 3_600_000,
        retry_jitter: false,
        overlap_policy: "skip".into(),
        timeout_ms: job.timeout_ms,
        allow_concurrent: false,
        misfire_policy: job.misfire.as_str().to_owned(),
        remark: String::new(),
        builtin_key: Some(key.clone()),
        alert: Default::default(),
    };
    for n in 1..=MAX_NAME_SUFFIX {
        if n > 1 {
            spec.name = format!("{} ({n})", job.name_zh);
        }
        match store.jobs().create(&spec, SEED_ACTOR, now).await {
            Ok(created) => {
                if n > 1 {
                    tracing::warn!(
                        job = created.id,
                        builtin = %key,
                        name = %created.name,
                        "a job named {} already exists, so the built-in job was created as {}",
                        job.name_zh,
                        created.name
                    );
                } else {
                    tracing::info!(job = created.id, name = %created.name, "built-in job seeded");
                }
                return Ok(Some(created.name));
            }
            Err(StorageError::NameTaken) => continue,
            Err(StorageError::AlreadyExists) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Err(WorkerError::Seed {
        key,
        reason: format!(
            "the names {0} to {0} ({MAX_NAME_SUFFIX}) are all taken",
            job.name_zh
        ),
    })
}

#[cfg(test)]
mod tests {
    use qiwu_storage::JobFilter;

    use super::*;
    use crate::handlers::builtin_catalog;
    use crate::test_support::test_store;

    async fn all_jobs(store: &Store) -> Vec<qiwu_storage::JobRecord> {
        store
            .jobs()
            .list(&JobFilter::default(), 1, 100)
            .await
            .unwrap()
            .0
    }

    #[tokio::test]
    async fn seeds_registered_builtins_once_with_their_settings() {
        let store = test_store().await;
        let catalog = builtin_catalog().unwrap();
        let created = seed_builtin_jobs(&store, &catalog, Utc::now())
            .await
            .unwrap();
        // session.sweep and wf.task.remind are not registered here.
        assert_eq!(
            created,
            ["清理过期日志", "派发待发送通知", "示例：回显消息"]
        );
        let jobs = all_jobs(&store).await;
        assert_eq!(jobs.len(), 3);
        let purge = &jobs[0];
        assert_eq!(purge.handler, "audit.purge");
        assert_eq!(purge.cron.as_str(), "0 30 3 * * *");
        assert!(purge.enabled);
        assert_eq!(purge.misfire_policy.as_str(), "run_once");
        assert_eq!(purge.group, "system");
        assert_eq!(purge.timeout_ms, 600_000);
        assert_eq!(purge.retry_count, 0);
        assert!(!purge.allow_concurrent);
        assert_eq!(purge.created_by, "system");
        assert_eq!(
            purge.builtin_key.as_deref(),
            Some("audit.purge|清理过期日志")
        );
        let dispatch = &jobs[1];
        assert_eq!(
            (dispatch.cron.as_str(), dispatch.timeout_ms),
            ("0 * * * * *", 60_000)
        );
        let echo = &jobs[2];
        assert!(!echo.enabled);
        assert_eq!(echo.group, "default");
        assert_eq!(
            echo.params,
            serde_json::json!({"message": "hello", "delayMs": 0})
        );
        // The template is seeded too.
        assert!(
            store
                .templates()
                .get("scheduler.timeout_alert")
                .await
                .unwrap()
                .is_some()
        );

        // A second run creates nothing.
        let again = seed_builtin_jobs(&store, &catalog, Utc::now())
            .await
            .unwrap();
        assert!(again.is_empty());
        assert_eq!(all_jobs(&store).await.len(), 3);
    }

    #[tokio::test]
    async fn never_recreates_a_deleted_builtin_nor_overwrites_an_edit() {
        let store = test_store().await;
        let catalog = builtin_catalog().unwrap();
        seed_builtin_jobs(&store, &catalog, Utc::now())
            .await
            .unwrap();
        let jobs = all_jobs(&store).await;
        store.jobs().delete(jobs[0].id).await.unwrap();
        let edited = NewJob {
            time_rules: Default::default(),
            name: jobs[1].name.clone(),
            group: jobs[1].group.clone(),
            handler: jobs[1].handler.clone(),
            params: jobs[1].params.clone(),
            cron: "0 */5 * * * *".into(),
            timezone: None,
            enabled: false,
            retry_count: 0,
            retry_interval_ms: 1000,
            retry_backoff: "fixed".into(),
            retry_max_interval_ms: 3_600_000,
            retry_jitter: false,
            overlap_policy: "skip".into(),
            timeout_ms: 60_000,
            allow_concurrent: false,
            misfire_policy: "skip".into(),
            remark: "changed by an admin".into(),
            builtin_key: None,
            alert: Default::default(),
        };
        store
            .jobs()
            .update(jobs[1].id, jobs[1].version, &edited, "admin", Utc::now())
            .await
            .unwrap();

        assert!(
            seed_builtin_jobs(&store, &catalog, Utc::now())
                .await
                .unwrap()
                .is_empty()
        );
        let after = all_jobs(&store).await;
        assert_eq!(after.len(), 2, "the deleted built-in stays deleted");
        let dispatch = store.jobs().get(jobs[1].id).await.unwrap().unwrap();
        assert_eq!(dispatch.cron.as_str(), "0 */5 * * * *");
        assert!(!dispatch.enabled);
        assert_eq!(dispatch.remark, "changed by an admin");
    }

    #[tokio::test]
    async fn only_registered_handlers_and_a_taken_name_gets_a_suffix() {
        let store = test_store().await;
        // A user's job already holds the built-in's name (and the next one).
        for name in ["示例：回显消息", "示例：回显消息 (2)"] {
            let job = NewJob {
                time_rules: Default::default(),
                name: name.into(),
                group: "default".into(),
                handler: "demo.echo".into(),
                params: serde_json::json!({}),
                cron: "0 0 0 * * *".into(),
                timezone: None,
                enabled: true,
                retry_count: 0,
                retry_interval_ms: 1000,
                retry_backoff: "fixed".into(),
                retry_max_interval_ms: 3_600_000,
                retry_jitter: false,
                overlap_policy: "skip".into(),
                timeout_ms: 60_000,
                allow_concurrent: false,
                misfire_policy: "skip".into(),
                remark: "mine".into(),
                builtin_key: None,
                alert: Default::default(),
            };
            store
                .jobs()
                .create(&job, "alice", Utc::now())
                .await
                .unwrap();
        }
        let full = builtin_catalog().unwrap();
        let only_echo =
            HandlerCatalog::new(full.iter().filter(|d| d.name == "demo.echo").cloned()).unwrap();
        let created = seed_builtin_jobs(&store, &only_echo, Utc::now())
            .await
            .unwrap();
        assert_eq!(created, ["示例：回显消息 (3)"]);
        let builtin = store
            .jobs()
            .find_by_builtin_key("demo.echo|示例：回显消息")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(builtin.name, "示例：回显消息 (3)");
        assert!(!builtin.enabled);
        assert_eq!(all_jobs(&store).await.len(), 3);

        // Registering the other handlers later seeds their jobs then.
        let created = seed_builtin_jobs(&store, &full, Utc::now()).await.unwrap();
        assert_eq!(created, ["清理过期日志", "派发待发送通知"]);
    }

    #[tokio::test]
    async fn an_existing_builtin_without_marker_is_only_marked() {
        let store = test_store().await;
        let catalog = builtin_catalog().unwrap();
        seed_builtin_jobs(&store, &catalog, Utc::now())
            .await
            .unwrap();
        // As if an instance crashed between creating the job and its marker.
        use sea_orm::EntityTrait;
        qiwu_storage::entity::seed_marker::Entity::delete_many()
            .exec(store.connection())
            .await
            .unwrap();
        assert!(
            seed_builtin_jobs(&store, &catalog, Utc::now())
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(all_jobs(&store).await.len(), 3);
    }
}

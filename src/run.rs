//! Wiring of the long-running roles (`serve`, `api`, `worker`): opening the
//! database and Redis, building the registry, the engine and the HTTP
//! server, and stopping them on a signal within the grace period.

use std::time::Duration;

use anyhow::Context;
use qiwu_api::{AppState, ChangeListener, Claims, JwtKeys};
use qiwu_scheduler_worker::clock::SystemClock;
use qiwu_scheduler_worker::{
    ClusterConfig, Command as EngineCommand, Engine, EngineConfig, EngineHandle, EngineStatus,
};
use qiwu_storage::{Change, Coord, Store};
use tokio::sync::watch;

use crate::config::Config;
use crate::config_file;

/// How long the super-admin token printed by `serve` stays valid.
pub const STARTUP_TOKEN_HOURS: i64 = 24 * 30;
/// How long running handlers get to stop at shutdown (SPEC §5).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How often every job is read again to repair a lost change message.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(60);

/// Passes committed API changes to the in-process engine and, in a
/// cluster, to every worker over Redis.
struct Changes {
    local: Option<EngineHandle>,
    redis: Option<Coord>,
}

impl Changes {
    fn publish(&self, change: Change) {
        if let Some(coord) = &self.redis {
            let coord = coord.clone();
            // A lost message is repaired by the workers' reconciliation.
            tokio::spawn(async move {
                if let Err(e) = coord.publish(change).await {
                    tracing::warn!(error = %e, ?change, "cannot publish a change; workers reconcile within 60 s");
                }
            });
        }
    }
}

impl ChangeListener for Changes {
    fn job_changed(&self, job_id: i64) {
        if let Some(local) = &self.local {
            local.send(EngineCommand::JobChanged(job_id));
        }
        self.publish(Change::Job(job_id));
    }

    fn fire_queued(&self, fire_id: i64) {
        if let Some(local) = &self.local {
            local.send(EngineCommand::FireQueued(fire_id));
        }
        self.publish(Change::Fire(fire_id));
    }

    fn run_cancel_requested(&self, run_id: i64) {
        if let Some(local) = &self.local {
            local.send(EngineCommand::CancelRequested(run_id));
        }
        self.publish(Change::Cancel(run_id));
    }
}

/// Which parts a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Serve,
    Api,
    Worker,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::Api => "api",
            Role::Worker => "worker",
        }
    }
}

pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    Store::connect(&config.database_url).await.with_context(|| {
        format!(
            "cannot open the database at QIWU_DATABASE_URL ({})",
            redact(&config.database_url)
        )
    })
}

/// A URL without its password, fit for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

pub async fn serve(config: Config, role: Role) -> anyhow::Result<()> {
    // Before anything else: a bad file stops start-up having touched nothing.
    let remote = match &config.config_file {
        Some(path) => config_file::load(
            path,
            &qiwu_scheduler_worker::handlers::builtin_catalog()
                .context("the built-in handler catalog is invalid")?,
        )?,
        None => Vec::new(),
    };
    let store = if role == Role::Worker {
        // Workers never migrate (several starting at once would race), and
        // they start without the database: the engine waits for it and for
        // the schema, and `/readyz` says what it waits for.
        Store::open_lazy(&config.database_url)
            .await
            .with_context(|| {
                format!(
                    "invalid QIWU_DATABASE_URL ({})",
                    redact(&config.database_url)
                )
            })?
    } else {
        open_store(&config).await?
    };
    if role != Role::Worker {
        store.migrate().await.context("migrations failed")?;
        store
            .templates()
            .seed_defaults(chrono::Utc::now())
            .await
            .context("cannot seed the notification templates")?;
    }
    // A cluster: a server database plus Redis (always for api and worker).
    let coord =
        match (&config.redis_url, config.is_sqlite()) {
            (Some(url), false) => Some(Coord::connect(url).await.with_context(|| {
                format!("cannot reach Redis at QIWU_REDIS_URL ({})", redact(url))
            })?),
            _ => None,
        };
    // Workers check the zone when their engine starts (the schema may not
    // be there yet).
    if coord.is_some() && role != Role::Worker {
        let agreed = store
            .cluster()
            .agree_timezone(config.timezone.name(), chrono::Utc::now())
            .await
            .context("cannot read the cluster's time zone (run `qiwu-scheduler migrate` first?)")?;
        if agreed != config.timezone.name() {
            anyhow::bail!(
                "QIWU_TIMEZONE={} differs from the cluster's zone {agreed}: every instance must use the same zone, or fire times would differ between instances",
                config.timezone.name()
            );
        }
    }
    let cluster = coord.clone().map(ClusterConfig::new);
    let clock: std::sync::Arc<dyn qiwu_scheduler_worker::clock::Clock> = match &cluster {
        Some(c) => c.clock.clone(),
        None => std::sync::Arc::new(SystemClock),
    };
    let webhook_secrets = config.webhook_secret.clone().map(|current| {
        qiwu_scheduler_worker::handlers::signing::SigningSecrets::new(
            current,
            config.webhook_previous_secrets.clone(),
        )
    });
    if let Some(secrets) = &webhook_secrets
        && secrets.previous_count() > 0
    {
        tracing::info!(
            previous = secrets.previous_count(),
            "webhook deliveries also carry a signature per QIWU_WEBHOOK_PREVIOUS_SECRETS entry"
        );
    }
    let registry = qiwu_scheduler_worker::handlers::builtin_registry(
        store.clone(),
        webhook_secrets,
        clock.clone(),
    )
    .context("the built-in handler registry is invalid")?
    // Every role: the API lists them and validates jobs against them, the
    // workers call them.
    .with_remote(remote_handlers(remote)?)
    .context("QIWU_CONFIG: cannot register the handlers it declares")?;
    if role != Role::Worker {
        // Built-in jobs are seeded once, ever, for the handlers registered.
        let seeded = qiwu_scheduler_worker::seed::seed_builtin_jobs(
            &store,
            registry.catalog(),
            chrono::Utc::now(),
        )
        .await
        .context("cannot seed the built-in jobs")?;
        if !seeded.is_empty() {
            tracing::info!(jobs = ?seeded, "built-in jobs seeded");
        }
    }

    let max_skew_ms = cluster.as_ref().map_or(0, |c| {
        i64::try_from(c.max_skew.as_millis()).unwrap_or(i64::MAX)
    });
    // In `serve` the engine has a pool of its own, so a burst of fires and
    // a burst of API requests never wait for each other's connections.
    let engine_store = match role {
        Role::Serve => Some(open_store(&config).await?),
        Role::Worker => Some(store.clone()),
        Role::Api => None,
    };
    let engine = engine_store.map(|engine_store| {
        Engine::new(
            engine_store,
            registry.clone(),
            EngineConfig {
                instance: config.instance_id.clone(),
                timezone: config.timezone,
                shutdown_grace: SHUTDOWN_GRACE,
                reconcile_every: RECONCILE_EVERY,
                close_all_running_at_start: cluster.is_none(),
                misfire_threshold: config.misfire_threshold,
                max_in_flight: config.max_in_flight,
                on_timeout: {
                    let store = store.clone();
                    std::sync::Arc::new(move |info: qiwu_scheduler_worker::TimeoutInfo| {
                        let store = store.clone();
                        Box::pin(async move {
                            let alert = qiwu_scheduler_worker::alerts::TimeoutAlert::from(info);
                            if let Err(e) = qiwu_scheduler_worker::alerts::raise_timeout_alert(&store, &alert).await {
                                tracing::error!(error = %e, job = alert.job_id, "cannot raise the timeout alert");
                            }
                        })
                    })
                },
                cluster,
            },
            clock,
        )
    });
    let skew = engine.as_ref().map(|(e, _)| e.skew());
    let engine_ready = engine.as_ref().map(|(e, _)| {
        let status = e.status();
        std::sync::Arc::new(move || match &*status.borrow() {
            EngineStatus::Running => None,
            EngineStatus::Starting(reason) => Some(reason.clone()),
            EngineStatus::Stopping => Some("stopping".to_string()),
        }) as qiwu_api::ops::EngineReadiness
    });
    let mut ops = qiwu_api::ops::Ops::new(store.clone(), role.name());
    ops.coord = coord.clone();
    ops.skew_ms = skew.filter(|_| coord.is_some());
    ops.max_skew_ms = max_skew_ms;
    ops.engine = engine_ready;
    // The per-job series come from the database, once per API process
    // rather than once per worker.
    ops.database_series = role != Role::Worker;
    let keys = match role {
        Role::Worker => None,
        _ => {
            if !config.jwt_previous_secrets.is_empty() {
                tracing::info!(
                    previous = config.jwt_previous_secrets.len(),
                    "tokens signed with a QIWU_JWT_PREVIOUS_SECRETS entry are still accepted"
                );
            }
            Some(
                JwtKeys::from_secret(config.jwt_secret_or_file()?.as_bytes())?
                    .with_previous(&config.jwt_previous_secrets)?,
            )
        }
    };
    let state = keys.as_ref().map(|keys| AppState {
        store: store.clone(),
        catalog: std::sync::Arc::new(registry.catalog().clone()),
        keys: keys.clone(),
        timezone: config.timezone,
        changes: std::sync::Arc::new(Changes {
            local: engine.as_ref().map(|(_, handle)| handle.clone()),
            redis: coord.clone(),
        }),
        max_pending_run_once: config.max_pending_run_once,
    });
    let server = actix_web::HttpServer::new(move || {
        let app = actix_web::App::new()
            .wrap(actix_web::middleware::Compress::default())
            // Outermost: request id, span and metrics see every answer.
            .wrap(actix_web::middleware::from_fn(
                qiwu_api::observe::middleware,
            ));
        match &state {
            Some(state) => app.configure(qiwu_api::configure(state.clone(), ops.clone())),
            None => app.configure(qiwu_api::ops::configure_worker(ops.clone())),
        }
    })
    .workers(2)
    .shutdown_timeout(SHUTDOWN_GRACE.as_secs())
    .disable_signals()
    .bind(config.listen)
    .with_context(|| format!("cannot listen on QIWU_LISTEN={}", config.listen))?;
    let addr = server.addrs().first().copied().unwrap_or(config.listen);
    let server = server.run();
    let handle = server.handle();

    println!(
        "Qiwu Scheduler ({}) listening on http://{addr}",
        role.name()
    );
    if role != Role::Worker {
        println!("API documentation: http://{addr}/docs/");
    }
    println!(
        "Time zone: {} · instance: {}",
        config.timezone, config.instance_id
    );
    if role == Role::Serve
        && let Some(keys) = &keys
    {
        let token = keys.mint(&Claims {
            sub: "admin".into(),
            name: "Super admin".into(),
            perms: vec![],
            super_admin: true,
            exp: (chrono::Utc::now() + chrono::Duration::hours(STARTUP_TOKEN_HOURS)).timestamp(),
        })?;
        println!(
            "Super-admin token (valid {} days): {token}",
            STARTUP_TOKEN_HOURS / 24
        );
    }
    if config.database_is_default {
        println!(
            "Database: {} (set QIWU_DATABASE_URL to change)",
            config.database_url
        );
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let server_task = tokio::spawn(server);
    let mut engine_task = engine.map(|(engine, _)| tokio::spawn(engine.run(stop_rx)));
    // The engine runs until told to stop; if it ends on its own, the
    // process must not live on without it (crash-only: the supervisor
    // restarts it).
    let engine_ended = async {
        match engine_task.as_mut() {
            Some(task) => task.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = shutdown_signal() => {}
        ended = engine_ended => {
            let _ = tokio::time::timeout(Duration::from_secs(2), handle.stop(false)).await;
            return match ended {
                Ok(Ok(())) => Err(anyhow::anyhow!("the engine stopped by itself")),
                Ok(Err(e)) => Err(anyhow::Error::new(e).context("the engine stopped")),
                Err(e) => Err(anyhow::Error::new(e).context("the engine task failed")),
            };
        }
    }
    tracing::info!("stopping: finishing requests and runs in flight (at most 10 s)");
    let _ = stop_tx.send(true);
    // Both wait at most the grace period; the bound on top keeps a stuck
    // request or handler from holding the process.
    let limit = SHUTDOWN_GRACE + Duration::from_secs(1);
    let engine_done = async {
        match engine_task {
            Some(task) => Some(tokio::time::timeout(limit, task).await),
            None => None,
        }
    };
    let (http, engine) = tokio::join!(tokio::time::timeout(limit, handle.stop(true)), engine_done);
    if http.is_err() {
        tracing::warn!("requests still running after the grace period; exiting anyway");
    }
    match engine {
        None | Some(Ok(Ok(Ok(())))) => {}
        Some(Ok(Ok(Err(e)))) => tracing::error!(error = %e, "the engine stopped with an error"),
        Some(Ok(Err(e))) => tracing::error!(error = %e, "the engine task failed"),
        Some(Err(_)) => tracing::warn!("the engine did not stop within the grace period"),
    }
    match server_task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e).context("the HTTP server failed"),
        Err(e) => Err(e).context("the HTTP server task failed"),
    }
}

/// A declared handler with the code that calls it.
type RemoteEntry = (
    qiwu_domain::HandlerDescriptor,
    std::sync::Arc<dyn qiwu_scheduler_worker::handlers::Handler>,
);

/// The handlers in other services, each calling its URL through one
/// shared HTTP client.
fn remote_handlers(
    declared: Vec<config_file::RemoteDeclaration>,
) -> anyhow::Result<Vec<RemoteEntry>> {
    use qiwu_scheduler_worker::handlers::remote::{RemoteHandler, client};
    use qiwu_scheduler_worker::handlers::signing::SigningSecrets;
    if declared.is_empty() {
        return Ok(Vec::new());
    }
    let client = client()?;
    let mut entries: Vec<RemoteEntry> = Vec::with_capacity(declared.len());
    for d in declared {
        let previous = d.previous_secrets.len();
        let handler = RemoteHandler::new(
            d.url,
            SigningSecrets::new(d.secret, d.previous_secrets),
            client.clone(),
        );
        tracing::info!(
            handler = %d.descriptor.name,
            host = %handler.host(),
            previous_secrets = previous,
            "handler in another service declared in QIWU_CONFIG"
        );
        entries.push((d.descriptor, std::sync::Arc::new(handler)));
    }
    Ok(entries)
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

//! The application as a library: [`App::build`] opens the database and
//! Redis and builds the registry, the engine and the HTTP server for one
//! role (`serve`, `api`, `worker`) as a sequence of small named steps;
//! [`App::run_until_stopped`] runs them until a stop signal and shuts them
//! down within the grace period. `main` only parses the command line; tests
//! can start a whole app in their own process.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use qiwu_api::{AppState, ChangeListener, Claims, JwtKeys};
use qiwu_coord::{Change, Coord};
use qiwu_scheduler_worker::clock::{Clock, SystemClock};
use qiwu_scheduler_worker::handlers::Registry as HandlerRegistry;
use qiwu_scheduler_worker::{
    ClusterConfig, Command as EngineCommand, Engine, EngineConfig, EngineHandle, EngineStatus,
};
use qiwu_storage::Store;
use tokio::sync::watch;

use crate::config::{Config, Secret};
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

    fn freezes_changed(&self, freeze_id: i64) {
        if let Some(local) = &self.local {
            local.send(EngineCommand::FreezesChanged);
        }
        self.publish(Change::Freeze(freeze_id));
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

/// Opens the database named by `QIWU_DATABASE_URL` (connecting now).
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    Store::connect(config.database_url.expose())
        .await
        .with_context(|| {
            format!(
                "cannot open the database at QIWU_DATABASE_URL ({})",
                config.database_url
            )
        })
}

/// Runs one role until SIGTERM or Ctrl-C: what `main` calls.
pub async fn serve(config: Config, role: Role) -> anyhow::Result<()> {
    let app = App::build(config, role).await?;
    app.print_banner()?;
    app.run_until_stopped(shutdown_signal()).await
}

/// A built application: every part connected and the HTTP server bound,
/// nothing running yet.
pub struct App {
    role: Role,
    config: Config,
    addr: SocketAddr,
    server: actix_web::dev::Server,
    engine: Option<Engine>,
    keys: Option<JwtKeys>,
}

impl App {
    /// Builds the parts of `role` in order. Any step that fails stops
    /// start-up with the reason, having started nothing.
    pub async fn build(config: Config, role: Role) -> anyhow::Result<App> {
        // Before anything else: a bad file stops start-up having touched
        // nothing.
        let remote = remote_declarations(&config)?;
        let store = open_database(&config, role).await?;
        let coord = connect_redis(&config).await?;
        if coord.is_some() && role != Role::Worker {
            agree_zone(&store, &config).await?;
        }
        let cluster = coord.clone().map(ClusterConfig::new);
        let clock: Arc<dyn Clock> = match &cluster {
            Some(c) => c.clock.clone(),
            None => Arc::new(SystemClock),
        };
        let registry = build_registry(&config, &store, clock.clone(), remote)?;
        if role != Role::Worker {
            seed_jobs(&store, &registry).await?;
        }
        let max_skew_ms = cluster.as_ref().map_or(0, |c| {
            i64::try_from(c.max_skew.as_millis()).unwrap_or(i64::MAX)
        });
        let engine = build_engine(&config, role, &store, &registry, cluster, clock).await?;
        let ops = build_ops(role, &store, coord.clone(), engine.as_ref(), max_skew_ms);
        let keys = jwt_keys(&config, role)?;
        let state = keys.as_ref().map(|keys| AppState {
            store: store.clone(),
            catalog: Arc::new(registry.catalog().clone()),
            keys: keys.clone(),
            timezone: config.timezone,
            changes: Arc::new(Changes {
                local: engine.as_ref().map(|(_, handle)| handle.clone()),
                redis: coord,
            }),
            max_pending_run_once: config.max_pending_run_once,
        });
        let (server, addr) = bind_http(&config, state, ops)?;
        Ok(App {
            role,
            config,
            addr,
            server,
            engine: engine.map(|(engine, _)| engine),
            keys,
        })
    }

    /// The address the HTTP server listens on (the real port when
    /// `QIWU_LISTEN` asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Prints where the app listens and, in `serve`, a super-admin token.
    pub fn print_banner(&self) -> anyhow::Result<()> {
        let addr = self.addr;
        println!(
            "Qiwu Scheduler ({}) listening on http://{addr}",
            self.role.name()
        );
        if self.role != Role::Worker {
            println!("API documentation: http://{addr}/docs/");
        }
        println!(
            "Time zone: {} · instance: {}",
            self.config.timezone, self.config.instance_id
        );
        if self.role == Role::Serve
            && let Some(keys) = &self.keys
        {
            let token = keys.mint(&Claims {
                sub: "admin".into(),
                name: "Super admin".into(),
                perms: vec![],
                super_admin: true,
                exp: (chrono::Utc::now() + chrono::Duration::hours(STARTUP_TOKEN_HOURS))
                    .timestamp(),
            })?;
            println!(
                "Super-admin token (valid {} days): {token}",
                STARTUP_TOKEN_HOURS / 24
            );
        }
        if self.config.database_is_default {
            println!(
                "Database: {} (set QIWU_DATABASE_URL to change)",
                self.config.database_url
            );
        }
        Ok(())
    }

    /// Serves and runs the engine until `stop` resolves, then finishes the
    /// requests and runs in flight within the grace period. An engine that
    /// ends on its own is an error: the process must not live on without
    /// it (crash-only: the supervisor restarts it).
    pub async fn run_until_stopped(self, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
        let handle = self.server.handle();
        let (stop_tx, stop_rx) = watch::channel(false);
        let server_task = tokio::spawn(self.server);
        let mut engine_task = self.engine.map(|engine| tokio::spawn(engine.run(stop_rx)));
        let engine_ended = async {
            match engine_task.as_mut() {
                Some(task) => task.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop => {}
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
        let (http, engine) =
            tokio::join!(tokio::time::timeout(limit, handle.stop(true)), engine_done);
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
}

/// The handlers `QIWU_CONFIG` declares in other services, checked against
/// the built-in catalog (names must not collide).
fn remote_declarations(config: &Config) -> anyhow::Result<Vec<config_file::RemoteDeclaration>> {
    match &config.config_file {
        Some(path) => config_file::load(
            path,
            &qiwu_scheduler_worker::handlers::builtin_catalog()
                .context("the built-in handler catalog is invalid")?,
        ),
        None => Ok(Vec::new()),
    }
}

/// The database, migrated and with its default templates, except for
/// workers: they never migrate (several starting at once would race) and
/// start without the database: the engine waits for it and for the
/// schema, and `/readyz` says what it waits for.
async fn open_database(config: &Config, role: Role) -> anyhow::Result<Store> {
    if role == Role::Worker {
        return Store::open_lazy(config.database_url.expose())
            .await
            .with_context(|| format!("invalid QIWU_DATABASE_URL ({})", config.database_url));
    }
    let store = open_store(config).await?;
    store.migrate().await.context("migrations failed")?;
    store
        .templates()
        .seed_defaults(chrono::Utc::now())
        .await
        .context("cannot seed the notification templates")?;
    Ok(store)
}

/// Redis, for a cluster: a server database plus `QIWU_REDIS_URL` (always
/// for `api` and `worker`, which checked it with the configuration).
async fn connect_redis(config: &Config) -> anyhow::Result<Option<Coord>> {
    match (&config.redis_url, config.is_sqlite()) {
        (Some(url), false) => {
            Ok(Some(Coord::connect(url.expose()).await.with_context(
                || format!("cannot reach Redis at QIWU_REDIS_URL ({url})"),
            )?))
        }
        _ => Ok(None),
    }
}

/// Every instance of a cluster must use one zone, or fire times would
/// differ between them. Workers check it when their engine starts (the
/// schema may not be there yet).
async fn agree_zone(store: &Store, config: &Config) -> anyhow::Result<()> {
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
    Ok(())
}

/// The built-in handlers and those of other services. Every role builds
/// it: the API lists them and validates jobs against them, the workers
/// call them.
fn build_registry(
    config: &Config,
    store: &Store,
    clock: Arc<dyn Clock>,
    remote: Vec<config_file::RemoteDeclaration>,
) -> anyhow::Result<HandlerRegistry> {
    let webhook_secrets = config.webhook_secret.as_ref().map(|current| {
        qiwu_scheduler_worker::handlers::signing::SigningSecrets::new(
            current.expose().to_string(),
            exposed(&config.webhook_previous_secrets),
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
    qiwu_scheduler_worker::handlers::builtin_registry(store.clone(), webhook_secrets, clock)
        .context("the built-in handler registry is invalid")?
        .with_remote(remote_handlers(remote)?)
        .context("QIWU_CONFIG: cannot register the handlers it declares")
}

/// Built-in jobs are seeded once, ever, for the handlers registered.
async fn seed_jobs(store: &Store, registry: &HandlerRegistry) -> anyhow::Result<()> {
    let seeded = qiwu_scheduler_worker::seed::seed_builtin_jobs(
        store,
        registry.catalog(),
        chrono::Utc::now(),
    )
    .await
    .context("cannot seed the built-in jobs")?;
    if !seeded.is_empty() {
        tracing::info!(jobs = ?seeded, "built-in jobs seeded");
    }
    Ok(())
}

/// The engine of `serve` and `worker`. In `serve` it has a pool of its
/// own, so a burst of fires and a burst of API requests never wait for
/// each other's connections.
async fn build_engine(
    config: &Config,
    role: Role,
    store: &Store,
    registry: &HandlerRegistry,
    cluster: Option<ClusterConfig>,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Option<(Engine, EngineHandle)>> {
    let engine_store = match role {
        Role::Serve => open_store(config).await?,
        Role::Worker => store.clone(),
        Role::Api => return Ok(None),
    };
    let engine_config = EngineConfig {
        instance: config.instance_id.clone(),
        timezone: config.timezone,
        shutdown_grace: SHUTDOWN_GRACE,
        reconcile_every: RECONCILE_EVERY,
        close_all_running_at_start: cluster.is_none(),
        misfire_threshold: config.misfire_threshold,
        max_in_flight: config.max_in_flight,
        claim_ahead: config.claim_ahead,
        on_timeout: timeout_alerts(store.clone()),
        cluster,
    };
    Ok(Some(Engine::new(
        engine_store,
        registry.clone(),
        engine_config,
        clock,
    )))
}

/// What the engine calls when an attempt times out: the timeout alert.
fn timeout_alerts(store: Store) -> qiwu_scheduler_worker::OnTimeout {
    Arc::new(move |info: qiwu_scheduler_worker::TimeoutInfo| {
        let store = store.clone();
        Box::pin(async move {
            let alert = qiwu_scheduler_worker::alerts::TimeoutAlert::from(info);
            if let Err(e) = qiwu_scheduler_worker::alerts::raise_timeout_alert(&store, &alert).await
            {
                tracing::error!(error = %e, job = alert.job_id, "cannot raise the timeout alert");
            }
        })
    })
}

/// The operations endpoints' view of this process (probes, metrics).
fn build_ops(
    role: Role,
    store: &Store,
    coord: Option<Coord>,
    engine: Option<&(Engine, EngineHandle)>,
    max_skew_ms: i64,
) -> qiwu_api::ops::Ops {
    let skew = engine.map(|(e, _)| e.skew());
    let engine_ready = engine.map(|(e, _)| {
        let status = e.status();
        Arc::new(move || match &*status.borrow() {
            EngineStatus::Running => None,
            EngineStatus::Starting(reason) => Some(reason.clone()),
            EngineStatus::Stopping => Some("stopping".to_string()),
        }) as qiwu_api::ops::EngineReadiness
    });
    let mut ops = qiwu_api::ops::Ops::new(store.clone(), role.name());
    ops.skew_ms = skew.filter(|_| coord.is_some());
    ops.coord = coord;
    ops.max_skew_ms = max_skew_ms;
    ops.engine = engine_ready;
    // The per-job series come from the database, once per API process
    // rather than once per worker.
    ops.database_series = role != Role::Worker;
    ops
}

/// The keys tokens are checked with (and, in `serve`, minted with); a
/// worker serves no API.
fn jwt_keys(config: &Config, role: Role) -> anyhow::Result<Option<JwtKeys>> {
    if role == Role::Worker {
        return Ok(None);
    }
    if !config.jwt_previous_secrets.is_empty() {
        tracing::info!(
            previous = config.jwt_previous_secrets.len(),
            "tokens signed with a QIWU_JWT_PREVIOUS_SECRETS entry are still accepted"
        );
    }
    Ok(Some(
        JwtKeys::from_secret(config.jwt_secret_or_file()?.as_bytes())?
            .with_previous(&exposed(&config.jwt_previous_secrets))?,
    ))
}

/// The HTTP server, bound: the API and the operations endpoints, or the
/// operations endpoints only for a worker.
fn bind_http(
    config: &Config,
    state: Option<AppState>,
    ops: qiwu_api::ops::Ops,
) -> anyhow::Result<(actix_web::dev::Server, SocketAddr)> {
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
    Ok((server.run(), addr))
}

/// The secrets' values, for the code that signs or verifies with them.
fn exposed(secrets: &[Secret]) -> Vec<String> {
    secrets.iter().map(|s| s.expose().to_string()).collect()
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
pub async fn shutdown_signal() {
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

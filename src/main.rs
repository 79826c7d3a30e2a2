//! `qiwu-scheduler`: one binary, several roles (SPEC §2). This file only
//! parses the command line and hands over to the library crates.

mod config;

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use qiwu_api::{AppState, Claims, JwtKeys, NoListener};
use qiwu_storage::Store;

use crate::config::Config;

#[derive(Parser)]
#[command(
    name = "qiwu-scheduler",
    version,
    about = "Scheduled jobs for the Qiwu admin platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// API and worker in one process (the default); SQLite needs no other server.
    Serve,
    /// HTTP API only; needs PostgreSQL or MySQL/MariaDB and Redis.
    Api,
    /// Timers and execution only; needs the same database and Redis as the API.
    Worker,
    /// Applies database migrations and exits.
    Migrate,
    /// Prints the OpenAPI document.
    Openapi,
    /// Mints a JWT signed with the configured secret.
    Token {
        /// The subject (user id).
        #[arg(long)]
        sub: String,
        /// A display name.
        #[arg(long, default_value = "")]
        name: String,
        /// A permission code; repeat for several.
        #[arg(long = "perm")]
        perms: Vec<String>,
        /// Grant every permission.
        #[arg(long)]
        super_admin: bool,
        /// Hours until the token expires.
        #[arg(long, default_value_t = 24)]
        ttl_hours: i64,
    },
}

/// How long the super-admin token printed by `serve` stays valid.
const STARTUP_TOKEN_HOURS: i64 = 24 * 30;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command.unwrap_or(Command::Serve))) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Openapi => {
            print!("{}", qiwu_api::openapi_json());
            Ok(())
        }
        Command::Token {
            sub,
            name,
            perms,
            super_admin,
            ttl_hours,
        } => {
            let config = Config::from_env()?;
            for p in &perms {
                if qiwu_api::Permission::from_code(p).is_none() {
                    anyhow::bail!("unknown permission {p:?}");
                }
            }
            let keys = JwtKeys::from_secret(config.jwt_secret_or_file()?.as_bytes())?;
            let token = keys.mint(&Claims {
                sub,
                name,
                perms,
                super_admin,
                exp: (chrono::Utc::now() + chrono::Duration::hours(ttl_hours)).timestamp(),
            })?;
            println!("{token}");
            Ok(())
        }
        Command::Migrate => {
            let config = Config::from_env()?;
            let store = open_store(&config).await?;
            store.migrate().await.context("migrations failed")?;
            println!("migrations applied");
            Ok(())
        }
        Command::Serve => serve(Config::from_env()?).await,
        Command::Api => {
            let config = Config::from_env()?;
            config.require_cluster("api")?;
            serve(config).await
        }
        Command::Worker => {
            let config = Config::from_env()?;
            config.require_cluster("worker")?;
            anyhow::bail!(
                "`qiwu-scheduler worker` is not available yet: job execution is the next milestone (use `serve` meanwhile)"
            )
        }
    }
}

async fn open_store(config: &Config) -> anyhow::Result<Store> {
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

async fn serve(config: Config) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    store.migrate().await.context("migrations failed")?;
    store
        .templates()
        .seed_defaults(chrono::Utc::now())
        .await
        .context("cannot seed the notification templates")?;
    let catalog = qiwu_scheduler_worker::handlers::builtin_catalog()
        .context("the built-in handler catalog is invalid")?;
    let secret = config.jwt_secret_or_file()?;
    let keys = JwtKeys::from_secret(secret.as_bytes())?;
    let state = AppState {
        store,
        catalog: std::sync::Arc::new(catalog),
        keys: keys.clone(),
        timezone: config.timezone,
        changes: std::sync::Arc::new(NoListener),
    };
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .wrap(actix_web::middleware::Compress::default())
            .configure(qiwu_api::configure(state.clone()))
    })
    .workers(2)
    .shutdown_timeout(10)
    .disable_signals()
    .bind(config.listen)
    .with_context(|| format!("cannot listen on QIWU_LISTEN={}", config.listen))?;
    let addr = server.addrs().first().copied().unwrap_or(config.listen);
    let server = server.run();
    let handle = server.handle();

    println!("Qiwu Scheduler listening on http://{addr}");
    println!("API documentation: http://{addr}/docs/");
    println!(
        "Time zone: {} · instance: {}",
        config.timezone, config.instance_id
    );
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
    if config.database_is_default {
        println!(
            "Database: {} (set QIWU_DATABASE_URL to change)",
            config.database_url
        );
    }

    let server_task = tokio::spawn(server);
    shutdown_signal().await;
    tracing::info!("stopping: finishing requests in flight (at most 10 s)");
    // The HTTP server waits for requests in flight; the bound keeps a stuck
    // request from holding the process forever.
    if tokio::time::timeout(Duration::from_secs(11), handle.stop(true))
        .await
        .is_err()
    {
        tracing::warn!("requests still running after 10 s; exiting anyway");
    }
    match server_task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e).context("the HTTP server failed"),
        Err(e) => Err(e).context("the HTTP server task failed"),
    }
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

//! `qiwu-scheduler`: one binary, several roles (SPEC §2). This file parses
//! the command line and runs the short commands; the long-running roles
//! are the library's `app::App`.

use anyhow::Context;
use clap::{Parser, Subcommand};
use qiwu_api::{Claims, JwtKeys};

use qiwu_scheduler::app::{Role, open_store, serve};
use qiwu_scheduler::config::Config;
use qiwu_scheduler::healthcheck;

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
    /// Probes the instance on QIWU_LISTEN (/healthz, or /readyz with
    /// --ready) and exits 0 when it answers 200: for container health checks.
    Healthcheck {
        /// Ask /readyz (database, Redis, clock usable) instead of /healthz.
        #[arg(long)]
        ready: bool,
    },
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

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve);
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
    // Logs and traces first; the trace exporter runs on the runtime.
    let telemetry = {
        let _runtime = runtime.enter();
        match start_telemetry(&command) {
            Ok(telemetry) => telemetry,
            Err(e) => {
                eprintln!("error: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        }
    };
    let result = runtime.block_on(async {
        let result = run(command).await;
        // Spans still queued go out before the process ends.
        telemetry.shutdown(std::time::Duration::from_secs(5)).await;
        result
    });
    // A handler that never yields must not hold the exit past the grace.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Installs the log subscriber (`QIWU_LOG_FORMAT`, `RUST_LOG`) and, for
/// the long-running roles, the trace exporter when `OTEL_*` asks for it.
fn start_telemetry(command: &Command) -> anyhow::Result<qiwu_telemetry::Telemetry> {
    let format = qiwu_telemetry::LogFormat::from_env()?;
    let role = match command {
        Command::Serve => Some(Role::Serve),
        Command::Api => Some(Role::Api),
        Command::Worker => Some(Role::Worker),
        _ => None,
    };
    let traces = match role {
        Some(_) => qiwu_telemetry::TraceConfig::from_env()?,
        None => None,
    };
    let role_name = role.map_or("tool", Role::name);
    let telemetry = qiwu_telemetry::init(format, traces.as_ref().map(|t| (t, role_name)))?;
    if telemetry.tracing() {
        tracing::info!(
            role = role_name,
            "exporting traces over OTLP (OTEL_* variables)"
        );
    }
    Ok(telemetry)
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Openapi => {
            print!("{}", qiwu_api::openapi_json());
            Ok(())
        }
        Command::Healthcheck { ready } => {
            let config = Config::from_env()?;
            let path = if ready { "/readyz" } else { "/healthz" };
            healthcheck::check(config.listen, path)
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
        Command::Serve => serve(Config::from_env()?, Role::Serve).await,
        Command::Api => {
            let config = Config::from_env()?;
            config.require_cluster("api")?;
            serve(config, Role::Api).await
        }
        Command::Worker => {
            let config = Config::from_env()?;
            config.require_cluster("worker")?;
            serve(config, Role::Worker).await
        }
    }
}

//! What the benchmarks share: reading their settings, fresh databases on
//! the local servers, the real binary as a child process, percentiles.

#![allow(dead_code)] // Each benchmark uses a part of it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qiwu_storage::Store;
use sea_orm::{ConnectionTrait, FromQueryResult, JsonValue, Statement};

pub const BIN: &str = env!("CARGO_BIN_EXE_qiwu-scheduler");
pub const SECRET: &str = "bench-secret-0123456789abcdef";

/// The environment variable `name` parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The value at percentile `p` (0–100) of sorted values.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The Redis URL for benchmark processes: database 13 of the test server
/// unless `QIWU_TEST_REDIS_URL` names one, so other users of the server do
/// not join the benchmark's cluster.
pub fn redis_url() -> String {
    let redis =
        std::env::var("QIWU_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    if redis.trim_end_matches('/').matches('/').count() <= 2 {
        format!("{}/13", redis.trim_end_matches('/'))
    } else {
        redis
    }
}

/// A fresh database: a new SQLite file, or a new database on the local
/// PostgreSQL or MySQL server (`QIWU_TEST_POSTGRES_URL`,
/// `QIWU_TEST_MYSQL_URL`), dropped by [`Database::drop_now`].
pub struct Database {
    pub kind: String,
    pub url: String,
    admin: Option<(Store, String)>,
}

impl Database {
    pub async fn fresh(kind: &str, prefix: &str) -> Database {
        // A fresh name per setup: a process of the previous setup that is
        // still exiting must not write into this one's SQLite files.
        static SETUPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let setup = SETUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}_{}_{setup}", std::process::id());
        let (url, admin) = match kind {
            "sqlite" => {
                let dir = std::env::temp_dir().join(&name);
                let _ = std::fs::remove_dir_all(&dir);
                (format!("sqlite://{}/bench.db", dir.display()), None)
            }
            "postgres" | "mysql" => {
                let (base, admin_url) = if kind == "postgres" {
                    let base = std::env::var("QIWU_TEST_POSTGRES_URL")
                        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
                    (base.clone(), format!("{base}/postgres"))
                } else {
                    let base = std::env::var("QIWU_TEST_MYSQL_URL")
                        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into());
                    (base.clone(), base)
                };
                let admin = Store::connect(&admin_url)
                    .await
                    .expect("the database server is reachable");
                let _ = admin
                    .connection()
                    .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name}"))
                    .await;
                let create = if kind == "mysql" {
                    format!("CREATE DATABASE {name} CHARACTER SET utf8mb4")
                } else {
                    format!("CREATE DATABASE {name}")
                };
                admin
                    .connection()
                    .execute_unprepared(&create)
                    .await
                    .expect("create database");
                (format!("{base}/{name}"), Some((admin, name)))
            }
            other => panic!("unknown database {other} (sqlite, postgres or mysql)"),
        };
        Database {
            kind: kind.to_string(),
            url,
            admin,
        }
    }

    /// Drops the database (or the SQLite file's directory).
    pub async fn drop_now(self) {
        match self.admin {
            Some((admin, name)) => {
                let sql = if self.kind == "postgres" {
                    format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                } else {
                    format!("DROP DATABASE IF EXISTS {name}")
                };
                let _ = admin.connection().execute_unprepared(&sql).await;
            }
            None => {
                if let Some(path) = self.url.strip_prefix("sqlite://")
                    && let Some(dir) = std::path::Path::new(path).parent()
                {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
        }
    }
}

/// Runs a statement, panicking with it when it fails.
pub async fn exec(store: &Store, sql: &str) {
    store
        .connection()
        .execute_unprepared(sql)
        .await
        .unwrap_or_else(|e| panic!("{e}: {sql}"));
}

/// The rows a query returns, as JSON objects.
pub async fn rows(store: &Store, sql: &str) -> Vec<JsonValue> {
    let db = store.connection();
    JsonValue::find_by_statement(Statement::from_string(
        db.get_database_backend(),
        sql.to_owned(),
    ))
    .all(db)
    .await
    .unwrap_or_else(|e| panic!("{e}: {sql}"))
}

/// A process of the real binary; killed when dropped.
pub struct Process {
    pub child: Child,
    pub base: String,
}

impl Process {
    pub fn spawn(role: &str, env: &[(&str, String)]) -> Process {
        let mut cmd = Command::new(BIN);
        cmd.arg(role)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn qiwu-scheduler");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let base = loop {
            let line = lines
                .next()
                .expect("the process printed its URL")
                .expect("read stdout");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.trim().to_string();
            }
        };
        // Keep draining stdout so the process never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Process { child, base }
    }

    /// Peak resident memory (VmHWM), in MB.
    pub fn peak_rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }

    /// Stops the process with SIGTERM and waits (at most `grace`, then
    /// SIGKILL).
    pub fn terminate(mut self, grace: Duration) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < grace {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `base` answers `/readyz` with 200; returns how long it took.
pub async fn wait_ready(client: &reqwest::Client, base: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if let Ok(resp) = client.get(format!("{base}/readyz")).send().await
            && resp.status().is_success()
        {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{base} not ready within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A super admin's token for the benchmark's processes.
pub fn admin_token() -> String {
    use qiwu_api::{Claims, JwtKeys};
    JwtKeys::from_secret(SECRET.as_bytes())
        .expect("keys")
        .mint(&Claims {
            sub: "bench".into(),
            name: "bench".into(),
            perms: Vec::new(),
            super_admin: true,
            exp: chrono::Utc::now().timestamp() + 86_400,
        })
        .expect("token")
}

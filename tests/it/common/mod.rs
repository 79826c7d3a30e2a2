//! Starts the real `qiwu-scheduler` binary for black-box tests: a fresh
//! working directory and database per server, port 0, tokens minted with
//! the same secret.

pub mod api;
pub mod cluster;
pub mod receiver;

pub use api::{audit, create_job, delete, fields, get, now_ms, post, put, run_once, send};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use qiwu_api::{Claims, JwtKeys};

pub const SECRET: &str = "test-secret-0123456789abcdef";
pub const BIN: &str = env!("CARGO_BIN_EXE_qiwu-scheduler");

/// A unique scratch directory under the target dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let base = std::env::temp_dir().join(format!(
            "qiwu-test-{tag}-{}-{:x}",
            std::process::id(),
            rand_u64()
        ));
        std::fs::create_dir_all(&base).expect("create temp dir");
        TempDir(base)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Every run of a job, oldest first, read straight from the database.
pub async fn runs_of(
    store: &qiwu_storage::Store,
    job_id: i64,
) -> Vec<qiwu_storage::entity::run::Model> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    qiwu_storage::entity::run::Entity::find()
        .filter(qiwu_storage::entity::run::Column::JobId.eq(job_id))
        .order_by_asc(qiwu_storage::entity::run::Column::Id)
        .all(store.connection())
        .await
        .expect("read runs")
}

/// Waits (polling the database every 100 ms, at most `limit`) until
/// `done` holds for the whole run log; returns it.
pub async fn wait_for_all_runs(
    store: &qiwu_storage::Store,
    limit: Duration,
    done: impl Fn(&[qiwu_storage::entity::run::Model]) -> bool,
) -> Vec<qiwu_storage::entity::run::Model> {
    use sea_orm::EntityTrait;
    let start = std::time::Instant::now();
    loop {
        let runs = qiwu_storage::entity::run::Entity::find()
            .all(store.connection())
            .await
            .expect("read runs");
        if done(&runs) {
            return runs;
        }
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?} ({} runs)",
            runs.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (polling the database every 100 ms, at most `limit`) until
/// `done` holds for the job's runs; returns the runs.
pub async fn wait_for_runs(
    store: &qiwu_storage::Store,
    job_id: i64,
    limit: Duration,
    done: impl Fn(&[qiwu_storage::entity::run::Model]) -> bool,
) -> Vec<qiwu_storage::entity::run::Model> {
    let start = std::time::Instant::now();
    loop {
        let runs = runs_of(store, job_id).await;
        if done(&runs) {
            return runs;
        }
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}; runs: {runs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` every 100 ms until it gives a value, at most `limit`.
pub async fn until<T>(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Disables every enabled job (on a fresh server: the seeded built-ins,
/// such as the every-minute notification dispatch), waits until no run is
/// left running, and clears the run log, so a test that counts the whole
/// run log sees only the runs it wrote itself.
pub async fn quiet_run_log(server: &Server) {
    let http = client();
    let admin = admin_token();
    let page: serde_json::Value = http
        .get(server.url("/api/jobs?enabled=true&pageSize=100"))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("list jobs")
        .json()
        .await
        .expect("job list");
    for job in page["items"].as_array().expect("items") {
        let id = job["id"].as_i64().expect("job id");
        let status = http
            .put(server.url(&format!("/api/jobs/{id}/enabled")))
            .bearer_auth(&admin)
            .json(&serde_json::json!({"enabled": false}))
            .send()
            .await
            .expect("disable job")
            .status();
        assert!(status.is_success(), "disabling job {id}: {status}");
    }
    let store = server.store().await;
    wait_for_all_runs(&store, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    let status = http
        .post(server.url("/api/runs/clear"))
        .bearer_auth(&admin)
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("clear runs")
        .status();
    assert!(status.is_success(), "clearing the run log: {status}");
    store.connection().clone().close().await.ok();
}

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish()
}

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    /// Everything the server printed on stdout before it was ready.
    pub banner: Vec<String>,
    pub dir: TempDir,
    /// A server database created for this server, dropped with it.
    pub database: Option<(Db, String)>,
    /// `QIWU_DATABASE_URL` as the process got it.
    pub database_url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some((db, name)) = self.database.take() {
            drop_database(db, &name);
        }
    }
}

/// Which database a server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
    MySql,
}

impl Server {
    /// `serve` on SQLite with the test secret and UTC.
    pub fn start() -> Server {
        Server::start_with(Db::Sqlite, &[])
    }

    pub fn start_with(db: Db, extra_env: &[(&str, &str)]) -> Server {
        let dir = TempDir::new("server");
        let (url, database) = match db {
            Db::Sqlite => (format!("sqlite://{}/qiwu.db", dir.path().display()), None),
            Db::Postgres | Db::MySql => {
                let (url, name) = fresh_database(db);
                (url, Some((db, name)))
            }
        };
        let mut env: Vec<(&str, String)> = vec![
            ("QIWU_LISTEN", "127.0.0.1:0".into()),
            ("QIWU_DATABASE_URL", url),
            ("QIWU_JWT_SECRET", SECRET.into()),
            ("QIWU_TIMEZONE", "UTC".into()),
        ];
        for (k, v) in extra_env {
            env.retain(|(key, _)| key != k);
            env.push((k, v.to_string()));
        }
        let mut server = Server::spawn(dir, &["serve"], &env, true);
        server.database = database;
        server.wait_ready();
        server
    }

    /// Waits until `/readyz` answers 200: the engine has started (it closes
    /// runs left `running` by an earlier process first, so a test that
    /// writes runs must not race it).
    pub fn wait_ready(&self) {
        for _ in 0..600 {
            if self.status_of("/readyz") == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{} did not answer 200 within 30 s", self.url("/readyz"));
    }

    /// The status code of a plain `GET path` (blocking, no client needed).
    pub fn status_of(&self, path: &str) -> Option<u16> {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(addr).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).ok()?;
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    }

    /// Spawns the binary in `dir` with exactly `env` (plus PATH).
    pub fn spawn(dir: TempDir, args: &[&str], env: &[(&str, String)], _: bool) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(dir.path())
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
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut banner = Vec::new();
        let base = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the server printed its URL within 60 s");
            banner.push(line.clone());
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.trim().to_string();
            }
        };
        // Keep reading the banner lines that follow the URL.
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
            banner.push(line);
            if banner.iter().any(|l| l.contains("token")) && banner.len() >= 4 {
                break;
            }
        }
        let database_url = env
            .iter()
            .find(|(k, _)| *k == "QIWU_DATABASE_URL")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| format!("sqlite://{}/data/qiwu.db", dir.path().display()));
        Server {
            child,
            base,
            banner,
            dir,
            database: None,
            database_url,
        }
    }

    /// Starts `serve` again on the same directory and SQLite file.
    pub fn restart(dir: TempDir) -> Server {
        let url = format!("sqlite://{}/qiwu.db", dir.path().display());
        let env: Vec<(&str, String)> = vec![
            ("QIWU_LISTEN", "127.0.0.1:0".into()),
            ("QIWU_DATABASE_URL", url),
            ("QIWU_JWT_SECRET", SECRET.into()),
            ("QIWU_TIMEZONE", "UTC".into()),
        ];
        let server = Server::spawn(dir, &["serve"], &env, true);
        server.wait_ready();
        server
    }

    /// Kills the process (SIGKILL) and hands back its directory.
    pub fn kill(mut self) -> TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.take_dir()
    }

    /// Stops with SIGTERM, asserts a clean exit, and hands back the directory.
    pub fn stop(mut self) -> TempDir {
        let status = self.terminate_in_place();
        assert!(status.success(), "SIGTERM exits 0, got {status}");
        self.take_dir()
    }

    fn take_dir(&mut self) -> TempDir {
        std::mem::replace(&mut self.dir, TempDir(PathBuf::new()))
    }

    /// A connection to the server's database, to read the run log.
    pub async fn store(&self) -> qiwu_storage::Store {
        qiwu_storage::Store::connect(&self.database_url)
            .await
            .expect("open the server's database")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.terminate_in_place()
    }

    fn terminate_in_place(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(status.success());
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the server did not exit within 15 s of SIGTERM");
    }
}

/// Drops a database made by [`fresh_database`]; best effort.
pub fn drop_database(db: Db, name: &str) {
    let _ = match db {
        Db::Postgres => Command::new("psql")
            .args([
                &format!("{}/postgres", postgres_base()),
                "-qc",
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ])
            .output(),
        Db::MySql => Command::new("mariadb")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                "3306",
                "-u",
                "root",
                "-e",
                &format!("DROP DATABASE IF EXISTS {name}"),
            ])
            .output(),
        Db::Sqlite => return,
    };
}

fn postgres_base() -> String {
    std::env::var("QIWU_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A fresh, empty database on the PostgreSQL or MySQL test server: its URL
/// and name.
pub fn fresh_database(db: Db) -> (String, String) {
    let name = format!("qiwu_bb_{:x}", rand_u64());
    match db {
        Db::Postgres => {
            let base = postgres_base();
            let status = Command::new("psql")
                .args([
                    &format!("{base}/postgres"),
                    "-qc",
                    &format!("CREATE DATABASE {name}"),
                ])
                .status()
                .expect("psql must be installed for the PostgreSQL tests");
            assert!(
                status.success(),
                "PostgreSQL at {base} (QIWU_TEST_POSTGRES_URL) is not reachable"
            );
            (format!("{base}/{name}"), name)
        }
        Db::MySql => {
            let base = std::env::var("QIWU_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into());
            let status = Command::new("mariadb")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-P",
                    "3306",
                    "-u",
                    "root",
                    "-e",
                    &format!("CREATE DATABASE {name} CHARACTER SET utf8mb4"),
                ])
                .status()
                .expect("the mariadb client must be installed for the MySQL tests");
            assert!(
                status.success(),
                "MariaDB at {base} (QIWU_TEST_MYSQL_URL) is not reachable"
            );
            (format!("{base}/{name}"), name)
        }
        Db::Sqlite => unreachable!("SQLite databases are files"),
    }
}

/// A token for `sub` with the given permission codes.
pub fn token(perms: &[&str]) -> String {
    mint("tester", perms, false, 3600)
}

pub fn admin_token() -> String {
    mint("admin", &[], true, 3600)
}

pub fn mint(sub: &str, perms: &[&str], super_admin: bool, ttl: i64) -> String {
    JwtKeys::from_secret(SECRET.as_bytes())
        .expect("keys")
        .mint(&Claims {
            sub: sub.into(),
            name: sub.into(),
            perms: perms.iter().map(|p| p.to_string()).collect(),
            super_admin,
            exp: chrono::Utc::now().timestamp() + ttl,
        })
        .expect("mint")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// One record on a job's schedule: the fire times it covers
/// (`first..=last`), its trigger and its attempt-1 runs' statuses.
#[derive(Debug, Clone)]
pub struct Record {
    pub fire_id: i64,
    pub first: i64,
    pub last: i64,
    pub trigger: String,
    pub first_runs: Vec<String>,
}

/// The records of `job`'s schedule (timer fires and catch-ups), oldest first.
pub async fn records(store: &qiwu_storage::Store, job_id: i64) -> Vec<Record> {
    use qiwu_storage::entity::{fire, run};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    let fires = fire::Entity::find()
        .filter(fire::Column::JobId.eq(job_id))
        .filter(fire::Column::Lane.eq(0))
        .order_by_asc(fire::Column::ScheduledAt)
        .all(store.connection())
        .await
        .expect("read fires");
    let runs = run::Entity::find()
        .filter(run::Column::JobId.eq(job_id))
        .filter(run::Column::Attempt.eq(1))
        .all(store.connection())
        .await
        .expect("read runs");
    fires
        .into_iter()
        .map(|f| Record {
            fire_id: f.id,
            first: f.first_at.unwrap_or(f.scheduled_at),
            last: f.scheduled_at,
            trigger: f.trigger.clone(),
            first_runs: runs
                .iter()
                .filter(|r| r.fire_id == f.id)
                .map(|r| r.status.clone())
                .collect(),
        })
        .collect()
}

/// What is wrong with an every-second job's records over `from..=to`:
/// `None` when each whole second is covered by exactly one record of its
/// schedule (a run, a skip, or one catch-up standing for several) and every
/// record has exactly one attempt-1 run row.
pub fn coverage_problem(records: &[Record], job_id: i64, from: i64, to: i64) -> Option<String> {
    for pair in records.windows(2) {
        if pair[1].first <= pair[0].last {
            return Some(format!(
                "job {job_id}: two records cover the same time: {pair:#?}"
            ));
        }
    }
    if let Some(r) = records.iter().find(|r| r.first_runs.len() != 1) {
        return Some(format!(
            "job {job_id}: a record without exactly one attempt-1 run: {r:#?}"
        ));
    }
    let mut second = from - from.rem_euclid(1000) + 1000;
    while second <= to {
        let covering = records
            .iter()
            .filter(|r| r.first <= second && second <= r.last)
            .count();
        if covering != 1 {
            return Some(format!(
                "job {job_id}: second {second} is covered by {covering} records; records near it: {:#?}",
                records
                    .iter()
                    .filter(|r| (r.last - second).abs() < 5000)
                    .collect::<Vec<_>>()
            ));
        }
        second += 1000;
    }
    None
}

/// Asserts [`coverage_problem`] finds nothing; returns the records.
pub async fn assert_every_second_recorded(
    store: &qiwu_storage::Store,
    job_id: i64,
    from: i64,
    to: i64,
) -> Vec<Record> {
    let records = records(store, job_id).await;
    if let Some(problem) = coverage_problem(&records, job_id, from, to) {
        panic!("{problem}");
    }
    records
}

/// Waits (polling every 250 ms, at most `limit`) until every job's seconds
/// over `from..=to` are recorded; returns how long it took, or panics with
/// the last problem seen.
pub async fn wait_until_recorded(
    store: &qiwu_storage::Store,
    jobs: &[i64],
    from: i64,
    to: i64,
    limit: Duration,
) -> Duration {
    let start = std::time::Instant::now();
    loop {
        let mut problem = None;
        for job in jobs {
            let records = records(store, *job).await;
            if let Some(p) = coverage_problem(&records, *job, from, to) {
                problem = Some(p);
                break;
            }
        }
        match problem {
            None => return start.elapsed(),
            Some(p) if start.elapsed() > limit => panic!("not recorded within {limit:?}: {p}"),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

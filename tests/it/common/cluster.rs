//! Servers a cluster test owns, so it can stop, restart or freeze them: a
//! Redis server, a PostgreSQL server (`initdb` + `pg_ctl` as the
//! `postgres` user on a free port), and `api` + `worker` processes of the
//! real binary on top.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Db, Server, TempDir, drop_database, fresh_database};

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_for_port(port: u16, what: &str) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port}");
}

/// A Redis server on a port of its own, so the test can restart it.
pub struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::on(free_port())
    }

    pub fn on(port: u16) -> Redis {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed for the cluster tests");
        let mut redis = Redis { child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        redis.stop();
        panic!("redis-server did not listen on {port}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn restart(&mut self) {
        self.stop();
        *self = Redis::on(self.port);
    }

    /// Runs a command through `redis-cli` (`CLIENT PAUSE 5000 ALL`, say).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Redis server that only speaks TLS, with a certificate from a CA made
/// for the test (`ca` is the file to trust, for `SSL_CERT_FILE`).
pub struct TlsRedis {
    child: Child,
    pub port: u16,
    dir: TempDir,
}

impl TlsRedis {
    pub fn start() -> TlsRedis {
        let dir = TempDir::new("tls");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl must be installed");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=qiwu-test-ca",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "redis.key",
            "-out",
            "redis.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(
            dir.path().join("ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .expect("ext");
        run(&[
            "x509",
            "-req",
            "-in",
            "redis.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "redis.crt",
            "-days",
            "2",
            "-extfile",
            "ext",
        ]);
        let port = free_port();
        let file = |name: &str| dir.path().join(name).display().to_string();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--tls-cert-file",
                &file("redis.crt"),
                "--tls-key-file",
                &file("redis.key"),
                "--tls-ca-cert-file",
                &file("ca.crt"),
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let redis = TlsRedis { child, port, dir };
        wait_for_port(port, "redis-server (TLS)");
        redis
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// The CA certificate that signed the server's.
    pub fn ca(&self) -> String {
        self.dir.path().join("ca.crt").display().to_string()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A PostgreSQL server of the test's own, which it may stop, restart and
/// freeze. `initdb` refuses to run as root, so it runs as `postgres`.
pub struct Postgres {
    dir: TempDir,
    pub port: u16,
}

fn as_postgres(program: &str, args: &[&str]) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "postgres", "--", program])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} as postgres (runuser): {e}"))
}

impl Postgres {
    pub fn start() -> Postgres {
        let dir = TempDir::new("pg");
        let status = Command::new("chown")
            .args(["postgres", &dir.path().display().to_string()])
            .status()
            .expect("chown");
        assert!(
            status.success(),
            "cannot hand the data directory to postgres"
        );
        let data = dir.path().join("data");
        let out = as_postgres(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        assert!(
            out.status.success(),
            "initdb (PostgreSQL's, on PATH) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pg = Postgres {
            dir,
            port: free_port(),
        };
        pg.resume();
        pg
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// Starts the (stopped) server again.
    pub fn resume(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        let out = as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_for_port(self.port, "PostgreSQL");
    }

    /// Stops the server (fast shutdown: clients are disconnected).
    pub fn stop(&self) {
        let out = as_postgres("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every process of the server: the postmaster and its children.
    fn pids(&self) -> Vec<String> {
        let pid_file = Path::new(&self.data()).join("postmaster.pid");
        // A stopped server has no pid file (and no process to signal).
        let Ok(text) = std::fs::read_to_string(pid_file) else {
            return Vec::new();
        };
        let postmaster = text.lines().next().unwrap_or_default().trim().to_string();
        let out = Command::new("pgrep")
            .args(["-P", &postmaster])
            .output()
            .expect("pgrep");
        let mut pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .collect();
        pids.push(postmaster);
        pids
    }

    fn signal(&self, signal: &str) {
        for pid in self.pids() {
            let _ = Command::new("kill").args([signal, &pid]).output();
        }
    }

    /// Freezes every process of the server (SIGSTOP): connections stay
    /// open and nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Creates a database and returns its URL.
    pub fn database(&self, name: &str) -> String {
        let status = Command::new("psql")
            .args([&self.admin_url(), "-qc", &format!("CREATE DATABASE {name}")])
            .status()
            .expect("psql");
        assert!(status.success(), "cannot create database {name}");
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.thaw();
        let _ = as_postgres(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

/// A MariaDB server of the test's own (a private `mariadbd` on a free
/// port, data in a temporary directory), which it may stop, restart and
/// freeze.
pub struct MariaDb {
    dir: TempDir,
    pub port: u16,
    child: Option<Child>,
}

impl MariaDb {
    pub fn start() -> MariaDb {
        let dir = TempDir::new("mariadb");
        let status = Command::new("chown")
            .args(["mysql:mysql", &dir.path().display().to_string()])
            .status()
            .expect("chown");
        assert!(status.success(), "cannot hand the data directory to mysql");
        let data = dir.path().join("data").display().to_string();
        let out = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                &format!("--datadir={data}"),
                "--user=mysql",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .output()
            .expect("mariadb-install-db must be installed");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let mut db = MariaDb {
            dir,
            port: free_port(),
            child: None,
        };
        db.resume();
        db
    }

    /// Starts the (stopped) server again.
    pub fn resume(&mut self) {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        let child = Command::new("mariadbd")
            .args([
                "--no-defaults",
                &format!("--datadir={}", path("data")),
                &format!("--port={}", self.port),
                "--bind-address=127.0.0.1",
                &format!("--socket={}", path("sock")),
                "--user=mysql",
                &format!("--log-error={}", path("err")),
                "--skip-log-bin",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd must be installed");
        self.child = Some(child);
        wait_for_port(self.port, "MariaDB");
    }

    /// Stops the server (SIGTERM: a clean shutdown).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .output();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .output();
        }
    }

    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Creates a database and returns its URL.
    pub fn database(&self, name: &str) -> String {
        let status = Command::new("mariadb")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
                "-u",
                "root",
                "-e",
                &format!("CREATE DATABASE {name} CHARACTER SET utf8mb4"),
            ])
            .status()
            .expect("mariadb client");
        assert!(status.success(), "cannot create database {name}");
        format!("mysql://root@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.thaw();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The environment of one cluster process.
pub fn cluster_env(url: &str, redis: &str, instance: &str) -> Vec<(&'static str, String)> {
    vec![
        ("QIWU_LISTEN", "127.0.0.1:0".into()),
        ("QIWU_DATABASE_URL", url.into()),
        ("QIWU_REDIS_URL", redis.into()),
        ("QIWU_JWT_SECRET", super::SECRET.into()),
        ("QIWU_TIMEZONE", "UTC".into()),
        ("QIWU_INSTANCE_ID", instance.into()),
    ]
}

/// Runs `migrate` against `url`.
pub fn migrate(url: &str, redis: &str) {
    let env = cluster_env(url, redis, "migrate");
    let out = Command::new(super::BIN)
        .arg("migrate")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run migrate");
    assert!(
        out.status.success(),
        "migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The processes of one cluster.
pub struct Cluster {
    /// The shared test server's database this cluster created (dropped
    /// with it), or `None` for a database the test owns.
    pub owned: Option<(Db, String)>,
    pub url: String,
    pub redis: Redis,
    pub api: Server,
    pub workers: BTreeMap<String, Server>,
}

impl Cluster {
    pub fn env(&self, instance: &str) -> Vec<(&'static str, String)> {
        cluster_env(&self.url, &self.redis.url(), instance)
    }

    /// A cluster on a fresh database of the shared test server.
    pub fn start(db: Db, workers: usize) -> Cluster {
        let (url, database) = fresh_database(db);
        let mut cluster = Cluster::start_on(url, Redis::start(), workers);
        cluster.owned = Some((db, database));
        cluster
    }

    /// A cluster on a database the test provides (already created).
    pub fn start_on(url: String, redis: Redis, workers: usize) -> Cluster {
        migrate(&url, &redis.url());
        let api = Server::spawn(
            TempDir::new("api"),
            &["api"],
            &cluster_env(&url, &redis.url(), "api-1"),
            true,
        );
        let mut cluster = Cluster {
            owned: None,
            url,
            redis,
            api,
            workers: BTreeMap::new(),
        };
        for i in 1..=workers {
            cluster.start_worker(&format!("w{i}"));
        }
        cluster
    }

    pub fn start_worker(&mut self, id: &str) {
        let env = self.env(id);
        let worker = Server::spawn(TempDir::new("worker"), &["worker"], &env, true);
        self.workers.insert(id.to_string(), worker);
    }

    pub async fn store(&self) -> qiwu_storage::Store {
        qiwu_storage::Store::connect(&self.url)
            .await
            .expect("open the cluster database")
    }

    /// Creates a job through the `api` process; returns its id.
    pub async fn create(&self, body: Value) -> i64 {
        super::create_job(&self.api, body).await
    }

    /// Waits until every worker is ready and each of `jobs` has a run (at
    /// most 60 s): the cluster is firing them, so the seconds from now on
    /// are the ones a test can hold it to.
    pub async fn until_firing(&self, jobs: &[i64]) {
        for worker in self.workers.values() {
            worker.wait_ready();
        }
        let store = self.store().await;
        super::wait_for_all_runs(&store, Duration::from_secs(60), |runs| {
            jobs.iter().all(|job| runs.iter().any(|r| r.job_id == *job))
        })
        .await;
        store.connection().clone().close().await.ok();
    }

    /// Waits until every worker is ready (its jobs armed) and listens on
    /// the Redis change channel, so a change made now reaches each one by
    /// message (at most 30 s).
    pub async fn until_workers_listen(&self) {
        for worker in self.workers.values() {
            worker.wait_ready();
        }
        let workers = self.workers.len().to_string();
        let start = std::time::Instant::now();
        while self
            .redis
            .cli(&["PUBSUB", "NUMSUB", qiwu_coord::CHANGES_CHANNEL])
            .lines()
            .nth(1)
            .is_none_or(|n| n.trim() != workers)
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the workers did not subscribe to the change channel"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops every worker cleanly (SIGTERM), asserting each exits 0.
    pub fn stop_workers(&mut self) {
        let ids: Vec<String> = self.workers.keys().cloned().collect();
        for id in ids {
            if let Some(worker) = self.workers.remove(&id) {
                let _ = worker.stop();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every process lets go of the database before it is dropped.
        self.workers.clear();
        let _ = self.api.child.kill();
        let _ = self.api.child.wait();
        if let Some((db, name)) = self.owned.take() {
            drop_database(db, &name);
        }
    }
}

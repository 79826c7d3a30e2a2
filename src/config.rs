//! Configuration from the environment (SPEC §2), each bad value reported
//! with the variable that holds it.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use chrono_tz::Tz;

/// Where `serve` keeps its files when nothing else is configured.
pub const DATA_DIR: &str = "data";
const SECRET_FILE: &str = "jwt-secret";
const MIN_SECRET_LEN: usize = 16;

/// A secret from the environment. Its `Debug` says only that it is set, so a
/// logged `Config` never carries it; `expose` is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A database or Redis URL, which may hold a password: `Debug` and
/// `Display` show it with the password replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionUrl(String);

impl ConnectionUrl {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConnectionUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for ConnectionUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnectionUrl({self})")
    }
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

/// Settings shared by every subcommand.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub database_url: ConnectionUrl,
    /// True when the database URL came from the default.
    pub database_is_default: bool,
    pub redis_url: Option<ConnectionUrl>,
    pub jwt_secret: Option<Secret>,
    /// `QIWU_JWT_PREVIOUS_SECRETS`: secrets tokens are still accepted with
    /// (never signed with) while `QIWU_JWT_SECRET` is rotated.
    pub jwt_previous_secrets: Vec<Secret>,
    pub timezone: Tz,
    pub instance_id: String,
    /// `QIWU_WEBHOOK_SECRET`: the key `notify.dispatch` signs webhook
    /// deliveries with; without it nothing is delivered.
    pub webhook_secret: Option<Secret>,
    /// `QIWU_WEBHOOK_PREVIOUS_SECRETS`: deliveries are signed with these
    /// too while `QIWU_WEBHOOK_SECRET` is rotated.
    pub webhook_previous_secrets: Vec<Secret>,
    /// `QIWU_CONFIG`: the file that declares handlers in other services
    /// (read by `serve`, `api` and `worker`; see `config_file`).
    pub config_file: Option<PathBuf>,
    /// `QIWU_MISFIRE_THRESHOLD_MS`: a fire time not claimed within this long
    /// is recorded by the job's misfire policy instead.
    pub misfire_threshold: std::time::Duration,
    /// `QIWU_MAX_IN_FLIGHT`: most fires running in one process at once.
    pub max_in_flight: usize,
    /// `QIWU_CLAIM_AHEAD_MS`: how long before its time a job's primary
    /// owner claims a timer fire (0: at its time).
    pub claim_ahead: std::time::Duration,
    /// `QIWU_MAX_PENDING_RUN_ONCE`: most queued "run once" fires per job;
    /// more are refused with 429.
    pub max_pending_run_once: u64,
}

/// A whole number in `min..=max` from `name`, or `default` when unset.
fn ranged(lookup: Lookup<'_>, name: &str, min: u64, max: u64, default: u64) -> anyhow::Result<u64> {
    match var(lookup, name)? {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => bail!("{name}={v:?} must be a whole number from {min} to {max}"),
        },
    }
}

/// Default of `QIWU_MAX_PENDING_RUN_ONCE`.
pub const DEFAULT_MAX_PENDING_RUN_ONCE: u64 = 100;
/// Largest `QIWU_MAX_PENDING_RUN_ONCE`: each queued fire becomes a task.
const MAX_MAX_PENDING_RUN_ONCE: u64 = 100_000;

/// Where settings are read from: `std::env::var`, or a test's own map.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Result<String, std::env::VarError>;

fn var(lookup: Lookup<'_>, name: &str) -> anyhow::Result<Option<String>> {
    match lookup(name) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v.trim().to_string())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => bail!("{name} is not valid UTF-8"),
    }
}

impl Config {
    pub fn from_env() -> anyhow::Result<Config> {
        Config::from_vars(&|name| std::env::var(name))
    }

    /// The configuration `lookup` describes, by the same rules as the
    /// environment's (an in-process app in a test reads a map).
    pub fn from_vars(lookup: Lookup<'_>) -> anyhow::Result<Config> {
        let listen = match var(lookup, "QIWU_LISTEN")? {
            Some(v) => v.parse::<SocketAddr>().with_context(|| {
                format!("QIWU_LISTEN={v:?} is not an address such as 127.0.0.1:8080")
            })?,
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
        };
        let (database_url, database_is_default) = match var(lookup, "QIWU_DATABASE_URL")? {
            Some(v) => {
                if ![
                    "sqlite:",
                    "postgres://",
                    "postgresql://",
                    "mysql://",
                    "mariadb://",
                ]
                .iter()
                .any(|p| v.starts_with(p))
                {
                    bail!(
                        "QIWU_DATABASE_URL must start with sqlite:, postgres://, postgresql:// or mysql://"
                    );
                }
                (v.replacen("mariadb://", "mysql://", 1), false)
            }
            None => (format!("sqlite://{DATA_DIR}/qiwu.db"), true),
        };
        let redis_url = var(lookup, "QIWU_REDIS_URL")?;
        if let Some(url) = &redis_url
            && !(url.starts_with("redis://") || url.starts_with("rediss://"))
        {
            bail!("QIWU_REDIS_URL must start with redis:// or rediss://");
        }
        let jwt_secret = var(lookup, "QIWU_JWT_SECRET")?;
        if let Some(s) = &jwt_secret
            && s.len() < MIN_SECRET_LEN
        {
            bail!("QIWU_JWT_SECRET must have at least {MIN_SECRET_LEN} characters");
        }
        let timezone = match var(lookup, "QIWU_TIMEZONE")? {
            Some(v) => v.parse::<Tz>().map_err(|_| {
                anyhow::anyhow!(
                    "QIWU_TIMEZONE={v:?} is not an IANA time zone such as Asia/Shanghai"
                )
            })?,
            None => system_timezone(),
        };
        let instance_id = match var(lookup, "QIWU_INSTANCE_ID")? {
            Some(v) if v.len() > 128 => bail!("QIWU_INSTANCE_ID may have at most 128 characters"),
            Some(v) => v,
            None => format!("{}-{}", host_name(), std::process::id()),
        };
        let webhook_secret = var(lookup, "QIWU_WEBHOOK_SECRET")?;
        if let Some(s) = &webhook_secret
            && s.len() < MIN_SECRET_LEN
        {
            bail!("QIWU_WEBHOOK_SECRET must have at least {MIN_SECRET_LEN} characters");
        }
        let jwt_previous_secrets = previous_secrets(
            "QIWU_JWT_PREVIOUS_SECRETS",
            var(lookup, "QIWU_JWT_PREVIOUS_SECRETS")?.as_deref(),
            ("QIWU_JWT_SECRET", jwt_secret.as_deref()),
        )?;
        let webhook_previous_secrets = previous_secrets(
            "QIWU_WEBHOOK_PREVIOUS_SECRETS",
            var(lookup, "QIWU_WEBHOOK_PREVIOUS_SECRETS")?.as_deref(),
            ("QIWU_WEBHOOK_SECRET", webhook_secret.as_deref()),
        )?;
        if !webhook_previous_secrets.is_empty() && webhook_secret.is_none() {
            bail!(
                "QIWU_WEBHOOK_PREVIOUS_SECRETS is set but QIWU_WEBHOOK_SECRET is not: deliveries are signed with the current secret first"
            );
        }
        let config_file = var(lookup, "QIWU_CONFIG")?.map(PathBuf::from);
        let misfire_threshold = std::time::Duration::from_millis(ranged(
            lookup,
            "QIWU_MISFIRE_THRESHOLD_MS",
            1_000,
            3_600_000,
            5_000,
        )?);
        let max_in_flight =
            usize::try_from(ranged(lookup, "QIWU_MAX_IN_FLIGHT", 1, 100_000, 5_000)?)
                .context("QIWU_MAX_IN_FLIGHT does not fit this machine")?;
        let claim_ahead =
            std::time::Duration::from_millis(ranged(lookup, "QIWU_CLAIM_AHEAD_MS", 0, 1_000, 500)?);
        let max_pending_run_once = ranged(
            lookup,
            "QIWU_MAX_PENDING_RUN_ONCE",
            1,
            MAX_MAX_PENDING_RUN_ONCE,
            DEFAULT_MAX_PENDING_RUN_ONCE,
        )?;
        let secrets = |list: Vec<String>| list.into_iter().map(Secret).collect();
        Ok(Config {
            listen,
            database_url: ConnectionUrl(database_url),
            database_is_default,
            redis_url: redis_url.map(ConnectionUrl),
            jwt_secret: jwt_secret.map(Secret),
            jwt_previous_secrets: secrets(jwt_previous_secrets),
            timezone,
            instance_id,
            webhook_secret: webhook_secret.map(Secret),
            webhook_previous_secrets: secrets(webhook_previous_secrets),
            config_file,
            misfire_threshold,
            max_in_flight,
            claim_ahead,
            max_pending_run_once,
        })
    }

    pub fn is_sqlite(&self) -> bool {
        self.database_url.expose().starts_with("sqlite:")
    }

    /// `api` and `worker` share state across processes: they need a server
    /// database and Redis.
    pub fn require_cluster(&self, role: &str) -> anyhow::Result<()> {
        if self.is_sqlite() {
            bail!(
                "`qiwu-scheduler {role}` needs PostgreSQL or MySQL/MariaDB: set QIWU_DATABASE_URL to a postgres:// or mysql:// URL (SQLite is for `serve` only)"
            );
        }
        if self.redis_url.is_none() {
            bail!(
                "`qiwu-scheduler {role}` needs Redis: set QIWU_REDIS_URL, such as redis://127.0.0.1:6379"
            );
        }
        if self.jwt_secret.is_none() && role == "api" {
            bail!("`qiwu-scheduler api` needs QIWU_JWT_SECRET, shared by every instance");
        }
        Ok(())
    }

    /// The signing secret: `QIWU_JWT_SECRET`, else one kept in
    /// `data/jwt-secret` (created with mode 0600 on first use).
    pub fn jwt_secret_or_file(&self) -> anyhow::Result<String> {
        if let Some(s) = &self.jwt_secret {
            return Ok(s.expose().to_string());
        }
        let path = Path::new(DATA_DIR).join(SECRET_FILE);
        read_or_create_secret(&path)
    }
}

/// The comma-separated secrets of `name` (`text`, already trimmed), each
/// trimmed and at least 16 characters, none equal to the current secret
/// (`current`: its variable and value) nor repeated. Every bad entry is
/// named by its position; no secret is ever echoed.
pub fn previous_secrets(
    name: &str,
    text: Option<&str>,
    current: (&str, Option<&str>),
) -> anyhow::Result<Vec<String>> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    check_previous(text.split(',').map(str::trim), current).map_err(|problems| {
        anyhow::anyhow!(
            "{name} (comma-separated secrets) is invalid: {}",
            problems.join("; ")
        )
    })
}

/// Checks previous secrets one by one (see [`previous_secrets`]); either
/// all are fine or every problem is returned, each naming its entry.
pub fn check_previous<'a>(
    entries: impl Iterator<Item = &'a str>,
    current: (&str, Option<&str>),
) -> Result<Vec<String>, Vec<String>> {
    let mut problems = Vec::new();
    let mut secrets: Vec<String> = Vec::new();
    for (index, entry) in entries.enumerate() {
        let number = index + 1;
        let chars = entry.chars().count();
        if entry.is_empty() {
            problems.push(format!("entry {number} is empty"));
        } else if chars < MIN_SECRET_LEN {
            problems.push(format!(
                "entry {number} has {chars} characters; at least {MIN_SECRET_LEN} are needed"
            ));
        } else if Some(entry) == current.1 {
            problems.push(format!(
                "entry {number} equals {}: a previous secret must be the one it replaced",
                current.0
            ));
        } else if let Some(first) = secrets.iter().position(|s| s == entry) {
            problems.push(format!("entry {number} repeats entry {}", first + 1));
        }
        secrets.push(entry.to_owned());
    }
    if problems.is_empty() {
        Ok(secrets)
    } else {
        Err(problems)
    }
}

fn read_or_create_secret(path: &PathBuf) -> anyhow::Result<String> {
    if let Ok(existing) = std::fs::read_to_string(path) {
        let existing = existing.trim().to_string();
        if existing.len() >= MIN_SECRET_LEN {
            return Ok(existing);
        }
        bail!(
            "{} holds a secret shorter than {MIN_SECRET_LEN} characters",
            path.display()
        );
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let secret: String = {
        use rand::Rng;
        let bytes: [u8; 32] = rand::rng().random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    };
    write_private(path, &secret)?;
    Ok(secret)
}

#[cfg(unix)]
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(not(unix))]
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The operating system's zone: `TZ`, `/etc/timezone`, or the target of
/// `/etc/localtime`; UTC when none of them names a zone.
fn system_timezone() -> Tz {
    let from_env = std::env::var("TZ")
        .ok()
        .map(|s| s.trim_start_matches(':').to_string());
    let from_file = || {
        std::fs::read_to_string("/etc/timezone")
            .ok()
            .map(|s| s.trim().to_string())
    };
    let from_link = || {
        std::fs::read_link("/etc/localtime").ok().and_then(|p| {
            let s = p.to_string_lossy().to_string();
            s.split_once("zoneinfo/").map(|(_, zone)| zone.to_string())
        })
    };
    [from_env, from_file(), from_link()]
        .into_iter()
        .flatten()
        .find_map(|name| name.parse::<Tz>().ok())
        .unwrap_or(chrono_tz::UTC)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_secrets_or_passwords() {
        let config = Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: ConnectionUrl("postgres://qiwu:db-password-1@db/qiwu".into()),
            database_is_default: false,
            redis_url: Some(ConnectionUrl(
                "rediss://:redis-password-1@cache:6380".into(),
            )),
            jwt_secret: Some(Secret("jwt-secret-0123456789".into())),
            jwt_previous_secrets: vec![Secret("old-jwt-secret-0123456".into())],
            timezone: chrono_tz::Asia::Shanghai,
            instance_id: "w1".into(),
            webhook_secret: Some(Secret("webhook-secret-0123456".into())),
            webhook_previous_secrets: vec![Secret("old-webhook-secret-012".into())],
            config_file: None,
            misfire_threshold: std::time::Duration::from_secs(5),
            max_in_flight: 10,
            claim_ahead: std::time::Duration::from_millis(500),
            max_pending_run_once: 10,
        };
        let shown = format!("{config:?}");
        for secret in [
            "db-password-1",
            "redis-password-1",
            "jwt-secret-0123456789",
            "old-jwt-secret-0123456",
            "webhook-secret-0123456",
            "old-webhook-secret-012",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("postgres://qiwu:***@db/qiwu"), "{shown}");
        assert_eq!(
            config.database_url.to_string(),
            "postgres://qiwu:***@db/qiwu"
        );
        assert_eq!(
            config.database_url.expose(),
            "postgres://qiwu:db-password-1@db/qiwu"
        );
    }

    const CURRENT: (&str, Option<&str>) = ("QIWU_JWT_SECRET", Some("current-secret-0123"));

    #[test]
    fn previous_secrets_are_checked_entry_by_entry() {
        let ok = [
            (None, vec![]),
            (Some("old-secret-0123456"), vec!["old-secret-0123456"]),
            (
                Some(" old-secret-0123456 , older-secret-0123456"),
                vec!["old-secret-0123456", "older-secret-0123456"],
            ),
        ];
        for (text, expected) in ok {
            let got = previous_secrets("QIWU_JWT_PREVIOUS_SECRETS", text, CURRENT).expect("valid");
            assert_eq!(got, expected, "{text:?}");
        }
        let bad = [
            ("short", "entry 1 has 5 characters; at least 16 are needed"),
            ("old-secret-0123456,", "entry 2 is empty"),
            (
                "old-secret-0123456,current-secret-0123",
                "entry 2 equals QIWU_JWT_SECRET",
            ),
            (
                "old-secret-0123456,old-secret-0123456",
                "entry 2 repeats entry 1",
            ),
            (
                "tiny,,old-secret-0123456",
                "entry 1 has 4 characters; at least 16 are needed; entry 2 is empty",
            ),
        ];
        for (text, expected) in bad {
            let err = previous_secrets("QIWU_JWT_PREVIOUS_SECRETS", Some(text), CURRENT)
                .expect_err(text)
                .to_string();
            assert!(
                err.starts_with("QIWU_JWT_PREVIOUS_SECRETS (comma-separated secrets) is invalid: "),
                "{err}"
            );
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(!err.contains("secret-0123"), "no secret echoed: {err}");
        }
    }
}

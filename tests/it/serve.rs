//! Black-box tests of start-up: the zero-configuration default, bad
//! configuration, and a clean exit on SIGTERM.

use std::process::Command;

use crate::common;
use crate::common::{BIN, Server, TempDir, client};
use reqwest::StatusCode;

#[tokio::test]
async fn serve_with_no_configuration() {
    let dir = TempDir::new("zero-config");
    // Only the port is set, so that parallel tests do not fight over 8080.
    let server = Server::spawn(dir, &[], &[("QIWU_LISTEN", "127.0.0.1:0".into())], true);
    let secret = server.dir.path().join("data/jwt-secret");
    let meta = std::fs::metadata(&secret).expect("data/jwt-secret was created");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
    assert!(server.dir.path().join("data/qiwu.db").exists());
    let token = server
        .banner
        .iter()
        .find_map(|l| l.split("token (valid 30 days): ").nth(1))
        .expect("a super-admin token is printed")
        .trim()
        .to_string();
    let resp = client()
        .get(server.url("/api/handlers"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let status = server.terminate();
    assert!(status.success(), "SIGTERM exits 0, got {status}");
}

#[test]
fn bad_configuration_names_the_variable() {
    /// Arguments, environment, and the variable the error must name.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 7] = [
        (&["serve"], &[("QIWU_LISTEN", "nowhere")], "QIWU_LISTEN"),
        (
            &["serve"],
            &[("QIWU_TIMEZONE", "Mars/Base")],
            "QIWU_TIMEZONE",
        ),
        (
            &["serve"],
            &[("QIWU_DATABASE_URL", "oracle://x")],
            "QIWU_DATABASE_URL",
        ),
        (
            &["serve"],
            &[("QIWU_JWT_SECRET", "short")],
            "QIWU_JWT_SECRET",
        ),
        (
            &["serve"],
            &[("QIWU_REDIS_URL", "http://x")],
            "QIWU_REDIS_URL",
        ),
        (
            &["api"],
            &[("QIWU_REDIS_URL", "redis://127.0.0.1:6379")],
            "QIWU_DATABASE_URL",
        ),
        (
            &["worker"],
            &[("QIWU_DATABASE_URL", "postgres://postgres@127.0.0.1/x")],
            "QIWU_REDIS_URL",
        ),
    ];
    for (args, env, variable) in cases {
        let dir = TempDir::new("bad-config");
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("QIWU_LISTEN", "127.0.0.1:0");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        assert!(
            !out.status.success(),
            "{args:?} {env:?} must refuse to start"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(variable), "{args:?} {env:?}: {stderr}");
    }
}

#[test]
fn token_command_mints_a_working_token() {
    let dir = TempDir::new("token");
    let out = Command::new(BIN)
        .args([
            "token",
            "--sub",
            "svc",
            "--perm",
            "scheduler.task.run",
            "--perm",
            "scheduler.task.view",
        ])
        .current_dir(dir.path())
        .env_clear()
        .env("QIWU_JWT_SECRET", common::SECRET)
        .output()
        .expect("run");
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).expect("utf-8");
    let claims = qiwu_api::JwtKeys::from_secret(common::SECRET.as_bytes())
        .expect("keys")
        .verify(token.trim())
        .expect("valid token");
    assert_eq!(claims.sub, "svc");
    assert_eq!(claims.perms, ["scheduler.task.run", "scheduler.task.view"]);
    assert!(!claims.super_admin);

    let out = Command::new(BIN)
        .args(["token", "--sub", "svc", "--perm", "scheduler.task.nuke"])
        .current_dir(dir.path())
        .env_clear()
        .env("QIWU_JWT_SECRET", common::SECRET)
        .output()
        .expect("run");
    assert!(!out.status.success());
}

/// Runs `qiwu-scheduler healthcheck` with `args` against `listen`.
fn healthcheck(listen: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("healthcheck")
        .args(args)
        .env_clear()
        .env("QIWU_LISTEN", listen)
        .output()
        .expect("run healthcheck")
}

#[tokio::test]
async fn healthcheck_probes_the_instance_on_qiwu_listen() {
    let server = Server::start();
    let listen = server
        .base
        .strip_prefix("http://")
        .expect("an http URL")
        .to_owned();
    let port = listen.rsplit(':').next().expect("a port").to_owned();
    // The address a container listens on (all interfaces) is probed on
    // loopback; /healthz by default, /readyz with --ready.
    for (address, args) in [
        (listen.clone(), &[][..]),
        (format!("0.0.0.0:{port}"), &[][..]),
        (listen.clone(), &["--ready"][..]),
    ] {
        let out = healthcheck(&address, args);
        assert!(out.status.success(), "{address} {args:?}: {out:?}");
    }
    drop(server);
    // Nothing listens any more: exit 1, naming the variable.
    let out = healthcheck(&listen, &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("nothing answers on QIWU_LISTEN={listen}")),
        "{stderr}"
    );
}

/// The application is a library: a test builds `serve` in its own process
/// (SQLite in a temporary directory, port 0), calls the API with a token
/// minted from the same secret, and stops it like a signal would.
#[tokio::test]
async fn serve_builds_and_stops_in_process() {
    use qiwu_scheduler::app::{App, Role};
    use qiwu_scheduler::config::Config;

    let dir = TempDir::new("in-process");
    let secret = "in-process-secret-0123456789";
    let vars = [
        ("QIWU_LISTEN", "127.0.0.1:0".to_string()),
        (
            "QIWU_DATABASE_URL",
            format!("sqlite://{}?mode=rwc", dir.path().join("qiwu.db").display()),
        ),
        ("QIWU_JWT_SECRET", secret.to_string()),
        ("QIWU_TIMEZONE", "Asia/Shanghai".to_string()),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .ok_or(std::env::VarError::NotPresent)
    };
    let config = Config::from_vars(&lookup).expect("configuration");
    let app = App::build(config, Role::Serve).await.expect("app builds");
    let base = format!("http://{}", app.addr());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(app.run_until_stopped(async {
        let _ = stop_rx.await;
    }));

    let keys = qiwu_api::JwtKeys::from_secret(secret.as_bytes()).expect("keys");
    let token = keys
        .mint(&qiwu_api::Claims {
            sub: "tester".into(),
            name: "Tester".into(),
            perms: vec![],
            super_admin: true,
            exp: (chrono::Utc::now() + chrono::Duration::hours(1)).timestamp(),
        })
        .expect("token");
    let resp = client()
        .get(format!("{base}/api/handlers"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);

    stop_tx.send(()).expect("the app is running");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(15), running)
        .await
        .expect("stops within the grace period")
        .expect("the app task");
    assert!(ended.is_ok(), "a clean stop: {ended:?}");
    assert!(
        client()
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_err(),
        "nothing listens after the stop"
    );
}

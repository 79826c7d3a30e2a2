//! Helpers of the observability tests: a process with its stderr kept in a
//! file, a small HTTP receiver (OTLP/HTTP traces, a remote handler, a
//! webhook), a small gRPC receiver (OTLP/gRPC traces, with or without
//! TLS), a strict OpenMetrics parser.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::cluster::Redis;
use crate::common::{BIN, TempDir};

/// A running binary whose stderr goes to `stderr.log` in its directory.
pub struct Proc {
    pub child: Child,
    pub base: String,
    pub dir: TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Writes `files` into a fresh directory, starts `args` there with
    /// exactly `env` (plus PATH) and waits for its URL.
    pub fn start(
        tag: &str,
        args: &[&str],
        env: &[(&str, String)],
        files: &[(&str, String)],
    ) -> Proc {
        let dir = TempDir::new(tag);
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write a file");
        }
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).expect("stderr file");
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn qiwu-scheduler");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let base = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{tag} printed its URL within 60 s"));
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.trim().to_string();
            }
        };
        let proc = Proc { child, base, dir };
        proc.wait_alive();
        proc
    }

    /// Waits until `/healthz` answers 200: the banner comes right after
    /// the bind, a moment before the server takes connections.
    fn wait_alive(&self) {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://").to_string();
        let start = std::time::Instant::now();
        loop {
            let ok = std::net::TcpStream::connect(&addr).ok().and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
                let mut head = [0u8; 12];
                s.read_exact(&mut head).ok()?;
                Some(head.ends_with(b"200"))
            });
            if ok == Some(true) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} did not answer /healthz within 30 s",
                self.base
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// An HTTP/1.1 server on 127.0.0.1:0 that keeps every request and answers
/// 200 (`done` as text for the remote handler, an empty protobuf message
/// for OTLP).
pub struct Receiver {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&data[..end]).to_string();
                        let mut lines = head.lines();
                        let path = lines
                            .next()
                            .and_then(|l| l.split_whitespace().nth(1))
                            .unwrap_or("")
                            .to_string();
                        let headers: BTreeMap<String, String> = lines
                            .filter_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
                            })
                            .collect();
                        let length: usize = headers
                            .get("content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if data.len() < end + 4 + length {
                            continue;
                        }
                        let body = data[end + 4..end + 4 + length].to_vec();
                        let (kind, answer): (&str, &[u8]) = if path.starts_with("/v1/traces") {
                            ("application/x-protobuf", b"")
                        } else {
                            ("text/plain", b"done")
                        };
                        seen.lock().expect("lock").push(Received {
                            path,
                            headers,
                            body,
                        });
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            answer.len()
                        );
                        let _ = socket.write_all(reply.as_bytes()).await;
                        let _ = socket.write_all(answer).await;
                        return;
                    }
                });
            }
        });
        Receiver { addr, requests }
    }

    pub fn received(&self, path_prefix: &str) -> Vec<Received> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }
}

/// The OTLP/gRPC trace export method.
pub const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// A gRPC server (HTTP/2 without TLS) on 127.0.0.1:0 that keeps every
/// unary call it gets, the message without its gRPC frame header, and
/// answers with an empty message and `grpc-status: 0` (an empty
/// `ExportTraceServiceResponse` is a full success).
pub struct GrpcReceiver {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<Received>>>,
}

impl GrpcReceiver {
    /// Without TLS (an `http://` endpoint).
    pub async fn start() -> GrpcReceiver {
        GrpcReceiver::start_with(None).await
    }

    /// Over TLS with `tls`'s certificate (an `https://` endpoint).
    pub async fn start_tls(tls: &TestTls) -> GrpcReceiver {
        use tokio_rustls::rustls;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![rustls::pki_types::CertificateDer::from(
                    tls.leaf_der.clone(),
                )],
                rustls::pki_types::PrivateKeyDer::Pkcs8(
                    rustls::pki_types::PrivatePkcs8KeyDer::from(tls.key_der.clone()),
                ),
            )
            .expect("the test certificate");
        // gRPC clients insist on HTTP/2 by ALPN.
        config.alpn_protocols = vec![b"h2".to_vec()];
        GrpcReceiver::start_with(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> GrpcReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let seen = Arc::clone(&seen);
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => grpc_connection(socket, seen).await,
                        Some(acceptor) => {
                            if let Ok(socket) = acceptor.accept(socket).await {
                                grpc_connection(socket, seen).await;
                            }
                        }
                    }
                });
            }
        });
        GrpcReceiver { addr, requests }
    }

    pub fn received(&self, path_prefix: &str) -> Vec<Received> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }
}

/// Serves the gRPC calls of one connection.
async fn grpc_connection<S>(socket: S, seen: Arc<Mutex<Vec<Received>>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Ok(mut conn) = h2::server::handshake(socket).await else {
        return;
    };
    // Accepting is what drives the connection, so each call is answered in
    // a task of its own.
    while let Some(Ok((request, respond))) = conn.accept().await {
        tokio::spawn(grpc_call(request, respond, Arc::clone(&seen)));
    }
}

/// A certificate authority of the test's own and a server certificate it
/// signed for `localhost` and 127.0.0.1, made by the `openssl` tool.
pub struct TestTls {
    /// The authority's certificate (PEM), for `SSL_CERT_FILE`.
    pub ca_file: PathBuf,
    pub leaf_der: Vec<u8>,
    pub key_der: Vec<u8>,
    _dir: TempDir,
}

impl TestTls {
    pub fn make() -> TestTls {
        let dir = TempDir::new("tls");
        let at = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(
            at("leaf.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("extensions");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let steps: Vec<Vec<String>> = vec![
            [
                &["req", "-x509"][..],
                &ec[..],
                &["-days", "2", "-subj", "/CN=qiwu test CA"][..],
            ]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .chain(["-keyout".into(), at("ca.key"), "-out".into(), at("ca.pem")])
            .collect(),
            [&["req"][..], &ec[..], &["-subj", "/CN=localhost"][..]]
                .concat()
                .iter()
                .map(|s| s.to_string())
                .chain([
                    "-keyout".into(),
                    at("leaf.key"),
                    "-out".into(),
                    at("leaf.csr"),
                ])
                .collect(),
            vec![
                "x509".into(),
                "-req".into(),
                "-in".into(),
                at("leaf.csr"),
                "-CA".into(),
                at("ca.pem"),
                "-CAkey".into(),
                at("ca.key"),
                "-CAcreateserial".into(),
                "-days".into(),
                "2".into(),
                "-extfile".into(),
                at("leaf.ext"),
                "-outform".into(),
                "DER".into(),
                "-out".into(),
                at("leaf.der"),
            ],
            vec![
                "pkcs8".into(),
                "-topk8".into(),
                "-nocrypt".into(),
                "-in".into(),
                at("leaf.key"),
                "-outform".into(),
                "DER".into(),
                "-out".into(),
                at("key.der"),
            ],
        ];
        for args in steps {
            let out = Command::new("openssl")
                .args(&args)
                .output()
                .expect("the openssl tool must be installed for the TLS tests");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        }
        TestTls {
            ca_file: dir.path().join("ca.pem"),
            leaf_der: std::fs::read(at("leaf.der")).expect("leaf"),
            key_der: std::fs::read(at("key.der")).expect("key"),
            _dir: dir,
        }
    }
}

/// Reads one unary call, keeps it, and answers OK.
async fn grpc_call(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    seen: Arc<Mutex<Vec<Received>>>,
) {
    let (parts, mut body) = request.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    // One length-prefixed message: a compression flag, a big-endian length.
    let message = match data.as_slice() {
        [0, a, b, c, d, rest @ ..]
            if u32::from_be_bytes([*a, *b, *c, *d]) as usize == rest.len() =>
        {
            rest.to_vec()
        }
        _ => panic!("not one uncompressed gRPC message: {} bytes", data.len()),
    };
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                v.to_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    seen.lock().expect("lock").push(Received {
        path: parts.uri.path().to_string(),
        headers,
        body: message,
    });
    let response = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("response");
    let Ok(mut stream) = respond.send_response(response, false) else {
        return;
    };
    let _ = stream.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = stream.send_trailers(trailers);
}

/// One sample of an exposition: its name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `name{a="x",b="y"} value` strictly.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let (name_end, rest) = match line.find(['{', ' ']) {
        Some(i) => (i, &line[i..]),
        None => return Err(format!("no value: {line}")),
    };
    let name = &line[..name_end];
    if !valid_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = rest;
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let end = loop {
            // label name
            let start = chars.peek().map(|(i, _)| *i).ok_or("unterminated labels")?;
            if inner[start..].starts_with('}') {
                break start;
            }
            let eq = inner[start..].find('=').ok_or("label without =")? + start;
            let lname = &inner[start..eq];
            if !valid_name(lname) {
                return Err(format!("bad label name {lname:?}"));
            }
            while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value not quoted".into());
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        '"' => value.push('"'),
                        '\\' => value.push('\\'),
                        other => return Err(format!("bad escape \\{other}")),
                    },
                    '"' => break,
                    '\n' => return Err("newline in label value".into()),
                    c => value.push(c),
                }
            }
            if labels.insert(lname.to_string(), value).is_some() {
                return Err(format!("label {lname} twice"));
            }
            match chars.next().ok_or("unterminated labels")? {
                (_, ',') => {}
                (i, '}') => break i,
                (_, c) => return Err(format!("unexpected {c:?} after a label")),
            }
        };
        rest = &inner[end + 1..];
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or_else(|| format!("no space before the value: {line}"))?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v
            .parse()
            .map_err(|_| format!("bad value {v:?} in {line}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses an OpenMetrics text exposition strictly: every family has HELP
/// and TYPE before its samples, each sample belongs to the family declared
/// last with a suffix its type allows, histograms have cumulative buckets
/// ending at `+Inf` equal to `_count`, every name is `qiwu_…`, and the text
/// ends with `# EOF`.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    let mut family: Option<(String, String)> = None;
    let mut helped = std::collections::HashSet::new();
    let mut typed = std::collections::HashSet::new();
    let mut lines = text.split('\n').peekable();
    let mut eof = false;
    while let Some(line) = lines.next() {
        if eof {
            if line.is_empty() && lines.peek().is_none() {
                break;
            }
            return Err(format!("text after # EOF: {line:?}"));
        }
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let keyword = parts.next().unwrap_or("");
            let name = parts.next().ok_or(format!("bad comment {line:?}"))?;
            let value = parts.next().unwrap_or("");
            if !name.starts_with("qiwu_") || !valid_name(name) {
                return Err(format!("bad family name {name:?}"));
            }
            match keyword {
                "HELP" => {
                    if value.trim().is_empty() {
                        return Err(format!("empty HELP for {name}"));
                    }
                    if !helped.insert(name.to_string()) {
                        return Err(format!("HELP twice for {name}"));
                    }
                }
                "TYPE" => {
                    if !matches!(
                        value,
                        "counter"
                            | "gauge"
                            | "histogram"
                            | "info"
                            | "stateset"
                            | "unknown"
                            | "summary"
                            | "gaugehistogram"
                    ) {
                        return Err(format!("bad type {value:?} for {name}"));
                    }
                    if !typed.insert(name.to_string()) {
                        return Err(format!("TYPE twice for {name}"));
                    }
                    family = Some((name.to_string(), value.to_string()));
                }
                "UNIT" => {
                    if !name.ends_with(&format!("_{value}")) {
                        return Err(format!("unit {value} not the suffix of {name}"));
                    }
                }
                other => return Err(format!("unknown comment {other:?}")),
            }
            continue;
        }
        if line.is_empty() {
            return Err("empty line".into());
        }
        let sample = parse_sample(line)?;
        let (name, kind) = family
            .as_ref()
            .ok_or(format!("sample before any TYPE: {line}"))?;
        if !helped.contains(name) {
            return Err(format!("no HELP for {name}"));
        }
        let suffix = sample
            .name
            .strip_prefix(name.as_str())
            .ok_or(format!("{} outside its family {name}", sample.name))?;
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "gauge" => &[""],
            "histogram" => &["_bucket", "_count", "_sum", "_created"],
            _ => &[""],
        };
        if !allowed.contains(&suffix) {
            return Err(format!("{} is not a sample of {kind} {name}", sample.name));
        }
        samples.push(sample);
    }
    if !eof {
        return Err("no # EOF".into());
    }
    check_histograms(&samples)?;
    Ok(samples)
}

/// A series: its name and its labels other than `le`.
type SeriesKey = (String, Vec<(String, String)>);

fn check_histograms(samples: &[Sample]) -> Result<(), String> {
    let mut series: BTreeMap<SeriesKey, Vec<(f64, f64)>> = BTreeMap::new();
    let mut counts = BTreeMap::new();
    for s in samples {
        let mut labels: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.sort();
        if let Some(base) = s.name.strip_suffix("_bucket") {
            let le = s.labels.get("le").ok_or("bucket without le")?;
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().map_err(|_| format!("bad le {le}"))?
            };
            series
                .entry((base.to_string(), labels))
                .or_default()
                .push((le, s.value));
        } else if let Some(base) = s.name.strip_suffix("_count") {
            counts.insert((base.to_string(), labels), s.value);
        }
    }
    for (key, buckets) in &series {
        let mut previous = (f64::NEG_INFINITY, 0.0);
        for &(le, n) in buckets {
            if le <= previous.0 || n < previous.1 {
                return Err(format!("{key:?}: buckets not increasing"));
            }
            previous = (le, n);
        }
        if previous.0 != f64::INFINITY {
            return Err(format!("{key:?}: no +Inf bucket"));
        }
        if counts.get(key) != Some(&previous.1) {
            return Err(format!("{key:?}: +Inf bucket differs from _count"));
        }
    }
    Ok(())
}

/// The value of the sample `name` with exactly these labels (others may
/// be present only when `labels` lists them).
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// A PostgreSQL database of the test's own, dropped at the end.
pub struct Database {
    pub url: String,
    pub name: String,
}

impl Database {
    pub fn fresh() -> Database {
        let (url, name) = crate::common::fresh_database(crate::common::Db::Postgres);
        Database { url, name }
    }

    /// Runs SQL on the server's `postgres` database (as the tests' user).
    pub fn admin(&self, sql: &str) {
        let base = self.url.rsplit_once('/').map_or("", |(b, _)| b).to_string();
        let status = Command::new("psql")
            .args([&format!("{base}/postgres"), "-qc", sql])
            .stdout(Stdio::null())
            .status()
            .expect("psql");
        assert!(status.success(), "psql: {sql}");
    }

    /// `qiwu-scheduler migrate` against it.
    pub fn migrate(&self) {
        let out = Command::new(BIN)
            .arg("migrate")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QIWU_DATABASE_URL", &self.url)
            .output()
            .expect("migrate");
        assert!(out.status.success(), "migrate: {out:?}");
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        crate::common::drop_database(crate::common::Db::Postgres, &self.name);
    }
}

/// The environment of a cluster process (`api` or `worker`).
pub fn cluster_env(db: &Database, redis: &Redis, instance: &str) -> Vec<(&'static str, String)> {
    crate::common::cluster::cluster_env(&db.url, &redis.url(), instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_is_strict() {
        let good = "# HELP qiwu_x X.\n# TYPE qiwu_x counter\nqiwu_x_total{a=\"1\\\"\"} 2\n# EOF\n";
        let samples = parse_exposition(good).expect("good");
        assert_eq!(value(&samples, "qiwu_x_total", &[("a", "1\"")]), Some(2.0));
        for bad in [
            "# TYPE qiwu_x counter\nqiwu_x_total 1\n# EOF\n",
            "# HELP qiwu_x X.\n# TYPE qiwu_x counter\nqiwu_x 1\n# EOF\n",
            "# HELP qiwu_x X.\n# TYPE qiwu_x counter\nqiwu_x_total 1\n",
            "# HELP qiwu_x X.\n# TYPE qiwu_x gauge\nqiwu_x{a=1} 1\n# EOF\n",
            "# HELP other X.\n# TYPE other gauge\nother 1\n# EOF\n",
            "# HELP qiwu_h H.\n# TYPE qiwu_h histogram\nqiwu_h_bucket{le=\"1\"} 2\nqiwu_h_bucket{le=\"+Inf\"} 1\nqiwu_h_count 1\nqiwu_h_sum 1\n# EOF\n",
        ] {
            assert!(parse_exposition(bad).is_err(), "accepted {bad:?}");
        }
    }
}

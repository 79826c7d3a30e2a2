//! `qiwu-scheduler healthcheck`: asks the instance on `QIWU_LISTEN` of this
//! container for `/healthz` (or `/readyz`) and exits 0 on a 200. Container
//! images have no curl, so the binary probes itself (Docker `HEALTHCHECK`,
//! Compose `healthcheck`).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, bail};

/// How long the whole probe may take, at most, per step.
const TIMEOUT: Duration = Duration::from_secs(3);
/// The most of an answer read: the status line is all that matters.
const MAX_ANSWER: u64 = 16 * 1024;

/// Where to connect for a listen address: an unspecified address (all
/// interfaces) is reached on loopback.
fn target(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// GETs `path` from the instance listening on `listen`; Ok on HTTP 200.
pub fn check(listen: SocketAddr, path: &str) -> anyhow::Result<()> {
    let addr = target(listen);
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .with_context(|| format!("nothing answers on QIWU_LISTEN={listen} (tried {addr})"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: qiwu-scheduler-healthcheck\r\nConnection: close\r\n\r\n"
    )
    .with_context(|| format!("cannot send the probe to {addr}"))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .with_context(|| format!("no answer from {addr}{path}"))?;
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or("");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
    match status_line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        Some(status) => bail!("{addr}{path} answered HTTP {status}: {body}"),
        None => bail!("{addr}{path} did not answer HTTP"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_interfaces_are_probed_on_loopback() {
        let cases = [
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("[::]:9000", "[::1]:9000"),
            ("10.1.2.3:80", "10.1.2.3:80"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
        ];
        for (listen, expected) in cases {
            let listen: SocketAddr = listen.parse().expect("addr");
            assert_eq!(target(listen).to_string(), expected);
        }
    }
}

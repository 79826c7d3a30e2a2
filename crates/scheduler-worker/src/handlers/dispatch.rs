//! `notify.dispatch`: delivers queued notifications to the webhook URL of
//! the `notify.webhook_url` setting, signed, alerts to their alert
//! channels (a signed webhook, or a DingTalk, WeCom or Feishu robot as
//! `robots` describes), and run-once callbacks to the URL their request
//! named, signed like the webhook, at most 3 attempts each.
//!
//! Each POST carries `X-Qiwu-Timestamp` (Unix seconds) and
//! `X-Qiwu-Signature: sha256=<hex HMAC-SHA256 of "{timestamp}.{body}">`,
//! keyed by `QIWU_WEBHOOK_SECRET` (then one more signature per secret of
//! `QIWU_WEBHOOK_PREVIOUS_SECRETS`, see `signing`). Rows are claimed with a lease, so a crash
//! mid-send loses nothing: the lease expires and a later run sends the row
//! again (at least once; receivers de-duplicate by `notificationId`). A 2xx
//! answer is a delivery; anything else, or no answer, a failed attempt.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use qiwu_domain::settings::{self, WEBHOOK_URL};
use std::collections::HashMap;

use qiwu_domain::alert::ChannelKind;
use qiwu_storage::{ChannelRecord, OutboxRecord, OutboxStatus, StorageError, Store};
use serde_json::{Map, Value};

use super::robots;
use super::signing::SigningSecrets;
pub use super::signing::signature;
use super::{Handler, HandlerFuture};
use crate::clock::{Clock, SystemClock};
use crate::context::RunContext;

/// Rows claimed at a time. With [`REQUEST_TIMEOUT`] this bounds one batch
/// to well under [`LEASE`], so a healthy sender never loses its lease.
const BATCH: u64 = 10;
/// How long a claimed row is ours before another run may take it.
const LEASE: Duration = Duration::minutes(3);
/// Longest wait for one webhook answer.
const REQUEST_TIMEOUT: StdDuration = StdDuration::from_secs(10);
const TIMESTAMP_HEADER: &str = "X-Qiwu-Timestamp";
const SIGNATURE_HEADER: &str = "X-Qiwu-Signature";

/// The `notify.dispatch` handler.
pub struct Dispatch {
    store: Store,
    /// `QIWU_WEBHOOK_SECRET` (and `QIWU_WEBHOOK_PREVIOUS_SECRETS`), read
    /// once at start-up.
    secret: Option<SigningSecrets>,
    /// Built once; an error is reported by every run rather than at start-up.
    client: Result<reqwest::Client, String>,
    clock: Arc<dyn Clock>,
}

impl Dispatch {
    pub fn new(store: Store, secret: Option<SigningSecrets>) -> Dispatch {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("qiwu-scheduler/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"));
        Dispatch {
            store,
            secret,
            client,
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads "now" from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Dispatch {
        self.clock = clock;
        self
    }
}

/// What one run did.
#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    failed: u64,
}

impl Handler for Dispatch {
    fn run(&self, _params: Map<String, Value>, ctx: RunContext) -> HandlerFuture {
        let store = self.store.clone();
        let secret = self.secret.clone();
        let client = self.client.clone();
        let clock = self.clock.clone();
        Box::pin(async move { dispatch(&store, secret, client, clock, ctx).await })
    }
}

fn storage(e: StorageError) -> String {
    format!("storage failed: {e:?}")
}

async fn dispatch(
    store: &Store,
    secret: Option<SigningSecrets>,
    client: Result<reqwest::Client, String>,
    clock: Arc<dyn Clock>,
    mut ctx: RunContext,
) -> Result<String, String> {
    let outbox = store.outbox();
    let raw = store.settings().get(WEBHOOK_URL).await.map_err(storage)?;
    let url = settings::webhook_url(raw.as_ref().map(|s| s.value.as_str()));
    // Rows for `notify.webhook_url` wait until a URL and a secret are set
    // (deliveries are signed, SPEC §8; audit.purge removes them in time);
    // alert channels are delivered meanwhile.
    let webhook = url.clone().zip(secret.clone());
    let client = client?;
    let mut channels = ChannelCache::default();

    let mut tally = Tally::default();
    let mut stopped = None;
    'claims: while stopped.is_none() {
        // Run-once callbacks go to their own URL, signed like the webhook.
        let claimed = outbox
            .claim_due_where(
                clock.now(),
                LEASE,
                BATCH,
                webhook.is_some(),
                secret.is_some(),
            )
            .await
            .map_err(storage)?;
        if claimed.is_empty() {
            break;
        }
        let mut rows = claimed.into_iter();
        while let Some(row) = rows.next() {
            let target = match (row.channel_id, &row.url, &secret) {
                (_, Some(callback), Some(secret)) => {
                    Target::Webhook(callback.clone(), secret.clone())
                }
                // Claimed without a secret to sign with: it waits again.
                (_, Some(_), None) => {
                    outbox.release(&row, clock.now()).await.map_err(storage)?;
                    continue;
                }
                (None, None, _) => match &webhook {
                    Some((url, secret)) => Target::Webhook(url.clone(), secret.clone()),
                    // Claimed before the setting was cleared: it waits again.
                    None => {
                        outbox.release(&row, clock.now()).await.map_err(storage)?;
                        continue;
                    }
                },
                (Some(id), None, _) => match channels.get(store, id).await.map_err(storage)? {
                    Some(channel) => Target::Channel(channel, secret.clone()),
                    None => {
                        outbox
                            .give_up(&row, "the alert channel was deleted")
                            .await
                            .map_err(storage)?;
                        tally.failed += 1;
                        ctx.log.line(format!(
                            "notification {}: its alert channel {id} was deleted; gave up",
                            row.notification_id
                        ));
                        continue;
                    }
                },
            };
            let outcome = tokio::select! {
                outcome = send(&client, &target, clock.as_ref(), &row.payload) => outcome,
                reason = ctx.stop.stopped() => {
                    stopped = Some(reason);
                    // Give back what was not sent; the cut-off attempt does not count.
                    for row in std::iter::once(row).chain(rows) {
                        outbox.release(&row, clock.now()).await.map_err(storage)?;
                    }
                    break 'claims;
                }
            };
            record(store, &ctx, &row, outcome, clock.as_ref(), &mut tally).await?;
        }
    }
    let pending = outbox.count_unfinished().await.map_err(storage)?;
    let line = format!(
        "sent {}, failed {}, pending {pending}",
        tally.sent, tally.failed
    );
    match (stopped, url, secret) {
        (Some(reason), _, _) => Err(format!("stopped ({reason:?}): {line}")),
        (None, None, _) => Ok(format!("no webhook configured ({WEBHOOK_URL}): {line}")),
        (None, Some(_), None) if pending > 0 => Err(format!(
            "QIWU_WEBHOOK_SECRET is not set, so deliveries cannot be signed: {line}"
        )),
        (None, _, _) => Ok(line),
    }
}

/// Where one outbox row goes.
enum Target {
    /// `notify.webhook_url`, signed with `QIWU_WEBHOOK_SECRET`.
    Webhook(String, SigningSecrets),
    /// An alert channel, with `QIWU_WEBHOOK_SECRET` for a webhook channel
    /// that has no secret of its own.
    Channel(Arc<ChannelRecord>, Option<SigningSecrets>),
}

/// The channels read by one run, each once.
#[derive(Default)]
struct ChannelCache(HashMap<i64, Option<Arc<ChannelRecord>>>);

impl ChannelCache {
    async fn get(
        &mut self,
        store: &Store,
        id: i64,
    ) -> Result<Option<Arc<ChannelRecord>>, StorageError> {
        if let Some(found) = self.0.get(&id) {
            return Ok(found.clone());
        }
        let found = store.alert_channels().get(id).await?.map(Arc::new);
        self.0.insert(id, found.clone());
        Ok(found)
    }
}

/// One delivery attempt to its target.
async fn send(
    client: &reqwest::Client,
    target: &Target,
    clock: &dyn Clock,
    payload: &str,
) -> Result<(), String> {
    let (channel, fallback) = match target {
        Target::Webhook(url, secret) => return deliver(client, url, secret, clock, payload).await,
        Target::Channel(channel, fallback) => (channel, fallback),
    };
    let Some(url) = channel.url.as_deref() else {
        return Err("the alert channel has no URL".to_owned());
    };
    let secret = channel.secret.as_deref();
    let now = clock.now();
    let (url, body) = match channel.kind {
        ChannelKind::Webhook => {
            let signing = match (secret, fallback) {
                (Some(own), _) => SigningSecrets::from(own),
                (None, Some(shared)) => shared.clone(),
                (None, None) => {
                    return Err(
                        "the webhook channel has no secret and QIWU_WEBHOOK_SECRET is not set"
                            .to_owned(),
                    );
                }
            };
            return deliver(client, url, &signing, clock, payload).await;
        }
        ChannelKind::Dingtalk => (
            robots::dingtalk_url(url, secret, now.timestamp_millis()),
            payload.to_owned(),
        ),
        ChannelKind::Wecom => (url.to_owned(), payload.to_owned()),
        ChannelKind::Feishu => (
            url.to_owned(),
            robots::feishu_signed(payload, secret, now.timestamp()),
        ),
        ChannelKind::Inbox => return Err("an inbox channel has nothing to send".to_owned()),
    };
    let response = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(describe)?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let answer = response.text().await.map_err(describe)?;
    robots::accepted(&answer)
}

/// Writes the outcome of one attempt and logs failures.
async fn record(
    store: &Store,
    ctx: &RunContext,
    row: &OutboxRecord,
    outcome: Result<(), String>,
    clock: &dyn Clock,
    tally: &mut Tally,
) -> Result<(), String> {
    let outbox = store.outbox();
    let attempt = row.attempts + 1;
    match outcome {
        Ok(()) => {
            if outbox.mark_sent(row, clock.now()).await.map_err(storage)? {
                tally.sent += 1;
            } else {
                ctx.log.line(format!(
                    "notification {}: delivered, but the lease had expired meanwhile",
                    row.notification_id
                ));
            }
        }
        Err(error) => {
            tally.failed += 1;
            let status = outbox
                .mark_failed(row, &error, clock.now())
                .await
                .map_err(storage)?;
            let next = match status {
                Some(OutboxStatus::Failed) => "gave up".to_owned(),
                Some(_) => "will retry".to_owned(),
                None => "lease had expired".to_owned(),
            };
            ctx.log.line(format!(
                "notification {}: attempt {attempt} failed: {error}; {next}",
                row.notification_id
            ));
        }
    }
    Ok(())
}

/// One signed POST; `Ok` on a 2xx answer.
async fn deliver(
    client: &reqwest::Client,
    url: &str,
    secret: &SigningSecrets,
    clock: &dyn Clock,
    payload: &str,
) -> Result<(), String> {
    let timestamp = clock.now().timestamp().to_string();
    let signature = secret.header_value(&timestamp, payload);
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(TIMESTAMP_HEADER, &timestamp)
        .header(SIGNATURE_HEADER, signature);
    // While tracing, the delivery names the dispatch attempt's span.
    if let Some(parent) = qiwu_telemetry::trace::traceparent(&tracing::Span::current()) {
        request = request.header("traceparent", parent);
    }
    let response = request
        .body(payload.to_owned())
        .send()
        .await
        .map_err(describe)?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {status}"))
    }
}

/// The error and its causes, without the URL (it may carry a token).
pub(super) fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use chrono::{DateTime, TimeZone, Utc};
    use qiwu_storage::NewNotification;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::alerts::webhook_payload;
    use crate::context::StopReason;
    use crate::test_support::{ManualClock, TestStore, run_context, test_store};

    const SECRET: &str = "webhook-secret";

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap()
    }

    /// One request as the receiver saw it.
    #[derive(Debug, Clone)]
    struct Received {
        timestamp: String,
        signature: String,
        body: String,
    }

    /// A tiny HTTP/1.1 receiver on 127.0.0.1:0 answering with scripted
    /// statuses (then 200), or never answering at all.
    struct Receiver {
        url: String,
        seen: Arc<Mutex<Vec<Received>>>,
    }

    impl Receiver {
        async fn start(script: Vec<u16>, hang: bool) -> Receiver {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/hook", listener.local_addr().unwrap());
            let seen = Arc::new(Mutex::new(Vec::new()));
            let script = Arc::new(Mutex::new(VecDeque::from(script)));
            let record = seen.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((mut socket, _)) = listener.accept().await else {
                        return;
                    };
                    let record = record.clone();
                    let script = script.clone();
                    tokio::spawn(async move {
                        let Some(req) = read_request(&mut socket).await else {
                            return;
                        };
                        record.lock().unwrap().push(req);
                        if hang {
                            tokio::time::sleep(StdDuration::from_secs(3600)).await;
                        }
                        let status = script.lock().unwrap().pop_front().unwrap_or(200);
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                        let _ = socket.write_all(answer.as_bytes()).await;
                    });
                }
            });
            Receiver { url, seen }
        }

        fn seen(&self) -> Vec<Received> {
            self.seen.lock().unwrap().clone()
        }
    }

    async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let header = |name: &str| {
            head.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let len: usize = header("content-length").parse().unwrap_or(0);
        while buf.len() < head_end + len {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Some(Received {
            timestamp: header("x-qiwu-timestamp"),
            signature: header("x-qiwu-signature"),
            body: String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string(),
        })
    }

    async fn setup(url: &str) -> (TestStore, i64) {
        let store = test_store().await;
        store
            .settings()
            .set("notify.webhook_url", url, "admin", t0())
            .await
            .unwrap();
        let (n, _) = store
            .notifications()
            .create_with_delivery(
                &NewNotification {
                    recipient: "super_admins".into(),
                    template_code: "scheduler.timeout_alert".into(),
                    title: "任务超时：报表".into(),
                    body: "正文".into(),
                },
                |n| webhook_payload(n, chrono_tz::UTC),
                t0(),
            )
            .await
            .unwrap();
        (store, n.id)
    }

    fn handler(store: &TestStore, clock: &Arc<ManualClock>) -> Dispatch {
        Dispatch::new(store.store.clone(), Some(SECRET.into())).with_clock(clock.clone())
    }

    async fn outbox_row(store: &Store) -> OutboxRecord {
        use sea_orm::EntityTrait;
        let row = qiwu_storage::entity::outbox::Entity::find()
            .one(store.connection())
            .await
            .unwrap()
            .unwrap();
        store.outbox().get(row.id).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn a_callback_goes_to_its_own_url_signed_and_waits_for_a_secret() {
        let receiver = Receiver::start(vec![], false).await;
        // No notify.webhook_url: callbacks do not need it.
        let store = test_store().await;
        let body = r#"{"fireId":7,"status":"success"}"#;
        store
            .notifications()
            .create_with_callback(
                &NewNotification {
                    recipient: "run_callback".into(),
                    template_code: "scheduler.run_callback".into(),
                    title: "t".into(),
                    body: body.into(),
                },
                &receiver.url,
                body,
                t0(),
            )
            .await
            .unwrap();
        let clock = Arc::new(ManualClock::at(t0()));
        // Without a secret it cannot be signed: it waits, untouched.
        let unsigned = Dispatch::new(store.store.clone(), None).with_clock(clock.clone());
        let out = unsigned.run(Map::new(), run_context().1).await.unwrap();
        assert!(out.ends_with("sent 0, failed 0, pending 1"), "{out}");
        assert!(receiver.seen().is_empty());
        assert_eq!(outbox_row(&store).await.status, OutboxStatus::Pending);
        // With one, it is POSTed to its URL with the webhook's signature.
        let out = handler(&store, &clock)
            .run(Map::new(), run_context().1)
            .await
            .unwrap();
        assert!(out.ends_with("sent 1, failed 0, pending 0"), "{out}");
        let seen = receiver.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].body, body);
        assert_eq!(
            seen[0].signature,
            format!(
                "sha256={}",
                hmac_reference(SECRET, &format!("{}.{body}", seen[0].timestamp))
            )
        );
        assert_eq!(outbox_row(&store).await.status, OutboxStatus::Sent);
    }

    #[test]
    fn signature_is_hmac_sha256_of_timestamp_dot_body() {
        let sig = signature("key", "1700000000", "{\"a\":1}");
        assert!(sig.starts_with("sha256="));
        assert_eq!(sig.len(), 7 + 64);
        assert_eq!(sig, signature("key", "1700000000", "{\"a\":1}"));
        assert_ne!(sig, signature("key2", "1700000000", "{\"a\":1}"));
        assert_ne!(sig, signature("key", "1700000001", "{\"a\":1}"));
        // The reference implementation against the well-known vector…
        assert_eq!(
            hmac_reference("key", "The quick brown fox jumps over the lazy dog"),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
        // …and the signature against the reference, over "{timestamp}.{body}".
        assert_eq!(
            signature("key", "1700000000", "{\"a\":1}"),
            format!("sha256={}", hmac_reference("key", "1700000000.{\"a\":1}"))
        );
    }

    /// An HMAC written out from its definition, to check the library use.
    fn hmac_reference(key: &str, message: &str) -> String {
        use sha2::{Digest, Sha256};
        let mut k = [0u8; 64];
        k[..key.len()].copy_from_slice(key.as_bytes());
        let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
        let inner = Sha256::new()
            .chain_update(&ipad)
            .chain_update(message.as_bytes())
            .finalize();
        let outer = Sha256::new()
            .chain_update(&opad)
            .chain_update(inner)
            .finalize();
        outer.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[tokio::test]
    async fn signed_delivery_retried_until_the_third_attempt_succeeds() {
        let receiver = Receiver::start(vec![500, 500], false).await;
        let (store, id) = setup(&receiver.url).await;
        let clock = Arc::new(ManualClock::at(t0()));
        let dispatch = handler(&store, &clock);

        let out = dispatch.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(out, "sent 0, failed 1, pending 1");
        // Not due again until the back-off has passed.
        clock.advance(Duration::seconds(30));
        let out = dispatch.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(out, "sent 0, failed 0, pending 1");
        clock.advance(Duration::seconds(30));
        let (_s, ctx) = run_context();
        let log = ctx.log.clone();
        let out = dispatch.run(Map::new(), ctx).await.unwrap();
        assert_eq!(out, "sent 0, failed 1, pending 1");
        assert!(
            log.contents().contains("attempt 2 failed: HTTP 500"),
            "{}",
            log.contents()
        );
        clock.advance(Duration::minutes(5));
        let out = dispatch.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(out, "sent 1, failed 0, pending 0");

        let row = outbox_row(&store).await;
        assert_eq!(row.status, OutboxStatus::Sent);
        assert_eq!(row.attempts, 3);
        let seen = receiver.seen();
        assert_eq!(seen.len(), 3);
        for req in &seen {
            assert_eq!(req.signature, signature(SECRET, &req.timestamp, &req.body));
            assert_eq!(
                req.signature,
                format!(
                    "sha256={}",
                    hmac_reference(SECRET, &format!("{}.{}", req.timestamp, req.body))
                )
            );
            let body: Value = serde_json::from_str(&req.body).unwrap();
            assert_eq!(body["notificationId"], id);
            assert_eq!(body["title"], "任务超时：报表");
            assert_eq!(body["body"], "正文");
            assert_eq!(body["template"], "scheduler.timeout_alert");
            assert_eq!(body["createdAt"], "2026-06-01T12:00:00+00:00");
        }
        assert_eq!(seen[0].timestamp, t0().timestamp().to_string());
    }

    #[tokio::test]
    async fn a_receiver_that_always_fails_gets_three_attempts_then_failed() {
        let receiver = Receiver::start(vec![503; 10], false).await;
        let (store, _) = setup(&receiver.url).await;
        let clock = Arc::new(ManualClock::at(t0()));
        let dispatch = handler(&store, &clock);
        for _ in 0..5 {
            dispatch.run(Map::new(), run_context().1).await.unwrap();
            clock.advance(Duration::minutes(10));
        }
        let row = outbox_row(&store).await;
        assert_eq!(row.status, OutboxStatus::Failed);
        assert_eq!(row.attempts, 3);
        assert_eq!(
            row.last_error.as_deref(),
            Some("HTTP 503 Service Unavailable")
        );
        assert_eq!(receiver.seen().len(), 3, "at most 3 attempts");
    }

    #[tokio::test]
    async fn an_unreachable_receiver_is_a_failed_attempt() {
        // Bind then drop: nothing listens on that port any more.
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let (store, _) = setup(&format!("http://{addr}/hook")).await;
        let clock = Arc::new(ManualClock::at(t0()));
        let (_s, ctx) = run_context();
        let log = ctx.log.clone();
        let out = handler(&store, &clock).run(Map::new(), ctx).await.unwrap();
        assert_eq!(out, "sent 0, failed 1, pending 1");
        assert!(
            log.contents().contains("attempt 1 failed"),
            "{}",
            log.contents()
        );
        assert!(
            !log.contents().contains(&addr.to_string()),
            "no URL in the log"
        );
    }

    #[tokio::test]
    async fn a_crash_mid_send_loses_nothing() {
        let receiver = Receiver::start(vec![], false).await;
        let (store, _) = setup(&receiver.url).await;
        // A previous run claimed the row and died before finishing.
        let crashed = store.outbox().claim_due(t0(), LEASE, 10).await.unwrap();
        assert_eq!(crashed.len(), 1);
        let clock = Arc::new(ManualClock::at(t0() + Duration::minutes(1)));
        let dispatch = handler(&store, &clock);
        // Still leased: not sent twice at once.
        let out = dispatch.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(out, "sent 0, failed 0, pending 1");
        assert!(receiver.seen().is_empty());
        // Past the lease, the next run delivers it.
        clock.advance(LEASE);
        let out = dispatch.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(out, "sent 1, failed 0, pending 0");
        assert_eq!(receiver.seen().len(), 1);
        assert_eq!(outbox_row(&store).await.attempts, 1);
    }

    #[tokio::test]
    async fn stops_promptly_and_gives_the_row_back() {
        let receiver = Receiver::start(vec![], true).await;
        let (store, _) = setup(&receiver.url).await;
        let clock = Arc::new(ManualClock::at(t0()));
        let (stopper, ctx) = run_context();
        let run = tokio::spawn(handler(&store, &clock).run(Map::new(), ctx));
        // Wait until the request is in flight, then stop.
        for _ in 0..200 {
            if !receiver.seen().is_empty() {
                break;
            }
            tokio::time::sleep(StdDuration::from_millis(10)).await;
        }
        let started = std::time::Instant::now();
        stopper.stop(StopReason::Shutdown);
        let err = run.await.unwrap().unwrap_err();
        assert!(started.elapsed() < StdDuration::from_secs(2));
        assert_eq!(err, "stopped (Shutdown): sent 0, failed 0, pending 1");
        let row = outbox_row(&store).await;
        assert_eq!(row.status, OutboxStatus::Pending);
        assert_eq!(row.attempts, 0, "a cut-off attempt does not count");
    }

    #[tokio::test]
    async fn nothing_is_sent_without_url_or_secret() {
        let receiver = Receiver::start(vec![], false).await;
        let (store, _) = setup(&receiver.url).await;
        let clock = Arc::new(ManualClock::at(t0()));
        let unsigned = Dispatch::new(store.store.clone(), None).with_clock(clock.clone());
        let err = unsigned.run(Map::new(), run_context().1).await.unwrap_err();
        assert!(err.contains("QIWU_WEBHOOK_SECRET"), "{err}");
        assert!(err.ends_with("pending 1"), "{err}");

        store
            .settings()
            .set("notify.webhook_url", "", "admin", t0())
            .await
            .unwrap();
        let out = handler(&store, &clock)
            .run(Map::new(), run_context().1)
            .await
            .unwrap();
        assert_eq!(
            out,
            "no webhook configured (notify.webhook_url): sent 0, failed 0, pending 1"
        );
        assert!(receiver.seen().is_empty());
        assert_eq!(outbox_row(&store).await.status, OutboxStatus::Pending);
    }

    #[tokio::test]
    async fn a_robot_that_refuses_fails_the_attempt_and_a_deleted_channel_gives_up() {
        use qiwu_domain::alert::{ChannelKind, ChannelSpec};
        // Answers 200 with an empty body: not a robot's `errcode` 0.
        let receiver = Receiver::start(vec![], false).await;
        let store = test_store().await;
        let channel = store
            .alert_channels()
            .create(
                &ChannelSpec {
                    name: "群".into(),
                    kind: ChannelKind::Wecom,
                    enabled: true,
                    is_default: false,
                    url: Some(format!("{}?key=k", receiver.url)),
                    secret: None,
                },
                "a",
                t0(),
            )
            .await
            .unwrap();
        store
            .notifications()
            .create_with_deliveries(
                &NewNotification {
                    recipient: "alert_archive".into(),
                    template_code: "scheduler.failure_alert".into(),
                    title: "任务失败：报表".into(),
                    body: "正文".into(),
                },
                &[Some(channel.id)],
                |_, _| super::robots::wecom_body("任务失败：报表", "正文"),
                t0(),
            )
            .await
            .unwrap();
        let clock = Arc::new(ManualClock::at(t0()));
        let dispatch = handler(&store, &clock);
        let (_s, ctx) = run_context();
        let log = ctx.log.clone();
        let out = dispatch.run(Map::new(), ctx).await.unwrap();
        // No webhook URL is set: the channel is delivered all the same.
        assert_eq!(
            out,
            "no webhook configured (notify.webhook_url): sent 0, failed 1, pending 1"
        );
        assert!(log.contents().contains("not JSON"), "{}", log.contents());
        let seen = receiver.seen();
        assert_eq!(seen.len(), 1);
        let body: Value = serde_json::from_str(&seen[0].body).unwrap();
        assert_eq!(body["msgtype"], "markdown");
        assert_eq!(body["markdown"]["content"], "**任务失败：报表**\n正文");

        store.alert_channels().delete(channel.id).await.unwrap();
        clock.advance(Duration::minutes(2));
        let out = dispatch.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(
            out,
            "no webhook configured (notify.webhook_url): sent 0, failed 1, pending 0"
        );
        let row = outbox_row(&store).await;
        assert_eq!(row.status, OutboxStatus::Failed);
        assert_eq!(
            row.last_error.as_deref(),
            Some("the alert channel was deleted")
        );
        assert_eq!(receiver.seen().len(), 1);
    }
}

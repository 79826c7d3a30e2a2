//! "Run once": queue a fire of a job now, with its saved params; with an
//! `Idempotency-Key`, a retried request gets the fire the first one
//! started; with a `callbackUrl`, the fire's end is POSTed there.

use actix_web::{HttpRequest, HttpResponse, post, web};
use chrono::{Duration, Utc};
use qiwu_domain::run_once::{KEY_TTL_HOURS, check_callback_url, check_key};
use qiwu_storage::{IdempotencyKey, KeyedFire, ManualQueued, ManualRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::{Need, perm};
use crate::body::Fields;
use crate::error::{ApiError, ErrorKind, MAX_BODY_BYTES, Noun, Problem, ProblemFieldText, Text};

/// What a refused run-once tells the caller to wait: about the time an
/// instance takes to start queued fires (their poll runs every 5 s).
const RETRY_AFTER_SECS: u64 = 5;
/// The header naming a request, so that its retries start one fire.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
use crate::query::Id;
use crate::state::AppState;

/// The optional body of a run-once request. Params always come from the
/// saved job: the manual forbids overriding them at run time.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunOnceRequest {
    /// Where the fire's end is POSTed (after its retries), signed like
    /// the `notify.webhook_url` deliveries: an `http` or `https` URL with a
    /// host, at most 2048 characters.
    #[schema(
        max_length = 2048,
        pattern = "^https?://[^\\s]+$",
        example = "https://orders.example.com/qiwu/done"
    )]
    pub callback_url: Option<String>,
}

/// What a run-once fire reports to its `callbackUrl` when it ends: the
/// body of the signed POST (`X-Qiwu-Timestamp`, `X-Qiwu-Signature`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunCallbackBody {
    pub fire_id: i64,
    pub job_id: i64,
    /// The last attempt's status: `success`, `failed`, `timeout`,
    /// `cancelled` or `skipped`.
    pub status: String,
    /// Attempts made (1 plus the retries).
    pub attempts: u32,
    /// When the first attempt started.
    pub started_at: Option<chrono::DateTime<Utc>>,
    /// When the last attempt ended.
    pub finished_at: chrono::DateTime<Utc>,
    /// The last attempt's error; null when it has none.
    pub error: Option<String>,
}

/// The queued fire.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOnceAccepted {
    pub fire_id: i64,
    pub message: String,
}

/// Runs a job once, now, with its saved params (no override), obeying its
/// timeout, retry and concurrency rules; disabled jobs can be run too. The
/// result appears in the run log, and the run detail names who started it
/// (`startedBy`). While tracing is on, the fire's trace is a child of this
/// request's, which continues the caller's W3C `traceparent` header when
/// one is sent.
///
/// With an `Idempotency-Key` header, a request repeating a key the same
/// caller (the user's `sub`, or the API key) used within 24 hours starts
/// nothing: it answers 200 with the fire the first request started (a
/// `callbackUrl` it sends is checked but not used: the first one stands).
/// The same key for another job is 422; concurrent requests with one key
/// start one fire. A request refused before its fire is queued does not
/// take the key.
///
/// With a body `{"callbackUrl": …}`, when the fire ends (after its
/// retries; also when it is skipped, cancelled or times out) a signed POST
/// of `RunCallbackBody` (see the schemas) goes to that URL through the notification outbox
/// (`notify.dispatch`, at most 3 attempts).
#[utoipa::path(
    tag = "jobs",
    summary = "Run a job once",
    security(("bearer" = [])),
    params(
        ("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
            description = "Makes retries of this request start one fire: 1–255 visible ASCII characters, remembered per caller for 24 hours"),
    ),
    request_body(content = Option<RunOnceRequest>, content_type = "application/json",
        description = "Optional: where to report the fire's end. `params` cannot be sent: they come from the saved job"),
    responses(
        (status = 202, description = "Queued: the fire runs with the saved params; see the run log for the result", body = RunOnceAccepted),
        (status = 200, description = "The `Idempotency-Key` already started this fire (within 24 hours): nothing new was started", body = RunOnceAccepted),
        (status = 400, description = "A bad `Idempotency-Key` or `callbackUrl`, or a body with other fields (such as `params`)",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The `Idempotency-Key` already started a fire of another job",
            body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The job already has `QIWU_MAX_PENDING_RUN_ONCE` run-once fires waiting; try again after `Retry-After` seconds",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before asking again"))),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A freeze window holds the job now: the problem names it and when it ends", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/{id}/run")]
pub async fn run_once(
    state: web::Data<AppState>,
    who: Need<perm::TaskRun>,
    id: web::Path<Id>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let id = id.into_inner().0;
    let key = idempotency_key(&req)?;
    let body = read_body(&req, payload).await?;
    let now = Utc::now();
    let job = state
        .store
        .jobs()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::JOB, id))?;
    let idem = key.as_deref().map(|key| IdempotencyKey {
        caller: &who.sub,
        key,
        ttl: Duration::hours(KEY_TTL_HOURS),
    });
    // A repeated key answers its fire, whatever the queue holds now.
    if let Some(idem) = &idem
        && let Some(found) = state.store.fires().keyed(idem, now).await?
    {
        return replayed(lang, id, found);
    }
    crate::routes::freezes::refuse_if_frozen(&state, &job, now).await?;
    // Bound the queue: each pending fire becomes a task when an instance
    // takes it. Counting first lets a few concurrent requests pass the
    // bound together, which is harmless; an unbounded queue is not.
    let pending = state.store.fires().pending_count(job.id).await?;
    if pending >= state.max_pending_run_once {
        let limit = state.max_pending_run_once;
        return Err(ApiError::new(ErrorKind::TooManyRequests {
            text: Text::new(
                format!(
                    "任务 {id} 已有 {pending} 次“执行一次”在排队（上限 {limit}）：请等它们开始后再试"
                ),
                format!(
                    "Job {id} already has {pending} run-once fires waiting (at most {limit}): try again once they have started"
                ),
            ),
            retry_after_secs: RETRY_AFTER_SECS,
        }));
    }
    // The fire's trace continues this request's.
    let traceparent = qiwu_telemetry::trace::traceparent(&tracing::Span::current());
    let request = ManualRequest {
        job_id: job.id,
        now,
        traceparent: traceparent.as_deref(),
        started_by: Some(&who.sub),
        callback_url: body.callback_url.as_deref(),
    };
    let fires = state.store.fires();
    let fire_id = match &idem {
        Some(idem) => match fires.create_manual_keyed(&request, idem).await {
            Ok(ManualQueued::Created(fire_id)) => fire_id,
            // A concurrent request with the key won.
            Ok(ManualQueued::Existing(found)) => return replayed(lang, id, found),
            Err(e) => return Err(e.into()),
        },
        None => fires.create_manual_request(&request).await?,
    };
    state.changes.fire_queued(fire_id);
    tracing::info!(job = id, fire = fire_id, actor = %who.sub, "run once queued");
    let mut detail = serde_json::json!({"fireId": fire_id, "jobId": id, "jobName": job.name});
    if let Some(key) = &key {
        detail["idempotencyKey"] = Value::from(key.as_str());
    }
    if let Some(url) = &body.callback_url {
        // Scheme and host only: a callback URL may carry a token.
        detail["callbackTarget"] = Value::from(qiwu_domain::alert::url_target(url));
    }
    crate::audit::record(
        &state,
        &who,
        crate::audit::Action::JobRun,
        crate::audit::Target::Job,
        Some(id.to_string()),
        format!("执行一次任务 {}（触发 {fire_id}）", job.name),
        None,
        Some(detail),
    )
    .await;
    Ok(HttpResponse::Accepted().json(RunOnceAccepted {
        fire_id,
        message: lang
            .pick(
                "已开始执行，结果见执行日志",
                "Started: see the run log for the result",
            )
            .to_string(),
    }))
}

/// The answer to a request whose key already started a fire: that fire
/// (200) when it is of this job, else 422.
fn replayed(
    lang: qiwu_domain::Lang,
    job_id: i64,
    found: KeyedFire,
) -> Result<HttpResponse, ApiError> {
    if found.job_id != job_id {
        let other = found.job_id;
        return Err(ApiError::new(ErrorKind::Unprocessable(Text::new(
            format!(
                "这个 Idempotency-Key 已用于执行任务 {other}：同一个键不能再执行任务 {job_id}，请换一个键"
            ),
            format!(
                "This Idempotency-Key already ran job {other}: it cannot run job {job_id}; use another key"
            ),
        ))));
    }
    Ok(HttpResponse::Ok().json(RunOnceAccepted {
        fire_id: found.fire_id,
        message: lang
            .pick(
                "这个 Idempotency-Key 已经开始过这次执行，没有再开始新的：结果见执行日志",
                "This Idempotency-Key already started this fire; nothing new was started: see the run log for the result",
            )
            .to_string(),
    }))
}

/// The checked `Idempotency-Key` header, if sent.
fn idempotency_key(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let mut values = req.headers().get_all(IDEMPOTENCY_KEY);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let problem = if values.next().is_some() {
        Text::new("Idempotency-Key 只能发送一次", "Send Idempotency-Key once")
    } else {
        match check_key(value.as_bytes()) {
            Ok(key) => return Ok(Some(key.to_owned())),
            Err(p) => Text::new(
                p.message(qiwu_domain::Lang::Zh),
                p.message(qiwu_domain::Lang::En),
            ),
        }
    };
    Err(ApiError::validation(vec![ProblemFieldText::new(
        IDEMPOTENCY_KEY,
        problem,
    )]))
}

/// The optional JSON body: nothing (or only blanks) is no body.
async fn read_body(req: &HttpRequest, payload: web::Payload) -> Result<RunOnceRequest, ApiError> {
    let bytes = match payload.to_bytes_limited(MAX_BODY_BYTES).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return Err(ApiError::bad_request(
                "请求体读取失败：请重新发送",
                "The request body could not be read: send it again",
            ));
        }
        Err(_) => {
            return Err(ApiError::new(ErrorKind::PayloadTooLarge {
                limit: MAX_BODY_BYTES,
            }));
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(RunOnceRequest { callback_url: None });
    }
    let content_type = actix_web::HttpMessage::content_type(req);
    let json = content_type == "application/json"
        || (content_type.starts_with("application/") && content_type.ends_with("+json"));
    if !json {
        return Err(ApiError::new(ErrorKind::UnsupportedMediaType));
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        crate::error::json_error(&actix_web::error::JsonPayloadError::Deserialize(e))
    })?;
    // An empty body is no body; a JSON body is the object the document
    // describes (`null` included in what is refused).
    let mut fields = Fields::new(value, &["callbackUrl"])?;
    fields.forbid(
        "params",
        "执行一次只用任务保存的参数，不能在执行时覆盖：请先修改任务",
        "Run once uses the job's saved params; they cannot be overridden at run time: edit the job first",
    );
    let callback_url = fields.string("callbackUrl", false);
    if let Some(url) = &callback_url
        && let Err(p) = check_callback_url(url)
    {
        fields.fail(
            "callbackUrl",
            p.message(qiwu_domain::Lang::Zh),
            p.message(qiwu_domain::Lang::En),
        );
    }
    fields.finish()?;
    Ok(RunOnceRequest { callback_url })
}

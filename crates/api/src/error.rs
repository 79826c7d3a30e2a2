//! The one mapping from every API failure to an HTTP problem response.
//!
//! An `ApiError` is a value without a language: every text it holds is in
//! both. The language is chosen when the error is rendered, from the
//! request's `Accept-Language`, which the `observe` middleware keeps for
//! the request (`observe::current_lang`), so handlers build errors with a
//! bare `?` and never pass a language around.
//!
//! Bodies are `application/problem+json`. A 5xx body never carries the
//! cause: the cause is logged in the request's log lines, which carry its
//! request id, and the body repeats that id as `instance`.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use qiwu_domain::alert::ChannelFieldError;
use qiwu_domain::calendar::user::CalendarFieldError;
use qiwu_domain::freeze::FreezeFieldError;
use qiwu_domain::notify::TemplateFieldError;
use qiwu_domain::{FieldError, Lang};
use qiwu_storage::StorageError;
use serde::Serialize;
use utoipa::ToSchema;

/// Every `type` a problem can have.
pub const PROBLEM_TYPES: [&str; 15] = [
    "urn:qiwu:problem:unauthenticated",
    "urn:qiwu:problem:forbidden",
    "urn:qiwu:problem:not-found",
    "urn:qiwu:problem:method-not-allowed",
    "urn:qiwu:problem:uri-too-long",
    "urn:qiwu:problem:payload-too-large",
    "urn:qiwu:problem:unsupported-media-type",
    "urn:qiwu:problem:too-many-requests",
    "urn:qiwu:problem:validation",
    "urn:qiwu:problem:bad-request",
    "urn:qiwu:problem:name-taken",
    "urn:qiwu:problem:stale-version",
    "urn:qiwu:problem:conflict",
    "urn:qiwu:problem:unprocessable",
    "urn:qiwu:problem:internal",
];

/// A problem document (RFC 9457) with per-field errors.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// A URN naming the kind of problem, such as `urn:qiwu:problem:validation`.
    #[serde(rename = "type")]
    #[schema(value_type = crate::schema::ProblemType)]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub errors: Vec<ProblemField>,
    /// On 5xx answers: this request's id (also in the `X-Request-Id`
    /// header and in every log line of the request), to find the cause in
    /// the service log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// One invalid field of the request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProblemField {
    /// The field, such as `cron` or `params/delayMs`.
    pub field: String,
    pub message: String,
}

/// Something a person reads, in both languages.
#[derive(Debug, Clone)]
pub struct Text {
    pub zh: String,
    pub en: String,
}

impl Text {
    pub fn new(zh: impl Into<String>, en: impl Into<String>) -> Text {
        Text {
            zh: zh.into(),
            en: en.into(),
        }
    }

    /// A text written by `write` in each language.
    pub fn each(write: impl Fn(Lang) -> String) -> Text {
        Text {
            zh: write(Lang::Zh),
            en: write(Lang::En),
        }
    }

    /// The same words in both (a message that exists in one language only).
    pub fn same(text: impl Into<String>) -> Text {
        let text = text.into();
        Text {
            zh: text.clone(),
            en: text,
        }
    }

    /// The text in `lang`.
    pub fn pick(&self, lang: Lang) -> &str {
        lang.pick(&self.zh, &self.en)
    }
}

/// What went wrong, independent of language.
#[derive(Debug)]
pub enum ErrorKind {
    /// No token, or a token that is malformed, forged or expired.
    Unauthenticated(Text),
    /// A valid token without the needed permission.
    Forbidden { needs: String },
    /// The resource does not exist.
    NotFound(Text),
    /// A path segment that cannot name any resource, such as `/api/jobs/abc`.
    NoSuchPath(ProblemFieldText),
    /// The path exists, but not with this method; `allow` lists the ones it has.
    MethodNotAllowed { allow: Vec<String> },
    /// The request line is longer than the service reads.
    UriTooLong { limit: usize },
    /// The body is larger than the service reads.
    PayloadTooLarge { limit: usize },
    /// The body is not `application/json`.
    UnsupportedMediaType,
    /// Too many requests of one kind are waiting; try again after a while.
    TooManyRequests { text: Text, retry_after_secs: u64 },
    /// Invalid fields.
    Validation(Vec<ProblemFieldText>),
    /// A request that cannot be read at all.
    BadRequest(Text),
    /// A unique name is already used.
    NameTaken(Text),
    /// The update was based on an old version.
    StaleVersion { current: i64 },
    /// Another conflict with the current state.
    Conflict(Text),
    /// A well-formed request that cannot be done as asked (an
    /// `Idempotency-Key` already used for another job).
    Unprocessable(Text),
    /// Our fault; the source is logged, never shown.
    Internal(Box<dyn std::error::Error + Send + Sync>),
}

/// A field error before the language is chosen.
#[derive(Debug, Clone)]
pub struct ProblemFieldText {
    pub field: String,
    pub message: Text,
}

impl ProblemFieldText {
    pub fn new(field: impl Into<String>, message: Text) -> ProblemFieldText {
        ProblemFieldText {
            field: field.into(),
            message,
        }
    }
}

/// A domain error about one field of a body: the field, and what is wrong
/// in either language. The domain's field error types implement it here,
/// so [`field_errors`] is the one way they become a 400.
pub trait FieldMessage {
    fn field(&self) -> &str;
    fn message(&self, lang: Lang) -> String;
}

macro_rules! field_message {
    ($($t:ty),* $(,)?) => {
        $(
            impl FieldMessage for $t {
                fn field(&self) -> &str {
                    &self.field
                }

                fn message(&self, lang: Lang) -> String {
                    // The type's own method (inherent methods come first).
                    <$t>::message(self, lang)
                }
            }
        )*
    };
}

field_message!(
    FieldError,
    ChannelFieldError,
    FreezeFieldError,
    CalendarFieldError,
    TemplateFieldError,
);

/// Every field error of a domain check, in both languages, for a 400.
pub fn field_errors<'a, E: FieldMessage + 'a>(
    errors: impl IntoIterator<Item = &'a E>,
) -> Vec<ProblemFieldText> {
    errors
        .into_iter()
        .map(|e| ProblemFieldText::new(e.field(), Text::each(|lang| e.message(lang))))
        .collect()
}

/// What a resource is called, in both languages, for the messages that
/// name one ("Job 7 does not exist").
#[derive(Debug, Clone, Copy)]
pub struct Noun {
    zh: &'static str,
    en: &'static str,
}

impl Noun {
    pub const JOB: Noun = Noun::new("任务", "Job");
    pub const RUN: Noun = Noun::new("执行记录", "Run");
    pub const JOB_GROUP: Noun = Noun::new("分组", "Job group");
    /// A group as a freeze's scope names it.
    pub const GROUP: Noun = Noun::new("分组", "Group");
    pub const HANDLER: Noun = Noun::new("处理器", "Handler");
    pub const CALENDAR: Noun = Noun::new("日历", "Calendar");
    pub const FREEZE: Noun = Noun::new("冻结窗口", "Freeze");
    pub const ALERT_CHANNEL: Noun = Noun::new("告警渠道", "Alert channel");
    pub const TEMPLATE: Noun = Noun::new("站内信模板", "Notification template");
    pub const NOTIFICATION: Noun = Noun::new("通知", "Notification");
    pub const API_KEY: Noun = Noun::new("API 密钥", "API key");

    const fn new(zh: &'static str, en: &'static str) -> Noun {
        Noun { zh, en }
    }

    /// "{noun} {key} does not exist".
    pub fn missing(self, key: impl fmt::Display) -> Text {
        Text::new(
            format!("{} {key} 不存在", self.zh),
            format!("{} {key} does not exist", self.en),
        )
    }

    /// "{noun} {key} already exists".
    pub fn exists(self, key: impl fmt::Display) -> Text {
        Text::new(
            format!("{} {key} 已存在", self.zh),
            format!("{} {key} already exists", self.en),
        )
    }
}

/// An error on its way to becoming a response; the language is chosen
/// when it is rendered ([`ApiError::render`]).
#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
}

impl From<ErrorKind> for ApiError {
    fn from(kind: ErrorKind) -> ApiError {
        ApiError { kind }
    }
}

/// A storage failure, so handlers use a bare `?` on repository calls;
/// callers handle `NotFound` themselves when the resource deserves a
/// specific message.
impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> ApiError {
        let kind = match e {
            StorageError::NotFound => ErrorKind::NotFound(Text::new("记录不存在", "Not found")),
            StorageError::StaleVersion { current } => ErrorKind::StaleVersion { current },
            StorageError::NameTaken => ErrorKind::NameTaken(Text::new(
                "任务名称已被使用：请换一个名称",
                "The job name is already taken: choose another name",
            )),
            StorageError::AlreadyExists => {
                ErrorKind::Conflict(Text::new("记录已存在", "It already exists"))
            }
            // Every list that pages by cursor calls the parameter `cursor`.
            StorageError::InvalidCursor => ErrorKind::Validation(vec![ProblemFieldText::new(
                "cursor",
                Text::new(
                    "cursor 无效：请原样传回上一页返回的 nextCursor",
                    "Invalid cursor: pass back the nextCursor of the previous page unchanged",
                ),
            )]),
            other => ErrorKind::Internal(Box::new(other)),
        };
        ApiError::new(kind)
    }
}

impl ApiError {
    pub fn new(kind: ErrorKind) -> ApiError {
        ApiError { kind }
    }

    pub fn validation(errors: Vec<ProblemFieldText>) -> ApiError {
        ApiError::new(ErrorKind::Validation(errors))
    }

    pub fn field(field: &str, zh: impl Into<String>, en: impl Into<String>) -> ApiError {
        ApiError::validation(vec![ProblemFieldText::new(field, Text::new(zh, en))])
    }

    pub fn bad_request(zh: impl Into<String>, en: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest(Text::new(zh, en)))
    }

    pub fn not_found(zh: impl Into<String>, en: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound(Text::new(zh, en)))
    }

    /// A 404 naming the resource: "Job 7 does not exist".
    pub fn missing(noun: Noun, key: impl fmt::Display) -> ApiError {
        ApiError::new(ErrorKind::NotFound(noun.missing(key)))
    }

    /// Maps a storage error about one resource: its `NotFound` is a 404
    /// naming the resource, anything else as [`From<StorageError>`].
    pub fn about(noun: Noun, key: impl fmt::Display) -> impl FnOnce(StorageError) -> ApiError {
        move |e| match e {
            StorageError::NotFound => ApiError::missing(noun, key),
            other => ApiError::from(other),
        }
    }

    /// A 409 naming the resource: "Calendar cn-ops already exists".
    pub fn exists(noun: Noun, key: impl fmt::Display) -> ApiError {
        ApiError::new(ErrorKind::Conflict(noun.exists(key)))
    }

    pub fn internal(source: impl std::error::Error + Send + Sync + 'static) -> ApiError {
        ApiError::new(ErrorKind::Internal(Box::new(source)))
    }

    fn status_and_kind(&self) -> (StatusCode, &'static str) {
        match &self.kind {
            ErrorKind::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ErrorKind::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            ErrorKind::NotFound(_) | ErrorKind::NoSuchPath(_) => {
                (StatusCode::NOT_FOUND, "not-found")
            }
            ErrorKind::MethodNotAllowed { .. } => {
                (StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed")
            }
            ErrorKind::UriTooLong { .. } => (StatusCode::URI_TOO_LONG, "uri-too-long"),
            ErrorKind::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large")
            }
            ErrorKind::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type")
            }
            ErrorKind::TooManyRequests { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "too-many-requests")
            }
            ErrorKind::Validation(_) => (StatusCode::BAD_REQUEST, "validation"),
            ErrorKind::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad-request"),
            ErrorKind::NameTaken(_) => (StatusCode::CONFLICT, "name-taken"),
            ErrorKind::StaleVersion { .. } => (StatusCode::CONFLICT, "stale-version"),
            ErrorKind::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ErrorKind::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
            ErrorKind::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The problem document this error renders as in `lang`.
    pub fn problem(&self, lang: Lang) -> Problem {
        let (status, kind) = self.status_and_kind();
        let (title, detail, errors) = match &self.kind {
            ErrorKind::Unauthenticated(t) => (
                lang.pick("未登录或登录已失效", "Not signed in"),
                t.pick(lang).to_string(),
                vec![],
            ),
            ErrorKind::Forbidden { needs } => (
                lang.pick("没有权限", "Forbidden"),
                match lang {
                    Lang::Zh => format!("需要权限 {needs}"),
                    Lang::En => format!("This needs the permission {needs}"),
                },
                vec![],
            ),
            ErrorKind::NotFound(t) => (
                lang.pick("不存在", "Not found"),
                t.pick(lang).into(),
                vec![],
            ),
            ErrorKind::NoSuchPath(f) => (
                lang.pick("不存在", "Not found"),
                f.message.pick(lang).into(),
                vec![ProblemField {
                    field: f.field.clone(),
                    message: f.message.pick(lang).into(),
                }],
            ),
            ErrorKind::MethodNotAllowed { allow } => (
                lang.pick("不支持该方法", "Method not allowed"),
                match lang {
                    Lang::Zh => format!("这个路径只支持 {}", allow.join("、")),
                    Lang::En => format!("This path supports only {}", allow.join(", ")),
                },
                vec![],
            ),
            ErrorKind::UriTooLong { limit } => (
                lang.pick("地址过长", "URI too long"),
                match lang {
                    Lang::Zh => format!("请求地址（路径加查询参数）最多 {limit} 字节"),
                    Lang::En => format!(
                        "The request target (path and query) may have at most {limit} bytes"
                    ),
                },
                vec![],
            ),
            ErrorKind::PayloadTooLarge { limit } => (
                lang.pick("请求体过大", "Payload too large"),
                match lang {
                    Lang::Zh => format!("请求体最多 {limit} 字节"),
                    Lang::En => format!("The request body may have at most {limit} bytes"),
                },
                vec![],
            ),
            ErrorKind::UnsupportedMediaType => (
                lang.pick("不支持的内容类型", "Unsupported media type"),
                lang.pick(
                    "请求体必须是 JSON：请带上 Content-Type: application/json",
                    "The request body must be JSON: send Content-Type: application/json",
                )
                .to_string(),
                vec![],
            ),
            ErrorKind::TooManyRequests { text, .. } => (
                lang.pick("请求过多", "Too many requests"),
                text.pick(lang).into(),
                vec![],
            ),
            ErrorKind::Validation(fields) => (
                lang.pick("输入有误", "Invalid input"),
                fields
                    .iter()
                    .map(|f| f.message.pick(lang).to_string())
                    .collect::<Vec<_>>()
                    .join(lang.pick("；", "; ")),
                fields
                    .iter()
                    .map(|f| ProblemField {
                        field: f.field.clone(),
                        message: f.message.pick(lang).to_string(),
                    })
                    .collect(),
            ),
            ErrorKind::BadRequest(t) => (
                lang.pick("请求无法处理", "Bad request"),
                t.pick(lang).into(),
                vec![],
            ),
            ErrorKind::NameTaken(t) => (
                lang.pick("名称已被使用", "Name taken"),
                t.pick(lang).into(),
                vec![ProblemField {
                    field: "name".into(),
                    message: t.pick(lang).into(),
                }],
            ),
            ErrorKind::StaleVersion { current } => (
                lang.pick("数据已被修改", "Stale version"),
                match lang {
                    Lang::Zh => {
                        format!("这条记录已被其他人修改（当前版本 {current}）：请刷新后再保存")
                    }
                    Lang::En => format!(
                        "Someone else changed this record (current version {current}): reload it and save again"
                    ),
                },
                vec![],
            ),
            ErrorKind::Conflict(t) => (lang.pick("冲突", "Conflict"), t.pick(lang).into(), vec![]),
            ErrorKind::Unprocessable(t) => (
                lang.pick("请求无法执行", "Unprocessable request"),
                t.pick(lang).into(),
                vec![],
            ),
            ErrorKind::Internal(_) => (
                lang.pick("服务内部错误", "Internal error"),
                lang.pick(
                    "服务出错了，请稍后再试；管理员可以在服务日志里查到原因",
                    "Something went wrong on our side; the cause is in the service log",
                )
                .to_string(),
                vec![],
            ),
        };
        Problem {
            kind: format!("urn:qiwu:problem:{kind}"),
            title: title.to_string(),
            status: status.as_u16(),
            detail,
            errors,
            instance: status
                .is_server_error()
                .then(crate::observe::current_request_id)
                .flatten(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (status, kind) = self.status_and_kind();
        write!(f, "{status} {kind}")
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status_and_kind().0
    }

    /// Rendered in the language of the request being handled.
    fn error_response(&self) -> HttpResponse {
        self.render(crate::observe::current_lang())
    }
}

impl ApiError {
    /// The response in `lang`: status, headers and problem body. The cause
    /// of a 5xx is logged here, once, in the request's span.
    pub fn render(&self, lang: Lang) -> HttpResponse {
        if let ErrorKind::Internal(source) = &self.kind {
            tracing::error!(error = %source, cause = ?source.source(), "request failed");
        }
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((header::CONTENT_TYPE, "application/problem+json"));
        match &self.kind {
            ErrorKind::Unauthenticated(_) => {
                response
                    .insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
            }
            ErrorKind::MethodNotAllowed { allow } => {
                response.insert_header((header::ALLOW, allow.join(", ")));
            }
            ErrorKind::TooManyRequests {
                retry_after_secs, ..
            } => {
                response.insert_header((header::RETRY_AFTER, retry_after_secs.to_string()));
            }
            _ => {}
        }
        response.json(self.problem(lang))
    }
}

/// The language a request asked for.
pub fn request_lang(req: &HttpRequest) -> Lang {
    Lang::from_accept_language(
        req.headers()
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    )
}

/// Most bytes a JSON body may have.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Extractor configurations whose failures become problem responses.
pub fn json_config() -> actix_web::web::JsonConfig {
    actix_web::web::JsonConfig::default()
        .limit(MAX_BODY_BYTES)
        .error_handler(|err, _req| json_error(&err).into())
}

/// The problem a body that cannot be read as JSON gets.
pub fn json_error(err: &actix_web::error::JsonPayloadError) -> ApiError {
    use actix_web::error::JsonPayloadError as E;
    match err {
        E::OverflowKnownLength { limit, .. } | E::Overflow { limit } => {
            ApiError::new(ErrorKind::PayloadTooLarge { limit: *limit })
        }
        E::Payload(actix_web::error::PayloadError::Overflow) => {
            ApiError::new(ErrorKind::PayloadTooLarge {
                limit: MAX_BODY_BYTES,
            })
        }
        E::ContentType => ApiError::new(ErrorKind::UnsupportedMediaType),
        E::Deserialize(e) if e.is_eof() && e.line() == 1 && e.column() == 0 => {
            ApiError::bad_request(
                "缺少请求体：请发送一个 JSON 对象",
                "The request body is missing: send a JSON object",
            )
        }
        E::Deserialize(e) => ApiError::bad_request(
            format!(
                "请求体不是合法的 JSON（第 {} 行第 {} 列）",
                e.line(),
                e.column()
            ),
            format!(
                "The request body is not valid JSON (line {}, column {}): {}",
                e.line(),
                e.column(),
                json_reason(e)
            ),
        ),
        other => ApiError::bad_request(
            "请求体读取失败：请重新发送",
            format!("The request body could not be read: {other}"),
        ),
    }
}

/// serde_json's reason without its position, which the message gives.
fn json_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

pub fn query_config() -> actix_web::web::QueryConfig {
    actix_web::web::QueryConfig::default().error_handler(|err, _req| {
        // Every query field is read as text and checked by `query`, so
        // only the query string's shape can fail here: a parameter given
        // twice, or bytes that are not UTF-8.
        let text = match &err {
            actix_web::error::QueryPayloadError::Deserialize(e) => e.to_string(),
            other => other.to_string(),
        };
        let field = backticked(&text).unwrap_or("query").to_string();
        let (zh, en) = if text.starts_with("duplicate field") {
            (
                format!("查询参数 {field} 只能出现一次"),
                format!("The query parameter {field} may be given only once"),
            )
        } else {
            (
                format!("查询参数有误：请使用 UTF-8 编码的 name=value 形式（{text}）"),
                format!("The query string must be UTF-8 name=value pairs ({text})"),
            )
        };
        ApiError::field(&field, zh, en).into()
    })
}

/// The first name serde quotes in backticks, such as `page` in
/// "duplicate field `page`".
fn backticked(text: &str) -> Option<&str> {
    let start = text.find('`')? + 1;
    let len = text[start..].find('`')?;
    Some(&text[start..start + len])
}

pub fn path_config() -> actix_web::web::PathConfig {
    actix_web::web::PathConfig::default().error_handler(|_err, req| {
        // The only typed path segments are ids (`crate::query::Id`): name
        // the one that did not parse.
        let field = req
            .match_info()
            .iter()
            .find(|(_, value)| crate::query::Id::parse(value).is_none())
            .map(|(name, _)| name.to_string())
            .unwrap_or_else(|| "id".to_string());
        crate::query::Id::path_error(&field).into()
    })
}

/// Answers routes that do not exist.
pub async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::not_found(
        format!("接口 {} {} 不存在", req.method(), req.path()),
        format!("There is no endpoint {} {}", req.method(), req.path()),
    )
    .render(request_lang(&req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_type_is_documented() {
        let t = || Text::new("zh", "en");
        let kinds = vec![
            ErrorKind::Unauthenticated(t()),
            ErrorKind::Forbidden { needs: "x".into() },
            ErrorKind::NotFound(t()),
            ErrorKind::NoSuchPath(ProblemFieldText::new("id", t())),
            ErrorKind::MethodNotAllowed {
                allow: vec!["GET".into()],
            },
            ErrorKind::UriTooLong { limit: 1 },
            ErrorKind::PayloadTooLarge { limit: 1 },
            ErrorKind::UnsupportedMediaType,
            ErrorKind::TooManyRequests {
                text: t(),
                retry_after_secs: 1,
            },
            ErrorKind::Validation(vec![]),
            ErrorKind::BadRequest(t()),
            ErrorKind::NameTaken(t()),
            ErrorKind::StaleVersion { current: 1 },
            ErrorKind::Conflict(t()),
            ErrorKind::Unprocessable(t()),
            ErrorKind::Internal(Box::new(std::io::Error::other("x"))),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for kind in kinds {
            let problem = ApiError::new(kind).problem(Lang::En);
            assert!(
                PROBLEM_TYPES.contains(&problem.kind.as_str()),
                "{}",
                problem.kind
            );
            seen.insert(problem.kind);
        }
        assert_eq!(seen.len(), PROBLEM_TYPES.len());
    }

    #[test]
    fn the_language_is_chosen_when_rendering() {
        let e = ApiError::missing(Noun::JOB, 7);
        assert_eq!(e.problem(Lang::Zh).detail, "任务 7 不存在");
        assert_eq!(e.problem(Lang::En).detail, "Job 7 does not exist");
        let e = ApiError::exists(Noun::CALENDAR, "ops");
        assert_eq!(e.problem(Lang::En).detail, "Calendar ops already exists");
        assert_eq!(e.problem(Lang::En).status, 409);
        // Outside the middleware, the default language.
        assert_eq!(crate::observe::current_lang(), Lang::Zh);
    }

    #[test]
    fn storage_errors_convert() {
        let e: ApiError = StorageError::StaleVersion { current: 3 }.into();
        assert!(matches!(e.kind, ErrorKind::StaleVersion { current: 3 }));
        let e: ApiError = StorageError::InvalidCursor.into();
        assert_eq!(e.problem(Lang::En).errors[0].field, "cursor");
    }

    #[test]
    fn field_errors_keep_both_languages() {
        let errors = vec![FieldError {
            field: "cron".into(),
            problem: qiwu_domain::JobProblem::Required,
        }];
        let fields = field_errors(&errors);
        assert_eq!(fields[0].field, "cron");
        assert_eq!(fields[0].message.zh, errors[0].message(Lang::Zh));
        assert_eq!(fields[0].message.en, errors[0].message(Lang::En));
    }
}

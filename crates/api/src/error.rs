//! The one mapping from every API failure to an HTTP problem response.
//!
//! Bodies are `application/problem+json` in the request's language. A 5xx
//! body never carries the cause: the cause is logged in the request's log
//! lines, which carry its request id, and the body repeats that id as
//! `instance`.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use qiwu_domain::{FieldError, Lang};
use qiwu_storage::StorageError;
use serde::Serialize;
use utoipa::ToSchema;

/// A problem document (RFC 9457) with per-field errors.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem, such as `urn:qiwu:problem:validation`.
    #[serde(rename = "type")]
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

    fn get(&self, lang: Lang) -> &str {
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

impl From<&FieldError> for ProblemFieldText {
    fn from(e: &FieldError) -> ProblemFieldText {
        ProblemFieldText {
            field: e.field.clone(),
            message: Text::new(e.message(Lang::Zh), e.message(Lang::En)),
        }
    }
}

/// An error on its way to becoming a response in `lang`.
#[derive(Debug)]
pub struct ApiError {
    pub lang: Lang,
    pub kind: ErrorKind,
}

impl ApiError {
    pub fn new(lang: Lang, kind: ErrorKind) -> ApiError {
        ApiError { lang, kind }
    }

    pub fn validation(lang: Lang, errors: Vec<ProblemFieldText>) -> ApiError {
        ApiError::new(lang, ErrorKind::Validation(errors))
    }

    pub fn field(
        lang: Lang,
        field: &str,
        zh: impl Into<String>,
        en: impl Into<String>,
    ) -> ApiError {
        ApiError::validation(lang, vec![ProblemFieldText::new(field, Text::new(zh, en))])
    }

    pub fn bad_request(lang: Lang, zh: impl Into<String>, en: impl Into<String>) -> ApiError {
        ApiError::new(lang, ErrorKind::BadRequest(Text::new(zh, en)))
    }

    pub fn not_found(lang: Lang, zh: impl Into<String>, en: impl Into<String>) -> ApiError {
        ApiError::new(lang, ErrorKind::NotFound(Text::new(zh, en)))
    }

    pub fn job_not_found(lang: Lang, id: i64) -> ApiError {
        ApiError::not_found(
            lang,
            format!("任务 {id} 不存在"),
            format!("Job {id} does not exist"),
        )
    }

    pub fn internal(
        lang: Lang,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> ApiError {
        ApiError::new(lang, ErrorKind::Internal(Box::new(source)))
    }

    /// Maps a storage failure; callers handle `NotFound` themselves when the
    /// resource deserves a specific message.
    pub fn storage(lang: Lang, e: StorageError) -> ApiError {
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
        ApiError::new(lang, kind)
    }

    fn status_and_kind(&self) -> (StatusCode, &'static str) {
        match &self.kind {
            ErrorKind::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ErrorKind::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            ErrorKind::NotFound(_) => (StatusCode::NOT_FOUND, "not-found"),
            ErrorKind::Validation(_) => (StatusCode::BAD_REQUEST, "validation"),
            ErrorKind::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad-request"),
            ErrorKind::NameTaken(_) => (StatusCode::CONFLICT, "name-taken"),
            ErrorKind::StaleVersion { .. } => (StatusCode::CONFLICT, "stale-version"),
            ErrorKind::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ErrorKind::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The problem document this error renders as.
    pub fn problem(&self) -> Problem {
        let lang = self.lang;
        let (status, kind) = self.status_and_kind();
        let (title, detail, errors) = match &self.kind {
            ErrorKind::Unauthenticated(t) => (
                lang.pick("未登录或登录已失效", "Not signed in"),
                t.get(lang).to_string(),
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
            ErrorKind::NotFound(t) => {
                (lang.pick("不存在", "Not found"), t.get(lang).into(), vec![])
            }
            ErrorKind::Validation(fields) => (
                lang.pick("输入有误", "Invalid input"),
                fields
                    .iter()
                    .map(|f| f.message.get(lang).to_string())
                    .collect::<Vec<_>>()
                    .join(lang.pick("；", "; ")),
                fields
                    .iter()
                    .map(|f| ProblemField {
                        field: f.field.clone(),
                        message: f.message.get(lang).to_string(),
                    })
                    .collect(),
            ),
            ErrorKind::BadRequest(t) => (
                lang.pick("请求无法处理", "Bad request"),
                t.get(lang).into(),
                vec![],
            ),
            ErrorKind::NameTaken(t) => (
                lang.pick("名称已被使用", "Name taken"),
                t.get(lang).into(),
                vec![ProblemField {
                    field: "name".into(),
                    message: t.get(lang).into(),
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
            ErrorKind::Conflict(t) => (lang.pick("冲突", "Conflict"), t.get(lang).into(), vec![]),
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

    fn error_response(&self) -> HttpResponse {
        if let ErrorKind::Internal(source) = &self.kind {
            tracing::error!(error = %source, cause = ?source.source(), "request failed");
        }
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((header::CONTENT_TYPE, "application/problem+json"));
        if matches!(self.kind, ErrorKind::Unauthenticated(_)) {
            response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        response.json(self.problem())
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

/// Extractor configurations whose failures become problem responses.
pub fn json_config() -> actix_web::web::JsonConfig {
    actix_web::web::JsonConfig::default()
        .limit(256 * 1024)
        .error_handler(|err, req| {
            let lang = request_lang(req);
            ApiError::bad_request(
                lang,
                format!("请求体不是合法的 JSON：{err}"),
                format!("The request body is not valid JSON: {err}"),
            )
            .into()
        })
}

pub fn query_config() -> actix_web::web::QueryConfig {
    actix_web::web::QueryConfig::default().error_handler(|err, req| {
        let lang = request_lang(req);
        ApiError::bad_request(
            lang,
            format!("查询参数有误：{err}"),
            format!("Invalid query parameters: {err}"),
        )
        .into()
    })
}

pub fn path_config() -> actix_web::web::PathConfig {
    actix_web::web::PathConfig::default().error_handler(|err, req| {
        let lang = request_lang(req);
        ApiError::not_found(
            lang,
            format!("路径有误：{err}"),
            format!("No such resource: {err}"),
        )
        .into()
    })
}

/// Answers routes that do not exist.
pub async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::not_found(
        request_lang(&req),
        format!("接口 {} {} 不存在", req.method(), req.path()),
        format!("There is no endpoint {} {}", req.method(), req.path()),
    )
    .error_response()
}

//! Bearer authentication and the permission codes of SPEC §9: a signed-in
//! person brings an HS256 JWT, a service account an API key (`qk_…`), both
//! as `Authorization: Bearer`.

use std::collections::BTreeSet;
use std::future::{Future, Ready, ready};
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, web};
use chrono::Utc;
use qiwu_domain::Lang;
use qiwu_storage::{API_KEY_MARK, ApiKeyRecord};

use crate::error::{ApiError, ErrorKind, Text, request_lang};
use crate::state::AppState;

/// The permission codes; super admins hold them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    TaskBrowse,
    TaskView,
    TaskCreate,
    TaskModify,
    TaskRemove,
    TaskExport,
    TaskRun,
    RunBrowse,
    RunView,
    RunExport,
    RunRemove,
}

impl Permission {
    pub const ALL: [Permission; 11] = [
        Permission::TaskBrowse,
        Permission::TaskView,
        Permission::TaskCreate,
        Permission::TaskModify,
        Permission::TaskRemove,
        Permission::TaskExport,
        Permission::TaskRun,
        Permission::RunBrowse,
        Permission::RunView,
        Permission::RunExport,
        Permission::RunRemove,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Permission::TaskBrowse => "scheduler.task.browse",
            Permission::TaskView => "scheduler.task.view",
            Permission::TaskCreate => "scheduler.task.create",
            Permission::TaskModify => "scheduler.task.modify",
            Permission::TaskRemove => "scheduler.task.remove",
            Permission::TaskExport => "scheduler.task.export",
            Permission::TaskRun => "scheduler.task.run",
            Permission::RunBrowse => "scheduler.run.browse",
            Permission::RunView => "scheduler.run.view",
            Permission::RunExport => "scheduler.run.export",
            Permission::RunRemove => "scheduler.run.remove",
        }
    }

    pub fn from_code(code: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.code() == code)
    }
}

/// Longest `sub` a token may carry, as wide as the columns that keep it.
pub const MAX_SUB_CHARS: usize = 128;

/// The signed-in caller of a request.
#[derive(Debug, Clone)]
pub struct Principal {
    pub sub: String,
    pub name: String,
    pub super_admin: bool,
    perms: BTreeSet<Permission>,
    /// The language the request asked for, for the texts of a successful
    /// answer (an error chooses its language when it is rendered).
    pub lang: Lang,
}

impl Principal {
    pub fn has(&self, p: Permission) -> bool {
        self.super_admin || self.perms.contains(&p)
    }

    /// Fails with 403 unless the caller holds every listed permission.
    pub fn require(&self, needed: &[Permission]) -> Result<(), ApiError> {
        let missing: Vec<&str> = needed
            .iter()
            .filter(|p| !self.has(**p))
            .map(|p| p.code())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ApiError::new(ErrorKind::Forbidden {
                needs: missing.join(", "),
            }))
        }
    }

    pub fn require_super_admin(&self) -> Result<(), ApiError> {
        if self.super_admin {
            Ok(())
        } else {
            Err(ApiError::new(ErrorKind::Forbidden {
                needs: "superAdmin".into(),
            }))
        }
    }

    /// The name recorded as `createdBy`/`updatedBy`.
    pub fn actor(&self) -> String {
        self.sub.clone()
    }
}

fn unauthenticated(zh: &str, en: &str) -> ApiError {
    ApiError::new(ErrorKind::Unauthenticated(Text::new(zh, en)))
}

/// The bearer token of a request, or the 401 saying what is wrong with it.
fn bearer_token(req: &HttpRequest) -> Result<&str, ApiError> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Err(unauthenticated(
            "缺少 Authorization: Bearer 令牌",
            "Missing the Authorization: Bearer token",
        ));
    };
    value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            unauthenticated(
                "Authorization 头必须是 Bearer 令牌",
                "The Authorization header must carry a Bearer token",
            )
        })
}

/// The caller of a JWT: checked in memory, no database.
fn jwt_principal(state: &AppState, token: &str, lang: Lang) -> Result<Principal, ApiError> {
    let claims = state.keys.verify(token).map_err(|e| {
        use jsonwebtoken::errors::ErrorKind as J;
        match e.kind() {
            J::ExpiredSignature => unauthenticated(
                "令牌已过期：请重新登录",
                "The token has expired: sign in again",
            ),
            _ => unauthenticated("令牌无效", "The token is not valid"),
        }
    })?;
    // `sub` is written as `createdBy`, `updatedBy` and the audit actor,
    // columns of 128 characters: refuse a longer one here rather than
    // shorten it (two users would then share a name) or fail later.
    if claims.sub.chars().any(char::is_control) {
        return Err(unauthenticated(
            "令牌的 sub 含有控制字符：请让签发方使用可打印的用户标识",
            "The token's sub holds control characters: ask its issuer for a printable user id",
        ));
    }
    let sub_chars = claims.sub.chars().count();
    if sub_chars > MAX_SUB_CHARS {
        return Err(unauthenticated(
            &format!(
                "令牌的 sub 最多 {MAX_SUB_CHARS} 个字符，这个有 {sub_chars} 个：请让签发方缩短用户标识"
            ),
            &format!(
                "The token's sub may have at most {MAX_SUB_CHARS} characters, this one has {sub_chars}: ask its issuer for a shorter user id"
            ),
        ));
    }
    Ok(Principal {
        perms: known_perms(&claims.perms),
        sub: claims.sub,
        name: claims.name,
        super_admin: claims.super_admin,
        lang,
    })
}

/// The caller of an API key: one lookup by the key's prefix. An unknown,
/// wrong or revoked key is a 401; what it may do is decided later (403).
async fn api_key_principal(
    state: web::Data<AppState>,
    key: String,
    lang: Lang,
) -> Result<Principal, ApiError> {
    let found = state
        .store
        .api_keys()
        .authenticate(&key, Utc::now())
        .await?;
    let Some(record) = found else {
        return Err(unauthenticated(
            "API 密钥无效或已被吊销",
            "The API key is not valid or has been revoked",
        ));
    };
    Ok(Principal::for_api_key(record, lang))
}

/// The codes we know; others (from a newer or older release) grant nothing.
fn known_perms(codes: &[String]) -> BTreeSet<Permission> {
    codes
        .iter()
        .filter_map(|c| Permission::from_code(c))
        .collect()
}

impl Principal {
    /// A service account: never a super admin, holding the key's scopes.
    fn for_api_key(key: ApiKeyRecord, lang: Lang) -> Principal {
        Principal {
            sub: format!("apikey:{}", key.name),
            perms: known_perms(&key.perms),
            name: key.name,
            super_admin: false,
            lang,
        }
    }
}

/// The caller of a request: ready at once for a JWT, after a database
/// lookup for an API key (so JWT requests allocate nothing extra).
pub enum PrincipalFuture {
    Ready(Ready<Result<Principal, ApiError>>),
    Lookup(Pin<Box<dyn Future<Output = Result<Principal, ApiError>>>>),
}

impl Future for PrincipalFuture {
    type Output = Result<Principal, ApiError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            PrincipalFuture::Ready(ready) => Pin::new(ready).poll(cx),
            PrincipalFuture::Lookup(lookup) => lookup.as_mut().poll(cx),
        }
    }
}

impl FromRequest for Principal {
    type Error = ApiError;
    type Future = PrincipalFuture;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let lang = request_lang(req);
        let Some(state) = req.app_data::<web::Data<AppState>>() else {
            return PrincipalFuture::Ready(ready(Err(ApiError::internal(std::io::Error::other(
                "AppState is not registered",
            )))));
        };
        match bearer_token(req) {
            Ok(token) if token.starts_with(API_KEY_MARK) => PrincipalFuture::Lookup(Box::pin(
                api_key_principal(state.clone(), token.to_owned(), lang),
            )),
            Ok(token) => PrincipalFuture::Ready(ready(jwt_principal(state, token, lang))),
            Err(e) => PrincipalFuture::Ready(ready(Err(e))),
        }
    }
}

/// What a route needs of its caller, checked when the caller is extracted
/// ([`Need`]): one permission (`perm::TaskView`), two
/// (`(perm::TaskModify, perm::TaskView)`, both needed, the 403 naming every
/// one missing), or `perm::SuperAdmin`.
pub trait Requirement {
    /// Ok, or the 403 naming what is missing.
    fn check(who: &Principal) -> Result<(), ApiError>;
}

/// A single permission as a type.
pub trait Perm {
    const PERMISSION: Permission;
}

/// The permissions and the super-admin role as types, for [`Need`].
pub mod perm {
    use super::{ApiError, Perm, Permission, Principal, Requirement};

    macro_rules! markers {
        ($($name:ident),* $(,)?) => {
            $(
                #[doc = concat!("The permission `Permission::", stringify!($name), "`.")]
                pub struct $name;

                impl Perm for $name {
                    const PERMISSION: Permission = Permission::$name;
                }

                impl Requirement for $name {
                    fn check(who: &Principal) -> Result<(), ApiError> {
                        who.require(&[Permission::$name])
                    }
                }
            )*
        };
    }

    markers!(
        TaskBrowse, TaskView, TaskCreate, TaskModify, TaskRemove, TaskExport, TaskRun, RunBrowse,
        RunView, RunExport, RunRemove,
    );

    /// Super admins only (settings, templates, the inbox, the audit log,
    /// API keys, groups, alert channels, calendars and freezes).
    pub struct SuperAdmin;

    impl Requirement for SuperAdmin {
        fn check(who: &Principal) -> Result<(), ApiError> {
            who.require_super_admin()
        }
    }

    impl<A: Perm, B: Perm> Requirement for (A, B) {
        fn check(who: &Principal) -> Result<(), ApiError> {
            who.require(&[A::PERMISSION, B::PERMISSION])
        }
    }
}

/// The caller of a route that needs `R`: a 401 without a valid token or
/// key, a 403 when the caller lacks `R`, so the route's permission is in
/// its signature (`who: Need<perm::TaskRun>`). Derefs to the [`Principal`].
pub struct Need<R> {
    who: Principal,
    needs: PhantomData<fn() -> R>,
}

impl<R> Deref for Need<R> {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.who
    }
}

/// The caller, then the check of `R`; as ready as [`PrincipalFuture`].
pub struct NeedFuture<R> {
    principal: PrincipalFuture,
    needs: PhantomData<fn() -> R>,
}

impl<R: Requirement> Future for NeedFuture<R> {
    type Output = Result<Need<R>, ApiError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().principal)
            .poll(cx)
            .map(|principal| {
                let who = principal?;
                R::check(&who)?;
                Ok(Need {
                    who,
                    needs: PhantomData,
                })
            })
    }
}

impl<R: Requirement> FromRequest for Need<R> {
    type Error = ApiError;
    type Future = NeedFuture<R>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        NeedFuture {
            principal: Principal::from_request(req, payload),
            needs: PhantomData,
        }
    }
}

/// The request's language, for endpoints that need no sign-in.
pub struct RequestLang(pub Lang);

impl FromRequest for RequestLang {
    type Error = ApiError;
    type Future = Ready<Result<RequestLang, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Ok(RequestLang(request_lang(req))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(perms: &[Permission], super_admin: bool) -> Principal {
        Principal {
            sub: "alice".into(),
            name: "Alice".into(),
            super_admin,
            perms: perms.iter().copied().collect(),
            lang: Lang::En,
        }
    }

    fn forbidden_needs(r: Result<(), ApiError>) -> String {
        match r.map_err(|e| e.kind) {
            Err(ErrorKind::Forbidden { needs }) => needs,
            other => panic!("expected a 403, got {other:?}"),
        }
    }

    #[test]
    fn requirements_name_every_missing_code() {
        use perm::*;
        let viewer = caller(&[Permission::TaskView], false);
        assert!(TaskView::check(&viewer).is_ok());
        assert_eq!(
            forbidden_needs(<(TaskModify, TaskView)>::check(&viewer)),
            "scheduler.task.modify"
        );
        let nobody = caller(&[], false);
        assert_eq!(
            forbidden_needs(<(TaskModify, TaskView)>::check(&nobody)),
            "scheduler.task.modify, scheduler.task.view"
        );
        assert_eq!(forbidden_needs(SuperAdmin::check(&viewer)), "superAdmin");
        let admin = caller(&[], true);
        assert!(SuperAdmin::check(&admin).is_ok());
        assert!(RunRemove::check(&admin).is_ok());
    }

    #[test]
    fn codes_round_trip() {
        for p in Permission::ALL {
            assert_eq!(Permission::from_code(p.code()), Some(p));
        }
        assert_eq!(Permission::from_code("scheduler.task.nuke"), None);
    }
}

//! The AWS role of an environment's boxes (environments.txt, "AWS permissions
//! inside a box"). A box claimed from an environment that names `awsRoleArn`
//! keeps that role in its spec (`Claimed::aws`); whenever its credentials
//! near their end, boxd opens an `aws:token` stream and gets here an identity
//! token psbx signs for it (`oidc::Issuer`, ten minutes, `sub`
//! `tenant:<account>:env:<environment>`, `aud` `sts.amazonaws.com`), with
//! the role, the session name `psbx-<box id>` and the STS endpoint. boxd
//! itself trades the token with STS (`AssumeRoleWithWebIdentity`, unsigned):
//! psbx never holds credentials that act in the account.
//!
//! The environment is read again for every token, and the box gets one only
//! while it is the environment the box was started in (its id, kept in the
//! claim: one deleted and made again under the same name is another) and
//! still names the role the box took: after `awsRoleArn` is removed or
//! changed, or the environment deleted, the box's credentials end within the
//! hour (review-2 L11).
//!
//! A box may open `aws:token` streams as fast as its channel allows, though
//! it needs one every tens of minutes (review-2 M4): each box has a
//! [`Bucket`] of [`BURST`] tokens and [`PER_MINUTE`] more a minute (past it
//! a stream is refused before the database is read or anything signed), a
//! refusal is kept for [`REFUSAL_KEPT`] (asked again meanwhile, it is
//! answered without a read), and refusals are logged through a
//! [`RefusalLog`].

use crate::blocking::blocking;
use crate::ids::{AccountId, BoxId};
use crate::meter::{Bucket, RefusalLog};
use crate::oidc::{Claims, Issuer, TOKEN_TTL};
use crate::spec::ClaimedAws;
use crate::store::Store;
use psbx_wire::boxd::AwsToken;
use psbx_wire::frame::code;
use psbx_wire::mux::Incoming;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The audience STS expects of a web identity token.
pub const AUDIENCE: &str = "sts.amazonaws.com";
/// How long boxd may take to end its (empty) request.
const QUERY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a box's credentials last by default (the role's usual
/// `MaxSessionDuration`, `deploy/aws/box-role.yaml`).
pub const DEFAULT_SESSION_SECONDS: u32 = 3600;
/// Tokens a box may ask for at once.
pub const BURST: u32 = 5;
/// Tokens a box may ask for each minute after its burst.
pub const PER_MINUTE: u32 = 6;
/// How long a refusal is the answer without reading the environment again.
pub const REFUSAL_KEPT: Duration = Duration::from_secs(5);

/// The OIDC subject of an environment's boxes (`awsSubject`).
pub fn subject(account: &AccountId, environment: &str) -> String {
    format!("tenant:{account}:env:{environment}")
}

/// The role session of a box's credentials: `psbx-<box id>`.
pub fn session_name(box_id: &str) -> String {
    format!("psbx-{box_id}")
}

/// The STS endpoint of `region` (AWS's global one without a region).
pub fn sts_url(region: Option<&str>) -> String {
    match region {
        Some(r) if r.starts_with("cn-") => format!("https://sts.{r}.amazonaws.com.cn/"),
        Some(r) => format!("https://sts.{r}.amazonaws.com/"),
        None => "https://sts.amazonaws.com/".to_owned(),
    }
}

/// Signs boxes' identity tokens; cheap to clone.
#[derive(Clone)]
pub struct BoxRole {
    issuer: Issuer,
    store: Store,
    /// An STS endpoint for every box instead of AWS's own (a local emulator).
    endpoint_url: Option<String>,
    session_seconds: u32,
    /// Environments read from the store (what tests count).
    reads: Arc<AtomicU64>,
}

/// The box an `aws:token` stream comes from, and what its streams cost.
pub struct Asker {
    pub box_id: BoxId,
    pub account: AccountId,
    pub environment: String,
    pub role: ClaimedAws,
    bucket: Mutex<Bucket>,
    refusals: Mutex<RefusalLog>,
    /// The last refusal and when it was made.
    refused: Mutex<Option<(Instant, u16, String)>>,
}

impl Asker {
    pub fn new(box_id: BoxId, account: AccountId, environment: String, role: ClaimedAws) -> Self {
        Self {
            box_id,
            account,
            environment,
            role,
            bucket: Mutex::new(Bucket::new(BURST, f64::from(PER_MINUTE) / 60.0)),
            refusals: Mutex::new(RefusalLog::new()),
            refused: Mutex::new(None),
        }
    }

    /// The refusal made less than [`REFUSAL_KEPT`] ago.
    fn kept_refusal(&self) -> Option<(u16, String)> {
        let kept = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        kept.as_ref()
            .filter(|(at, ..)| at.elapsed() < REFUSAL_KEPT)
            .map(|(_, status, why)| (*status, why.clone()))
    }
}

impl BoxRole {
    pub fn new(
        issuer: Issuer,
        store: Store,
        endpoint_url: Option<String>,
        session_seconds: u32,
    ) -> Self {
        Self {
            issuer,
            store,
            endpoint_url,
            session_seconds,
            reads: Arc::default(),
        }
    }

    /// Environments read from the store for tokens.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Answers one `aws:token` stream.
    pub async fn serve(&self, incoming: Incoming, asker: &Asker) {
        match self.token(asker).await {
            Ok(token) => {
                let Ok(body) = serde_json::to_vec(&token) else {
                    return incoming.refuse(code::UNAVAILABLE, "the token cannot be encoded");
                };
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = incoming.accept();
                // boxd sends nothing and half-closes: its end first, so that
                // the stream is finished both ways when it is dropped.
                let mut nothing = Vec::new();
                let ended = tokio::time::timeout(
                    QUERY_WAIT,
                    (&mut stream).take(1024).read_to_end(&mut nothing),
                )
                .await;
                if !matches!(ended, Ok(Ok(_))) {
                    return stream.reset("the token request did not end");
                }
                if stream.write_all(&body).await.is_ok() {
                    let _ = stream.shutdown().await;
                }
            }
            Err((status, why)) => {
                let (log, quiet) = asker
                    .refusals
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .admit();
                let box_id = &asker.box_id;
                if quiet > 0 {
                    tracing::warn!(%box_id, refused = quiet, "AWS token refusals not logged (over {} per {:?})",
                        crate::meter::REFUSALS_LOGGED, crate::meter::REFUSAL_LOG_INTERVAL);
                }
                if log {
                    tracing::warn!(%box_id, status, reason = %why, "no AWS token for the box");
                }
                incoming.refuse(status, &why);
            }
        }
    }

    /// A token for the box, or why not: past its rate, or refused lately
    /// (kept for [`REFUSAL_KEPT`]), without a read.
    async fn token(&self, asker: &Asker) -> Result<AwsToken, (u16, String)> {
        if let Some(refused) = asker.kept_refusal() {
            return Err(refused);
        }
        {
            let mut bucket = asker.bucket.lock().unwrap_or_else(PoisonError::into_inner);
            if !bucket.take() {
                return Err((
                    code::TOO_MANY_STREAMS,
                    format!(
                        "this box asked for AWS tokens faster than {} (after {BURST} at once): \
                         a token lasts {} minutes",
                        bucket.rate(),
                        TOKEN_TTL.as_secs() / 60
                    ),
                ));
            }
        }
        let checked = self.check(asker).await;
        if let Err((status, why)) = &checked {
            *asker.refused.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((Instant::now(), *status, why.clone()));
        }
        checked?;
        self.sign(asker).await
    }

    /// Whether the box's environment is still the one it started in and
    /// still names its role.
    async fn check(&self, asker: &Asker) -> Result<(), (u16, String)> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let (store, account, name) = (
            self.store.clone(),
            asker.account.clone(),
            asker.environment.clone(),
        );
        let found = blocking(move || store.environment(&account, &name))
            .await
            .map_err(|e| {
                (
                    code::UNAVAILABLE,
                    format!("cannot read the environment: {e}"),
                )
            })?;
        let env = &asker.environment;
        let Some(found) = found else {
            return Err((
                code::NOT_FOUND,
                format!("environment {env:?} was deleted: its boxes get no more AWS credentials"),
            ));
        };
        if asker
            .role
            .environment_id
            .as_ref()
            .is_some_and(|id| id != found.id.as_str())
        {
            return Err((
                code::NOT_FOUND,
                format!(
                    "environment {env:?} was deleted and made again since this box started: \
                     its boxes get no more AWS credentials (start a new box)"
                ),
            ));
        }
        match found.aws_role_arn {
            Some(role) if role == asker.role.role_arn => Ok(()),
            Some(role) => Err((
                code::FORBIDDEN,
                format!(
                    "environment {env:?} names the AWS role {role} now, not {}: \
                     start a new box to take the new role",
                    asker.role.role_arn
                ),
            )),
            None => Err((
                code::FORBIDDEN,
                format!(
                    "environment {env:?} no longer names an AWS role: its boxes get no more AWS credentials"
                ),
            )),
        }
    }

    /// The token, its role, session and STS endpoint.
    async fn sign(&self, asker: &Asker) -> Result<AwsToken, (u16, String)> {
        let claims = Claims {
            subject: subject(&asker.account, &asker.environment),
            audience: AUDIENCE.to_owned(),
            ttl: TOKEN_TTL,
        };
        let token = self
            .issuer
            .sign(&claims)
            .await
            .map_err(|e| (code::UNAVAILABLE, e.to_string()))?;
        Ok(AwsToken {
            token,
            role_arn: asker.role.role_arn.clone(),
            session_name: session_name(asker.box_id.as_str()),
            sts_url: self
                .endpoint_url
                .clone()
                .unwrap_or_else(|| sts_url(asker.role.region.as_deref())),
            duration_seconds: self.session_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_urls_are_regional() {
        assert_eq!(
            sts_url(Some("ap-northeast-1")),
            "https://sts.ap-northeast-1.amazonaws.com/"
        );
        assert_eq!(
            sts_url(Some("cn-north-1")),
            "https://sts.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(sts_url(None), "https://sts.amazonaws.com/");
    }
}

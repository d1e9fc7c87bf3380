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
//! The environment is read again for every token: a deleted environment's
//! boxes get no more tokens (their credentials end within the hour).

use crate::blocking::blocking;
use crate::environments::claim::ClaimedAws;
use crate::ids::{AccountId, BoxId};
use crate::oidc::{Claims, Issuer, TOKEN_TTL};
use crate::store::Store;
use psbx_wire::boxd::AwsToken;
use psbx_wire::frame::code;
use psbx_wire::mux::Incoming;

/// The audience STS expects of a web identity token.
pub const AUDIENCE: &str = "sts.amazonaws.com";
/// How long boxd may take to end its (empty) request.
const QUERY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a box's credentials last by default (the role's usual
/// `MaxSessionDuration`, `deploy/aws/box-role.yaml`).
pub const DEFAULT_SESSION_SECONDS: u32 = 3600;

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
}

/// The box an `aws:token` stream comes from.
pub struct Asker {
    pub box_id: BoxId,
    pub account: AccountId,
    pub environment: String,
    pub role: ClaimedAws,
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
        }
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
                tracing::warn!(box_id = %asker.box_id, status, reason = %why, "no AWS token for the box");
                incoming.refuse(status, &why);
            }
        }
    }

    async fn token(&self, asker: &Asker) -> Result<AwsToken, (u16, String)> {
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
        if found.is_none() {
            return Err((
                code::NOT_FOUND,
                format!(
                    "environment {:?} was deleted: its boxes get no more AWS credentials",
                    asker.environment
                ),
            ));
        }
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

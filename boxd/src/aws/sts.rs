//! The one AWS call boxd makes: STS `AssumeRoleWithWebIdentity`, which AWS
//! takes unsigned (the identity token is the proof), so no SDK: a form POST
//! over the box's own network (the STS endpoint is on the internet) and its
//! XML answer read with `roxmltree`.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, StatusCode};
use psbx_wire::boxd::AwsToken;
use std::time::Duration;

/// The whole call, connection included.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest answer read.
const MAX_ANSWER: usize = 256 * 1024;

/// Temporary credentials of the role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    /// As STS wrote it (ISO 8601), handed on as is.
    pub expiration_text: String,
    pub expiration: DateTime<Utc>,
    pub role_arn: String,
}

/// Why there are no credentials, in AWS's terms where AWS gave them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StsError {
    /// STS refused: its error code and message.
    #[error("STS refused AssumeRoleWithWebIdentity for {role}: {code}: {message}")]
    Refused {
        role: String,
        code: String,
        message: String,
    },
    #[error("STS at {url} could not be asked: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("STS at {url} answered what is not an AssumeRoleWithWebIdentity result: {reason}")]
    Answer { url: String, reason: String },
}

pub type Client = hyper_util::client::legacy::Client<crate::privnet::external::Timed, Full<Bytes>>;

/// The form body of the call.
pub fn form(token: &AwsToken) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "AssumeRoleWithWebIdentity")
        .append_pair("Version", "2011-06-15")
        .append_pair("RoleArn", &token.role_arn)
        .append_pair("RoleSessionName", &token.session_name)
        .append_pair("WebIdentityToken", &token.token)
        .append_pair("DurationSeconds", &token.duration_seconds.to_string())
        .finish()
}

/// Trades `token` for the role's credentials.
pub async fn assume(client: &Client, token: &AwsToken) -> Result<Credentials, StsError> {
    let url = token.sts_url.clone();
    let unreachable = |reason: String| StsError::Unreachable {
        url: url.clone(),
        reason,
    };
    let request = Request::post(&token.sts_url)
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .header("accept", "text/xml")
        .body(Full::new(Bytes::from(form(token))))
        .map_err(|e| unreachable(e.to_string()))?;
    let call = async {
        let answer = client
            .request(request)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = answer.status();
        let body = Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok::<_, StsError>((status, body))
    };
    let (status, body) = tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| unreachable(format!("no answer in {} s", CALL_TIMEOUT.as_secs())))??;
    let text = String::from_utf8_lossy(&body);
    read_answer(status, &text, &token.role_arn).map_err(|e| match e {
        Read::Refused(code, message) => StsError::Refused {
            role: token.role_arn.clone(),
            code,
            message,
        },
        Read::Unreadable(reason) => StsError::Answer { url, reason },
    })
}

/// What an answer could not give.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Refused(String, String),
    Unreadable(String),
}

/// The credentials in an STS answer, or its error.
fn read_answer(status: StatusCode, text: &str, role_arn: &str) -> Result<Credentials, Read> {
    let document = roxmltree::Document::parse(text).map_err(|e| Read::Unreadable(e.to_string()))?;
    let find = |name: &str| {
        document
            .descendants()
            .find(|n| n.has_tag_name(name))
            .and_then(|n| n.text())
            .map(|t| t.trim().to_owned())
    };
    if !status.is_success() {
        return Err(match find("Code") {
            Some(code) => Read::Refused(code, find("Message").unwrap_or_default()),
            None => Read::Unreadable(format!("HTTP {status} without an AWS error")),
        });
    }
    let field = |name: &str| {
        find(name).ok_or_else(|| Read::Unreadable(format!("the answer has no {name}")))
    };
    let expiration_text = field("Expiration")?;
    let expiration = DateTime::parse_from_rfc3339(&expiration_text)
        .map_err(|e| Read::Unreadable(format!("Expiration {expiration_text:?}: {e}")))?
        .with_timezone(&Utc);
    Ok(Credentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: field("SessionToken")?,
        expiration_text,
        expiration,
        role_arn: role_arn.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = "arn:aws:iam::123456789012:role/box";

    #[test]
    fn the_form_carries_the_token_encoded() {
        let token = AwsToken {
            token: "a.b+c/d=".into(),
            role_arn: ROLE.into(),
            session_name: "psbx-box_1".into(),
            sts_url: "https://sts.us-east-1.amazonaws.com/".into(),
            duration_seconds: 3600,
        };
        assert_eq!(
            form(&token),
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15\
             &RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fbox\
             &RoleSessionName=psbx-box_1&WebIdentityToken=a.b%2Bc%2Fd%3D&DurationSeconds=3600"
        );
    }

    #[test]
    fn credentials_are_read_from_the_result() {
        let xml = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <SessionToken>FQoGZXIvYXdzE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI</SecretAccessKey>
      <Expiration>2026-12-02T16:00:00.5Z</Expiration>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
    </Credentials>
    <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/box/psbx-box_1</Arn></AssumedRoleUser>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"#;
        let c = read_answer(StatusCode::OK, xml, ROLE).unwrap();
        assert_eq!(c.access_key_id, "ASIAEXAMPLE");
        assert_eq!(c.secret_access_key, "wJalrXUtnFEMI");
        assert_eq!(c.session_token, "FQoGZXIvYXdzE");
        assert_eq!(c.expiration_text, "2026-12-02T16:00:00.5Z");
        assert_eq!(c.expiration.timestamp(), 1_796_227_200);
    }

    #[test]
    fn refusals_keep_aws_code_and_message() {
        let xml = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>
<Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>
<RequestId>x</RequestId></ErrorResponse>"#;
        assert_eq!(
            read_answer(StatusCode::FORBIDDEN, xml, ROLE),
            Err(Read::Refused(
                "AccessDenied".into(),
                "Not authorized to perform sts:AssumeRoleWithWebIdentity".into()
            ))
        );
        assert!(matches!(
            read_answer(StatusCode::BAD_GATEWAY, "<html/>", ROLE),
            Err(Read::Unreadable(_))
        ));
        assert!(matches!(
            read_answer(StatusCode::OK, "<Result/>", ROLE),
            Err(Read::Unreadable(_))
        ));
    }
}

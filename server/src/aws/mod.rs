//! The AWS calls psbx makes for an account (environments.txt, "Import
//! service settings from AWS"): the server's only module that uses the AWS
//! SDK, so its STS, ECS, SSM and Secrets Manager crates are used nowhere
//! else (the S3 storage of files is `psbx_actors::storage`'s).
//!
//! psbx signs in to an account's AWS by assuming the read-only role the
//! account created, with the account's ExternalId: a value derived from the
//! master key and the account id (stable, never stored, unguessable by
//! another account). psbx's own identity — the principal the role trusts,
//! `aws.principal_arn` — comes from the SDK's default credential chain
//! (environment, profile, the instance's role). Every read assumes the role
//! afresh ([`Aws::assume`], a [`Session`] of 15 minutes kept in memory only),
//! then reads ECS (`ecs`) and the values its task definitions refer to
//! (`values`). `aws.endpoint_url` sends every call to one endpoint instead of
//! AWS's (a local emulator in tests). TLS is rustls with ring, the
//! workspace's provider.
//!
//! psbx is a deputy with its own AWS identity (review-2 M5): a role in that
//! identity's account, whose trust policy trusts the account or psbx itself
//! without an ExternalId condition, would let any tenant read the
//! operator's own services and secrets. So a role in `aws.principal_arn`'s
//! account, or in one of `aws.denied_accounts`, is refused before anything
//! is asked of AWS ([`Aws::denial`]: for `PUT /v1/aws`, every assume, and an
//! environment's `awsRoleArn`). psbx's identity should still be a dedicated
//! principal in an otherwise empty account, allowed only `sts:AssumeRole`,
//! with an explicit Deny on the operator's own accounts (README).
//!
//! The roles themselves are made by the account, from psbx's CloudFormation
//! templates: [`templates`] builds them into the binary (served at
//! `/aws/templates/`) with the CLI lines that create them.

pub mod ecs;
pub mod templates;
pub mod values;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_sts::error::ProvideErrorMetadata;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use psbx_actors::ids::AccountId;
use psbx_actors::secrets::vault::Vault;

/// What the account's role must allow (the read-only template grants it).
pub const READ_ONLY_ACTIONS: [&str; 7] = [
    "ecs:ListClusters",
    "ecs:ListServices",
    "ecs:DescribeServices",
    "ecs:DescribeTaskDefinition",
    "ssm:GetParameters",
    "secretsmanager:GetSecretValue",
    "kms:Decrypt",
];

/// Why a call to AWS failed, in AWS's own terms.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// AWS answered with an error (`code`, `message` as AWS gave them).
    #[error("AWS refused {action}: {code}: {message}")]
    Refused {
        action: &'static str,
        code: String,
        message: String,
    },
    /// AWS could not be reached, or answered what the SDK could not read.
    #[error("cannot reach AWS for {action}: {reason}")]
    Unreachable {
        action: &'static str,
        reason: String,
    },
    /// The role is in an account psbx never acts in (its own, or one the
    /// operator denied): nothing was asked of AWS.
    #[error("{0}")]
    Denied(String),
}

/// The SDK's settings for this server; cheap to clone.
#[derive(Clone, Debug)]
pub struct Aws {
    endpoint_url: Option<String>,
    principal_arn: Option<String>,
    template_url: Option<String>,
    /// Accounts whose roles are refused (`aws.denied_accounts`).
    denied_accounts: Vec<String>,
}

/// Whether `id` is an AWS account id: 12 digits.
pub fn is_account_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit())
}

/// The account id of an ARN (`arn:<partition>:<service>:<region>:<account>:…`),
/// when it has one.
pub fn account_of(arn: &str) -> Option<&str> {
    let fields: Vec<&str> = arn.splitn(6, ':').collect();
    match fields.as_slice() {
        ["arn", _, _, _, account, _] if is_account_id(account) => Some(account),
        _ => None,
    }
}

/// The account's role, assumed: AWS's answer to who psbx is now, and the
/// SDK configuration that calls AWS as that role.
#[derive(Debug, Clone)]
pub struct Session {
    /// `arn:aws:sts::<account>:assumed-role/<role>/<session>`.
    pub arn: String,
    config: SdkConfig,
}

impl Session {
    /// The configuration for calls in `region` (a task definition may refer
    /// to parameters and secrets of another region).
    fn in_region(&self, region: &str) -> SdkConfig {
        self.config
            .to_builder()
            .region(Region::new(region.to_owned()))
            .build()
    }

    pub fn region(&self) -> &str {
        self.config.region().map(Region::as_ref).unwrap_or_default()
    }
}

impl Aws {
    pub fn new(config: &crate::config::AwsConfig) -> Self {
        Self {
            endpoint_url: config.endpoint_url.clone(),
            principal_arn: config.principal_arn.clone(),
            template_url: config.readonly_role_template_url.clone(),
            denied_accounts: config.denied_accounts.clone(),
        }
    }

    /// Why psbx refuses `role_arn` (`what` names the field, such as
    /// `roleArn`): a role in psbx's own account or a denied one; `None`
    /// when it may be used.
    pub fn denial(&self, what: &str, role_arn: &str) -> Option<String> {
        let account = account_of(role_arn)?;
        if self.principal_arn.as_deref().and_then(account_of) == Some(account) {
            return Some(format!(
                "{what} {role_arn:?} is in AWS account {account}, psbx's own (aws.principal_arn): \
                 psbx never uses roles there; create the role in your own AWS account"
            ));
        }
        self.denied_accounts.iter().any(|d| d == account).then(|| {
            format!(
                "{what} {role_arn:?} is in AWS account {account}, whose roles this server's \
                 operator does not allow (aws.denied_accounts); use a role in your own AWS account"
            )
        })
    }

    /// The principal accounts' roles must trust, as configured.
    pub fn principal_arn(&self) -> Option<&str> {
        self.principal_arn.as_deref()
    }

    /// The account's ExternalId: `psbx-` and 32 hex digits derived from the
    /// master key and the account id.
    pub fn external_id(vault: &Vault, account: &AccountId) -> String {
        let derived = vault.derive("aws-external-id", account.as_str().as_bytes());
        format!("psbx-{}", hex::encode(&derived[..16]))
    }

    /// A CloudFormation quick-create link for the read-only role, with the
    /// principal and ExternalId filled in (none without a published template
    /// or a configured principal).
    pub fn quick_create_url(&self, external_id: &str, region: Option<&str>) -> Option<String> {
        let template = self.template_url.as_deref()?;
        let principal = self.principal_arn.as_deref()?;
        crate::server_info::quick_create_url(
            template,
            "psbx-readonly",
            region,
            &[("TrustedPrincipal", principal), ("ExternalId", external_id)],
        )
    }

    /// The SDK configuration for `region` with psbx's own credentials.
    async fn sdk(&self, region: &str) -> aws_config::SdkConfig {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .region(Region::new(region.to_owned()));
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        loader.load().await
    }

    /// Assumes `role_arn` with the account's ExternalId, as psbx does before
    /// every read: proof that the role trusts psbx, and the credentials to
    /// read with.
    pub async fn assume(
        &self,
        role_arn: &str,
        region: &str,
        external_id: &str,
        account: &AccountId,
    ) -> Result<Session, AwsError> {
        const ACTION: &str = "sts:AssumeRole";
        if let Some(why) = self.denial("the role", role_arn) {
            return Err(AwsError::Denied(why));
        }
        let base = self.sdk(region).await;
        let answer = aws_sdk_sts::Client::new(&base)
            .assume_role()
            .role_arn(role_arn)
            .role_session_name(format!("psbx-{}", account.as_str()))
            .external_id(external_id)
            .duration_seconds(900)
            .send()
            .await
            .map_err(|e| refused(ACTION, e))?;
        let arn = answer
            .assumed_role_user()
            .map(|u| u.arn().to_owned())
            .unwrap_or_default();
        let Some(keys) = answer.credentials() else {
            return Err(AwsError::Unreachable {
                action: ACTION,
                reason: "the answer held no credentials".to_owned(),
            });
        };
        let credentials = Credentials::new(
            keys.access_key_id(),
            keys.secret_access_key(),
            Some(keys.session_token().to_owned()),
            std::time::SystemTime::try_from(*keys.expiration()).ok(),
            "psbx-assumed-role",
        );
        let config = base
            .to_builder()
            .credentials_provider(SharedCredentialsProvider::new(credentials))
            .build();
        Ok(Session { arn, config })
    }
}

/// An SDK error as AWS gave it: its code and message, or why no answer came.
pub(crate) fn refused<E>(action: &'static str, e: aws_sdk_sts::error::SdkError<E>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e {
        aws_sdk_sts::error::SdkError::ServiceError(service) => {
            let err = service.err();
            // The SDK reads AWS's own error shape; an answer in another shape
            // (an emulator's `<Errors><Error>`) still has its Code and Message.
            let body = service.raw().body().bytes().unwrap_or_default();
            let (code, message) = match (err.code(), err.message()) {
                (Some(code), message) => (code.to_owned(), message.map(str::to_owned)),
                (None, _) => xml_error(body)
                    .unwrap_or_else(|| (format!("HTTP {}", service.raw().status().as_u16()), None)),
            };
            AwsError::Refused {
                action,
                code,
                message: message.unwrap_or_else(|| "no message".to_owned()),
            }
        }
        // An error body the SDK could not read at all (an emulator's XML
        // for a JSON service): AWS's answer still, when it has a Code.
        aws_sdk_sts::error::SdkError::ResponseError(response) => {
            match xml_error(response.raw().body().bytes().unwrap_or_default()) {
                Some((code, message)) => AwsError::Refused {
                    action,
                    code,
                    message: message.unwrap_or_else(|| "no message".to_owned()),
                },
                None => AwsError::Unreachable {
                    action,
                    reason: format!(
                        "AWS answered HTTP {} in a form psbx cannot read",
                        response.raw().status().as_u16()
                    ),
                },
            }
        }
        other => AwsError::Unreachable {
            action,
            reason: aws_sdk_sts::error::DisplayErrorContext(&other).to_string(),
        },
    }
}

/// The `Code` and `Message` of an XML error body, wherever they are in it.
fn xml_error(body: &[u8]) -> Option<(String, Option<String>)> {
    let text = std::str::from_utf8(body).ok()?;
    let doc = roxmltree::Document::parse(text).ok()?;
    let find = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name(name))
            .and_then(|n| n.text())
            .map(str::to_owned)
    };
    Some((find("Code")?, find("Message")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_ids_are_stable_per_account_and_differ_between_accounts() {
        let vault = Vault::from_key(&[3u8; 32]);
        let a = AccountId::parse("acct_a").unwrap();
        let b = AccountId::parse("acct_b").unwrap();
        let id = Aws::external_id(&vault, &a);
        assert_eq!(id, Aws::external_id(&vault, &a));
        assert_ne!(id, Aws::external_id(&vault, &b));
        assert!(id.starts_with("psbx-") && id.len() == 37, "{id}");
        let other_key = Vault::from_key(&[4u8; 32]);
        assert_ne!(id, Aws::external_id(&other_key, &a));
    }

    #[test]
    fn error_bodies_in_either_shape_give_code_and_message() {
        let aws = br#"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>no</Message></Error></ErrorResponse>"#;
        let moto = br#"<?xml version="1.0"?><ErrorResponse><Errors><Error><Code>AccessDenied</Code><Message>User: x is not authorized</Message></Error></Errors></ErrorResponse>"#;
        assert_eq!(
            xml_error(aws),
            Some(("AccessDenied".into(), Some("no".into())))
        );
        assert_eq!(
            xml_error(moto),
            Some((
                "AccessDenied".into(),
                Some("User: x is not authorized".into())
            ))
        );
        assert_eq!(xml_error(b"not xml"), None);
    }

    #[test]
    fn roles_in_psbx_s_own_or_denied_accounts_are_refused() {
        let aws = Aws {
            endpoint_url: None,
            principal_arn: Some("arn:aws:iam::111122223333:role/psbx".into()),
            template_url: None,
            denied_accounts: vec!["444455556666".into()],
        };
        let own = aws
            .denial("roleArn", "arn:aws:iam::111122223333:role/x")
            .unwrap();
        assert!(
            own.contains("111122223333") && own.contains("psbx's own"),
            "{own}"
        );
        let denied = aws
            .denial("roleArn", "arn:aws-cn:iam::444455556666:role/x")
            .unwrap();
        assert!(denied.contains("aws.denied_accounts"), "{denied}");
        assert_eq!(
            aws.denial("roleArn", "arn:aws:iam::777788889999:role/x"),
            None
        );
        assert_eq!(
            account_of("arn:aws:sts::111122223333:assumed-role/psbx/i-1"),
            Some("111122223333")
        );
        assert_eq!(account_of("arn:aws:s3:::bucket"), None);
        assert_eq!(account_of("111122223333"), None);
    }

    #[test]
    fn the_quick_create_link_names_the_principal_and_external_id() {
        let aws = Aws {
            endpoint_url: None,
            principal_arn: Some("arn:aws:iam::111122223333:root".into()),
            template_url: Some("https://b.s3.amazonaws.com/readonly-role.yaml".into()),
            denied_accounts: vec![],
        };
        let link = aws
            .quick_create_url("psbx-abc", Some("ap-northeast-1"))
            .unwrap();
        assert!(link.starts_with(
            "https://console.aws.amazon.com/cloudformation/home?region=ap-northeast-1#/stacks/quickcreate?"
        ));
        assert!(link.contains("param_ExternalId=psbx-abc"), "{link}");
        assert!(
            link.contains("param_TrustedPrincipal=arn%3Aaws%3Aiam%3A%3A111122223333%3Aroot"),
            "{link}"
        );
        let no_template = Aws {
            template_url: None,
            ..aws
        };
        assert_eq!(no_template.quick_create_url("x", None), None);
    }
}

//! What boxd and the server exchange for the box's AWS role: the identity
//! token boxd asks for (`aws:token`, an [`super::Outbound`] stream it opens) and
//! the credentials endpoint it serves in the box with what the claim gave it
//! ([`BoxAws`]). boxd's side is `boxd/src/aws/`; kept apart from the
//! services because the stream runs the other way.

use serde::{Deserialize, Serialize};

/// The target of [`super::Outbound::AwsToken`].
pub const AWS_TOKEN_TARGET: &str = "aws:token";

/// What boxd needs for one `AssumeRoleWithWebIdentity` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsToken {
    /// The signed identity token (a JWT, ten minutes).
    pub token: String,
    pub role_arn: String,
    /// `psbx-<box id>`.
    pub session_name: String,
    /// The STS endpoint the box sends it to (`https://sts.<region>.amazonaws.com/`).
    pub sts_url: String,
    /// How long the credentials are asked for.
    pub duration_seconds: u32,
}

/// Where boxd serves the role's credentials, in the form of ECS's container
/// credentials endpoint: the address is on the box's loopback device, so its
/// programs and its containers (through their bridge) reach it, and nothing
/// outside the box does.
pub const AWS_CREDENTIALS_ADDR: std::net::Ipv4Addr = std::net::Ipv4Addr::new(169, 254, 170, 2);
/// The path of the credentials on [`AWS_CREDENTIALS_ADDR`] (port 80).
pub const AWS_CREDENTIALS_PATH: &str = "/v1/credentials";

/// `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
pub fn aws_credentials_uri() -> String {
    format!("http://{AWS_CREDENTIALS_ADDR}{AWS_CREDENTIALS_PATH}")
}

/// The box's AWS role as a claim gives it to boxd: the environment variables
/// the server also wrote into every settings file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxAws {
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`: what a request for the
    /// credentials must carry in its `Authorization` header.
    pub authorization: String,
    /// `AWS_REGION` and `AWS_DEFAULT_REGION` (none: the environment names none).
    pub region: Option<String>,
}

impl BoxAws {
    /// The variables SDKs and the CLI read, in the order they are written.
    pub fn variables(&self) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI".to_owned(),
                aws_credentials_uri(),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN".to_owned(),
                self.authorization.clone(),
            ),
        ];
        if let Some(region) = &self.region {
            vars.push(("AWS_REGION".to_owned(), region.clone()));
            vars.push(("AWS_DEFAULT_REGION".to_owned(), region.clone()));
        }
        vars
    }

    /// `vars` (a service's settings, the commands' environment) with the
    /// role's variables: the credentials' always (any of the same name
    /// replaced), the region's where `vars` sets none of its own.
    pub fn add_to(&self, vars: &mut Vec<(String, String)>) {
        vars.retain(|(k, _)| !k.starts_with("AWS_CONTAINER_"));
        for (key, value) in self.variables() {
            if !vars.iter().any(|(k, _)| *k == key) {
                vars.push((key, value));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roles_variables_replace_credentials_and_keep_a_services_region() {
        let aws = BoxAws {
            authorization: "tok".into(),
            region: Some("us-east-1".into()),
        };
        let mut vars = vec![
            ("AWS_REGION".to_owned(), "eu-west-1".to_owned()),
            (
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI".to_owned(),
                "/v2/x".to_owned(),
            ),
            ("PORT".to_owned(), "8080".to_owned()),
        ];
        aws.add_to(&mut vars);
        let got: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            got,
            [
                "AWS_REGION=eu-west-1",
                "PORT=8080",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.2/v1/credentials",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN=tok",
                "AWS_DEFAULT_REGION=us-east-1",
            ]
        );
    }
}

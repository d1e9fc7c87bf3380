//! The shapes of environments on the API: what an environment, its
//! connections (addresses, status, never a token but once) and its services
//! (variable names only) read as, and the bodies that create and change
//! them, with the checks of their fields ([`check_change`], [`role_arn_ok`],
//! [`region_ok`]). `routes::environments` answers them, and MCP's
//! `sandbox_environments` lists the same views.

use crate::error::ApiError;
use crate::server_info::ServerInfo;
use chrono::{DateTime, Utc};
use psbx_actors::environments::address::RawEndpoint;
use psbx_actors::environments::service_settings::SourceRef;
use psbx_actors::environments::{Connection, Environment};
use psbx_actors::ids::ConnectorToken;
use psbx_actors::store::{EnvironmentChange, ServiceRecord};
use psbx_wire::Endpoint;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointView {
    pub host: String,
    pub port: u16,
}

impl From<&Endpoint> for EndpointView {
    fn from(e: &Endpoint) -> Self {
        Self {
            host: e.host.to_string(),
            port: e.port,
        }
    }
}

/// A connection: one network, one connector token (never shown here).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionView {
    /// `conn_...`
    pub id: String,
    pub name: String,
    pub endpoints: Vec<EndpointView>,
    /// Whether a connector of this connection is connected now.
    pub online: bool,
    /// Open connector sessions on the replica that answered (every copy of the connector).
    pub sessions: u32,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub connector_version: Option<String>,
    pub rtt_ms: Option<f64>,
    pub created_at: DateTime<Utc>,
    pub token_rotated_at: Option<DateTime<Utc>>,
}

impl From<&Connection> for ConnectionView {
    fn from(c: &Connection) -> Self {
        Self {
            id: c.record.id.to_string(),
            name: c.record.name.clone(),
            endpoints: c.record.endpoints.iter().map(EndpointView::from).collect(),
            online: c.status.online,
            sessions: c.status.sessions,
            last_seen_at: c.status.last_seen_at,
            connector_version: c.status.connector_version.clone(),
            rtt_ms: c.status.rtt_ms,
            created_at: c.record.created_at,
            token_rotated_at: c.record.token_rotated_at,
        }
    }
}

/// A service's settings: variable names only.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    pub name: String,
    pub keys_count: usize,
    pub keys: Vec<String>,
    /// `dotenv` (uploaded) or `ecs` (imported).
    pub source: String,
    /// Where imported settings came from (null for uploads).
    pub source_ref: Option<SourceRefView>,
    pub updated_at: DateTime<Utc>,
}

/// The ECS service a service's settings were imported from; `sync` reads it again.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceRefView {
    /// `ecs`.
    pub kind: String,
    pub region: String,
    pub cluster: String,
    /// The ECS service's name.
    pub service: String,
    /// The task definition read, with its revision.
    pub task_definition: String,
    /// The container read (give `container` to import another).
    pub container: String,
    /// Every container of the task definition.
    pub containers: Vec<String>,
    /// What could not be read ("Not imported"), with the reason.
    pub skipped: Vec<SkippedView>,
}

/// Something the task definition refers to that was not imported.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedView {
    /// `environmentFile`.
    pub kind: String,
    /// As the task definition names it (`arn:aws:s3:::bucket/app.env`).
    pub source: String,
    pub reason: String,
}

impl From<&ServiceRecord> for ServiceView {
    fn from(s: &ServiceRecord) -> Self {
        let keys: Vec<String> =
            serde_json::from_value(s.variable_names.clone()).unwrap_or_default();
        Self {
            name: s.name.clone(),
            keys_count: keys.len(),
            keys,
            source: s.source.clone(),
            source_ref: SourceRef::from_value(s.source_ref.as_ref()).map(|r| SourceRefView {
                kind: r.kind,
                region: r.region,
                cluster: r.cluster,
                service: r.service,
                task_definition: r.task_definition,
                container: r.container,
                containers: r.containers,
                skipped: r
                    .skipped
                    .into_iter()
                    .map(|k| SkippedView {
                        kind: k.kind,
                        source: k.source,
                        reason: k.reason,
                    })
                    .collect(),
            }),
            updated_at: s.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentView {
    pub name: String,
    /// Addresses a box can reach now: those of connections that are online.
    pub reachable: Vec<EndpointView>,
    /// True when any connection has a connector online.
    pub connector_online: bool,
    pub connections: Vec<ConnectionView>,
    pub services: Vec<ServiceView>,
    pub external_base_url: Option<String>,
    /// The OIDC subject of this environment's boxes: `tenant:<account>:env:<environment>`.
    pub aws_subject: String,
    /// A CloudFormation quick-create link for the boxes' role (when the operator
    /// configured the template's location).
    pub aws_box_role_quick_create_url: Option<String>,
    /// Where this server serves the boxes' role's CloudFormation template
    /// (`<public url>/aws/templates/box-role.yaml`, no credential).
    pub aws_box_role_template_url: String,
    /// A shell command line that downloads that template with curl and
    /// creates the stack `psbx-box-role-<environment>` (characters other than
    /// letters and digits as '-') with the AWS CLI, its parameters filled in
    /// (OidcProvider: this server; Subject: `awsSubject`; CreateProvider
    /// "true": change it to "false" when your AWS account has psbx's OIDC
    /// provider already, as after another environment's stack), values
    /// shell-quoted, in `awsRegion` (else us-east-1). Run it with credentials
    /// of the AWS account the boxes should act in.
    pub aws_box_role_create_stack_command: String,
    /// A shell command line that waits for that stack and prints its RoleArn
    /// output: the `awsRoleArn` to `PUT`.
    pub aws_box_role_arn_command: String,
    pub aws_role_arn: Option<String>,
    pub aws_region: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl EnvironmentView {
    pub fn new(env: &Environment, info: &ServerInfo) -> Self {
        let r = &env.record;
        let connections: Vec<ConnectionView> =
            env.connections.iter().map(ConnectionView::from).collect();
        let reachable = env
            .connections
            .iter()
            .zip(&connections)
            .filter(|(_, view)| view.online)
            .flat_map(|(c, _)| c.record.endpoints.iter().map(EndpointView::from))
            .collect();
        let subject = psbx_actors::box_role::subject(&r.account_id, &r.name);
        let commands = crate::aws::templates::box_role(
            &info.public_url,
            &r.name,
            &subject,
            r.aws_region.as_deref(),
        );
        Self {
            name: r.name.clone(),
            reachable,
            connector_online: connections.iter().any(|c| c.online),
            services: env.services.iter().map(ServiceView::from).collect(),
            connections,
            external_base_url: r.external_base_url.clone(),
            aws_box_role_quick_create_url: info.aws_box_role_quick_create_url(
                &r.name,
                &subject,
                r.aws_region.as_deref(),
            ),
            aws_box_role_template_url: crate::aws::templates::template_url(
                &info.public_url,
                crate::aws::templates::BOX_ROLE_FILE,
            ),
            aws_box_role_create_stack_command: commands.create,
            aws_box_role_arn_command: commands.role_arn,
            aws_subject: subject,
            aws_role_arn: r.aws_role_arn.clone(),
            aws_region: r.aws_region.clone(),
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EnvironmentList {
    pub environments: Vec<EnvironmentView>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEnvironment {
    /// 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit, such as `dev`.
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
}

/// Present and null clears a field; absent leaves it as is.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateEnvironment {
    /// Where unchanged HTTP services live, `https://...`; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, pattern = "^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$")]
    pub external_base_url: Option<Option<String>>,
    /// `arn:aws:iam::<account>:role/<name>`; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, pattern = "^arn:aws[^:]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$")]
    pub aws_role_arn: Option<Option<String>>,
    /// Such as `ap-northeast-1`; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, pattern = "^[a-z0-9]+(-[a-z0-9]+)+-[0-9]+$")]
    pub aws_region: Option<Option<String>>,
}

pub fn check_change(
    body: UpdateEnvironment,
    aws: &crate::aws::Aws,
) -> Result<EnvironmentChange, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_request", m);
    if let Some(Some(url)) = &body.external_base_url {
        let ok = url::Url::parse(url)
            .ok()
            .is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        if !ok {
            return Err(bad(format!(
                "externalBaseUrl {url:?} is not an http:// or https:// URL, such as https://dev.example.com"
            )));
        }
    }
    if let Some(Some(arn)) = &body.aws_role_arn
        && !role_arn_ok(arn)
    {
        return Err(bad(format!(
            "awsRoleArn {arn:?} is not an IAM role ARN, such as arn:aws:iam::123456789012:role/psbx-boxes"
        )));
    }
    if let Some(Some(arn)) = &body.aws_role_arn
        && let Some(why) = aws.denial("awsRoleArn", arn)
    {
        return Err(ApiError::bad_request("aws_role_denied", why)
            .hint("give the environment a role in your own AWS account"));
    }
    if let Some(Some(region)) = &body.aws_region
        && !region_ok(region)
    {
        return Err(bad(format!(
            "awsRegion {region:?} is not an AWS region name, such as ap-northeast-1"
        )));
    }
    Ok(EnvironmentChange {
        external_base_url: body.external_base_url,
        aws_role_arn: body.aws_role_arn,
        aws_region: body.aws_region,
    })
}

pub fn role_arn_ok(arn: &str) -> bool {
    let mut parts = arn.splitn(6, ':');
    let fields: Vec<&str> = parts.by_ref().collect();
    matches!(fields.as_slice(), ["arn", partition, "iam", "", account, resource]
        if partition.starts_with("aws")
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-/".contains(&b))))
}

pub fn region_ok(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        && parts
            .last()
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// A connection just made (or its token rotated): the token and the command
/// that runs its connector. Shown this once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionWithToken {
    #[serde(flatten)]
    pub connection: ConnectionView,
    /// `psbx_conn_...`: keep it; it is not shown again (rotate to get a new one).
    pub token: String,
    /// Runs the connector in the network this connection reaches.
    pub run_command: String,
}

pub fn with_token(
    c: &Connection,
    token: &ConnectorToken,
    info: &ServerInfo,
) -> ConnectionWithToken {
    ConnectionWithToken {
        connection: ConnectionView::from(c),
        token: token.expose().to_owned(),
        run_command: info.connector_run_command(token.expose()),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateConnection {
    /// One per network, such as `aws` or `office`: 1 to 64 letters, digits,
    /// '-', '_' or '.', starting with a letter or digit.
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
}

/// An address a connection carries, as sent (the document's view of
/// [`RawEndpoint`], which the server checks).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct EndpointInput {
    /// A host name (labels of letters, digits, '-' and '_', not starting or
    /// ending with '-') or an IPv4 address; its pattern is
    /// `psbx_wire::HOST_NAME_PATTERN` (`patterns::constraints`).
    #[schema(min_length = 1, max_length = 253)]
    host: String,
    #[schema(minimum = 1, maximum = 65535)]
    port: u16,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutEndpoints {
    /// The whole list, at most 100, each address once: `[{"host": "db.internal", "port": 5432}]`.
    #[schema(value_type = Vec<EndpointInput>, max_items = 100)]
    pub endpoints: Vec<RawEndpoint>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutService {
    /// The service's settings as `.env` text: `KEY=value` lines, comments,
    /// `export ` prefixes, single- and double-quoted (multi-line) values.
    pub dotenv: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    pub service: String,
    pub variable: String,
}

/// An address found in the settings.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuggestedEndpoint {
    pub host: String,
    pub port: u16,
    /// The services and variables it was found in.
    pub sources: Vec<SourceView>,
    /// The connection that already lists it, if one does.
    pub listed_on: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SuggestedEndpoints {
    pub endpoints: Vec<SuggestedEndpoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_arns_and_regions_are_checked() {
        assert!(role_arn_ok("arn:aws:iam::123456789012:role/psbx-boxes"));
        assert!(role_arn_ok("arn:aws-cn:iam::123456789012:role/path/to/x_y"));
        assert!(!role_arn_ok("arn:aws:iam::12345:role/x"));
        assert!(!role_arn_ok("arn:aws:s3:::bucket"));
        assert!(!role_arn_ok("arn:aws:iam::123456789012:user/x"));
        assert!(!role_arn_ok("arn:aws:iam::123456789012:role/"));
        assert!(region_ok("ap-northeast-1"));
        assert!(region_ok("us-gov-west-1"));
        assert!(!region_ok("tokyo"));
        assert!(!region_ok("AP-NORTHEAST-1"));
    }
}

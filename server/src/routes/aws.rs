//! `/v1/aws`: the account's AWS, connected once (environments.txt, "Import
//! service settings from AWS"). `GET` gives what the read-only role must
//! trust — psbx's principal and the account's ExternalId — and how to create
//! it: the AWS CLI line that makes the stack from the template psbx serves
//! (`aws::templates`), so that a fresh installation offers a way without the
//! operator publishing anything, the line that prints the role's ARN, and the
//! console quick-create link when the operator published the template to S3.
//! Without a principal there is no role to create: the commands are null and
//! `hint` names the setting the operator sets. `PUT {roleArn, region}`
//! assumes the role once, and keeps it only when AWS let psbx in, saying in
//! AWS's terms why not.
//! `GET /v1/aws/ecs/services` lists what the connected role can see; the
//! imports that read one of them are in `imports`.

use crate::auth::Auth;
use crate::aws::{Aws, AwsError, READ_ONLY_ACTIONS, Session, templates};
use crate::error::ApiError;
use crate::server_info::ServerInfo;
use actix_web::http::StatusCode;
use actix_web::{get, put, web};
use chrono::{DateTime, Utc};
use psbx_actors::blocking::blocking;
use psbx_actors::ids::AccountId;
use psbx_actors::secrets::Secrets;
use psbx_actors::store::Store;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The account's AWS connection.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsView {
    /// What the role's trust policy must require as `sts:ExternalId`
    /// (stable for this account).
    pub external_id: String,
    /// The principal the role must trust (this server's AWS identity; null
    /// when the operator has not configured `aws.principal_arn`).
    pub principal_arn: Option<String>,
    /// A CloudFormation quick-create link for the read-only role, its
    /// parameters filled in (null unless the operator published the template
    /// to S3, `aws.readonly_role_template_url`, and set `aws.principal_arn`).
    pub quick_create_url: Option<String>,
    /// Where this server serves the read-only role's CloudFormation template
    /// (`<public url>/aws/templates/readonly-role.yaml`, no credential).
    pub template_url: String,
    /// A shell command line that downloads that template with curl and
    /// creates the stack `psbx-readonly` with the AWS CLI (`aws cloudformation
    /// create-stack`), every parameter filled in (TrustedPrincipal,
    /// ExternalId) and values shell-quoted, in the connected region (else
    /// us-east-1: IAM roles are global). Run it with credentials of the AWS
    /// account whose services you import. Null while `principalArn` is (see
    /// `hint`).
    pub create_stack_command: Option<String>,
    /// A shell command line that waits for that stack and prints its RoleArn
    /// output: the `roleArn` to `PUT`. Null while `principalArn` is.
    pub role_arn_command: Option<String>,
    /// Why there is nothing to create yet, and who can change it: set when
    /// the operator has not configured `aws.principal_arn`
    /// (`PSBX_AWS__PRINCIPAL_ARN`); null otherwise.
    pub hint: Option<String>,
    /// What the role must allow.
    pub required_actions: Vec<String>,
    /// The connected role, once `PUT` succeeded.
    pub role_arn: Option<String>,
    pub region: Option<String>,
    pub connected_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectAws {
    /// The role's ARN (the stack's RoleArn output).
    #[schema(pattern = "^arn:aws[^:]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$")]
    pub role_arn: String,
    /// The region of the account's ECS services (`ap-northeast-1`).
    #[schema(pattern = "^[a-z0-9]+(-[a-z0-9]+)+-[0-9]+$")]
    pub region: String,
}

impl From<AwsError> for ApiError {
    fn from(e: AwsError) -> Self {
        match &e {
            AwsError::Refused { .. } => Self::new(StatusCode::BAD_REQUEST, "aws_refused", e.to_string()),
            AwsError::Denied(why) => Self::new(StatusCode::BAD_REQUEST, "aws_role_denied", why.clone())
                .hint("create the role in your own AWS account, then PUT /v1/aws with its ARN"),
            AwsError::Unreachable { .. } => {
                Self::new(StatusCode::BAD_GATEWAY, "aws_unreachable", e.to_string())
                    .hint("retry in a moment; if it keeps failing, the operator should check the server's network to AWS")
            }
        }
    }
}

/// What `hint` says while psbx has no principal for roles to trust.
const NO_PRINCIPAL: &str = "this server has no AWS identity for a role to trust, so there is no role to create yet: \
     the operator sets aws.principal_arn (PSBX_AWS__PRINCIPAL_ARN) to the server's AWS principal and gives the server its credentials";

async fn view(
    aws: &Aws,
    info: &ServerInfo,
    secrets: &Secrets,
    store: &Store,
    account: &AccountId,
) -> Result<AwsView, ApiError> {
    let external_id = Aws::external_id(&secrets.vault(), account);
    let (s, a) = (store.clone(), account.clone());
    let row = blocking(move || s.account_aws(&a)).await?;
    let region = row.as_ref().map(|r| r.region.as_str());
    let commands =
        templates::readonly_role(&info.public_url, aws.principal_arn(), &external_id, region);
    Ok(AwsView {
        quick_create_url: aws.quick_create_url(&external_id, region),
        template_url: templates::template_url(&info.public_url, templates::READONLY_ROLE_FILE),
        hint: commands.is_none().then(|| NO_PRINCIPAL.to_owned()),
        create_stack_command: commands.as_ref().map(|c| c.create.clone()),
        role_arn_command: commands.map(|c| c.role_arn),
        external_id,
        principal_arn: aws.principal_arn().map(str::to_owned),
        required_actions: READ_ONLY_ACTIONS.iter().map(|a| (*a).to_owned()).collect(),
        role_arn: row.as_ref().map(|r| r.role_arn.clone()),
        region: row.as_ref().map(|r| r.region.clone()),
        connected_at: row.map(|r| r.connected_at),
    })
}

#[utoipa::path(
    tag = "aws",
    operation_id = "getAws",
    security(("api_key" = [])),
    responses((status = 200, body = AwsView))
)]
#[get("/aws")]
pub async fn get(
    Auth(who): Auth,
    aws: web::Data<Aws>,
    info: web::Data<ServerInfo>,
    secrets: web::Data<Secrets>,
    store: web::Data<Store>,
) -> Result<web::Json<AwsView>, ApiError> {
    Ok(web::Json(
        view(&aws, &info, &secrets, &store, &who.account_id).await?,
    ))
}

#[utoipa::path(
    tag = "aws",
    operation_id = "connectAws",
    request_body = ConnectAws,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "psbx assumed the role: it is connected", body = AwsView),
        (status = 400, description = "Not a role ARN or region (`invalid_request`), a role in psbx's own AWS account or one the operator denies (`aws_role_denied`, before AWS is asked), or AWS refused to let psbx assume the role (`aws_refused`, with AWS's code and message: the trust policy, the principal or the ExternalId)", body = crate::error::ErrorBody),
        (status = 502, description = "AWS could not be reached (`aws_unreachable`)", body = crate::error::ErrorBody),
        (status = 501, description = "This server offers no AWS: the operator has not given it an AWS identity (`aws_not_configured`); not a passing state, so not worth retrying until the operator sets `aws.principal_arn`", body = crate::error::ErrorBody),
    )
)]
#[put("/aws")]
pub async fn put(
    Auth(who): Auth,
    aws: web::Data<Aws>,
    info: web::Data<ServerInfo>,
    secrets: web::Data<Secrets>,
    store: web::Data<Store>,
    body: web::Json<ConnectAws>,
) -> Result<web::Json<AwsView>, ApiError> {
    let body = body.into_inner();
    if !crate::views::environments::role_arn_ok(&body.role_arn) {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "roleArn {:?} is not an IAM role ARN, such as arn:aws:iam::123456789012:role/psbx-readonly",
                body.role_arn
            ),
        ));
    }
    check_region(&body.region)?;
    if let Some(why) = aws.denial("roleArn", &body.role_arn) {
        return Err(AwsError::Denied(why).into());
    }
    let principal = configured(&aws)?;
    let external_id = Aws::external_id(&secrets.vault(), &who.account_id);
    let session = aws
        .assume(&body.role_arn, &body.region, &external_id, &who.account_id)
        .await
        .map_err(|e| {
            let hint = format!(
                "the role's trust policy must allow sts:AssumeRole to {principal} with the condition sts:ExternalId = {external_id} (GET /v1/aws)"
            );
            ApiError::from(e).hint(hint)
        })?;
    tracing::info!(account = %who.account_id, role = %body.role_arn, assumed = %session.arn, "connected the account's AWS");
    let (s, a) = (store.get_ref().clone(), who.account_id.clone());
    blocking(move || s.put_account_aws(&a, &body.role_arn, &body.region)).await?;
    Ok(web::Json(
        view(&aws, &info, &secrets, &store, &who.account_id).await?,
    ))
}

fn check_region(region: &str) -> Result<(), ApiError> {
    if crate::views::environments::region_ok(region) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_request",
            format!("region {region:?} is not an AWS region name, such as ap-northeast-1"),
        ))
    }
}

/// The principal accounts' roles trust, or 501 when the operator gave this
/// server no AWS identity (then nothing is sent to AWS).
fn configured(aws: &Aws) -> Result<&str, ApiError> {
    aws.principal_arn().ok_or_else(|| {
        // 501, not 503: the server lacks the feature until its operator
        // configures it; nothing the caller can retry into working.
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "aws_not_configured",
            "this server has no AWS identity for roles to trust",
        )
        .hint("the operator sets aws.principal_arn (and gives the server AWS credentials)")
    })
}

/// The account's connected role, assumed now, in `region` (the connected
/// region unless another is given).
pub(crate) async fn session(
    aws: &Aws,
    secrets: &Secrets,
    store: &Store,
    account: &AccountId,
    region: Option<&str>,
) -> Result<Session, ApiError> {
    configured(aws)?;
    if let Some(region) = region {
        check_region(region)?;
    }
    let (s, a) = (store.clone(), account.clone());
    let Some(row) = blocking(move || s.account_aws(&a)).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "aws_not_connected",
            "this account has not connected its AWS yet",
        )
        .hint("create the read-only role (GET /v1/aws gives the command that creates it), then PUT /v1/aws {roleArn, region}"));
    };
    let external_id = Aws::external_id(&secrets.vault(), account);
    aws.assume(
        &row.role_arn,
        region.unwrap_or(&row.region),
        &external_id,
        account,
    )
    .await
    .map_err(|e| {
        ApiError::from(e).hint(format!(
            "psbx could not assume {} any more: check that the role still exists and trusts psbx (GET /v1/aws), then PUT /v1/aws again",
            row.role_arn
        ))
    })
}

/// A call that AWS refused while reading: the hint names what the role must
/// allow.
pub(crate) fn read_refused(e: AwsError, session: &Session) -> ApiError {
    let hint = match &e {
        AwsError::Refused { action, .. } => format!(
            "the role ({}) must allow {action}: GET /v1/aws lists every action it needs",
            session.arn
        ),
        AwsError::Unreachable { .. } => {
            "retry in a moment; if it keeps failing, the operator should check the server's network to AWS".to_owned()
        }
        AwsError::Denied(_) => {
            "connect a role in your own AWS account (PUT /v1/aws)".to_owned()
        }
    };
    ApiError::from(e).hint(hint)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// The region to list (`ap-northeast-1`); the connected region when left out.
    #[param(pattern = "^[a-z0-9]+(-[a-z0-9]+)+-[0-9]+$")]
    pub region: Option<String>,
}

/// An ECS service the account's role can see.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EcsServiceView {
    /// The cluster's name: `cluster` of an import.
    pub cluster: String,
    /// The service's name: `service` of an import.
    pub service: String,
    pub service_arn: String,
    /// The task definition the service runs now.
    pub task_definition: Option<String>,
    /// `ACTIVE`, `DRAINING` or `INACTIVE`.
    pub status: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EcsServiceList {
    pub region: String,
    pub services: Vec<EcsServiceView>,
    /// True when there were more than 1000 services (only the first are listed).
    pub truncated: bool,
}

#[utoipa::path(
    tag = "aws",
    operation_id = "listEcsServices",
    params(ListQuery),
    security(("api_key" = [])),
    responses(
        (status = 200, body = EcsServiceList),
        (status = 400, description = "Not a region name (`invalid_request`), the connected role is in an account psbx does not use (`aws_role_denied`), or AWS refused a call (`aws_refused`, with AWS's code and message and the action the role must allow)", body = crate::error::ErrorBody),
        (status = 409, description = "The account has not connected its AWS (`aws_not_connected`): PUT /v1/aws first", body = crate::error::ErrorBody),
        (status = 502, description = "AWS could not be reached (`aws_unreachable`)", body = crate::error::ErrorBody),
        (status = 501, description = "This server offers no AWS: the operator has not given it an AWS identity (`aws_not_configured`); not a passing state, so not worth retrying until the operator sets `aws.principal_arn`", body = crate::error::ErrorBody),
    )
)]
#[get("/aws/ecs/services")]
pub async fn ecs_services(
    Auth(who): Auth,
    aws: web::Data<Aws>,
    secrets: web::Data<Secrets>,
    store: web::Data<Store>,
    query: web::Query<ListQuery>,
) -> Result<web::Json<EcsServiceList>, ApiError> {
    let session = session(
        &aws,
        &secrets,
        &store,
        &who.account_id,
        query.region.as_deref(),
    )
    .await?;
    let (services, truncated) = session
        .ecs_services()
        .await
        .map_err(|e| read_refused(e, &session))?;
    Ok(web::Json(EcsServiceList {
        region: session.region().to_owned(),
        services: services
            .into_iter()
            .map(|s| EcsServiceView {
                cluster: s.cluster,
                service: s.service,
                service_arn: s.service_arn,
                task_definition: s.task_definition,
                status: s.status,
            })
            .collect(),
        truncated,
    }))
}

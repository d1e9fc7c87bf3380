//! Service settings imported from ECS (environments.txt, "Import service
//! settings from AWS"): `POST /v1/environments/{env}/services/import` reads
//! an ECS service's current task definition with the account's connected
//! role and stores one container's settings under the service's name (or the
//! one given), sealed like uploaded settings, with where they came from
//! (`sourceRef`, what could not be read in `sourceRef.skipped`);
//! `POST /v1/environments/{env}/services/{name}/sync` reads the same service
//! and container again. The environment is checked before AWS is asked, and
//! nothing is stored unless every value was read.

use super::aws::{read_refused, session};
use crate::auth::Auth;
use crate::aws::ecs::{ReadError, TaskSettings};
use crate::aws::{Aws, Session};
use crate::error::ApiError;
use crate::views::environments::ServiceView;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, post, web};
use psbx_actors::environments::service_settings::SourceRef;
use psbx_actors::environments::{Environments, check_name};
use psbx_actors::ids::AccountId;
use psbx_actors::secrets::Secrets;
use psbx_actors::store::Store;
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportService {
    /// The ECS service's region; the connected region when left out.
    #[schema(pattern = "^[a-z0-9]+(-[a-z0-9]+)+-[0-9]+$")]
    pub region: Option<String>,
    /// The cluster's name or ARN (`GET /v1/aws/ecs/services` lists them).
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = "^(arn:[!-~]+|[A-Za-z0-9_-]{1,255})$"
    )]
    pub cluster: String,
    /// The ECS service's name or ARN.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = "^(arn:[!-~]+|[A-Za-z0-9_-]{1,255})$"
    )]
    pub service: String,
    /// The name to store the settings under (`/work/.sbx/env/<name>.env`);
    /// the ECS service's name when left out.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9][A-Za-z0-9._-]*$"
    )]
    pub name: Option<String>,
    /// The container whose settings to import, when the task definition has
    /// several; otherwise the one named like the service, else the first
    /// essential one (`sourceRef.container` says which was read).
    #[schema(min_length = 1, max_length = 255)]
    pub container: Option<String>,
}

/// An ECS cluster or service name, or an ARN.
fn ecs_name_ok(value: &str) -> bool {
    if let Some(rest) = value.strip_prefix("arn:") {
        return !rest.is_empty()
            && value.len() <= 2048
            && value.bytes().all(|b| b.is_ascii_graphic());
    }
    (1..=255).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Reads the service's settings and where they came from, saying what went
/// wrong in AWS's terms.
async fn read(
    session: &Session,
    cluster: &str,
    service: &str,
    container: Option<&str>,
) -> Result<(Vec<(String, String)>, SourceRef), ApiError> {
    let read: TaskSettings = session
        .read_service(cluster, service, container)
        .await
        .map_err(|e| match e {
            ReadError::Aws(e) => read_refused(e, session),
            ReadError::NotFound(message) => ApiError::not_found("ecs_service_not_found", message),
            ReadError::Unusable(message) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "not_importable",
                format!("{message}; nothing was stored"),
            ),
        })?;
    let source = SourceRef {
        kind: SourceRef::ECS.to_owned(),
        region: session.region().to_owned(),
        cluster: cluster.to_owned(),
        service: service.to_owned(),
        task_definition: read.task_definition,
        container: read.container,
        containers: read.containers,
        skipped: read.skipped,
    };
    Ok((read.vars, source))
}

/// Stores what was read; 201 when the name is new.
async fn store(
    envs: &Environments,
    account: &AccountId,
    env: &str,
    name: &str,
    (vars, source): (Vec<(String, String)>, SourceRef),
) -> Result<HttpResponse, ApiError> {
    let (new, record) = envs
        .put_imported_service(account, env, name, vars, &source)
        .await?;
    tracing::info!(
        %account, env, name, task_definition = %source.task_definition, container = %source.container,
        variables = record.variable_names.as_array().map_or(0, Vec::len), skipped = source.skipped.len(),
        "imported a service's settings from ECS"
    );
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(HttpResponse::build(status).json(ServiceView::from(&record)))
}

#[utoipa::path(tag = "environments", operation_id = "importService", request_body = ImportService,
    security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name")),
    responses(
        (status = 200, description = "Imported, replacing the settings stored under that name", body = ServiceView),
        (status = 201, description = "Imported under a new name", body = ServiceView),
        (status = 400, description = "A bad region or name (`invalid_request`), or AWS refused a call (`aws_refused`, with AWS's code and message and the action the role must allow)", body = crate::error::ErrorBody),
        (status = 404, description = "No such environment (`environment_not_found`), or no such cluster or service in the region (`ecs_service_not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The account has not connected its AWS (`aws_not_connected`): PUT /v1/aws first", body = crate::error::ErrorBody),
        (status = 422, description = "The task definition does not give the settings (`not_importable`): no such container, or a secret that cannot be read as ECS reads it; or they hold a psbx credential (`not_a_secret`)", body = crate::error::ErrorBody),
        (status = 429, description = "The account's stored values would pass `quotas.max_stored_bytes` (`quota_exceeded`)", body = crate::error::ErrorBody),
        (status = 502, description = "AWS could not be reached (`aws_unreachable`)", body = crate::error::ErrorBody),
        (status = 501, description = "This server offers no AWS: the operator has not given it an AWS identity (`aws_not_configured`); not a passing state, so not worth retrying until the operator sets `aws.principal_arn`", body = crate::error::ErrorBody),
    ))]
#[post("/environments/{env}/services/import")]
pub async fn import(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    aws: web::Data<Aws>,
    secrets: web::Data<Secrets>,
    db: web::Data<Store>,
    env: web::Path<String>,
    body: web::Json<ImportService>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let account = &who.account_id;
    for (what, value) in [("cluster", &body.cluster), ("service", &body.service)] {
        if !ecs_name_ok(value) {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!(
                    "{what} {value:?} is not an ECS {what} name (1 to 255 letters, digits, '-' and '_') or ARN: \
                     GET /v1/aws/ecs/services lists them"
                ),
            ));
        }
    }
    let service = body.service.rsplit('/').next().unwrap_or(&body.service);
    let name = body.name.as_deref().unwrap_or(service);
    check_name("the service", name).map_err(|e| {
        ApiError::from(e).hint("give `name`: the ECS service's name cannot be used as it is")
    })?;
    envs.get(account, &env).await?;
    let session = session(&aws, &secrets, &db, account, body.region.as_deref()).await?;
    let read = read(
        &session,
        &body.cluster,
        &body.service,
        body.container.as_deref(),
    )
    .await?;
    store(&envs, account, &env, name, read).await
}

#[utoipa::path(tag = "environments", operation_id = "syncService",
    security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name"), ("name" = String, Path, description = "The imported service's name")),
    responses(
        (status = 200, description = "Read again from the task definition the ECS service runs now", body = ServiceView),
        (status = 400, description = "AWS refused a call (`aws_refused`, with AWS's code and message and the action the role must allow)", body = crate::error::ErrorBody),
        (status = 404, description = "No such environment or service (`environment_not_found`), or the ECS cluster or service is gone (`ecs_service_not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The service was uploaded, not imported (`not_imported`), or the account's AWS is not connected (`aws_not_connected`)", body = crate::error::ErrorBody),
        (status = 422, description = "The task definition no longer gives the settings (`not_importable`), or they hold a psbx credential (`not_a_secret`)", body = crate::error::ErrorBody),
        (status = 429, description = "The account's stored values would pass `quotas.max_stored_bytes` (`quota_exceeded`)", body = crate::error::ErrorBody),
        (status = 502, description = "AWS could not be reached (`aws_unreachable`)", body = crate::error::ErrorBody),
        (status = 501, description = "This server offers no AWS: the operator has not given it an AWS identity (`aws_not_configured`); not a passing state, so not worth retrying until the operator sets `aws.principal_arn`", body = crate::error::ErrorBody),
    ))]
#[post("/environments/{env}/services/{name}/sync")]
pub async fn sync(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    aws: web::Data<Aws>,
    secrets: web::Data<Secrets>,
    db: web::Data<Store>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (env, name) = path.into_inner();
    let account = &who.account_id;
    let record = envs.service(account, &env, &name).await?;
    let Some(source) = SourceRef::from_value(record.source_ref.as_ref()) else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_imported",
            format!(
                "service {name:?} was uploaded, not imported from ECS: there is no sync for uploads"
            ),
        )
        .hint(format!(
            "upload it again (PUT /v1/environments/{env}/services/{name})"
        )));
    };
    let session = session(&aws, &secrets, &db, account, Some(&source.region)).await?;
    let read = read(
        &session,
        &source.cluster,
        &source.service,
        Some(&source.container),
    )
    .await?;
    store(&envs, account, &env, &name, read).await
}

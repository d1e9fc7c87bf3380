//! `/v1/environments`: an account's dev setups (environments.txt, "Set it up
//! over REST"). Environments are addressed by name; reads carry connections
//! with their addresses and status, services with variable names only, and
//! the AWS identity fields. Another account's environment is a 404. The
//! request and answer shapes are in `views::environments`.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::server_info::ServerInfo;
use crate::views::environments::{
    ConnectionView, ConnectionWithToken, CreateConnection, CreateEnvironment, EnvironmentList,
    EnvironmentView, PutEndpoints, PutService, ServiceView, SourceView, SuggestedEndpoint,
    SuggestedEndpoints, UpdateEnvironment, check_change, with_token,
};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, delete, get, post, put, web};
use psbx_actors::environments::Environments;

#[utoipa::path(tag = "environments", operation_id = "createEnvironment", request_body = CreateEnvironment,
    security(("api_key" = [])),
    responses((status = 201, body = EnvironmentView), (status = 409, description = "The account has an environment of that name (`name_taken`)", body = crate::error::ErrorBody)))]
#[post("/environments")]
pub async fn create(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    info: web::Data<ServerInfo>,
    body: web::Json<CreateEnvironment>,
) -> Result<HttpResponse, ApiError> {
    let env = envs.create(&who.account_id, &body.name).await?;
    Ok(HttpResponse::Created().json(EnvironmentView::new(&env, &info)))
}

#[utoipa::path(tag = "environments", operation_id = "listEnvironments", security(("api_key" = [])),
    responses((status = 200, body = EnvironmentList)))]
#[get("/environments")]
pub async fn list(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    info: web::Data<ServerInfo>,
) -> Result<web::Json<EnvironmentList>, ApiError> {
    let all = envs.list(&who.account_id).await?;
    Ok(web::Json(EnvironmentList {
        environments: all.iter().map(|e| EnvironmentView::new(e, &info)).collect(),
    }))
}

#[utoipa::path(tag = "environments", operation_id = "getEnvironment", security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name")),
    responses((status = 200, body = EnvironmentView), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[get("/environments/{env}")]
pub async fn get(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    info: web::Data<ServerInfo>,
    env: web::Path<String>,
) -> Result<web::Json<EnvironmentView>, ApiError> {
    let env = envs.get(&who.account_id, &env).await?;
    Ok(web::Json(EnvironmentView::new(&env, &info)))
}

#[utoipa::path(tag = "environments", operation_id = "updateEnvironment", request_body = UpdateEnvironment,
    security(("api_key" = [])), params(("env" = String, Path, description = "The environment's name")),
    responses((status = 200, body = EnvironmentView), (status = 400, description = "A field is not what it must be (`invalid_request`), or `awsRoleArn` is in psbx's own AWS account or one the operator denies (`aws_role_denied`)", body = crate::error::ErrorBody), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[put("/environments/{env}")]
pub async fn update(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    info: web::Data<ServerInfo>,
    aws: web::Data<crate::aws::Aws>,
    env: web::Path<String>,
    body: web::Json<UpdateEnvironment>,
) -> Result<web::Json<EnvironmentView>, ApiError> {
    let change = check_change(body.into_inner(), &aws)?;
    let env = envs.update(&who.account_id, &env, change).await?;
    Ok(web::Json(EnvironmentView::new(&env, &info)))
}

#[utoipa::path(tag = "environments", operation_id = "deleteEnvironment", security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[delete("/environments/{env}")]
pub async fn remove(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    env: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    envs.delete(&who.account_id, &env).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(tag = "environments", operation_id = "createConnection", request_body = CreateConnection,
    security(("api_key" = [])), params(("env" = String, Path, description = "The environment's name")),
    responses((status = 201, body = ConnectionWithToken), (status = 404, description = "No such environment in this account (`environment_not_found`)", body = crate::error::ErrorBody), (status = 409, description = "The environment has a connection of that name (`name_taken`)", body = crate::error::ErrorBody), (status = 429, description = "The account's connections quota is used up (`quota_exceeded`)", body = crate::error::ErrorBody)))]
#[post("/environments/{env}/connections")]
pub async fn create_connection(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    info: web::Data<ServerInfo>,
    env: web::Path<String>,
    body: web::Json<CreateConnection>,
) -> Result<HttpResponse, ApiError> {
    let (connection, token) = envs
        .add_connection(&who.account_id, &env, &body.name)
        .await?;
    Ok(HttpResponse::Created().json(with_token(&connection, &token, &info)))
}

#[utoipa::path(tag = "environments", operation_id = "putConnectionEndpoints", request_body = PutEndpoints,
    security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name"), ("id" = String, Path, description = "`conn_...`")),
    responses((status = 200, body = ConnectionView), (status = 400, body = crate::error::ErrorBody), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[put("/environments/{env}/connections/{id}/endpoints")]
pub async fn put_endpoints(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    path: web::Path<(String, String)>,
    body: web::Json<PutEndpoints>,
) -> Result<web::Json<ConnectionView>, ApiError> {
    let (env, id) = path.into_inner();
    let connection = envs
        .set_endpoints(&who.account_id, &env, &id, &body.endpoints)
        .await?;
    Ok(web::Json(ConnectionView::from(&connection)))
}

#[utoipa::path(tag = "environments", operation_id = "rotateConnectionToken", security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name"), ("id" = String, Path, description = "`conn_...`")),
    responses((status = 200, body = ConnectionWithToken), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[post("/environments/{env}/connections/{id}/token")]
pub async fn rotate_token(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    info: web::Data<ServerInfo>,
    path: web::Path<(String, String)>,
) -> Result<web::Json<ConnectionWithToken>, ApiError> {
    let (env, id) = path.into_inner();
    let (connection, token) = envs.rotate_token(&who.account_id, &env, &id).await?;
    Ok(web::Json(with_token(&connection, &token, &info)))
}

#[utoipa::path(tag = "environments", operation_id = "deleteConnection", security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name"), ("id" = String, Path, description = "`conn_...`")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[delete("/environments/{env}/connections/{id}")]
pub async fn delete_connection(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    envs.delete_connection(&who.account_id, &env, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(tag = "environments", operation_id = "putService", request_body = PutService,
    security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name"), ("name" = String, Path, description = "The service's name: 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit", min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9][A-Za-z0-9._-]*$")),
    responses((status = 200, body = ServiceView), (status = 201, body = ServiceView),
        (status = 400, description = "Malformed settings: the message names the line", body = crate::error::ErrorBody),
        (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody),
        (status = 422, description = "The settings hold a psbx API key, connector token or OAuth token of this server (`not_a_secret`): a box does not need it", body = crate::error::ErrorBody),
        (status = 429, description = "The account's stored values would pass `quotas.max_stored_bytes` (`quota_exceeded`)", body = crate::error::ErrorBody)))]
#[put("/environments/{env}/services/{name}")]
pub async fn put_service(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    path: web::Path<(String, String)>,
    body: web::Json<PutService>,
) -> Result<HttpResponse, ApiError> {
    let (env, name) = path.into_inner();
    let (new, record) = envs
        .put_service(&who.account_id, &env, &name, &body.dotenv)
        .await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(HttpResponse::build(status).json(ServiceView::from(&record)))
}

#[utoipa::path(tag = "environments", operation_id = "deleteService", security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name"), ("name" = String, Path, description = "The service's name")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[delete("/environments/{env}/services/{name}")]
pub async fn delete_service(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (env, name) = path.into_inner();
    envs.delete_service(&who.account_id, &env, &name).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(tag = "environments", operation_id = "suggestedEndpoints", security(("api_key" = [])),
    params(("env" = String, Path, description = "The environment's name")),
    responses((status = 200, body = SuggestedEndpoints), (status = 404, description = "No such environment, connection or service in this account (`environment_not_found`)", body = crate::error::ErrorBody)))]
#[get("/environments/{env}/suggested-endpoints")]
pub async fn suggested_endpoints(
    Auth(who): Auth,
    envs: web::Data<Environments>,
    env: web::Path<String>,
) -> Result<web::Json<SuggestedEndpoints>, ApiError> {
    let found = envs.suggested_endpoints(&who.account_id, &env).await?;
    Ok(web::Json(SuggestedEndpoints {
        endpoints: found
            .into_iter()
            .map(|(s, listed_on)| SuggestedEndpoint {
                host: s.host,
                port: s.port,
                sources: s
                    .sources
                    .into_iter()
                    .map(|src| SourceView {
                        service: src.service,
                        variable: src.variable,
                    })
                    .collect(),
                listed_on,
            })
            .collect(),
    }))
}

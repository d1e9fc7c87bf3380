//! The route table. Open routes (health, the OpenAPI document, metrics, the skill, the
//! one-time upload URLs and takeover pages whose token is their credential) are registered by
//! `app.rs` ahead of the `/v1` scope; every route listed in [`v1`]
//! sits behind the API key middleware.

pub mod api_keys;
pub mod aws;
pub mod box_access;
pub mod boxes;
pub mod connect;
pub mod docs;
pub mod environments;
pub mod exec;
pub mod health;
pub mod imports;
pub mod metrics;
pub mod oidc;
pub mod paging;
pub mod published;
pub mod reviews;
pub mod secrets;
pub mod shots;
pub mod takeover;
pub mod uploads;
pub mod url_key;
pub mod wire;

use utoipa_actix_web::service_config::ServiceConfig;

/// Authenticated `/v1` routes, paths relative to `/v1`.
pub fn v1(cfg: &mut ServiceConfig) {
    cfg.service(api_keys::list)
        .service(api_keys::create)
        .service(api_keys::revoke)
        .service(boxes::start)
        .service(boxes::list)
        .service(boxes::get)
        .service(boxes::keep)
        .service(url_key::rotate)
        .service(boxes::stop)
        .service(wire::wire)
        .service(takeover::create)
        .service(takeover::list_terminals)
        .service(takeover::close_terminals)
        .service(takeover::close_terminal)
        .service(exec::exec)
        .service(exec::processes)
        .service(exec::logs)
        .service(exec::signal)
        .service(exec::sync)
        .service(environments::create)
        .service(environments::list)
        .service(environments::get)
        .service(environments::update)
        .service(environments::remove)
        .service(environments::create_connection)
        .service(environments::put_endpoints)
        .service(environments::rotate_token)
        .service(environments::delete_connection)
        .service(imports::import)
        .service(imports::sync)
        .service(environments::put_service)
        .service(environments::delete_service)
        .service(environments::suggested_endpoints)
        .service(secrets::list)
        .service(secrets::put)
        .service(secrets::remove)
        .service(aws::get)
        .service(aws::put)
        .service(aws::ecs_services)
        .service(box_access::get)
        .service(box_access::put)
        .service(shots::take)
        .service(shots::list)
        .service(shots::remove_all)
        .service(shots::get)
        .service(shots::file)
        .service(shots::remove)
        .service(reviews::hand_over)
        .service(reviews::list)
        .service(reviews::get)
        .service(reviews::answer);
}

//! Takeover links through the real app on a real PostgreSQL database, without
//! a libvirt host (a terminal cannot open here: the WebSocket then answers
//! 503 after spending the link, which is what the one-use checks need).
//! The terminal itself is tested end to end in tests/tests/takeover.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, URL, a_box, fixture, state_with};

use actix_web::http::{StatusCode, header};
use actix_web::test::{self, TestRequest};
use psbx_actors::box_state::BoxState;
use psbx_actors::ids::AccountId;

use psbx_server::app::{self};
use psbx_server::config::{Config, TakeoverConfig};
use serde_json::Value;

fn db_count(f: &Fixture, condition: &str) -> i64 {
    use diesel::{Connection, RunQueryDsl};
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = diesel::PgConnection::establish(f.db.url()).unwrap();
    diesel::sql_query(format!(
        "SELECT count(*) AS n FROM takeover_links WHERE {condition}"
    ))
    .load::<N>(&mut conn)
    .unwrap()[0]
        .n
}

fn takeover(key: &str, box_id: &str) -> TestRequest {
    TestRequest::post()
        .uri(&format!("/v1/boxes/{box_id}/takeover"))
        .insert_header((header::AUTHORIZATION, format!("Bearer {key}")))
}

/// A WebSocket upgrade of the link's terminal.
fn upgrade(path: &str) -> TestRequest {
    TestRequest::get()
        .uri(&format!("{path}/ws?cols=100&rows=30"))
        .insert_header((header::UPGRADE, "websocket"))
        .insert_header((header::CONNECTION, "Upgrade"))
        .insert_header((header::SEC_WEBSOCKET_VERSION, "13"))
        .insert_header((header::SEC_WEBSOCKET_KEY, "dGhlIHNhbXBsZSBub25jZQ=="))
}

fn path_of(url: &str) -> String {
    url.strip_prefix(URL).unwrap().to_owned()
}

fn code(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["error"]["code"].as_str().unwrap().to_owned()
}

#[actix_web::test]
async fn a_link_is_stored_hashed_its_page_is_safe_and_its_terminal_opens_once() {
    let f = fixture();
    let key = f.first.key.secret.expose().to_owned();
    let id = a_box(&f, &f.first.account.id, BoxState::Running);
    let app = test::init_service(app::build(state_with(&f, &Config::default()).await)).await;

    let res = test::call_service(&app, takeover(&key, &id).to_request()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let link: Value = test::read_body_json(res).await;
    assert_eq!(link["boxId"], id.as_str());
    let url = link["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{URL}/takeover/tko_")), "{url}");
    let token = url.rsplit('/').next().unwrap();
    assert!(token.len() >= 36, "{token}");
    let expires: chrono::DateTime<chrono::Utc> =
        link["expiresAt"].as_str().unwrap().parse().unwrap();
    let left = expires - chrono::Utc::now();
    assert!(
        left > chrono::Duration::minutes(14) && left <= chrono::Duration::minutes(15),
        "{left}"
    );
    // Only its SHA-256 is stored.
    assert_eq!(db_count(&f, &format!("token_hash = '{token}'")), 0);
    assert_eq!(
        db_count(
            &f,
            &format!("token_hash = encode(sha256('{token}'::bytea), 'hex') AND used_at IS NULL")
        ),
        1
    );

    // The page, twice: a GET does not spend the link.
    let path = path_of(url);
    for _ in 0..2 {
        let res = test::call_service(&app, TestRequest::get().uri(&path).to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
        let h = res.headers();
        let csp = h
            .get(header::CONTENT_SECURITY_POLICY)
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(csp, psbx_server::routes::takeover::CSP);
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        assert_eq!(h.get(header::REFERRER_POLICY).unwrap(), "no-referrer");
        assert_eq!(h.get(header::CACHE_CONTROL).unwrap(), "no-store");
        assert_eq!(h.get(header::X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff");
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        assert!(page.contains("/takeover/assets/xterm.js"), "{page}");
        assert!(!page.contains("<script>"), "an inline script: {page}");
    }
    // Its assets, bundled from npm, with the same headers.
    for (asset, kind) in [
        ("xterm.js", "text/javascript"),
        ("addon-fit.js", "text/javascript"),
        ("takeover.js", "text/javascript"),
        ("xterm.css", "text/css"),
        ("takeover.css", "text/css"),
    ] {
        let req = TestRequest::get()
            .uri(&format!("/takeover/assets/{asset}"))
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(res.status(), StatusCode::OK, "{asset}");
        let h = res.headers();
        assert!(
            h.get(header::CONTENT_TYPE)
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert!(h.get(header::CONTENT_SECURITY_POLICY).is_some(), "{asset}");
        assert_eq!(h.get(header::X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff");
    }

    // A plain GET of the WebSocket spends nothing either.
    let res = test::call_service(
        &app,
        TestRequest::get().uri(&format!("{path}/ws")).to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&test::read_body(res).await), "not_websocket");

    // The first WebSocket spends the link (no host here, and no node holds
    // the box's: no terminal opens).
    let res = test::call_service(&app, upgrade(&path).to_request()).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&test::read_body(res).await), "host_unavailable");
    assert_eq!(
        db_count(&f, "used_at IS NOT NULL"),
        1,
        "the WebSocket did not spend the link"
    );
    // The second is 410, and so is the page.
    let res = test::call_service(&app, upgrade(&path).to_request()).await;
    assert_eq!(res.status(), StatusCode::GONE);
    assert_eq!(code(&test::read_body(res).await), "takeover_used");
    let res = test::call_service(&app, TestRequest::get().uri(&path).to_request()).await;
    assert_eq!(res.status(), StatusCode::GONE);
    assert!(res.headers().get(header::CONTENT_SECURITY_POLICY).is_some());
    let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    assert!(page.contains("already used"), "{page}");
    assert!(page.contains("ask the agent for a new"), "{page}");
}

#[actix_web::test]
async fn expired_unknown_and_other_accounts_links_do_not_work() {
    let f = fixture();
    let key = f.first.key.secret.expose().to_owned();
    let id = a_box(&f, &f.first.account.id, BoxState::Running);
    let config = Config {
        takeover: TakeoverConfig {
            link_ttl: "1s".to_owned(),
            ..TakeoverConfig::default()
        },
        ..Config::default()
    };
    let app = test::init_service(app::build(state_with(&f, &config).await)).await;

    let res = test::call_service(&app, takeover(&key, &id).to_request()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let link: Value = test::read_body_json(res).await;
    let path = path_of(link["url"].as_str().unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let res = test::call_service(&app, TestRequest::get().uri(&path).to_request()).await;
    assert_eq!(res.status(), StatusCode::GONE);
    let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    assert!(page.contains("has expired"), "{page}");
    let res = test::call_service(&app, upgrade(&path).to_request()).await;
    assert_eq!(res.status(), StatusCode::GONE);
    assert_eq!(code(&test::read_body(res).await), "takeover_expired");

    // Unknown links: 404, page and WebSocket.
    for unknown in [
        "/takeover/tko_nosuchlinkatall0123456789",
        "/takeover/not-a-token",
    ] {
        let res = test::call_service(&app, TestRequest::get().uri(unknown).to_request()).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{unknown}");
        let res = test::call_service(&app, upgrade(unknown).to_request()).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{unknown}");
        assert_eq!(code(&test::read_body(res).await), "takeover_not_found");
    }

    // Another account's box is a 404; a stopped box a 409; no key a 401.
    let other = {
        use diesel::{Connection, RunQueryDsl};
        let other = AccountId::generate().unwrap();
        let mut conn = diesel::PgConnection::establish(f.db.url()).unwrap();
        diesel::sql_query(format!(
            "INSERT INTO accounts (id, name) VALUES ('{other}', 'other')"
        ))
        .execute(&mut conn)
        .unwrap();
        other
    };
    let theirs = a_box(&f, &other, BoxState::Running);
    let res = test::call_service(&app, takeover(&key, &theirs).to_request()).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(code(&test::read_body(res).await), "box_not_found");
    let stopped = a_box(&f, &f.first.account.id, BoxState::Stopped);
    let res = test::call_service(&app, takeover(&key, &stopped).to_request()).await;
    assert_eq!(res.status(), StatusCode::CONFLICT);
    assert_eq!(code(&test::read_body(res).await), "box_stopped");
    let req = TestRequest::post()
        .uri(&format!("/v1/boxes/{id}/takeover"))
        .to_request();
    assert_eq!(
        test::call_service(&app, req).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(db_count(&f, "true"), 1, "refused calls made links");
}

#[actix_web::test]
async fn the_takeover_route_is_in_the_api_document() {
    let f = fixture();
    let app = test::init_service(app::build(state_with(&f, &Config::default()).await)).await;
    let req = TestRequest::get().uri("/v1/openapi.json").to_request();
    let doc: Value = test::call_and_read_body_json(&app, req).await;
    let op = &doc["paths"]["/v1/boxes/{id}/takeover"]["post"];
    assert_eq!(op["operationId"], "takeoverBox", "{op}");
    for status in ["201", "401", "404", "409", "503"] {
        assert!(op["responses"].get(status).is_some(), "{status}: {op}");
    }
}

/// The owner's view of a box's terminals: none open here (no host), another
/// account's box is 404, a malformed or unknown terminal id says so; and the
/// routes are documented.
#[actix_web::test]
async fn terminals_are_listed_and_closed_per_box_of_the_account() {
    let f = fixture();
    let key = f.first.key.secret.expose().to_owned();
    let id = a_box(&f, &f.first.account.id, BoxState::Running);
    let app = test::init_service(app::build(state_with(&f, &Config::default()).await)).await;
    let call = |method: actix_web::http::Method, path: String, key: &str| {
        TestRequest::default()
            .method(method)
            .uri(&path)
            .insert_header((header::AUTHORIZATION, format!("Bearer {key}")))
            .to_request()
    };
    use actix_web::http::Method;
    let terminals = format!("/v1/boxes/{id}/terminals");
    let res = test::call_service(&app, call(Method::GET, terminals.clone(), &key)).await;
    assert_eq!(res.status(), StatusCode::OK);
    let listed: Value = test::read_body_json(res).await;
    assert_eq!(listed, serde_json::json!({"terminals": []}));
    let res = test::call_service(&app, call(Method::DELETE, terminals.clone(), &key)).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = test::call_service(
        &app,
        call(Method::DELETE, format!("{terminals}/nope"), &key),
    )
    .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&test::read_body(res).await), "invalid_terminal_id");
    let res = test::call_service(
        &app,
        call(Method::DELETE, format!("{terminals}/term_abc"), &key),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(code(&test::read_body(res).await), "terminal_not_found");
    // Another account's box is not found, whoever asks.
    let theirs = {
        use diesel::{Connection, RunQueryDsl};
        let account = AccountId::generate().unwrap();
        let mut conn = diesel::PgConnection::establish(f.db.url()).unwrap();
        diesel::sql_query(format!(
            "INSERT INTO accounts (id, name) VALUES ('{account}', 'other')"
        ))
        .execute(&mut conn)
        .unwrap();
        account
    };
    let other = a_box(&f, &theirs, BoxState::Running);
    let res = test::call_service(
        &app,
        call(Method::GET, format!("/v1/boxes/{other}/terminals"), &key),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);

    let req = TestRequest::get().uri("/v1/openapi.json").to_request();
    let doc: Value = test::call_and_read_body_json(&app, req).await;
    for (path, method, op_id) in [
        ("/v1/boxes/{id}/terminals", "get", "listTerminals"),
        ("/v1/boxes/{id}/terminals", "delete", "closeTerminals"),
        (
            "/v1/boxes/{id}/terminals/{terminal}",
            "delete",
            "closeTerminal",
        ),
    ] {
        let op = &doc["paths"][path][method];
        assert_eq!(op["operationId"], op_id, "{op}");
        for status in ["200", "401", "404"] {
            assert!(op["responses"].get(status).is_some(), "{status}: {op}");
        }
    }
}

//! HTTP tests through the real app (the one `psbx serve` runs) on a real
//! PostgreSQL database of their own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{URL, bearer, fixture, other_account, state};

use actix_web::http::{StatusCode, header};
use actix_web::test::{self, TestRequest};
use psbx_actors::secrets::Secrets;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::app::{self, AppState};
use psbx_server::config::Config;
use psbx_tests::TestDatabase;
use serde_json::{Value, json};

macro_rules! service {
    ($f:expr) => {
        test::init_service(app::build(state(&$f).await)).await
    };
}

/// Checks the error body of DESIGN.md §10 and returns its code.
fn error_code(body: &Value) -> &str {
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    error["code"].as_str().expect("error.code")
}

#[actix_rt::test]
async fn health_and_discovery_are_open() {
    let f = fixture();
    let app = service!(f);
    let res = test::call_service(&app, TestRequest::get().uri("/v1/health").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(body["status"], "ok");
    assert_eq!(body["database"], "ok");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));

    let res = test::call_service(
        &app,
        TestRequest::get().uri("/v1/openapi.json").to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let doc: Value = test::read_body_json(res).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (path, method) in [
        ("/v1/health", "get"),
        ("/v1/openapi.json", "get"),
        ("/v1/api-keys", "get"),
        ("/v1/api-keys", "post"),
        ("/v1/api-keys/{id}", "delete"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from the document"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
}

#[actix_rt::test]
async fn missing_wrong_and_revoked_keys_get_401_with_the_error_body() {
    let f = fixture();
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();

    type Case = (
        &'static str,
        Option<(header::HeaderName, String)>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "missing",
            None,
            r#"Bearer realm="psbx", resource_metadata="http://localhost:8080/.well-known/oauth-protected-resource/v1""#,
        ),
        (
            "not bearer",
            Some((header::AUTHORIZATION, "Basic dTpw".into())),
            r#"Bearer realm="psbx", resource_metadata="http://localhost:8080/.well-known/oauth-protected-resource/v1""#,
        ),
        (
            "wrong",
            Some(bearer("psbx_notakey")),
            r#"Bearer realm="psbx", resource_metadata="http://localhost:8080/.well-known/oauth-protected-resource/v1", error="invalid_token""#,
        ),
    ];
    for (what, auth, challenge) in cases {
        let mut req = TestRequest::get().uri("/v1/api-keys");
        if let Some(h) = auth {
            req = req.insert_header(h);
        }
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{what}");
        assert_eq!(
            res.headers().get(header::WWW_AUTHENTICATE).unwrap(),
            challenge,
            "{what}"
        );
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "unauthorized", "{what}");
        assert!(body["error"]["hint"].is_string());
    }

    // Unknown routes under /v1 do not reveal themselves to strangers.
    let res = test::call_service(
        &app,
        TestRequest::get().uri("/v1/secret-thing").to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // A key revoked through the API stops working on the very next request.
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri("/v1/api-keys")
            .insert_header(bearer(&key))
            .set_json(json!({"name": "short-lived"}))
            .to_request(),
    )
    .await;
    let made: Value = test::read_body_json(res).await;
    let doomed = made["key"].as_str().unwrap().to_owned();
    let ok = TestRequest::get()
        .uri("/v1/api-keys")
        .insert_header(bearer(&doomed))
        .to_request();
    assert_eq!(test::call_service(&app, ok).await.status(), StatusCode::OK);
    let res = test::call_service(
        &app,
        TestRequest::delete()
            .uri(&format!("/v1/api-keys/{}", made["id"].as_str().unwrap()))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/api-keys")
            .insert_header(bearer(&doomed))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "unauthorized");
}

#[actix_rt::test]
async fn keys_are_created_listed_without_secrets_and_revoked() {
    let f = fixture();
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();

    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri("/v1/api-keys")
            .insert_header(bearer(&key))
            .set_json(json!({"name": "ci"}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let made: Value = test::read_body_json(res).await;
    assert_eq!(made["name"], "ci");
    assert!(made["id"].as_str().unwrap().starts_with("key_"));
    let secret = made["key"].as_str().unwrap();
    assert!(secret.starts_with("psbx_"));
    assert!(made["createdAt"].as_str().unwrap().ends_with('Z'));

    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/api-keys")
            .insert_header(bearer(secret))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let text = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    assert!(
        !text.contains(secret) && !text.contains(&key),
        "a secret was listed: {text}"
    );
    let list: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = list["apiKeys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first key", "ci"]);
    assert!(list.get("nextCursor").is_none());

    // Paging with an opaque cursor.
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/api-keys?limit=1")
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    let page: Value = test::read_body_json(res).await;
    assert_eq!(page["apiKeys"].as_array().unwrap().len(), 1);
    let cursor = page["nextCursor"].as_str().unwrap();
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(&format!("/v1/api-keys?limit=1&cursor={cursor}"))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    let page: Value = test::read_body_json(res).await;
    assert_eq!(page["apiKeys"][0]["name"], "ci");
    assert!(page.get("nextCursor").is_none());

    let made_id = made["id"].as_str().unwrap();
    let revoke = |id: &str| {
        TestRequest::delete()
            .uri(&format!("/v1/api-keys/{id}"))
            .insert_header(bearer(&key))
            .to_request()
    };
    assert_eq!(
        test::call_service(&app, revoke(made_id)).await.status(),
        StatusCode::NO_CONTENT
    );
    // Unknown, malformed, and already revoked ids are 404.
    for id in ["key_doesnotexist", "not-an-id", made_id] {
        let res = test::call_service(&app, revoke(id)).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{id}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "api_key_not_found");
    }
}

#[actix_rt::test]
async fn another_accounts_key_is_a_404_not_a_403() {
    let f = fixture();
    let app = service!(f);
    let other = psbx_actors::ids::AccountId::parse(&f.db.add_account("acct_other")).unwrap();
    let theirs = f.store.create_api_key(&other, "theirs").unwrap();
    let res = test::call_service(
        &app,
        TestRequest::delete()
            .uri(&format!("/v1/api-keys/{}", theirs.key.id))
            .insert_header(bearer(f.first.key.secret.expose()))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    // And their key lists only their keys.
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/api-keys")
            .insert_header(bearer(theirs.secret.expose()))
            .to_request(),
    )
    .await;
    let list: Value = test::read_body_json(res).await;
    assert_eq!(list["apiKeys"].as_array().unwrap().len(), 1);
    assert_eq!(list["apiKeys"][0]["name"], "theirs");
}

#[actix_rt::test]
async fn bad_input_is_a_400_that_says_what_was_wrong() {
    let f = fixture();
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();
    let cases = [
        (
            TestRequest::post()
                .uri("/v1/api-keys")
                .set_json(json!({"name": "x", "admin": true})),
            "invalid_body",
            "admin",
        ),
        (
            TestRequest::post().uri("/v1/api-keys").set_json(json!({})),
            "invalid_body",
            "name",
        ),
        (
            TestRequest::post()
                .uri("/v1/api-keys")
                .set_json(json!({"name": ""})),
            "invalid_request",
            "name",
        ),
        (
            TestRequest::get().uri("/v1/api-keys?limit=0"),
            "invalid_limit",
            "limit",
        ),
        (
            TestRequest::get().uri("/v1/api-keys?limit=5000"),
            "invalid_limit",
            "limit",
        ),
        (
            TestRequest::get().uri("/v1/api-keys?cursor=forged"),
            "invalid_cursor",
            "cursor",
        ),
        (
            TestRequest::get().uri("/v1/api-keys?sort=name"),
            "invalid_query",
            "sort",
        ),
    ];
    for (req, code, mentions) in cases {
        let res = test::call_service(&app, req.insert_header(bearer(&key)).to_request()).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{code}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), code);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(mentions),
            "{body}"
        );
    }
    let res = test::call_service(&app, TestRequest::get().uri("/nowhere").to_request()).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "route_not_found");
}

#[actix_rt::test]
async fn metrics_count_requests_by_route_and_show_the_pool() {
    let f = fixture();
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();
    for _ in 0..3 {
        test::call_service(
            &app,
            TestRequest::get()
                .uri("/v1/api-keys")
                .insert_header(bearer(&key))
                .to_request(),
        )
        .await;
    }
    test::call_service(&app, TestRequest::get().uri("/v1/api-keys").to_request()).await;
    test::call_service(
        &app,
        TestRequest::delete()
            .uri("/v1/api-keys/key_zzz")
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/metrics")
            .peer_addr("127.0.0.1:45000".parse().unwrap())
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers()
            .get(header::CONTENT_TYPE)
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    for expected in [
        r#"psbx_http_requests_total{method="GET",route="/v1/api-keys",status="200"} 3"#,
        r#"psbx_http_requests_total{method="GET",route="/v1/api-keys",status="401"} 1"#,
        r#"psbx_http_requests_total{method="DELETE",route="/v1/api-keys/{id}",status="404"} 1"#,
        r#"psbx_http_request_duration_seconds_count{method="GET",route="/v1/api-keys"} 4"#,
        "psbx_db_pool_max_connections 4",
        r#"psbx_db_pool_connections{state="idle"}"#,
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("key_zzz"), "raw paths leak into labels");
}

#[actix_rt::test]
async fn secrets_are_stored_sealed_and_never_read_back() {
    let f = fixture();
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();
    let value = "s3cr3t-value-that-must-not-leak";
    let put = |name: &str, value: &str| {
        TestRequest::put()
            .uri(&format!("/v1/secrets/{name}"))
            .insert_header(bearer(&key))
            .set_json(json!({ "value": value }))
            .to_request()
    };
    let res = test::call_service(&app, put("GITHUB_TOKEN", value)).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let made: Value = test::read_body_json(res).await;
    assert_eq!(made["name"], "GITHUB_TOKEN");
    assert!(made.get("value").is_none(), "{made}");
    let res = test::call_service(&app, put("GITHUB_TOKEN", "another-value-1")).await;
    assert_eq!(res.status(), StatusCode::OK, "replacing answers 200");
    test::call_service(&app, put("A_SECOND", "x")).await;

    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/secrets")
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    let text = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    assert!(
        !text.contains(value) && !text.contains("another-value-1"),
        "{text}"
    );
    let list: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = list["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["A_SECOND", "GITHUB_TOKEN"]);
    assert!(list["secrets"][0]["updatedAt"].is_string());

    // Sealed at rest.
    {
        use diesel::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            row: String,
        }
        let mut conn = <diesel::PgConnection as diesel::Connection>::establish(f.db.url()).unwrap();
        let rows: Vec<Row> = diesel::sql_query("SELECT secrets::text AS row FROM secrets")
            .load(&mut conn)
            .unwrap();
        let hex_value: String = b"another-value-1"
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        for r in rows {
            assert!(
                !r.row.contains("another-value") && !r.row.contains(&hex_value),
                "{}",
                r.row
            );
        }
    }

    // Names are environment variable names; values have bounds.
    for (name, value) in [("1BAD", "x"), ("A-B", "x"), ("OK", "")] {
        let res = test::call_service(&app, put(name, value)).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{name}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "invalid_request");
    }

    let delete = |name: &str| {
        TestRequest::delete()
            .uri(&format!("/v1/secrets/{name}"))
            .insert_header(bearer(&key))
            .to_request()
    };
    assert_eq!(
        test::call_service(&app, delete("A_SECOND")).await.status(),
        StatusCode::NO_CONTENT
    );
    let res = test::call_service(&app, delete("A_SECOND")).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "secret_not_found");

    // Another account sees none of them.
    let other = psbx_actors::ids::AccountId::parse(&f.db.add_account("acct_other")).unwrap();
    let theirs = f.store.create_api_key(&other, "theirs").unwrap();
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/secrets")
            .insert_header(bearer(theirs.secret.expose()))
            .to_request(),
    )
    .await;
    let list: Value = test::read_body_json(res).await;
    assert_eq!(list["secrets"].as_array().unwrap().len(), 0);
    let res = test::call_service(
        &app,
        TestRequest::delete()
            .uri("/v1/secrets/GITHUB_TOKEN")
            .insert_header(bearer(theirs.secret.expose()))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[test]
fn a_different_master_key_is_refused() {
    let db = TestDatabase::new();
    let store = Store::open(db.url(), PoolOptions::default()).unwrap();
    Secrets::new(store.clone(), Vault::from_key(&[1u8; 32])).unwrap();
    Secrets::new(store.clone(), Vault::from_key(&[1u8; 32])).unwrap();
    let err = Secrets::new(store, Vault::from_key(&[2u8; 32]))
        .err()
        .unwrap();
    assert!(err.to_string().contains("master key"), "{err}");
}

#[actix_rt::test]
async fn upload_urls_need_no_key_but_a_known_token() {
    let f = fixture();
    let app = service!(f);
    for (method, token) in [
        (actix_web::http::Method::PUT, "psbxup_nosuchtoken"),
        (actix_web::http::Method::POST, "psbxup_nosuchtoken"),
        (actix_web::http::Method::PUT, "not-even-shaped-right"),
    ] {
        let res = test::call_service(
            &app,
            TestRequest::default()
                .method(method.clone())
                .uri(&format!("/v1/uploads/{token}"))
                .insert_header((header::CONTENT_TYPE, "application/x-tar"))
                .set_payload(vec![0u8; 1024])
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{method} {token}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "upload_not_found", "{body}");
        assert!(
            body["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("sandbox_sync"),
            "{body}"
        );
    }
}

#[actix_rt::test]
async fn metrics_are_only_served_to_allowed_networks() {
    let f = fixture();
    let app = service!(f);
    for peer in [Some("10.0.2.15:40000"), Some("[2001:db8::1]:40000"), None] {
        let mut req = TestRequest::get().uri("/metrics");
        if let Some(peer) = peer {
            req = req.peer_addr(peer.parse().unwrap());
        }
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "{peer:?}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "metrics_forbidden");
        assert!(
            body["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("metrics.allow")
        );
    }
    for peer in ["127.0.0.1:40000", "[::1]:40000"] {
        let req = TestRequest::get()
            .uri("/metrics")
            .peer_addr(peer.parse().unwrap());
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), StatusCode::OK, "{peer}");
    }
}

// --- sign-in, OAuth registration, sign-in links -----------------------------

/// Where the sign-in tests' browser connects from.
const PEER: &str = "203.0.113.10:40000";
const PASSWORD: &str = "correct horse battery";
const REDIRECT: &str = "http://127.0.0.1:9/callback";
/// RFC 7636 appendix B's S256 challenge.
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

fn hidden_fields(page: &str) -> Vec<(String, String)> {
    page.split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|rest| {
            let (name, rest) = rest.split_once("\" value=\"").unwrap();
            let (value, _) = rest.split_once('"').unwrap();
            (name.to_owned(), value.replace("&amp;", "&"))
        })
        .collect()
}

/// `name=value` pairs of a response's `Set-Cookie` headers, for a `Cookie` header.
fn cookies_of<B>(res: &actix_web::dev::ServiceResponse<B>) -> String {
    res.headers()
        .get_all(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ")
}

macro_rules! register {
    ($app:expr, $peer:expr) => {
        test::call_service(
            &$app,
            TestRequest::post()
                .uri("/oauth/register")
                .peer_addr($peer.parse().unwrap())
                .set_json(json!({"client_name": "Claude Code", "redirect_uris": [REDIRECT]}))
                .to_request(),
        )
        .await
    };
}

/// Registers a client and opens its authorize page: (Cookie header, form fields).
macro_rules! authorize_page {
    ($app:expr) => {{
        let res = register!($app, PEER);
        assert_eq!(res.status(), StatusCode::CREATED);
        let client: Value = test::read_body_json(res).await;
        let client_id = client["client_id"].as_str().unwrap().to_owned();
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("response_type", "code"),
                ("client_id", client_id.as_str()),
                ("redirect_uri", REDIRECT),
                ("state", "st"),
                ("code_challenge", CHALLENGE),
                ("code_challenge_method", "S256"),
            ])
            .finish();
        let res = test::call_service(
            &$app,
            TestRequest::get()
                .uri(&format!("/oauth/authorize?{query}"))
                .peer_addr(PEER.parse().unwrap())
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::OK);
        let cookie = cookies_of(&res);
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        assert!(
            page.contains("calls itself <strong>Claude Code</strong>"),
            "{page}"
        );
        (cookie, hidden_fields(&page))
    }};
}

/// Posts the authorize form with this password and extra headers.
macro_rules! post_form {
    ($app:expr, $cookie:expr, $fields:expr, $password:expr, $headers:expr) => {{
        let mut form = $fields.clone();
        form.push(("account".into(), "default".into()));
        form.push(("password".into(), $password.into()));
        form.push(("decision".into(), "approve".into()));
        let mut req = TestRequest::post()
            .uri("/oauth/authorize")
            .peer_addr(PEER.parse().unwrap())
            .insert_header((header::COOKIE, $cookie.clone()))
            .set_form(&form);
        for h in $headers {
            req = req.insert_header(h);
        }
        test::call_service(&$app, req.to_request()).await
    }};
}

#[actix_rt::test]
async fn the_sixth_wrong_password_within_a_minute_is_429_and_runs_no_argon2() {
    let f = fixture();
    f.store.set_password(&f.first.account.id, PASSWORD).unwrap();
    let app = service!(f);
    let (cookie, fields) = authorize_page!(app);
    let none: [(&str, &str); 0] = [];
    for attempt in 1..=5 {
        let res = post_form!(app, cookie, fields, "wrong password", none);
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    // Every argon2 slot taken: a sign-in that ran argon2 now would wait
    // forever. The sixth attempt answers anyway, so it did not.
    let slots = psbx_actors::store::Argon2Slots::global();
    let held: Vec<_> = (0..psbx_actors::store::ARGON2_SLOTS)
        .map(|_| slots.take())
        .collect();
    for password in ["wrong password", PASSWORD] {
        let res = actix_rt::time::timeout(std::time::Duration::from_secs(60), async {
            post_form!(app, cookie, fields, password, none)
        })
        .await
        .expect("a throttled sign-in waited for argon2");
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = res
            .headers()
            .get(header::RETRY_AFTER)
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        assert!(
            page.contains("at most 5 failed sign-ins for this account a minute"),
            "{page}"
        );
        assert!(!page.contains(PASSWORD));
    }
    assert_eq!(slots.waiting(), 0);
    drop(held);
}

#[actix_rt::test]
async fn a_sign_in_form_posted_from_another_origin_is_403() {
    let f = fixture();
    f.store.set_password(&f.first.account.id, PASSWORD).unwrap();
    let app = service!(f);
    let (cookie, fields) = authorize_page!(app);
    // The cookie and field match (as after cookie tossing from a box URL), but
    // the browser says where the form was.
    for refused in [
        vec![(header::ORIGIN, "https://x.box.example")],
        vec![(header::ORIGIN, "null")],
        vec![(
            header::HeaderName::from_static("sec-fetch-site"),
            "same-site",
        )],
    ] {
        let res = post_form!(app, cookie, fields, PASSWORD, refused.clone());
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "{refused:?}");
        assert!(res.headers().get(header::LOCATION).is_none());
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        assert!(page.contains("another site"), "{page}");
    }
    let res = post_form!(
        app,
        cookie,
        fields,
        PASSWORD,
        [(header::ORIGIN, "http://localhost:8080")]
    );
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert!(
        res.headers()
            .get(header::LOCATION)
            .unwrap()
            .to_str()
            .unwrap()
            .contains("code=")
    );
}

#[actix_rt::test]
async fn the_21st_registration_from_one_address_within_a_minute_is_429() {
    let f = fixture();
    let app = service!(f);
    for n in 1..=20 {
        assert_eq!(
            register!(app, PEER).status(),
            StatusCode::CREATED,
            "registration {n}"
        );
    }
    let res = register!(app, PEER);
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key(header::RETRY_AFTER));
    let body: Value = test::read_body_json(res).await;
    assert_eq!(body["error"], "too_many_requests");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("at most 20 client registrations from this address a minute"),
        "{body}"
    );
    // Another address is not affected.
    assert_eq!(
        register!(app, "198.51.100.7:1234").status(),
        StatusCode::CREATED
    );
    // Too large a registration is refused before it is read.
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri("/oauth/register")
            .peer_addr("198.51.100.8:1234".parse().unwrap())
            .set_json(json!({"redirect_uris": [REDIRECT], "padding": "x".repeat(64 * 1024)}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[actix_rt::test]
async fn clients_nobody_authorized_within_a_day_are_deleted_at_the_next_registration() {
    let f = fixture();
    let app = service!(f);
    let old = f
        .store
        .register_oauth_client(Some("old"), &[REDIRECT.to_owned()])
        .unwrap();
    let mut conn = <diesel::PgConnection as diesel::Connection>::establish(f.db.url()).unwrap();
    diesel::RunQueryDsl::execute(
        diesel::sql_query("UPDATE oauth_clients SET created_at = now() - interval '25 hours'"),
        &mut conn,
    )
    .unwrap();
    assert_eq!(register!(app, PEER).status(), StatusCode::CREATED);
    assert!(f.store.oauth_client(old.id.as_str()).unwrap().is_none());
}

#[actix_rt::test]
async fn a_login_link_is_confirmed_by_get_spent_by_post_and_set_password_ends_the_session() {
    let f = fixture();
    let app = service!(f);
    let link = f.store.create_login_link(&f.first.account.id).unwrap();
    let path = format!("/oauth/login/{link}");
    // GET (what a mail or chat link scanner does) twice: the link stays usable.
    let mut confirm = None;
    for _ in 0..2 {
        let res = test::call_service(
            &app,
            TestRequest::get()
                .uri(&path)
                .peer_addr(PEER.parse().unwrap())
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(!cookies_of(&res).contains("psbx_session"));
        let cookie = cookies_of(&res);
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        assert!(page.contains("<strong>default</strong>"), "{page}");
        confirm = Some((cookie, hidden_fields(&page)));
    }
    let (cookie, form) = confirm.unwrap();
    let post = |headers: Vec<(header::HeaderName, &'static str)>| {
        let mut req = TestRequest::post()
            .uri(&path)
            .peer_addr(PEER.parse().unwrap())
            .insert_header((header::COOKIE, cookie.clone()))
            .set_form(&form);
        for h in headers {
            req = req.insert_header(h);
        }
        req.to_request()
    };
    // A POST from another site does not spend it (login CSRF).
    let res = test::call_service(&app, post(vec![(header::ORIGIN, "https://evil.example")])).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    // Nor one without the page's cookie.
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&path)
            .peer_addr(PEER.parse().unwrap())
            .set_form(&form)
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    // The POST from the page spends it and signs the browser in.
    let res = test::call_service(&app, post(vec![(header::ORIGIN, "http://localhost:8080")])).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        res.headers().get(header::LOCATION).unwrap(),
        "/oauth/signed-in"
    );
    let session = cookies_of(&res)
        .split("; ")
        .find(|c| c.starts_with("psbx_session="))
        .unwrap()
        .to_owned();
    let signed_in = || {
        TestRequest::get()
            .uri("/oauth/signed-in")
            .insert_header((header::COOKIE, session.clone()))
            .to_request()
    };
    assert_eq!(
        test::call_service(&app, signed_in()).await.status(),
        StatusCode::OK
    );
    // Spent: neither GET nor POST works again.
    let res = test::call_service(&app, post(vec![])).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = test::call_service(&app, TestRequest::get().uri(&path).to_request()).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    // A new password signs the browser out.
    f.store.set_password(&f.first.account.id, PASSWORD).unwrap();
    assert_eq!(
        test::call_service(&app, signed_in()).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[actix_rt::test]
async fn links_that_do_not_work_are_throttled_per_address() {
    let f = fixture();
    let app = service!(f);
    for n in 1..=10 {
        let res = test::call_service(
            &app,
            TestRequest::get()
                .uri(&format!("/oauth/login/guess{n}"))
                .peer_addr(PEER.parse().unwrap())
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "guess {n}");
    }
    // Even a good link is refused from that address for now; not from another.
    let link = f.store.create_login_link(&f.first.account.id).unwrap();
    let open = |peer: &str| {
        TestRequest::get()
            .uri(&format!("/oauth/login/{link}"))
            .peer_addr(peer.parse().unwrap())
            .to_request()
    };
    let res = test::call_service(&app, open(PEER)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key(header::RETRY_AFTER));
    assert_eq!(
        test::call_service(&app, open("198.51.100.7:1"))
            .await
            .status(),
        StatusCode::OK
    );
}

/// review-2 L7: every bearer token is looked up in the database, so an
/// address that sent 60 invalid ones within a minute gets 429 without a
/// lookup, on `/v1`, `/mcp` and takeover links alike; another address is
/// still answered.
#[actix_rt::test]
async fn invalid_bearer_tokens_are_throttled_per_address() {
    let f = fixture();
    let app = service!(f);
    let call = |path: &str, token: &str, peer: &str| {
        TestRequest::get()
            .uri(path)
            .insert_header((header::AUTHORIZATION, format!("Bearer {token}")))
            .peer_addr(peer.parse().unwrap())
            .to_request()
    };
    for n in 1..=60 {
        let token = if n % 2 == 0 {
            "psbx_guess"
        } else {
            "psbxo_guess"
        };
        let res = test::call_service(&app, call("/v1/boxes", &format!("{token}{n}"), PEER)).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "guess {n}");
    }
    for path in ["/v1/boxes", "/mcp"] {
        let res = test::call_service(&app, call(path, "psbx_guess61", PEER)).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        assert!(res.headers().contains_key(header::RETRY_AFTER), "{path}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "too_many_attempts", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("at most 60"),
            "{body}"
        );
    }
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/takeover/guess")
            .peer_addr(PEER.parse().unwrap())
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = test::call_service(&app, call("/v1/boxes", "psbx_guess", "198.51.100.7:1")).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "another address");
    let res = test::call_service(&app, call("/v1/boxes", &f.key(), "198.51.100.7:1")).await;
    assert_eq!(
        res.status(),
        StatusCode::OK,
        "a good key from another address"
    );
}

#[actix_rt::test]
async fn mcp_accepts_the_origin_browsers_send_for_a_default_port() {
    let f = fixture();
    let secrets = Secrets::new(f.store.clone(), Vault::from_key(&[9u8; 32])).unwrap();
    let id = psbx_actors::ids::ServerId::parse("srv_test").unwrap();
    let parts = app::Parts::new(
        f.store.clone(),
        secrets,
        Default::default(),
        "https://psbx.example.com",
        id,
    );
    let state = AppState::assemble(&Config::default(), parts).await.unwrap();
    let app = test::init_service(app::build(state)).await;
    let key = f.first.key.secret.expose().to_owned();
    let initialize = |origin: &'static str| {
        TestRequest::post()
            .uri("/mcp")
            .insert_header((header::HOST, "psbx.example.com"))
            .insert_header((header::ORIGIN, origin))
            .insert_header(bearer(&key))
            .insert_header((header::ACCEPT, "application/json, text/event-stream"))
            .set_json(json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}
            }))
            .to_request()
    };
    let res = test::call_service(&app, initialize("https://psbx.example.com")).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = test::call_service(&app, initialize("https://psbx.example.com.evil.example")).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
}

#[actix_rt::test]
async fn document_fetches_name_no_cause_and_are_throttled_per_address() {
    let f = fixture();
    let secrets = Secrets::new(f.store.clone(), Vault::from_key(&[9u8; 32])).unwrap();
    let id = psbx_actors::ids::ServerId::parse("srv_test").unwrap();
    let parts = app::Parts::new(f.store.clone(), secrets, Default::default(), URL, id);
    let mut config = Config::default();
    // Loopback documents allowed, so that the fetch goes to a closed loopback
    // port (the discard port) and nowhere else.
    config.oauth.loopback_client_metadata = true;
    let state = AppState::assemble(&config, parts).await.unwrap();
    let app = test::init_service(app::build(state)).await;
    let open = |peer: &str| {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("response_type", "code"),
                ("client_id", "http://127.0.0.1:9/client.json"),
                ("redirect_uri", REDIRECT),
                ("code_challenge", CHALLENGE),
                ("code_challenge_method", "S256"),
            ])
            .finish();
        TestRequest::get()
            .uri(&format!("/oauth/authorize?{query}"))
            .peer_addr(peer.parse().unwrap())
            .to_request()
    };
    for n in 1..=30 {
        let res = test::call_service(&app, open(PEER)).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "fetch {n}");
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        assert!(page.contains("could not be fetched"), "{page}");
        assert!(
            !page.to_lowercase().contains("refused"),
            "the cause leaks: {page}"
        );
    }
    let res = test::call_service(&app, open(PEER)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key(header::RETRY_AFTER));
    let res = test::call_service(&app, open("198.51.100.7:1")).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
}

// Review M2 at the API: with max_boxes = 1 and one live box, the account's
// next `POST /v1/boxes` is 429 `quota_exceeded` naming the limit; another
// account is not refused for it (this server has no host: 503).
#[actix_web::test]
async fn a_box_past_max_boxes_is_a_429_while_another_account_is_not_refused() {
    use psbx_actors::box_state::BoxState;
    use psbx_actors::store::NewBox;
    let mut f = fixture();
    f.store = f.store.clone().with_quotas(psbx_actors::quota::Quotas {
        max_boxes: 1,
        ..Default::default()
    });
    let unit = psbx_actors::settings::Unit {
        vcpus: 1,
        memory_mib: 256,
        disk_gb: 1,
    };
    let id = psbx_actors::ids::BoxId::generate().unwrap();
    f.store
        .insert_box(&NewBox {
            account_id: Some(f.first.account.id.clone()),
            ..NewBox::for_size(id, "test:///", "test", BoxState::Running, 1, unit)
        })
        .unwrap();
    let other = other_account(&f);
    let app = service!(f);
    let start = |key: &str| {
        TestRequest::post()
            .uri("/v1/boxes")
            .insert_header(bearer(key))
            .set_json(json!({}))
            .to_request()
    };
    let res = test::call_service(&app, start(f.first.key.secret.expose())).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "quota_exceeded", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("quotas.max_boxes = 1"), "{message}");
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("stop boxes"),
        "{body}"
    );

    let res = test::call_service(&app, start(&other)).await;
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "boxes_unavailable", "{body}");
}

// Body limits: a JSON body past 1 MiB is 413 `payload_too_large` with the
// error body; so is an upload whose length passes the upload limit (before
// its token is looked at).
#[actix_web::test]
async fn over_limit_bodies_are_413_with_the_error_body() {
    let f = fixture();
    let app = service!(f);
    let res = test::call_service(
        &app,
        TestRequest::put()
            .uri("/v1/secrets/BIG")
            .insert_header(bearer(f.first.key.secret.expose()))
            .set_json(json!({ "value": "x".repeat(2 << 20) }))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "payload_too_large", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("1 MiB"),
        "{body}"
    );

    let res = test::call_service(
        &app,
        TestRequest::put()
            .uri("/v1/uploads/psbxup_unknown")
            .set_payload("x")
            // Said, not sent: the header the route reads first.
            .insert_header((header::CONTENT_LENGTH, (2u64 << 30).to_string()))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(error_code(&body), "payload_too_large", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("1 GiB"),
        "{body}"
    );
}

// Issue item 3: this server's own API keys and connector tokens (alone or
// inside a header line) are refused as secrets and as environment settings
// with `not_a_secret`; a value that only looks like a key is stored.
#[actix_web::test]
async fn psbx_keys_and_connector_tokens_are_not_secrets() {
    let f = fixture();
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();
    let put = |value: &str| {
        TestRequest::put()
            .uri("/v1/secrets/TOKEN")
            .insert_header(bearer(&key))
            .set_json(json!({ "value": value }))
            .to_request()
    };
    let post = |uri: &str, body: Value| {
        TestRequest::post()
            .uri(uri)
            .insert_header(bearer(&key))
            .set_json(body)
            .to_request()
    };
    assert_eq!(
        test::call_service(&app, post("/v1/environments", json!({"name": "dev"})))
            .await
            .status(),
        StatusCode::CREATED
    );
    let res = test::call_service(
        &app,
        post(
            "/v1/environments/dev/connections",
            json!({"name": "office"}),
        ),
    )
    .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let made: Value = test::read_body_json(res).await;
    let token = made["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("psbx_conn_"), "{made}");

    for value in [key.clone(), format!("Bearer {key}"), token.clone()] {
        let res = test::call_service(&app, put(&value)).await;
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = test::read_body_json(res).await;
        assert_eq!(error_code(&body), "not_a_secret", "{body}");
        let text = body.to_string();
        assert!(
            !text.contains(&value),
            "the answer repeats the credential: {text}"
        );
        assert!(
            body["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("box reaches psbx"),
            "{body}"
        );
    }
    let res = test::call_service(
        &app,
        TestRequest::put()
            .uri("/v1/environments/dev/services/api")
            .insert_header(bearer(&key))
            .set_json(json!({ "dotenv": format!("PSBX_KEY={key}\n") }))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // Shaped like a key, but not one of this server's; and an ordinary value.
    let lookalike = format!("psbx_{}", "a".repeat(40));
    assert_eq!(
        test::call_service(&app, put(&lookalike)).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        test::call_service(&app, put("ghp_ordinary")).await.status(),
        StatusCode::OK
    );
}

// Quotas on the other objects an account stores: secrets (a replacement is
// not a new one), connections, and the bytes of stored values.
#[actix_web::test]
async fn secrets_connections_and_stored_bytes_have_quotas() {
    let mut f = fixture();
    f.store = f.store.clone().with_quotas(psbx_actors::quota::Quotas {
        max_secrets: 1,
        max_connections: 1,
        max_stored_bytes: 4096,
        ..Default::default()
    });
    let app = service!(f);
    let key = f.first.key.secret.expose().to_owned();
    let put = |name: &str, value: &str| {
        TestRequest::put()
            .uri(&format!("/v1/secrets/{name}"))
            .insert_header(bearer(&key))
            .set_json(json!({ "value": value }))
            .to_request()
    };
    let post = |uri: &str, body: Value| {
        TestRequest::post()
            .uri(uri)
            .insert_header(bearer(&key))
            .set_json(body)
            .to_request()
    };
    let refused = |body: &Value, limit: &str| {
        assert_eq!(error_code(body), "quota_exceeded", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(limit), "{message}");
    };
    assert_eq!(
        test::call_service(&app, put("A", "one")).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        test::call_service(&app, put("A", "two")).await.status(),
        StatusCode::OK
    );
    let res = test::call_service(&app, put("B", "three")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    refused(&test::read_body_json(res).await, "quotas.max_secrets = 1");
    let res = test::call_service(&app, put("A", &"x".repeat(8192))).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    refused(
        &test::read_body_json(res).await,
        "quotas.max_stored_bytes = 4096",
    );

    test::call_service(&app, post("/v1/environments", json!({"name": "dev"}))).await;
    test::call_service(&app, post("/v1/environments", json!({"name": "prod"}))).await;
    let res = test::call_service(
        &app,
        post("/v1/environments/dev/connections", json!({"name": "a"})),
    )
    .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    // Counted over all the account's environments.
    let res = test::call_service(
        &app,
        post("/v1/environments/prod/connections", json!({"name": "b"})),
    )
    .await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    refused(
        &test::read_body_json(res).await,
        "quotas.max_connections = 1",
    );
}

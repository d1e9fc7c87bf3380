//! `/v1/box-access` through the real app on a real PostgreSQL database of its
//! own: the round trip, refusals that name the entry, turning the list off,
//! another account's list apart, and the document.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bearer, fixture, other_account, state, state_with};

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use psbx_server::app::{self};
use psbx_server::config::Config;
use serde_json::{Value, json};

macro_rules! call {
    ($app:expr, $req:expr) => {{
        let res = test::call_service(&$app, $req.to_request()).await;
        let status = res.status();
        let body: Value = test::read_body_json(res).await;
        (status, body)
    }};
}

fn put(key: &str, body: Value) -> TestRequest {
    TestRequest::put()
        .uri("/v1/box-access")
        .insert_header(bearer(key))
        .set_json(body)
}

fn get(key: &str) -> TestRequest {
    TestRequest::get()
        .uri("/v1/box-access")
        .insert_header(bearer(key))
}

#[actix_web::test]
async fn a_list_round_trips_and_an_empty_one_turns_it_off() {
    let f = fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let (status, body) = call!(app, get(&f.key()));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"entries": [], "updatedAt": null}));

    let (status, body) = call!(
        app,
        put(
            &f.key(),
            json!({"entries": ["203.0.113.0/24", "198.51.100.7", "198.51.100.7/32"]})
        )
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["entries"], json!(["203.0.113.0/24", "198.51.100.7"]));
    let at = body["updatedAt"].as_str().unwrap().to_owned();
    chrono::DateTime::parse_from_rfc3339(&at).unwrap();
    let (status, read) = call!(app, get(&f.key()));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read, body);

    // Another account's list is its own.
    let other = other_account(&f);
    let (_, theirs) = call!(app, get(&other));
    assert_eq!(theirs, json!({"entries": [], "updatedAt": null}));
    let (status, _) = call!(app, put(&other, json!({"entries": ["10.0.0.0/8"]})));
    assert_eq!(status, StatusCode::OK);
    let (_, mine) = call!(app, get(&f.key()));
    assert_eq!(mine["entries"], json!(["203.0.113.0/24", "198.51.100.7"]));

    // An empty list turns it off and says when.
    let (status, off) = call!(app, put(&f.key(), json!({"entries": []})));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(off["entries"], json!([]));
    assert!(off["updatedAt"].is_string());
    let (_, read) = call!(app, get(&f.key()));
    assert_eq!(read, off);
}

#[actix_web::test]
async fn refused_lists_name_the_entry_and_change_nothing() {
    let f = fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let (status, _) = call!(app, put(&f.key(), json!({"entries": ["203.0.113.0/24"]})));
    assert_eq!(status, StatusCode::OK);

    let (status, body) = call!(
        app,
        put(
            &f.key(),
            json!({"entries": ["203.0.113.0/24", "2001:db8::/32"]})
        )
    );
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_box_access");
    assert_eq!(
        body["error"]["message"],
        "2001:db8::/32 is IPv6: only IPv4 addresses and ranges are matched for now"
    );

    let (status, body) = call!(app, put(&f.key(), json!({"entries": ["203.0.113.5/24"]})));
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean 203.0.113.0/24?"),
        "{body}"
    );

    let (status, body) = call!(app, put(&f.key(), json!({"entries": ["the office"]})));
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"the office\""), "{message}");
    assert!(message.contains("203.0.113.0/24"), "{message}");

    let fifty_one: Vec<String> = (0..51).map(|i| format!("10.0.{i}.0/24")).collect();
    let (status, body) = call!(app, put(&f.key(), json!({ "entries": fifty_one })));
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "invalid_box_access");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 50"),
        "{body}"
    );
    let fifty: Vec<String> = (0..50).map(|i| format!("10.0.{i}.0/24")).collect();
    let (status, body) = call!(app, put(&f.key(), json!({ "entries": fifty })));
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["entries"].as_array().unwrap().len(), 50);

    // Unknown fields and a missing list are the body's 400.
    let (status, body) = call!(app, put(&f.key(), json!({"entries": [], "mode": "deny"})));
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "invalid_body");
    let (status, _) = call!(app, put(&f.key(), json!({})));
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (_, read) = call!(app, get(&f.key()));
    assert_eq!(read["entries"].as_array().unwrap().len(), 50);
    // Without a key: 401.
    let res = test::call_service(&app, TestRequest::get().uri("/v1/box-access").to_request()).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[actix_web::test]
async fn the_document_describes_both_calls_with_their_limits() {
    let f = fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let (_, doc) = call!(app, TestRequest::get().uri("/v1/openapi.json"));
    let item = &doc["paths"]["/v1/box-access"];
    assert_eq!(item["get"]["operationId"], "getBoxAccess");
    assert_eq!(item["put"]["operationId"], "putBoxAccess");
    for status in ["200", "400", "401", "503"] {
        assert!(item["put"]["responses"][status].is_object(), "{status}");
    }
    let entries = &doc["components"]["schemas"]["PutBoxAccess"]["properties"]["entries"];
    assert_eq!(entries["maxItems"], 50);
    assert_eq!(
        entries["items"]["pattern"],
        psbx_actors::box_access::entry_pattern()
    );
    assert_eq!(
        doc["components"]["schemas"]["PutBoxAccess"]["additionalProperties"],
        false
    );
}

// The per-address rate limits key by `client_addr::client_ip`: behind a
// trusted proxy each forwarded client counts on its own, and what a client
// puts in `X-Forwarded-For` itself is not believed.
#[actix_web::test]
async fn behind_a_trusted_proxy_registrations_are_counted_per_forwarded_client() {
    let f = fixture();
    let config = Config {
        trusted_proxies: vec!["10.0.0.5".to_owned()],
        ..Config::default()
    };
    let app = test::init_service(app::build(state_with(&f, &config).await)).await;
    let register = |peer: &str, forwarded: &str| {
        TestRequest::post()
            .uri("/oauth/register")
            .peer_addr(peer.parse().unwrap())
            .insert_header(("X-Forwarded-For", forwarded.to_owned()))
            .set_json(json!({"redirect_uris": ["http://127.0.0.1:9/callback"]}))
            .to_request()
    };
    for n in 1..=20 {
        let res = test::call_service(&app, register("10.0.0.5:443", "203.0.113.10")).await;
        assert_eq!(res.status(), StatusCode::CREATED, "registration {n}");
    }
    let res = test::call_service(&app, register("10.0.0.5:443", "203.0.113.10")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another client behind the same proxy is not affected...
    let res = test::call_service(&app, register("10.0.0.5:443", "203.0.113.11")).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    // ...nor is it let through by claiming another address itself: the
    // proxy appends the address it saw, which is the one counted.
    let res = test::call_service(
        &app,
        register("10.0.0.5:443", "198.51.100.99, 203.0.113.10"),
    )
    .await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // A peer that is not a trusted proxy is the client, whatever it forwards.
    for n in 1..=20 {
        let res = test::call_service(
            &app,
            register("198.51.100.7:1234", &format!("203.0.113.{n}")),
        )
        .await;
        assert_eq!(res.status(), StatusCode::CREATED, "registration {n}");
    }
    let res = test::call_service(&app, register("198.51.100.7:1234", "203.0.113.200")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

//! An id in a route's path or a tool's arguments that is not even of its
//! kind's shape answers exactly as a well-formed id that names nothing of
//! the account: the same status, code, message and hint (the message naming
//! the id as given), for boxes, shots, reviews and API keys, on REST and MCP
//! alike (`server/src/ids`). Nothing here boots a box: the app runs without a
//! host, and the ids name nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{a_box, bearer, fixture, state};

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::{Method, StatusCode, header};
use actix_web::test::{self, TestRequest};
use psbx_actors::box_state::BoxState;
use psbx_server::app;
use serde_json::{Value, json};

/// Well-formed ids nothing has.
const NO_BOX: &str = "box_0nothing0here";
const NO_SHOT: &str = "shot_0nothing0here";
const NO_REVIEW: &str = "rev_0nothing0here";
const NO_KEY: &str = "key_0nothing0here";

/// Ids of no kind's shape: a foreign prefix, no prefix, a character ids
/// never have.
const MALFORMED: [&str; 3] = ["shot_0abc", "not-an-id", "box_a.b"];

/// A call: method, path with `{}` where the id goes, JSON body.
type Call = (Method, String, Option<Value>);

fn call(method: Method, path: &str, body: Option<Value>) -> Call {
    (method, path.to_owned(), body)
}

/// The calls that take a box id, each with a body it accepts.
fn box_calls() -> Vec<Call> {
    vec![
        call(Method::GET, "/v1/boxes/{}", None),
        call(Method::DELETE, "/v1/boxes/{}", None),
        call(
            Method::POST,
            "/v1/boxes/{}/keep",
            Some(json!({"keep": "1h"})),
        ),
        call(
            Method::POST,
            "/v1/boxes/{}/exec",
            Some(json!({"cmd": "true"})),
        ),
        call(Method::GET, "/v1/boxes/{}/processes", None),
        call(Method::GET, "/v1/boxes/{}/processes/7/logs", None),
        call(Method::DELETE, "/v1/boxes/{}/processes/7", None),
        call(Method::POST, "/v1/boxes/{}/sync", None),
        call(Method::POST, "/v1/boxes/{}/shots", None),
        call(Method::GET, "/v1/boxes/{}/shots", None),
        call(Method::DELETE, "/v1/boxes/{}/shots", None),
        call(
            Method::POST,
            "/v1/boxes/{}/reviews",
            Some(json!({"title": "look", "summary": "at it"})),
        ),
        call(Method::POST, "/v1/boxes/{}/takeover", None),
        call(Method::GET, "/v1/boxes/{}/terminals", None),
        call(Method::DELETE, "/v1/boxes/{}/terminals", None),
        call(Method::DELETE, "/v1/boxes/{}/terminals/term_0abc", None),
        call(Method::POST, "/v1/boxes/{}/url-key", None),
        call(
            Method::POST,
            "/v1/boxes/{}/wire",
            Some(json!({"service": "api.svc.local", "mode": "box"})),
        ),
    ]
}

/// What `call` answers with `given` in its path: the status and the error
/// body, `given` replaced by `{id}` in the message and hint.
async fn answer<S, B>(app: &S, key: &str, (method, path, body): &Call, given: &str) -> (u16, Value)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut req = TestRequest::default()
        .method(method.clone())
        .uri(&path.replace("{}", given))
        .insert_header(bearer(key));
    if let Some(body) = body {
        req = req.set_json(body);
    }
    let res = test::call_service(app, req.to_request()).await;
    let status = res.status().as_u16();
    let mut body: Value = test::read_body_json(res).await;
    for field in ["message", "hint"] {
        if let Some(text) = body["error"][field].as_str() {
            body["error"][field] = Value::String(text.replace(given, "{id}"));
        }
    }
    (status, body)
}

/// Each call with each malformed id answers as with `unknown`: a 404 of `code`.
async fn same_as_unknown<S, B>(app: &S, key: &str, calls: &[Call], unknown: &str, code: &str)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    for call in calls {
        let expected = answer(app, key, call, unknown).await;
        assert_eq!(expected.0, 404, "{} {}: {}", call.0, call.1, expected.1);
        assert_eq!(expected.1["error"]["code"], code, "{} {}", call.0, call.1);
        assert!(
            expected.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("{id}"),
            "{} {}: {}",
            call.0,
            call.1,
            expected.1
        );
        for bad in MALFORMED {
            let got = answer(app, key, call, bad).await;
            assert_eq!(got, expected, "{} {} with {bad:?}", call.0, call.1);
        }
    }
}

#[actix_web::test]
async fn a_malformed_id_answers_as_an_unknown_one_on_every_route() {
    let f = fixture();
    let key = f.key();
    let app = test::init_service(app::build(state(&f).await)).await;

    same_as_unknown(&app, &key, &box_calls(), NO_BOX, "box_not_found").await;

    // A shot is found by its own id; the box in its path only narrows it, so
    // a box id that names nothing, well-formed or not, leaves the shot not
    // found.
    let mine = a_box(&f, &f.first.account.id, BoxState::Running);
    let shot_calls = [
        call(Method::GET, &format!("/v1/boxes/{mine}/shots/{{}}"), None),
        call(
            Method::GET,
            &format!("/v1/boxes/{mine}/shots/{{}}/file"),
            None,
        ),
        call(
            Method::DELETE,
            &format!("/v1/boxes/{mine}/shots/{{}}"),
            None,
        ),
    ];
    same_as_unknown(&app, &key, &shot_calls, NO_SHOT, "shot_not_found").await;
    for (method, _, body) in shot_calls {
        let path = format!("/v1/boxes/{{}}/shots/{NO_SHOT}");
        let call = (method, path, body);
        let expected = answer(&app, &key, &call, NO_BOX).await;
        assert_eq!(expected.0, 404, "{}", call.1);
        assert_eq!(expected.1["error"]["code"], "shot_not_found", "{}", call.1);
        for bad in MALFORMED {
            assert_eq!(answer(&app, &key, &call, bad).await, expected, "{}", call.1);
        }
    }

    let review_calls = [
        call(Method::GET, "/v1/reviews/{}", None),
        call(
            Method::POST,
            "/v1/reviews/{}/answer",
            Some(json!({"approved": true})),
        ),
    ];
    same_as_unknown(&app, &key, &review_calls, NO_REVIEW, "review_not_found").await;

    let key_calls = [call(Method::DELETE, "/v1/api-keys/{}", None)];
    same_as_unknown(&app, &key, &key_calls, NO_KEY, "api_key_not_found").await;

    // What is not an id keeps its answer: a pid that is no number is a path
    // that does not fit (400 `invalid_path`), a terminal id of the wrong
    // shape a 400 of its own, whatever the box.
    for (method, path, code) in [
        (
            Method::GET,
            "/v1/boxes/{}/processes/seven/logs",
            "invalid_path",
        ),
        (
            Method::DELETE,
            "/v1/boxes/{}/terminals/nope",
            "invalid_terminal_id",
        ),
    ] {
        for given in [NO_BOX, "not-an-id"] {
            let (status, body) = answer(&app, &key, &call(method.clone(), path, None), given).await;
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (400, Some(code)),
                "{path} with {given}"
            );
        }
    }
}

#[actix_web::test]
async fn an_mcp_tool_fails_alike_for_a_malformed_and_an_unknown_box() {
    let f = fixture();
    let key = f.key();
    let app = test::init_service(app::build(state(&f).await)).await;
    let call = |tool: &str, id: &str| {
        TestRequest::post()
            .uri("/mcp")
            .insert_header((header::HOST, "localhost:8080"))
            .insert_header(bearer(&key))
            .insert_header((header::ACCEPT, "application/json, text/event-stream"))
            .insert_header(("mcp-protocol-version", "2025-11-25"))
            .set_json(json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": {"id": id}},
            }))
            .to_request()
    };
    for tool in ["sandbox_status", "sandbox_stop"] {
        let mut seen = Vec::new();
        for id in [NO_BOX, "not-an-id", "shot_0abc"] {
            let res = test::call_service(&app, call(tool, id)).await;
            assert_eq!(res.status(), StatusCode::OK, "{tool} {id}");
            let result = tool_result(&test::read_body(res).await);
            assert_eq!(result["isError"], true, "{tool} {id}: {result}");
            let text = result["content"][0]["text"].as_str().unwrap();
            assert!(text.contains("no box"), "{tool} {id}: {text}");
            seen.push(text.replace(id, "{id}"));
        }
        assert!(seen.iter().all(|t| *t == seen[0]), "{tool}: {seen:?}");
    }
}

/// The `result` of a tool call's answer: one JSON-RPC message, plain or as
/// the `data:` of a server-sent event.
fn tool_result(body: &[u8]) -> Value {
    let text = std::str::from_utf8(body).unwrap();
    let message = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| data.contains("\"result\""))
        .unwrap_or(text);
    let message: Value = serde_json::from_str(message).unwrap();
    message["result"].clone()
}

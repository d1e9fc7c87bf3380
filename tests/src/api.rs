//! The REST API as tests call it: a request with a bearer key, answered as
//! (status, JSON body), and the same asserting a 2xx answer.

use serde_json::Value;
use std::time::Duration;

/// `method base+path` with `key` as bearer token and `body` as JSON, if any.
pub fn call(base: &str, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("http client");
    if method == reqwest::Method::PUT
        && path.starts_with("/v1/secrets/")
        && let Some(value) = body.as_ref().and_then(|b| b["value"].as_str())
    {
        crate::witness::secret(value);
    }
    let mut req = client
        .request(method.clone(), format!("{base}{path}"))
        .bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let res = req.send().expect("the server answers");
    let status = res.status().as_u16();
    let text = res.text().unwrap_or_default();
    crate::witness::assert_unseen(&format!("the answer to {method} {path}"), &text);
    crate::witness::tokens_in(&text);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// [`call`], failing the test unless the answer is a 2xx; its body.
pub fn ok(base: &str, key: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, answer) = call(base, key, method, path, body);
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {answer}"
    );
    answer
}

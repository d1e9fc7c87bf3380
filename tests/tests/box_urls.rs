//! Box URLs end to end: a real box, a program serving HTTP in it, and requests
//! to `http://box-<id>-<key>.box.localhost:<port>/` made the way a browser
//! makes them (to the server's loopback listener, Host naming the box).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

/// `url`'s host and the server's address: the request goes to the server,
/// whatever the box domain resolves to.
fn host_of(url: &str) -> String {
    url.split("://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// A whole HTTP/1.1 exchange on a new connection: the raw answer.
fn raw(server: &str, host: &str, path: &str) -> Vec<u8> {
    let addr = server.trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    conn.read_to_end(&mut out).unwrap();
    out
}

/// The answer without its `Date` header (the one line that says when).
fn without_date(answer: &[u8]) -> String {
    String::from_utf8_lossy(answer)
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn status_of(answer: &[u8]) -> u16 {
    String::from_utf8_lossy(answer)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn body_of(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

fn exec(s: &BoxServer, id: &str, body: Value) -> Value {
    s.ok("POST", &format!("/v1/boxes/{id}/exec"), Some(body))
}

#[test]
fn box_urls_reach_the_box_wake_it_and_tell_nothing_to_strangers() {
    let s = BoxServer::start("idle_freeze = \"8s\"\npool_size = 0");
    let server = s.url();
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "web", "services": [
            {"name": "web", "port": 80, "targetPort": 3000},
            {"name": "worker"}
        ]})),
    );
    let id = started["id"].as_str().unwrap().to_owned();
    let url = started["url"].as_str().unwrap().to_owned();
    let rest = id.strip_prefix("box_").unwrap();
    assert!(
        url.starts_with(&format!("http://box-{rest}-")) && url.contains(".box.localhost:"),
        "{started}"
    );
    // One URL per declared port; a service without one has none.
    let web_url = started["services"][0]["url"].as_str().unwrap();
    assert!(web_url.contains("-80.box.localhost:"), "{started}");
    assert_eq!(started["services"][1]["url"], Value::Null, "{started}");
    let host = host_of(&url);

    // Nothing listens yet: a page that says which port in which box.
    let answer = raw(&server, &host, "/");
    assert_eq!(status_of(&answer), 502, "{}", without_date(&answer));
    let page = body_of(&answer);
    assert!(
        page.contains(&format!("Nothing listens on port 3000 in box {id}")),
        "{page}"
    );

    exec(
        &s,
        &id,
        json!({"cmd": "mkdir -p /work/www && echo hello from the box > /work/www/index.html && busybox httpd -f -p 3000 -h /work/www", "background": true}),
    );
    let answer = wait::until("the box's page through its URL", Duration::from_secs(30), || {
        let answer = raw(&server, &host, "/index.html");
        (status_of(&answer) == 200).then_some(answer)
    });
    assert_eq!(body_of(&answer), "hello from the box\n");
    // The port form reaches the same service through its declared port.
    assert_eq!(
        body_of(&raw(&server, &host_of(web_url), "/index.html")),
        "hello from the box\n"
    );

    // A wrong key, an unknown box and a host that is no box URL: one answer.
    let key = host.split('.').next().unwrap().rsplit('-').next().unwrap();
    let wrong_key = host.replace(key, &"0".repeat(key.len()));
    let unknown_box = host.replace(rest, "zzzzzzzzzzzzzzzzzzzz");
    let not_a_box = host.replacen("box-", "nobox-", 1);
    let reference = without_date(&raw(&server, &wrong_key, "/index.html"));
    assert!(reference.starts_with("HTTP/1.1 404"), "{reference}");
    for other in [&unknown_box, &not_a_box] {
        assert_eq!(without_date(&raw(&server, other, "/index.html")), reference);
    }

    // Idle, the box freezes; a request to its URL wakes it.
    wait::until("the box to freeze", LONG, || {
        (s.db_box_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    let answer = raw(&server, &host, "/index.html");
    assert_eq!(body_of(&answer), "hello from the box\n", "{}", without_date(&answer));
    assert_eq!(s.db_box_state(&id).as_deref(), Some("running"));

    // Once stopped, its URL is the same 404 as a box that never was.
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(without_date(&raw(&server, &host, "/index.html")), reference);
    // psbx's own routes are not served on box hosts.
    assert_eq!(without_date(&raw(&server, &host, "/v1/health")), reference);
}

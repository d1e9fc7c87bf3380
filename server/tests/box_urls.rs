//! Box URLs against the real app on a loopback listener with the fake
//! hypervisor (`psbx_actors::hypervisor::fake`): the fake boxd's `port:<n>`
//! dials port `n` on the test machine's loopback, where each test runs "the
//! box's program" ([`BoxProgram`]), so no VM is needed. What is checked here
//! is what the server does between a client and a box (review-2 M3, L2, L3,
//! M6, L8): caps and idle timeouts, upgrades, key rotation, cookies, the log.
//! The whole path with a real box is tests/tests/box_urls.rs.
//!
//! Here rather than in tests/tests/: the test crate does not depend on the
//! server and actor crates, which an in-process server needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use actix_web::dev::ServerHandle;
use psbx_actors::hypervisor::fake::FakeHypervisor;
use psbx_actors::ids::BoxId;
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::config::{BoxUrlsConfig, Config};
use psbx_tests::TestDatabase;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

/// How long a test waits for an answer that must come.
const ANSWER: Duration = Duration::from_secs(60);

/// The app serving on loopback with a fake host; stopped when dropped.
struct Served {
    url: String,
    key: String,
    store: Store,
    handle: ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    runtime: tokio::runtime::Runtime,
    _db: TestDatabase,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start(idle_freeze: &str, box_urls: BoxUrlsConfig) -> Self {
        let db = TestDatabase::new();
        let store = Store::open(db.url(), PoolOptions::short_lived(8)).unwrap();
        let first = store.bootstrap().unwrap().unwrap();
        let server = store.register_server("box-urls", "0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let images = common::fake_image(dir.path());
        let (listener, url) = common::loopback();
        let config = Config {
            data_dir: dir.path().to_owned(),
            public_url: Some(url.clone()),
            box_domain: "box.localhost".into(),
            // The test is its own proxy: X-Forwarded-For names the clients.
            trusted_proxies: vec!["127.0.0.1".into()],
            box_urls,
            boxes: common::fake_host_boxes(images, idle_freeze),
            ..Config::default()
        };
        let fake = FakeHypervisor::new(&format!("fake:///{}", db.name()));
        let served =
            common::serve_on_fake_host(&store, server.id.as_str(), fake, config, listener, 2);
        let (handle, thread) = (served.handle, served.thread);
        Self {
            key: first.key.secret.expose().to_owned(),
            url,
            store,
            handle,
            thread: Some(thread),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            _db: db,
            _dir: dir,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        psbx_tests::api::call(&self.url, &self.key, method, path, body)
    }

    /// A running box of the account: its id and its bare URL.
    fn running_box(&self) -> (String, String) {
        let (status, started) = self.call("POST", "/v1/boxes", Some(json!({"name": "web"})));
        assert_eq!(status, 201, "{started}");
        let id = started["id"].as_str().unwrap().to_owned();
        let url = started["url"].as_str().unwrap().to_owned();
        psbx_tests::wait::until("the box runs", ANSWER, || {
            (self.state_of(&id) == "running").then_some(())
        });
        (id, url)
    }

    fn state_of(&self, id: &str) -> String {
        self.store
            .box_by_id(&BoxId::parse(id).unwrap())
            .unwrap()
            .unwrap()
            .state
            .to_string()
    }

    /// Connects to the server's listener.
    fn connect(&self) -> TcpStream {
        let conn = TcpStream::connect(self.url.trim_start_matches("http://")).unwrap();
        conn.set_read_timeout(Some(ANSWER)).unwrap();
        conn
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.runtime.block_on(self.handle.stop(false));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The host of a box URL for port `port` in the box (`-<port>` form).
fn port_host(url: &str, port: u16) -> String {
    let host = url.split("://").nth(1).unwrap().split('/').next().unwrap();
    host.replacen(".box.localhost", &format!("-{port}.box.localhost"), 1)
}

/// A whole answer to a request already written on `conn` (the server closes
/// the connection after it: the requests say `Connection: close`).
fn answer_of(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The head of an answer on `conn` (up to the blank line), read byte by byte
/// so that nothing after it is taken.
fn head_of(conn: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn get(s: &Served, host: &str, path: &str) -> String {
    let mut conn = s.connect();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    answer_of(&mut conn)
}

/// What the box's program saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// A request for this path arrived (its head).
    Request(String),
    /// The connection of a request for this path was closed by the server.
    Closed(String),
}

/// "The box's program": an HTTP/1.1 server on the test machine's loopback
/// that the fake boxd's `port:<n>` reaches. By path:
/// * `/hold`: reads the body as it comes and never answers;
/// * `/cookie`: sets a cookie with `Domain=box.example`;
/// * `/sneaky`: answers `101` (`Upgrade: websocket`) whatever was asked, then
///   says when the server closes the connection;
/// * `/ws`: `101` with the protocol asked for, then echoes;
/// * `/h2c`: `101` to `h2c`, whatever was asked;
/// * anything else: 200 `hello from the box`.
struct BoxProgram {
    port: u16,
    seen: mpsc::Receiver<Seen>,
}

impl BoxProgram {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, seen) = mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let tx = tx.clone();
                std::thread::spawn(move || serve(conn, &tx));
            }
        });
        Self { port, seen }
    }

    /// The next thing the program saw (it must see something).
    fn next(&self) -> Seen {
        self.seen.recv_timeout(ANSWER).unwrap()
    }
}

fn serve(conn: TcpStream, tx: &mpsc::Sender<Seen>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        head.push(line.trim_end().to_owned());
    }
    let path = head
        .first()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_owned();
    let upgrade = head.iter().find_map(|h| {
        h.to_ascii_lowercase()
            .strip_prefix("upgrade: ")
            .map(str::to_owned)
    });
    let _ = tx.send(Seen::Request(path.clone()));
    let mut conn = conn;
    let mut rest = Vec::new();
    match path.as_str() {
        "/hold" => {
            let _ = reader.read_to_end(&mut rest);
        }
        "/cookie" => {
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nSet-Cookie: a=b; Domain=box.example; Path=/\r\n\
                  Set-Cookie: c=d;domain=.box.example;Secure\r\nContent-Length: 2\r\n\r\nok",
            );
        }
        "/sneaky" | "/h2c" => {
            let protocol = if path == "/h2c" { "h2c" } else { "websocket" };
            let _ = write!(
                conn,
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: {protocol}\r\nConnection: Upgrade\r\n\r\n"
            );
            let _ = reader.read_to_end(&mut rest);
            let _ = tx.send(Seen::Closed(path));
        }
        "/ws" => {
            let protocol = upgrade.unwrap_or_default();
            let _ = write!(
                conn,
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: {protocol}\r\nConnection: Upgrade\r\n\r\n"
            );
            let mut buf = [0u8; 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(Seen::Closed(path));
        }
        _ => {
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\nConnection: close\r\n\r\nhello from the box\n",
            );
        }
    }
}

/// A POST to `/hold` whose body never comes (one byte of a million), from
/// client `client` through the test's "proxy".
fn stalled_post(s: &Served, host: &str, client: &str) -> TcpStream {
    let mut conn = s.connect();
    write!(
        conn,
        "POST /hold HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: {client}\r\n\
         Content-Length: 1000000\r\n\r\nx"
    )
    .unwrap();
    conn
}

/// 300 stalled POSTs to a box's URL: 64 from one client and 64 more from
/// others are held (the caps per client and per box), every other one is
/// answered 503 at once (while all the held ones still wait), the owner's
/// exec still works, and the box freezes on time under the stalled ones.
#[test]
fn a_box_url_cannot_starve_its_owner() {
    let s = Served::start("6s", BoxUrlsConfig::default());
    let program = BoxProgram::start();
    let (id, url) = s.running_box();
    let host = port_host(&url, program.port);
    let mut held = Vec::new();
    let mut refused = Vec::new();
    let mut sent = 0;
    // One client asks first: 64 held, then 6 refused for the client's cap.
    // Then 23 others, 10 each: 64 more held, then refused for the box's cap.
    let clients = std::iter::repeat_n("198.51.100.1".to_owned(), 70)
        .chain((0..230).map(|i| format!("203.0.113.{}", 10 + i / 10)));
    for client in clients {
        sent += 1;
        let mut conn = stalled_post(&s, &host, &client);
        let mine = held
            .iter()
            .filter(|(c, _): &&(String, TcpStream)| *c == client)
            .count();
        if held.len() < 128 && mine < 64 {
            assert_eq!(
                program.next(),
                Seen::Request("/hold".into()),
                "request {sent}"
            );
            held.push((client, conn));
        } else {
            let answer = head_of(&mut conn);
            assert_eq!(
                status_of(&answer),
                503,
                "request {sent} from {client}: {answer}"
            );
            assert!(
                answer.to_ascii_lowercase().contains("retry-after: 5"),
                "{answer}"
            );
            refused.push((client, conn));
        }
    }
    assert_eq!(sent, 300);
    assert_eq!((held.len(), refused.len()), (128, 172));
    // The pages say which cap was met.
    let (_, conn) = refused
        .iter_mut()
        .find(|(c, _)| c == "198.51.100.1")
        .unwrap();
    let page = answer_of(conn);
    assert!(page.contains("Your address has 64 requests open"), "{page}");
    let page = answer_of(&mut refused.last_mut().unwrap().1);
    assert!(page.contains("This box has 128 requests open"), "{page}");

    // The owner's calls still open streams on the box's channel.
    let (status, exec) = s.call(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({"cmd": "true", "background": true})),
    );
    assert_eq!(status, 200, "{exec}");

    // Stalled connections are no activity: the box freezes under them.
    psbx_tests::wait::until("the box to freeze under stalled requests", ANSWER, || {
        (s.state_of(&id) == "frozen").then_some(())
    });
    drop(held);
}

/// A request body that sends nothing for `body_idle_timeout` is cut (408);
/// a WebSocket quiet for `websocket_idle_timeout` is closed; a WebSocket
/// that talks is not.
#[test]
fn quiet_bodies_and_websockets_are_cut() {
    let s = Served::start(
        "1h",
        BoxUrlsConfig {
            body_idle_timeout: "2s".into(),
            websocket_idle_timeout: "2s".into(),
            ..BoxUrlsConfig::default()
        },
    );
    let program = BoxProgram::start();
    let (_, url) = s.running_box();
    let host = port_host(&url, program.port);

    let mut conn = stalled_post(&s, &host, "198.51.100.1");
    assert_eq!(program.next(), Seen::Request("/hold".into()));
    let answer = answer_of(&mut conn);
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert!(
        answer.contains("Nothing of this request's body arrived for 2 seconds"),
        "{answer}"
    );

    let mut ws = s.connect();
    write!(
        ws,
        "GET /ws HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    )
    .unwrap();
    let head = head_of(&mut ws);
    assert_eq!(status_of(&head), 101, "{head}");
    assert_eq!(program.next(), Seen::Request("/ws".into()));
    // Talking keeps it open: an echo comes back.
    ws.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    ws.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");
    // Quiet, it is closed at both ends.
    assert_eq!(program.next(), Seen::Closed("/ws".into()));
    let mut rest = Vec::new();
    let _ = ws.read_to_end(&mut rest);
}

/// A 101 passes only for the upgrade the client asked for; cookies lose
/// their Domain; a rotated key leaves the old host with the constant 404;
/// box-URL paths stay out of the log.
#[test]
fn box_urls_upgrades_cookies_key_rotation_and_the_log() {
    let logs = common::logs();
    let s = Served::start("1h", BoxUrlsConfig::default());
    let program = BoxProgram::start();
    let (id, url) = s.running_box();
    let host = port_host(&url, program.port);

    // A 101 to a plain GET: 502, and the box's connection is closed.
    let answer = get(&s, &host, "/sneaky");
    assert_eq!(status_of(&answer), 502, "{answer}");
    assert_eq!(program.next(), Seen::Request("/sneaky".into()));
    assert_eq!(program.next(), Seen::Closed("/sneaky".into()));
    // A 101 to another protocol than the one asked for: 502 too.
    let mut conn = s.connect();
    write!(
        conn,
        "GET /h2c HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    )
    .unwrap();
    let answer = head_of(&mut conn);
    assert_eq!(status_of(&answer), 502, "{answer}");
    assert_eq!(program.next(), Seen::Request("/h2c".into()));
    assert_eq!(program.next(), Seen::Closed("/h2c".into()));

    // Cookies stay their host's.
    let answer = get(&s, &host, "/cookie");
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(program.next(), Seen::Request("/cookie".into()));
    let cookies: Vec<&str> = answer
        .split("\r\n")
        .filter(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .collect();
    assert_eq!(cookies.len(), 2, "{answer}");
    assert!(
        cookies.iter().any(|c| c.ends_with("a=b; Path=/")),
        "{cookies:?}"
    );
    assert!(
        cookies.iter().any(|c| c.ends_with("c=d;Secure")),
        "{cookies:?}"
    );
    assert!(!answer.to_ascii_lowercase().contains("domain"), "{answer}");

    // The path of a box URL's request is not logged.
    let answer = get(&s, &host, "/reset/tok3nofthebox");
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(program.next(), Seen::Request("/reset/tok3nofthebox".into()));

    // Rotation: the old host answers as a wrong key does, the new one works.
    let key = host.split('.').next().unwrap().split('-').nth(2).unwrap();
    let wrong_key = host.replace(key, &"0".repeat(key.len()));
    let reference = get(&s, &wrong_key, "/");
    assert_eq!(status_of(&reference), 404, "{reference}");
    let (status, rotated) = s.call("POST", &format!("/v1/boxes/{id}/url-key"), None);
    assert_eq!(status, 200, "{rotated}");
    let new_url = rotated["url"].as_str().unwrap();
    assert_ne!(new_url, url);
    let new_host = port_host(new_url, program.port);
    let without_date = |a: &str| {
        a.split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .collect::<Vec<_>>()
            .join("\r\n")
    };
    assert_eq!(without_date(&get(&s, &host, "/")), without_date(&reference));
    let answer = get(&s, &new_host, "/");
    assert!(answer.ends_with("hello from the box\n"), "{answer}");
    assert_eq!(program.next(), Seen::Request("/".into()));
    // Reading the box shows the new URL.
    let (_, read) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(read["url"], new_url);
    // Another account's box, or no box: 404.
    let (status, _) = s.call("POST", "/v1/boxes/box_nosuchbox/url-key", None);
    assert_eq!(status, 404);

    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!logged.contains("tok3nofthebox"), "a box path in the log");
    assert!(logged.contains("[box URL]"), "no box-URL request line");
}

/// review-2 L3: a box started with `urlPorts` is reached through its URL on
/// those ports only; any other port answers as a wrong key does, and the
/// view shows no URL it would not serve.
#[test]
fn url_ports_limit_what_a_shared_link_opens() {
    let s = Served::start("1h", BoxUrlsConfig::default());
    let program = BoxProgram::start();
    let (status, refused) = s.call("POST", "/v1/boxes", Some(json!({"urlPorts": [0]})));
    assert_eq!(status, 400, "{refused}");
    let (status, started) = s.call(
        "POST",
        "/v1/boxes",
        Some(json!({
            "name": "shared",
            "services": [
                {"name": "web.svc.local", "port": program.port},
                {"name": "db.svc.local", "port": 6379}
            ],
            "urlPorts": [program.port, program.port]
        })),
    );
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    psbx_tests::wait::until("the box runs", ANSWER, || {
        (s.state_of(&id) == "running").then_some(())
    });
    let (_, view) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(view["urlPorts"], json!([program.port]), "{view}");
    let url = view["url"].as_str().unwrap().to_owned();
    let web = url.replacen(
        ".box.localhost",
        &format!("-{}.box.localhost", program.port),
        1,
    );
    assert_eq!(view["services"][0]["url"], web.as_str(), "{view}");
    assert!(
        view["services"][1]["url"].is_null(),
        "db's port is not reached: {view}"
    );
    let answer = get(&s, &port_host(&url, program.port), "/");
    assert!(answer.ends_with("hello from the box\n"), "{answer}");
    assert_eq!(program.next(), Seen::Request("/".into()));
    let without_date = |a: &str| {
        a.split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .collect::<Vec<_>>()
            .join("\r\n")
    };
    let other_port = port_host(&url, 6379);
    let key = other_port
        .split('.')
        .next()
        .unwrap()
        .split('-')
        .nth(2)
        .unwrap();
    let wrong_key = other_port.replace(key, &"0".repeat(key.len()));
    assert_eq!(
        without_date(&get(&s, &other_port, "/")),
        without_date(&get(&s, &wrong_key, "/")),
        "a port outside urlPorts answers as a wrong key"
    );
}

/// A box domain that is not a public suffix is warned about at start.
#[actix_rt::test]
async fn a_box_domain_off_the_public_suffix_list_is_warned_about() {
    let logs = common::logs();
    let f = common::fixture();
    let config = Config {
        box_domain: "boxes.example".into(),
        ..Config::default()
    };
    let _state = common::state_with(&f, &config).await;
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        logged.contains("box_domain is not on the Public Suffix List")
            && logged.contains("boxes.example"),
        "{logged}"
    );
}

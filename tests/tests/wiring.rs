//! Issue 18 on real boxes: what a box declares in `services`, how a name is
//! switched between the box and the environment's external base URL, how a
//! name reached through the connector is taken over in place, and links
//! between two boxes of one account.
//!
//! A namespace "dev" stands for the user's network, with the real
//! `psbx-connector` listing `api.svc.local:8080` (a listener there counts
//! what reaches it: nothing may) and `orders.svc.local:7070` (an echo server
//! that holds connections). A namespace "internet" holds dev's external base
//! URL (an HTTP server on 203.0.113.x:8000 answering with the request line,
//! Host and X-Forwarded-Host it got) and an address of 172.16.5.0/24 whose
//! listeners must stay unreached. Box A declares names in box mode (one on
//! port 80 with a `targetPort`), a range, and `shop.svc.local` in external
//! mode; it is switched to box with `POST /v1/boxes/{id}/wire`, and
//! `orders.svc.local:7070` is taken over while a connection through the
//! connector is held. Box B links `api.svc.local:8080` to A, a second
//! account may not link to A, and once A stops B's link fails and is logged.
//! One server and two boxes, so that CI boots as few as possible. Every
//! route is checked with `ip route get` before anything is sent; traffic
//! goes only to loopback, the box's channel and the two namespaces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::dev::{Api, connector, held};
use psbx_tests::netns::Netns;
use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The test's address ranges: the only ones test boxes may reach.
const TEST_RANGES: &str = "only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]";

/// What a box says on `<name>:80` when the name is declared on another port.
fn port_80_body(name: &str) -> String {
    format!("nothing listens on {name}:80 in this box: that name is declared on another port")
}

/// What this test asks of the API beyond `psbx_tests::dev::Api`.
trait WiringApi {
    fn background(&self, id: &str, cmd: &str);
    fn httpd(&self, id: &str, port: u16, page: &str);
    fn view(&self, id: &str) -> Value;
    fn wire(&self, id: &str, body: Value) -> Value;
}

impl WiringApi for Api {
    /// Starts `cmd` in the box in the background.
    fn background(&self, id: &str, cmd: &str) {
        self.ok(
            "POST",
            &format!("/boxes/{id}/exec"),
            json!({ "cmd": cmd, "background": true }),
        );
    }

    /// busybox httpd on `port` in the box, serving `page` at `/`.
    fn httpd(&self, id: &str, port: u16, page: &str) {
        self.background(
            id,
            &format!(
                "mkdir -p /tmp/www{port} && echo {page} > /tmp/www{port}/index.html && \
                 busybox httpd -f -p {port} -h /tmp/www{port}"
            ),
        );
        // Serving before anything is sent to it.
        let (code, out) = self.sh(
            id,
            &format!(
                "for i in $(seq 1 50); do timeout 2 wget -qO- http://127.0.0.1:{port}/ 2>/dev/null && exit 0; \
                 sleep 0.2; done; exit 1"
            ),
        );
        assert_eq!(
            (code, out.as_str()),
            (0, format!("{page}\n").as_str()),
            "httpd on {port} in {id}"
        );
    }

    fn view(&self, id: &str) -> Value {
        self.ok("GET", &format!("/boxes/{id}"), json!(null))
    }

    fn wire(&self, id: &str, body: Value) -> Value {
        let (status, view) = self.call("POST", &format!("/boxes/{id}/wire"), body.clone());
        assert_eq!(status, 200, "wire {body}: {view}");
        view
    }
}

/// An HTTP server in `ns` on `addr:port` answering every GET with
/// `request: <request line>`, `host: <Host>` and `x-forwarded-host: <...>`
/// lines; each request line is appended to `log`.
fn echo_http(ns: &mut Netns, addr: Ipv4Addr, port: u16, log: &std::path::Path) {
    const SCRIPT: &str = "import http.server, sys\n\
        ADDR, PORT, LOG = sys.argv[1], int(sys.argv[2]), sys.argv[3]\n\
        class H(http.server.BaseHTTPRequestHandler):\n\
        \x20   def do_GET(self):\n\
        \x20       with open(LOG, 'a') as f:\n\
        \x20           f.write(self.requestline + '\\n')\n\
        \x20       body = ('request: %s\\nhost: %s\\nx-forwarded-host: %s\\n' % (self.requestline, \
                   self.headers.get('Host'), self.headers.get('X-Forwarded-Host'))).encode()\n\
        \x20       self.send_response(200)\n\
        \x20       self.send_header('Content-Type', 'text/plain')\n\
        \x20       self.send_header('Content-Length', str(len(body)))\n\
        \x20       self.end_headers()\n\
        \x20       self.wfile.write(body)\n\
        \x20   def log_message(self, *args):\n\
        \x20       pass\n\
        http.server.ThreadingHTTPServer((ADDR, PORT), H).serve_forever()\n";
    let mut cmd = ns.command("python3");
    cmd.args(["-c", SCRIPT, &addr.to_string(), &port.to_string()])
        .arg(log)
        .stdout(Stdio::null());
    ns.spawn(cmd);
    ns.assert_routed(addr);
    let target = SocketAddrV4::new(addr, port);
    wait::until(
        &format!("the HTTP server on {target} in {}", ns.name),
        Duration::from_secs(20),
        || TcpStream::connect_timeout(&target.into(), Duration::from_secs(1)).ok(),
    );
}

/// `GET path` from the host with HTTP/1.0 on a plain socket (no proxy from
/// the environment can redirect it): the whole answer.
fn host_get(target: SocketAddrV4, path: &str) -> String {
    let mut stream = TcpStream::connect_timeout(&target.into(), Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("{target} does not answer the host: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {target}\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// The entry of `view.services` for `name:port`.
fn service<'a>(view: &'a Value, name: &str, port: u16) -> &'a Value {
    view["services"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name && s["port"] == port))
        .unwrap_or_else(|| panic!("no service {name}:{port} in {view}"))
}

/// Whether `view.environment.reachable` lists `host:port`.
fn reachable(view: &Value, host: &str, port: u16) -> bool {
    view["environment"]["reachable"]
        .as_array()
        .unwrap_or_else(|| panic!("no environment.reachable in {view}"))
        .iter()
        .any(|e| e["host"] == host && e["port"] == port)
}

/// An address of 198.18.0.0/15 (boxd's own addresses).
fn in_boxd_range(text: &str) -> bool {
    text.parse::<Ipv4Addr>()
        .is_ok_and(|a| a.octets()[0] == 198 && a.octets()[1] & 0xfe == 18)
}

/// The address busybox nslookup printed for the name it was asked.
fn looked_up(out: &str) -> String {
    out.split("Name:")
        .nth(1)
        .and_then(|rest| {
            rest.lines()
                .find_map(|l| l.trim().strip_prefix("Address:"))
                .map(|a| a.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no address in nslookup's answer: {out}"))
}

/// Runs `cmd` in the box between two readings of `/proc/uptime`: (output,
/// seconds the command took in the box).
fn timed(api: &Api, id: &str, cmd: &str) -> (String, f64) {
    let (_, out) = api.sh(
        id,
        &format!(
            "a=$(cut -d' ' -f1 /proc/uptime); {cmd}; b=$(cut -d' ' -f1 /proc/uptime); \
             echo \"took $a $b\""
        ),
    );
    let took = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("took "))
        .and_then(|t| t.split_once(' '))
        .and_then(|(a, b)| Some(b.parse::<f64>().ok()? - a.parse::<f64>().ok()?))
        .unwrap_or_else(|| panic!("no timing in {out}"));
    (out, took)
}

#[test]
fn declared_services_external_mode_take_over_and_links() {
    let begun = Instant::now();
    let step = |what: &str| eprintln!("[{:>6.1?}] {what}", begun.elapsed());

    // The user's network: api's listener (must stay unreached) and orders'
    // echo server, both on dev's loopback under the names the box dials.
    let mut dev = Netns::new(&[
        ("api.svc.local", "127.0.0.1"),
        ("orders.svc.local", "127.0.0.1"),
    ]);
    let dev_api = dev.listener(Ipv4Addr::LOCALHOST, 8080, "dev's api");
    // It answers inside dev (and counts that one connection).
    let probe = dev
        .command("python3")
        .args([
            "-c",
            "import socket; print(socket.create_connection(('127.0.0.1', 8080), 3).recv(100).decode())",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&probe.stdout).contains("dev's api"),
        "dev's api listener: {probe:?}"
    );
    wait::until(
        "dev's api to count the probe",
        Duration::from_secs(5),
        || (dev_api.accepted() == 1).then_some(()),
    );
    dev.echo_server("127.0.0.1", 7070, "hello from dev orders");

    // The internet: dev's external base URL, and an address of the range A
    // declares, whose listeners nothing may reach.
    let mut internet = Netns::new(&[]);
    let web = internet.routed([203, 0, 113]);
    let range_addr = internet.routed([172, 16, 5]);
    let range_9090 = internet.listener(range_addr, 9090, "the range's 9090 outside the box");
    let range_9091 = internet.listener(range_addr, 9091, "the range's 9091 outside the box");
    for l in [&range_9090, &range_9091] {
        l.assert_answers_the_host();
    }
    let logs = tempfile::tempdir().unwrap();
    let requests = logs.path().join("requests.log");
    echo_http(&mut internet, web, 8000, &requests);
    let probe = host_get(SocketAddrV4::new(web, 8000), "/probe");
    assert!(
        probe.contains("request: GET /probe HTTP/1.0"),
        "the external base URL's server: {probe}"
    );
    assert_eq!(lines(&requests), 1);
    let base = format!("http://{web}:8000/base");

    let s = BoxServer::start_on(
        &format!("{}:0", dev.host_ip),
        "",
        &format!(
            "idle_freeze = \"45s\"\nnetwork = true\n\
             [boxes.egress]\nresolvers = [\"127.0.0.1:9\"]\n{TEST_RANGES}"
        ),
    );
    let url = s.url();
    let api = Api {
        url: url.clone(),
        key: s.key.clone(),
    };
    api.ok("POST", "/environments", json!({"name": "dev"}));
    let conn = api.ok(
        "POST",
        "/environments/dev/connections",
        json!({"name": "dc"}),
    );
    api.ok(
        "PUT",
        &format!(
            "/environments/dev/connections/{}/endpoints",
            conn["id"].as_str().unwrap()
        ),
        json!({"endpoints": [
            {"host": "api.svc.local", "port": 8080},
            {"host": "orders.svc.local", "port": 7070}
        ]}),
    );
    let connector_log = logs.path().join("connector.log");
    let _checked =
        psbx_tests::witness::CheckedFile::new("the connector's log", connector_log.clone());
    connector(
        &mut dev,
        &url,
        conn["token"].as_str().unwrap(),
        &[("PSBX_ALLOW", "api.svc.local:8080 orders.svc.local:7070")],
        &connector_log,
    );
    api.wait_online("dc", true, 2);
    step("dev, the internet, the server and the connector are up");

    // Box A.
    let (status, started) = api.call(
        "POST",
        "/boxes",
        json!({
            "name": "wiring",
            "environment": "dev",
            "externalBaseUrl": base,
            "services": [
                {"name": "api.svc.local", "port": 8080, "mode": "box"},
                {"name": "internal-lb.svc.local", "port": 80, "targetPort": 8080, "mode": "box"},
                {"name": "web.svc.local", "port": 3000, "mode": "box"},
                {"name": "172.16.0.0/16", "port": 9090},
                {"name": "shop.svc.local", "port": 8090}
            ]
        }),
    );
    assert_eq!(status, 201, "{started}");
    let a = started["id"].as_str().unwrap().to_owned();
    step(&format!("box A {a} started"));
    assert_eq!(started["externalBaseUrl"], base.as_str(), "{started}");
    assert_eq!(started["environment"]["connectorOnline"], true, "{started}");

    // 1. A declared name goes to the box, not to dev.
    let api_service = service(&started, "api.svc.local", 8080);
    assert_eq!(api_service["mode"], "box", "{api_service}");
    assert_eq!(api_service["kind"], "name", "{api_service}");
    // The address comes from boxd's health: read the box again when the
    // start's own read of it got no answer (the server logs why).
    let address = match api_service["address"].as_str() {
        Some(address) => address.to_owned(),
        None => {
            eprintln!(
                "the start's health read got no answer: {}",
                started["health"]
            );
            service(&api.view(&a), "api.svc.local", 8080)["address"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    };
    assert!(in_boxd_range(&address), "{api_service}");
    let lb = service(&started, "internal-lb.svc.local", 80);
    assert_eq!(
        (lb["mode"].as_str(), lb["targetPort"].as_u64()),
        (Some("box"), Some(8080)),
        "{lb}"
    );
    let range = service(&started, "172.16.0.0/16", 9090);
    assert_eq!(range["kind"], "range", "{range}");
    assert_eq!(
        range["mode"], "box",
        "ranges are always in box mode: {range}"
    );
    assert_eq!(range["address"], Value::Null, "{range}");
    assert!(
        !reachable(&started, "api.svc.local", 8080),
        "a name the box runs is not reachable through dev: {started}"
    );
    assert!(reachable(&started, "orders.svc.local", 7070), "{started}");
    api.httpd(&a, 8080, "from-the-box-api");
    let (code, out) = api.sh(&a, "timeout 20 wget -qO- http://api.svc.local:8080/");
    assert_eq!((code, out.as_str()), (0, "from-the-box-api\n"));
    assert_eq!(dev_api.accepted(), 1, "dev's api was reached from a box");
    step("1: api.svc.local:8080 is the box's");

    // 2. Port 80 with a targetPort; port 80 of a name declared elsewhere;
    // other ports of a declared name stay in the box.
    let (code, out) = api.sh(&a, "timeout 20 wget -qO- http://internal-lb.svc.local/");
    assert_eq!((code, out.as_str()), (0, "from-the-box-api\n"));
    let (_, out) = api.sh(
        &a,
        "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 10 web.svc.local 80",
    );
    let (head, body) = out
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer on web.svc.local:80: {out:?}"));
    assert!(head.starts_with("HTTP/1.1 502"), "{out:?}");
    assert_eq!(body, port_80_body("web.svc.local"), "{out:?}");
    let (_, out) = api.sh(
        &a,
        "(echo in-the-box-3001 | nc -l -p 3001 >/dev/null &); sleep 1; \
         nc -w 5 web.svc.local 3001 </dev/null",
    );
    assert!(out.contains("in-the-box-3001"), "{out}");
    let (out, took) = timed(
        &api,
        &a,
        "nc -w 10 web.svc.local 3002 </dev/null; echo exit=$?",
    );
    assert!(out.contains("refused") && out.contains("exit=1"), "{out}");
    assert!(took < 2.0, "refused after {took} s, not at once: {out}");
    step("2: port 80 and the other ports of declared names");

    // 3. The range on its port goes to the box; another port of it does not.
    api.httpd(&a, 9090, "from-the-box-9090");
    let (code, out) = api.sh(
        &a,
        &format!("timeout 20 wget -qO- http://{range_addr}:9090/"),
    );
    assert_eq!((code, out.as_str()), (0, "from-the-box-9090\n"));
    api.background(&a, "echo in-the-box-9091 | nc -l -p 9091 >/dev/null");
    let (out, took) = timed(
        &api,
        &a,
        &format!("nc -w 3 {range_addr} 9091 </dev/null; echo exit=$?"),
    );
    assert!(
        out.contains("exit=1") && !out.contains("in-the-box-9091"),
        "{range_addr}:9091 was answered: {out}"
    );
    assert!(took >= 2.5, "not a timeout ({took} s): {out}");
    // The box's 9091 was there all along, and was not what answered.
    let (_, out) = api.sh(&a, "nc -w 3 127.0.0.1 9091 </dev/null");
    assert!(out.contains("in-the-box-9091"), "{out}");
    assert_eq!(range_9090.accepted(), 1, "only the host's own check");
    assert_eq!(range_9091.accepted(), 1, "only the host's own check");
    step("3: the declared range");

    // 4. External mode: the base URL gets the request; switched to box, the
    // box's page.
    let shop = service(&started, "shop.svc.local", 8090);
    assert_eq!(shop["mode"], "external", "{shop}");
    let (code, out) = api.sh(
        &a,
        "timeout 20 wget -qO- 'http://shop.svc.local:8090/x?y=1'",
    );
    assert_eq!(code, 0, "{out}");
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), 3, "{out}");
    assert!(
        got[0].starts_with("request: GET /base/x?y=1 HTTP/1."),
        "{out}"
    );
    assert_eq!(got[1], format!("host: {web}:8000"), "{out}");
    assert_eq!(got[2], "x-forwarded-host: shop.svc.local:8090", "{out}");
    assert_eq!(lines(&requests), 2);
    let view = api.view(&a);
    assert_eq!(service(&view, "shop.svc.local", 8090)["mode"], "external");
    api.httpd(&a, 8090, "from-the-box-shop");
    let wired = api.wire(&a, json!({"service": "shop.svc.local", "mode": "box"}));
    assert_eq!(
        service(&wired, "shop.svc.local", 8090)["mode"],
        "box",
        "{wired}"
    );
    // The box's httpd serves its index only.
    let (code, out) = api.sh(&a, "timeout 20 wget -qO- 'http://shop.svc.local:8090/'");
    assert_eq!((code, out.as_str()), (0, "from-the-box-shop\n"));
    assert_eq!(lines(&requests), 2, "the base URL was asked again");
    step("4: external mode, then box mode");

    // 5. Take-over in place of a name held open through the connector.
    assert_eq!(held(&dev, 7070), 0);
    api.background(
        &a,
        "sleep 600 | { nc orders.svc.local 7070 > /tmp/held.txt; echo closed > /tmp/held.done; }",
    );
    wait::until(
        "dev holding the box's connection to orders",
        Duration::from_secs(30),
        || (held(&dev, 7070) == 1).then_some(()),
    );
    let (_, out) = api.sh(&a, "cat /tmp/held.txt; ls /tmp/held.done 2>&1");
    assert!(
        out.contains("hello from dev orders\n") && out.contains("No such file"),
        "{out}"
    );
    let (_, before) = api.sh(&a, "nslookup orders.svc.local");
    let address = looked_up(&before);
    assert!(in_boxd_range(&address), "{before}");
    api.httpd(&a, 7070, "from-the-box-orders");
    let wired_at = Instant::now();
    let wired = api.wire(&a, json!({"service": "orders.svc.local", "port": 7070}));
    let orders = service(&wired, "orders.svc.local", 7070);
    assert_eq!(orders["mode"], "box", "{orders}");
    assert_eq!(orders["address"], address.as_str(), "{orders}");
    assert!(
        !reachable(&wired, "orders.svc.local", 7070),
        "a name taken over is not reachable through dev: {wired}"
    );
    let (_, out) = api.sh(
        &a,
        "for i in $(seq 1 40); do [ -f /tmp/held.done ] && break; sleep 0.25; done; \
         cat /tmp/held.txt /tmp/held.done",
    );
    let closed_after = wired_at.elapsed();
    assert!(
        out.contains("hello from dev orders\nclosed\n"),
        "the held connection was not closed: {out}"
    );
    assert!(closed_after < Duration::from_secs(10), "{closed_after:?}");
    eprintln!("the held connection ended {closed_after:?} after the wire call");
    wait::until(
        "dev to let go of the held connection",
        Duration::from_secs(10),
        || (held(&dev, 7070) == 0).then_some(()),
    );
    let (code, out) = api.sh(&a, "timeout 20 wget -qO- http://orders.svc.local:7070/");
    assert_eq!((code, out.as_str()), (0, "from-the-box-orders\n"));
    let (_, after) = api.sh(&a, "nslookup orders.svc.local");
    assert_eq!(looked_up(&after), address, "{before}\n{after}");
    let view = api.view(&a);
    let features = view["health"]["features"]
        .as_array()
        .unwrap_or_else(|| panic!("no health.features: {view}"));
    assert!(features.iter().any(|f| f == "take-over"), "{view}");
    step("5: orders.svc.local:7070 taken over");

    // 6. Links: B reaches A's api under the same name.
    let (status, b_started) = api.call(
        "POST",
        "/boxes",
        json!({
            "name": "linked",
            "links": [{"name": "api.svc.local", "port": 8080, "box": a}]
        }),
    );
    assert_eq!(status, 201, "{b_started}");
    let b = b_started["id"].as_str().unwrap().to_owned();
    step(&format!("box B {b} started"));
    let (code, out) = api.sh(&b, "timeout 30 wget -qO- http://api.svc.local:8080/");
    assert_eq!((code, out.as_str()), (0, "from-the-box-api\n"));
    let link = |view: &Value| {
        view["links"]
            .as_array()
            .and_then(|l| {
                l.iter()
                    .find(|l| l["name"] == "api.svc.local" && l["port"] == 8080)
                    .cloned()
            })
            .unwrap_or_else(|| panic!("no link api.svc.local:8080 in {view}"))
    };
    let listed = link(&api.view(&b));
    assert_eq!(listed["box"], a.as_str(), "{listed}");
    assert_eq!(listed["targetPort"], 8080, "{listed}");
    assert_eq!(listed["state"], "running", "{listed}");
    let (status, answer) = api.call(
        "POST",
        &format!("/boxes/{b}/wire"),
        json!({"links": [{"name": "self.svc.local", "port": 1234, "box": b}]}),
    );
    assert_eq!(status, 400, "a link to itself: {answer}");
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");

    // Another account's box is not there for this one.
    let other = s.key_of_new_account("acct_wiringother");
    let (status, answer) = psbx_tests::api::call(
        &url,
        &other,
        "POST",
        "/v1/boxes",
        Some(json!({"links": [{"name": "api.svc.local", "port": 8080, "box": a}]})),
    );
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["code"], "box_not_found", "{answer}");

    // A left alone freezes; a connection over B's link wakes it.
    wait::until("box A freezing", Duration::from_secs(150), || {
        (s.listed_state(&a).as_deref() == Some("frozen")).then_some(())
    });
    step("box A frozen");
    // A change that does not fit A's declarations (a service it does not
    // declare, given without the port to declare it) is a conflict, and is
    // refused before anything is done: A stays frozen.
    let (status, answer) = api.call(
        "POST",
        &format!("/boxes/{a}/wire"),
        json!({"service": "nope.svc.local", "mode": "box"}),
    );
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "wire_conflict", "{answer}");
    assert_eq!(
        s.listed_state(&a).as_deref(),
        Some("frozen"),
        "thawed by a refused change"
    );
    let (code, out) = api.sh(&b, "timeout 60 wget -qO- http://api.svc.local:8080/");
    assert_eq!(
        (code, out.as_str()),
        (0, "from-the-box-api\n"),
        "through the link to a frozen box"
    );
    assert_eq!(s.listed_state(&a).as_deref(), Some("running"));
    step("box A woken by B's link");

    // A stopped: B's link fails, and the log says why.
    api.ok("DELETE", &format!("/boxes/{a}"), json!(null));
    step("box A stopped");
    let (_, out) = api.sh(
        &b,
        "timeout 15 wget -qO- http://api.svc.local:8080/; echo exit=$?; \
         cat /work/.sbx/logs/private-endpoints.log",
    );
    assert!(
        !out.contains("from-the-box-api") && !out.contains("exit=0"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "api.svc.local:8080 404 the box {a} that api.svc.local:8080 links to is stopped"
        )),
        "{out}"
    );
    let listed = link(&api.view(&b));
    assert_eq!(listed["state"], "stopped", "{listed}");
    assert_eq!(dev_api.accepted(), 1, "dev's api was reached from a box");
    api.ok("DELETE", &format!("/boxes/{b}"), json!(null));
    step("6: links");
}

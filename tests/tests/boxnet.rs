//! The box network, on real boxes (the test image) with a network card: the
//! test stands up its own "internet" (a namespace holding 198.51.100.x
//! addresses with a web server and a DNS server), an operator's private
//! network (a 10.x namespace), a link-local host (169.254.77.x) and
//! listeners on the host's loopback and its own address, every route checked
//! with `ip route get` before anything is sent, and every listener checked to
//! answer from the host. The server runs in the allow-list mode limited to
//! the test ranges, with the test's DNS server as its only resolver: no box
//! can send a packet or a DNS query to any other address.
//!
//! From the box: the internet by name (boxd → the platform's resolver → the
//! namespace's DNS server); a private-zone name is NXDOMAIN; a public name of
//! a private address resolves and then times out, unlogged. Then root in the
//! box flushes its own rules and points its route at QEMU's gateway: the
//! psbx server's port, the database's, a loopback listener, the host's own
//! address, the 10.x host and the link-local one are all out of reach, and
//! nothing reached them; the internet still answers. The host's rules are put
//! back when removed, and go when the server stops with no box left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::netns::{Listener, Netns};
use psbx_tests::vm::{BoxServer, network_table, wait_until};
use serde_json::json;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

/// The test's address ranges: the only ones test boxes may reach.
const TEST_RANGES: &str = "only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]";

/// Runs `cmd` in the box: stdout and stderr together.
fn exec(s: &BoxServer, id: &str, cmd: &str) -> String {
    let answer = s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({ "cmd": cmd, "timeout": "90s" })),
    );
    format!(
        "{}{}",
        answer["stdout"]["text"].as_str().unwrap_or_default(),
        answer["stderr"]["text"].as_str().unwrap_or_default()
    )
}

fn table_present(table: &str) -> bool {
    Command::new("nft")
        .args(["list", "table", "inet", table])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A free TCP port on the host's loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_box_reaches_the_internet_and_nothing_of_the_hosts() {
    // The internet: a web server and a DNS server on public test addresses.
    let mut internet = Netns::new(&[]);
    let web = internet.routed([198, 51, 100]);
    let dns = internet.routed([198, 51, 100]);
    let web_listener = internet.listener(web, 80, "HTTP/1.0 200 OK\r\n\r\nhello from the internet");
    // The operator's network and a link-local host, each routed from the host.
    let mut office = Netns::new(&[]);
    let office_listener = office.listener(office.ns_ip, 8443, "office");
    let mut metadata = Netns::new(&[]);
    let link_local = metadata.routed([169, 254, 77]);
    let link_local_listener = metadata.listener(link_local, 80, "metadata");
    let dns_log = internet.dns_server(
        dns,
        &[
            ("web.example.test", web),
            ("rds.example.test", office.ns_ip),
        ],
    );
    // The host's own: a loopback listener, and one on an address of the host's.
    let loopback = Listener::on_host(Ipv4Addr::LOCALHOST, free_port(), "loopback");
    let own = Listener::on_host(office.host_ip, free_port(), "host address");

    let mut s = BoxServer::start(&format!(
        "pool_size = 0\nidle_freeze = \"1h\"\nnetwork = true\n\
         [boxes.egress]\nresolvers = [\"{dns}\"]\n{TEST_RANGES}"
    ));
    let table = network_table(&s.installation());
    assert!(table_present(&table), "no nftables table {table}");
    // What the box must not reach is there: each answers the host.
    for l in [
        &web_listener,
        &office_listener,
        &link_local_listener,
        &loopback,
        &own,
    ] {
        l.assert_answers_the_host();
    }
    let psbx_port = s.url().rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let database = std::env::var("PSBX_TEST_DATABASE_URL").expect("scripts/test sets it");
    let pg_port = database
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse::<u16>().ok())
        .expect("a port in PSBX_TEST_DATABASE_URL");
    for port in [psbx_port, pg_port] {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("127.0.0.1:{port} does not answer the host: {e}"));
    }
    let accepted: Vec<usize> = [&office_listener, &link_local_listener, &loopback, &own]
        .iter()
        .map(|l| l.accepted())
        .collect();

    let started = s.ok("POST", "/v1/boxes", Some(json!({"name": "net"})));
    let id = started["id"].as_str().unwrap().to_owned();

    // Configured at boot: address, route, MTU; IPv6 off; boxd's resolver.
    let out = exec(
        &s,
        &id,
        "ip -4 addr show dev eth0; ip route; cat /sys/class/net/eth0/mtu \
         /proc/sys/net/ipv6/conf/all/disable_ipv6 /etc/resolv.conf",
    );
    assert!(out.contains("inet 10.0.2.15/24"), "{out}");
    assert!(out.contains("default via 10.0.2.2 dev eth0"), "{out}");
    assert!(out.contains("\n1500\n1\n"), "MTU 1500, IPv6 off: {out}");
    assert!(out.contains("nameserver 198.18.0.1\n"), "{out}");

    // The internet, by name, through the test's own DNS server.
    let out = exec(
        &s,
        &id,
        "nslookup web.example.test; echo | nc -w 10 web.example.test 80",
    );
    assert!(out.contains(&format!("Address: {web}")), "{out}");
    assert!(out.contains("hello from the internet"), "{out}");
    let asked = std::fs::read_to_string(&dns_log).unwrap();
    assert!(asked.contains("web.example.test\n"), "{asked}");

    // A name only a private zone has: NXDOMAIN. A public name of a private
    // address: it resolves, and the connection times out, unlogged.
    let out = exec(&s, &id, "nslookup secret.corp.internal; echo exit=$?");
    assert!(out.contains("NXDOMAIN") && out.contains("exit=1"), "{out}");
    let started_at = Instant::now();
    let out = exec(
        &s,
        &id,
        "nslookup rds.example.test; nc -w 3 rds.example.test 8443 </dev/null; echo exit=$?; \
         ls /work/.sbx/logs/private-endpoints.log",
    );
    assert!(out.contains(&format!("Address: {}", office.ns_ip)), "{out}");
    assert!(out.contains("exit=1") && !out.contains("office"), "{out}");
    assert!(out.contains("No such file"), "logged: {out}");
    assert!(
        started_at.elapsed() >= Duration::from_secs(3),
        "not a timeout: {out}"
    );

    // Root in the box undoes what it can: its own rules, its address and
    // route. Every target is tried at once (each waits 5 s).
    let targets = [
        format!("10.0.2.2:{psbx_port}"),
        format!("10.0.2.2:{pg_port}"),
        format!("10.0.2.2:{}", loopback.addr.port()),
        format!("10.0.2.2:{}", own.addr.port()),
        own.addr.to_string(),
        office_listener.addr.to_string(),
        link_local_listener.addr.to_string(),
        "10.0.2.3:53".to_owned(),
    ];
    let tries: String = targets
        .iter()
        .map(|t| {
            let (host, port) = t.split_once(':').unwrap();
            format!("(if nc -w 5 {host} {port} </dev/null >/tmp/got 2>&1; then echo \"REACHED {t}: $(cat /tmp/got)\"; else echo \"out of reach: {t}\"; fi) & ")
        })
        .collect();
    let out = exec(
        &s,
        &id,
        &format!(
            "nft flush ruleset; ip addr add 10.0.2.16/24 dev eth0; ip link set eth0 up; \
             ip route replace default via 10.0.2.2 dev eth0; {tries} wait"
        ),
    );
    for t in &targets {
        assert!(out.contains(&format!("out of reach: {t}\n")), "{t}: {out}");
    }
    assert!(!out.contains("REACHED"), "{out}");
    let after: Vec<usize> = [&office_listener, &link_local_listener, &loopback, &own]
        .iter()
        .map(|l| l.accepted())
        .collect();
    assert_eq!(accepted, after, "a listener was reached from the box");
    // ...while the internet still answers, and the host still reaches them all.
    let out = exec(&s, &id, "echo | nc -w 10 web.example.test 80");
    assert!(out.contains("hello from the internet"), "{out}");
    for l in [&office_listener, &link_local_listener, &loopback, &own] {
        l.assert_answers_the_host();
    }

    // Rules removed under the server are put back.
    assert!(
        Command::new("nft")
            .args(["delete", "table", "inet", &table])
            .status()
            .unwrap()
            .success()
    );
    wait_until("the rules to be put back", Duration::from_secs(30), || {
        table_present(&table).then_some(())
    });

    // A server stopped while a box runs keeps them; stopped with none, removes them.
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
    let (stopped, log) = s.server.take().unwrap().stop();
    assert!(stopped, "{log}");
    assert!(log.contains("removed the box network rules"), "{log}");
    assert!(!table_present(&table), "{table} left behind");
}

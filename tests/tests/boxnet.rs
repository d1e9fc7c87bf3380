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
//! nothing reached them; the internet still answers, also after a freeze and
//! thaw (with the box's clock set from the host's again). Azure's WireServer
//! address (168.63.129.16, which the test routes to its own "internet" and
//! lets through its allow-list) is out of reach by default, and the table's
//! denied counter shows the drop. The box's connections leave from the
//! source address the test gives it (`boxes.egress.snat`, a second address of
//! the host), the host's own from its usual one. The host's rules are put back when removed
//! or when their chain is flushed, and go when the server stops with no box
//! left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "stories/review.rs"]
mod review;

use psbx_tests::netns::{Listener, Netns};
use psbx_tests::vm::exec_text as exec;
use psbx_tests::vm::{BoxServer, delete_network_table, network_table};
use psbx_tests::wait;
use serde_json::json;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

/// The test's address ranges: the only ones test boxes may reach.
const TEST_RANGES: &str = "only = [\"198.51.100.0/24\", \"203.0.113.0/24\"]";

/// The environment `dev`, with one connection (`office`, no connector runs
/// for it yet) listing `endpoints`; returns the connection's token.
fn environment(s: &BoxServer, endpoints: serde_json::Value) -> String {
    s.ok("POST", "/v1/environments", Some(json!({"name": "dev"})));
    let conn = s.ok(
        "POST",
        "/v1/environments/dev/connections",
        Some(json!({"name": "office"})),
    );
    s.ok(
        "PUT",
        &format!(
            "/v1/environments/dev/connections/{}/endpoints",
            conn["id"].as_str().unwrap()
        ),
        Some(json!({ "endpoints": endpoints })),
    );
    conn["token"].as_str().unwrap().to_owned()
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

use psbx_tests::free_port;

/// The packets the table's deny-list rule (`ip daddr @denied counter drop`) dropped.
fn denied_packets(table: &str) -> u64 {
    let text = String::from_utf8(
        Command::new("nft")
            .args(["list", "table", "inet", table])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    text.lines()
        .find(|l| l.contains("ip daddr @denied counter packets"))
        .and_then(|l| {
            l.split("packets ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no counter on the deny rule of {table}: {text}"))
}

/// The bytes the table's `egress` set counts for `uid` (0: no element).
fn uid_bytes(table: &str, uid: u32) -> u64 {
    let out = Command::new("nft")
        .args(["-j", "list", "set", "inet", table, "egress"])
        .output()
        .unwrap();
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("nft listed the set egress of {table} as no JSON: {e}"));
    listing["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["set"]["elem"].as_array())
        .flatten()
        .find(|e| e["elem"]["val"].as_u64() == Some(u64::from(uid)))
        .and_then(|e| e["elem"]["counter"]["bytes"].as_u64())
        .unwrap_or(0)
}

/// Azure's WireServer, DNS and HostGAPlugin: a public address that trusts the
/// host's own source address.
const WIRESERVER: Ipv4Addr = Ipv4Addr::new(168, 63, 129, 16);

/// One booted box with a card (TCG: about 10 s to boot, plus a freeze and
/// thaw of about 5 s and a few 3-10 s timeouts; about 60 s in all, 3 s of
/// them for the lookups across the thaw).
#[test]
fn a_box_reaches_the_internet_and_nothing_of_the_hosts() {
    // The internet: a web server and a DNS server on public test addresses.
    let mut internet = Netns::new(&[]);
    let web = internet.routed([198, 51, 100]);
    let dns = internet.routed([198, 51, 100]);
    let web_listener = internet.listener(web, 80, "HTTP/1.0 200 OK\r\n\r\nhello from the internet");
    // Azure's WireServer, reached from the host (it trusts the host's address).
    internet.routed_exactly(WIRESERVER);
    let wireserver = internet.listener(WIRESERVER, 80, "HTTP/1.0 200 OK\r\n\r\ngoal state");
    // A public address the operator denies (boxes.egress.deny).
    let denied = internet.routed([198, 51, 100]);
    let denied_listener = internet.listener(denied, 80, "denied by the operator");
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
    // The address boxes' traffic leaves from (boxes.egress.snat): a second
    // address of the host on the internet's veth, which the namespace routes back.
    let snat = internet.host_alias(Ipv4Addr::new(100, 64, 77, 77));

    // The test's ranges and the WireServer: only the built-in deny list
    // keeps a box from it.
    let mut s = BoxServer::start(&format!(
        "idle_freeze = \"15s\"\nnetwork = true\n\
         [boxes.egress]\nresolvers = [\"{dns}\"]\ndeny = [\"{denied}\"]\nsnat = \"{snat}\"\n\
         only = [\"198.51.100.0/24\", \"203.0.113.0/24\", \"{WIRESERVER}/32\"]"
    ));
    let table = network_table(&s.installation());
    assert!(table_present(&table), "no nftables table {table}");
    // What the box must not reach is there: each answers the host.
    for l in [
        &web_listener,
        &wireserver,
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
    let reached_from_box = [
        &wireserver,
        &denied_listener,
        &office_listener,
        &link_local_listener,
        &loopback,
        &own,
    ];
    let accepted: Vec<usize> = reached_from_box.iter().map(|l| l.accepted()).collect();

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
    // What the box sent is counted by the host for its own uid, and stored
    // as the box's internet egress within a check or two (every 2 s).
    let uid = psbx_tests::vm::qemu_uid(&id);
    let sent = wait::until("the box's internet bytes", Duration::from_secs(20), || {
        let view = s.ok("GET", &format!("/v1/boxes/{id}"), None);
        view["internetEgressBytes"].as_u64().filter(|b| *b > 0)
    });
    let counted = uid_bytes(&table, uid);
    assert!(
        counted >= sent,
        "{table} counts {counted} for uid {uid}, the box says {sent}"
    );
    // It came from the box's own address; the host's connections did not.
    let peers = web_listener.peers();
    assert_eq!(peers.last(), Some(&snat), "{peers:?}");
    assert_eq!(peers.first(), Some(&internet.host_ip), "{peers:?}");

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
        denied_listener.addr.to_string(),
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
    let after: Vec<usize> = reached_from_box.iter().map(|l| l.accepted()).collect();
    assert_eq!(accepted, after, "a listener was reached from the box");
    // ...while the internet still answers, and the host still reaches them all.
    let out = exec(&s, &id, "echo | nc -w 10 web.example.test 80");
    assert!(out.contains("hello from the internet"), "{out}");
    for l in reached_from_box {
        l.assert_answers_the_host();
    }

    // The WireServer from the box (its own rules gone): a timeout, nothing
    // reached it, and the host's deny rule counted the drop.
    internet.assert_routed(WIRESERVER);
    let reached: Vec<usize> = reached_from_box.iter().map(|l| l.accepted()).collect();
    let dropped = denied_packets(&table);
    let out = exec(
        &s,
        &id,
        &format!("nc -w 3 {WIRESERVER} 80 </dev/null; echo exit=$?"),
    );
    assert!(
        out.contains("exit=1\n") && !out.contains("goal state"),
        "{out}"
    );
    assert_eq!(
        reached,
        reached_from_box
            .iter()
            .map(|l| l.accepted())
            .collect::<Vec<_>>(),
        "a listener was reached from the box"
    );
    let listing = Command::new("nft")
        .args(["list", "table", "inet", &table])
        .output()
        .unwrap();
    assert!(
        denied_packets(&table) > dropped,
        "the deny rule of {table} counted no drop (from {dropped}): {out}\n{}\n{}",
        String::from_utf8_lossy(&listing.stdout),
        s.server
            .as_ref()
            .unwrap()
            .log
            .lines()
            .into_iter()
            .filter(|l| l.contains("network"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Names keep resolving across a freeze and thaw (issue 30): a loop in the
    // box asks boxd's DNS five times a second, and the queries in flight when
    // the session to the server ends are answered on the new one.
    s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({
            "cmd": "echo $$ > /work/dns-loop.pid; while true; do if nslookup web.example.test >/dev/null 2>&1; \
                    then echo \"$(date +%s) ok\"; else echo \"$(date +%s) FAIL\"; fi; \
                    sleep 0.2; done > /work/dns-loop.log 2>&1",
            "background": true
        })),
    );

    // Frozen and thawed: the card still works, and the clock is the host's
    // again (boxd sets it from the server's on the new session).
    wait::until("the box to freeze", Duration::from_secs(120), || {
        (s.listed_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(20));
    let thawed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let view = s.ok("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(view["state"], "running", "{view}");
    std::thread::sleep(Duration::from_secs(3));
    let lookups = exec(
        &s,
        &id,
        "cat /work/dns-loop.log; kill $(cat /work/dns-loop.pid)",
    );
    let after: Vec<&str> = lookups
        .lines()
        .filter(|l| {
            l.split(' ')
                .next()
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t >= thawed_at)
        })
        .collect();
    assert!(
        !lookups.contains("FAIL") && after.len() >= 3,
        "lookups across the thaw (from {thawed_at}): {lookups}"
    );
    let out = exec(&s, &id, "date +%s; echo | nc -w 10 web.example.test 80");
    assert!(
        out.contains("hello from the internet"),
        "after a thaw: {out}"
    );
    wait::until(
        "the box's internet bytes to grow",
        Duration::from_secs(20),
        || {
            let view = s.ok("GET", &format!("/v1/boxes/{id}"), None);
            view["internetEgressBytes"].as_u64().filter(|b| *b > sent)
        },
    );
    let box_time: i64 = out.lines().next().unwrap().trim().parse().unwrap();
    let host_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (host_time - box_time).abs() <= 5,
        "box clock {box_time}, host {host_time}"
    );

    // Rules removed under the server are put back.
    assert!(delete_network_table(&table), "nft could not delete {table}");
    wait::until("the rules to be put back", Duration::from_secs(30), || {
        table_present(&table).then_some(())
    });

    // A server stopped while a box runs keeps them; stopped with none, removes them.
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
    let (stopped, log) = s.server.take().unwrap().stop();
    assert!(stopped, "{log}");
    assert!(log.contains("removed the box network rules"), "{log}");
    assert!(!table_present(&table), "{table} left behind");
}

/// Environments.txt "What is not listed stays out of reach", case by case, on
/// a box with a network card in an environment whose connection lists
/// `db.internal:5432` and the office host's `<ip>:8443` (no connector runs:
/// the server refuses those streams, which is enough to see them caught); and
/// a private address the operator allows (an internal mirror) is reached.
#[test]
fn what_is_not_listed_stays_out_of_reach() {
    let mut office = Netns::new(&[]);
    let listed = office.listener(office.ns_ip, 8443, "listed port");
    let unlisted_port = office.listener(office.ns_ip, 9443, "unlisted port");
    let other = office.routed([10, 235, 7]);
    let unlisted_ip = office.listener(other, 8443, "unlisted address");
    // A private address the operator lets boxes reach (boxes.egress.allow).
    let mirror_ip = office.routed([10, 236, 7]);
    let mirror = office.listener(mirror_ip, 8080, "the internal mirror");
    for l in [&listed, &unlisted_port, &unlisted_ip, &mirror] {
        l.assert_answers_the_host();
    }
    let s = BoxServer::start(&format!(
        "network = true\n[boxes.egress]\n\
         resolvers = [\"127.0.0.1:9\"]\nallow = [\"{mirror_ip}\"]\n{TEST_RANGES}"
    ));
    environment(
        &s,
        json!([{"host": "db.internal", "port": 5432}, {"host": office.ns_ip.to_string(), "port": 8443}]),
    );
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "unlisted", "environment": "dev"})),
    );
    let id = started["id"].as_str().unwrap().to_owned();
    let log_lines = |s: &BoxServer| {
        exec(
            s,
            &id,
            "cat /work/.sbx/logs/private-endpoints.log 2>/dev/null",
        )
        .lines()
        .count()
    };
    let timed = |cmd: &str| {
        let at = Instant::now();
        let out = exec(&s, &id, cmd);
        (out, at.elapsed())
    };

    // A listed IP on its listed port is caught by boxd (and, with no
    // connector online, reset and logged).
    let (out, _) = timed(&format!(
        "nc -w 5 {} 8443 </dev/null; echo exit=$?",
        office.ns_ip
    ));
    assert!(!out.contains("listed port"), "{out}");
    let log = exec(&s, &id, "cat /work/.sbx/logs/private-endpoints.log");
    assert!(
        log.contains(&format!(" {}:8443 503 ", office.ns_ip)),
        "{log}"
    );
    let logged = log_lines(&s);

    // The listed IP on a port that is not listed, and a private IP that is
    // not listed: no answer (a timeout), nothing logged.
    for (target, greeting) in [
        (format!("{} 9443", office.ns_ip), "unlisted port"),
        (format!("{other} 8443"), "unlisted address"),
    ] {
        let (out, took) = timed(&format!("nc -w 4 {target} </dev/null; echo exit=$?"));
        assert!(
            out.contains("exit=1") && !out.contains(greeting),
            "{target}: {out}"
        );
        assert!(
            took >= Duration::from_secs(4),
            "{target}: not a timeout ({took:?}): {out}"
        );
    }
    assert_eq!(log_lines(&s), logged, "an unlisted connection was logged");

    // A listed host on a port that is not listed stays in the box: refused
    // at once with nothing there, answered by a listener on 0.0.0.0.
    let (out, took) = timed("nc -w 10 db.internal 7000 </dev/null; echo exit=$?");
    assert!(out.contains("refused") && out.contains("exit=1"), "{out}");
    assert!(
        took < Duration::from_secs(3),
        "refused slowly ({took:?}): {out}"
    );
    let out = exec(
        &s,
        &id,
        "(echo in-the-box | nc -l -p 7000 >/dev/null &) ; sleep 1; nc -w 5 db.internal 7000 </dev/null",
    );
    assert!(out.contains("in-the-box"), "{out}");
    assert_eq!(
        log_lines(&s),
        logged,
        "{}",
        exec(&s, &id, "cat /work/.sbx/logs/private-endpoints.log")
    );

    for l in [&listed, &unlisted_port, &unlisted_ip] {
        assert_eq!(l.accepted(), 1, "{} was reached from the box", l.addr);
    }
    // ...while the operator's allowed range is reached, unlogged.
    let out = exec(&s, &id, &format!("nc -w 10 {mirror_ip} 8080 </dev/null"));
    assert!(out.contains("the internal mirror"), "{out}");
    assert_eq!(mirror.accepted(), 2);
    assert_eq!(log_lines(&s), logged);
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
}

/// The production image (`scripts/image/debian`) on the box network: a git
/// repository served over HTTP in the test's internet is cloned by name; Docker
/// containers on the default bridge, on a user-defined network and in docker
/// compose (v2) reach the internet by name (Docker's DNS forwards to boxd's) and
/// the environment's addresses, which boxd catches from containers as from the
/// box's own programs; an unlisted private address times out from a container
/// too. Every tool the image promises runs: node, go (a hello built and run),
/// python, php, jq, psql, pg_isready, redis-cli, a Chromium headless screenshot
/// and a frame grabbed from Xvfb's :99; `psbx-testdb` starts PostgreSQL 16
/// (reset empties it; `gotest` gives each Go package its own database), Redis
/// and an S3 server the AWS CLI puts to and gets from; `psbx-toolchain` says
/// what it cannot reach. Then the real connector in the office namespace
/// carries `psbx-ro-psql` to a PostgreSQL there (`db.internal`, password auth):
/// a select works, an insert fails as read-only, the password never shows.
/// And nothing in the image calls out by itself: the only names the test's DNS
/// server was asked are the test's own, and the host's rules dropped nothing
/// outside the test ranges. Last, on the same box, the review story
/// (`stories/review.rs`): shots, the hand-over and the person's circled answer.
#[test]
fn the_production_image_its_tools_and_the_box_network() {
    let images = psbx_tests::vm::images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{}/debian has no production image: scripts/test builds it (scripts/image/debian {}/debian <boxd>)",
        images.display(),
        images.display()
    );
    let mut internet = Netns::new(&[]);
    let web = internet.routed([198, 51, 100]);
    let dns = internet.routed([198, 51, 100]);
    let dns_log = internet.dns_server(dns, &[("git.example.test", web), ("web.example.test", web)]);
    // An address of the range the box declares as its own (172.16.0.0/16:9090):
    // routed into the namespace, so a connection that got past the box would
    // land here, not on this machine's network.
    let range_addr = internet.routed([172, 16, 5]);
    let range_listener = internet.listener(range_addr, 9090, "the range's address REACHED");
    // A git repository, served as files ("dumb" HTTP) with the greeting page.
    let site = tempfile::tempdir().unwrap();
    psbx_tests::git::sh(
        site.path(),
        "git init -q -b main src && cd src && echo 'cloned by name' > README && git add README && \
         git commit -qm first && cd .. && git clone -q --bare src repo.git && \
         git -C repo.git update-server-info && echo 'hello from the internet' > hello.txt",
    );
    internet.serve_files(web, 80, site.path());
    // Dropped after the namespace (which kills the server first).
    let pgdir = tempfile::tempdir().unwrap();
    let mut office = Netns::new(&[("db.internal", "127.0.0.1")]);
    let unlisted = office.listener(office.ns_ip, 9443, "unlisted");
    dev_postgres(&mut office, pgdir.path());
    unlisted.assert_answers_the_host();
    range_listener.assert_answers_the_host();

    // On the office's link, where the connector in it reaches the server.
    let s = BoxServer::start_on(
        &format!("{}:0", office.host_ip),
        "",
        &format!(
            "network = true\nimage = \"debian\"\n\
         unit_vcpus = 2\nunit_memory_mib = 3072\nunit_disk_gb = 8\nboot_timeout = \"300s\"\n\
         [boxes.egress]\nresolvers = [\"{dns}\"]\n{TEST_RANGES}"
        ),
    );
    let token = environment(
        &s,
        json!([{"host": "db.internal", "port": 5432}, {"host": "10.9.8.7", "port": 8080}]),
    );
    // The service whose setting psbx-ro-psql uses (uploaded before the box is claimed).
    s.ok(
        "PUT",
        "/v1/environments/dev/services/api",
        Some(json!({"dotenv": format!(
            "DATABASE_URL=postgres://u:{DEV_PASSWORD}@db.internal:5432/db\nLOG_LEVEL=debug\n"
        )})),
    );
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({
            "name": "debian",
            "environment": "dev",
            "services": [{"name": "172.16.0.0/16", "port": 9090, "targetPort": 9000}]
        })),
    );
    let id = started["id"].as_str().unwrap().to_owned();
    assert_eq!(started["services"][0]["kind"], "range", "{started}");
    // The box's own service for the range.
    s.ok(
        "POST",
        &format!("/v1/boxes/{id}/exec"),
        Some(json!({
            "cmd": "mkdir -p /work/range && echo in-the-box-range > /work/range/r.txt && \
                    exec python3 -m http.server 9000 --directory /work/range",
            "background": true
        })),
    );

    let out = exec(
        &s,
        &id,
        "ls /sys/class/net; ip -4 addr show dev eth0; cat /etc/resolv.conf",
    );
    assert!(
        out.contains("eth0") && out.contains("inet 10.0.2.15/24"),
        "{out}"
    );
    let out = exec(
        &s,
        &id,
        "cd /work && git clone -q http://git.example.test/repo.git && cat repo/README && \
                            curl -sS --max-time 20 http://web.example.test/hello.txt",
    );
    assert!(
        out.contains("cloned by name") && out.contains("hello from the internet"),
        "{out}"
    );

    // A container image made in the box from nothing but busybox.
    let out = exec(&s, &id, psbx_tests::vm::BUSYBOX_IMAGE);
    assert!(out.contains("built"), "{out}");
    // What each container does: the internet by name, the environment's name
    // and listed IP (caught by boxd: with no connector, reset and logged),
    // an unlisted private IP (a timeout), an address of the box's declared
    // range on its port (the box's own service).
    let probe = format!(
        "nslookup web.example.test; echo | nc -w 10 web.example.test 80 && echo web-ok; \
         nc -w 5 db.internal 5432 </dev/null; nc -w 5 10.9.8.7 8080 </dev/null; \
         if nc -w 4 {} 9443 </dev/null; then echo unlisted-REACHED; else echo unlisted-out-of-reach; fi; \
         timeout 20 wget -qO- http://{range_addr}:9090/r.txt",
        office.ns_ip
    );
    let compose =
        format!("services:\n  probe:\n    image: bb\n    command: [\"sh\", \"-c\", {probe:?}]\n");
    let runs = [
        (
            "default bridge",
            format!("docker run --rm bb sh -c '{probe}'"),
        ),
        (
            "user-defined network",
            format!(
                "docker network create psbxnet >/dev/null; docker run --rm --network psbxnet bb sh -c '{probe}'"
            ),
        ),
        (
            "docker compose",
            format!(
                "mkdir -p /work/c && cat >/work/c/docker-compose.yml <<'EOF'\n{compose}EOF\n\
                 cd /work/c && docker compose up --no-color --abort-on-container-exit 2>&1"
            ),
        ),
    ];
    for (i, (how, cmd)) in runs.iter().enumerate() {
        let out = exec(&s, &id, cmd);
        assert!(out.contains("web-ok"), "{how}: {out}");
        assert!(out.contains("in-the-box-range"), "{how}: {out}");
        assert!(
            out.contains("unlisted-out-of-reach") && !out.contains("REACHED"),
            "{how}: {out}"
        );
        let log = exec(&s, &id, "cat /work/.sbx/logs/private-endpoints.log");
        assert_eq!(
            log.lines()
                .filter(|l| l.contains(" db.internal:5432 503 "))
                .count(),
            i + 1,
            "{how}: {log}"
        );
        assert_eq!(
            log.lines()
                .filter(|l| l.contains(" 10.9.8.7:8080 503 "))
                .count(),
            i + 1,
            "{how}: {log}"
        );
    }
    assert_eq!(unlisted.accepted(), 1, "reached from a container");
    assert_eq!(
        range_listener.accepted(),
        1,
        "the range's address was reached outside the box"
    );

    // Nothing called out by itself: nothing was sent outside the test ranges.
    let rules = String::from_utf8(
        Command::new("nft")
            .args(["list", "table", "inet", &network_table(&s.installation())])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let outside = rules
        .lines()
        .find(|l| l.contains("!= @only"))
        .unwrap_or_else(|| panic!("{rules}"));
    assert!(
        outside.contains("packets 0 "),
        "the box sent outside the test ranges: {rules}"
    );
    tools(&s, &id);
    // And every name asked is one of the test's, also while the tools ran
    // (dot.net: `psbx-toolchain add dotnet` tries it): Chromium, started by
    // hand, looks up no Google name (the image's policies and flags, issue 30).
    let asked = std::fs::read_to_string(&dns_log).unwrap();
    for name in asked.lines() {
        assert!(
            ["git.example.test", "web.example.test", "dot.net"].contains(&name),
            "something in the box looked up {name:?}: {asked}"
        );
    }
    // The office's connector comes up: psbx-ro-psql reaches dev's database.
    let log = pgdir.path().join("connector.log");
    let mut cmd = office.command(psbx_tests::binary("psbx-connector").to_str().unwrap());
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PSBX_CONNECTOR_TOKEN", &token)
        .env("PSBX_URL", s.url())
        .env("PSBX_ALLOW_INSECURE", "1")
        .env("PSBX_ALLOW", "db.internal:5432")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(pgdir.path().join("connector.err")).unwrap());
    office.spawn(cmd);
    wait::until(
        "the office's connector online",
        Duration::from_secs(60),
        || {
            let env = s.ok("GET", "/v1/environments/dev", None);
            (env["connections"][0]["online"] == true).then_some(())
        },
    );
    let out = exec(
        &s,
        &id,
        "psbx-ro-psql api -At -c 'select name from items order by name' -c 'show statement_timeout'; echo rc=$?",
    );
    assert!(
        out.contains("alpha\nbeta\n1min\nrc=0"),
        "a select through the connector: {out}"
    );
    let out = exec(
        &s,
        &id,
        &format!(
            "psbx-ro-psql api -c \"insert into items values ('gamma')\"; echo rc=$?; \
             psbx-ro-psql api -At -c \"select 'postgres://u:{DEV_PASSWORD}@db.internal:5432/db', '{DEV_PASSWORD}'\"; \
             psbx-ro-psql api -c '\\conninfo'; psbx-ro-psql nosuch; psbx-ro-psql --var LOG_LEVEL api"
        ),
    );
    assert!(
        out.contains("cannot execute INSERT in a read-only transaction") && out.contains("rc=1"),
        "an insert through psbx-ro-psql: {out}"
    );
    assert!(out.contains("***|***"), "the echoed secrets masked: {out}");
    assert!(
        !out.contains(DEV_PASSWORD),
        "the password shows in psbx-ro-psql's output: {out}"
    );
    assert!(
        out.contains("no settings for nosuch") && out.contains("LOG_LEVEL is not a postgres://"),
        "{out}"
    );

    // The review story on the same box (one boot of the production image instead of
    // two); it ends with the person's "Shut down", which stops the box.
    review::run(&s, &id);
}

/// The password of dev's database user `u` (never in psbx-ro-psql's output).
const DEV_PASSWORD: &str = "dev-Secret-4711pw";

/// PostgreSQL 15 (the host's server binaries) on 127.0.0.1:5432 in `ns`, run
/// as `postgres` with password auth, its data in `dir`: database `db` of user
/// `u` (password [`DEV_PASSWORD`]) with table `items` (alpha, beta).
fn dev_postgres(ns: &mut Netns, dir: &std::path::Path) {
    let bin = std::path::Path::new("/usr/lib/postgresql/15/bin");
    assert!(
        bin.join("postgres").is_file(),
        "no PostgreSQL 15 server at {}: apt-get install postgresql-15",
        bin.display()
    );
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{what}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(dir.join("pw"), "super-pw\n").unwrap();
    std::fs::set_permissions(dir.join("pw"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let data = dir.join("data");
    let as_postgres = ["--reuid=postgres", "--regid=postgres", "--init-groups"];
    run(
        Command::new("setpriv")
            .args(as_postgres)
            .arg(bin.join("initdb"))
            .args(["-U", "postgres", "-A", "scram-sha-256", "--no-sync", "-D"])
            .arg(&data)
            .arg("--pwfile")
            .arg(dir.join("pw"))
            .current_dir(dir),
        "initdb of dev's database",
    );
    let mut server = ns.command("setpriv");
    server
        .args(as_postgres)
        .arg(bin.join("postgres"))
        .arg("-D")
        .arg(&data)
        .args(["-c", "listen_addresses=127.0.0.1", "-p", "5432", "-c"])
        .arg(format!("unix_socket_directories={}", dir.display()))
        .stdout(std::fs::File::create(dir.join("postgres.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("postgres.err")).unwrap())
        .current_dir(dir);
    ns.spawn(server);
    let psql = |user: &str, password: &str, db: &str, sql: &str| {
        let mut cmd = ns.command("psql");
        cmd.args(["-h", "127.0.0.1", "-p", "5432", "-U", user, "-d", db])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", password);
        cmd
    };
    wait::until("dev's PostgreSQL", Duration::from_secs(30), || {
        psql("postgres", "super-pw", "postgres", "select 1")
            .output()
            .ok()
            .filter(|o| o.status.success())
    });
    run(
        &mut psql(
            "postgres",
            "super-pw",
            "postgres",
            &format!("create role u login password '{DEV_PASSWORD}'"),
        ),
        "the role u",
    );
    run(
        &mut psql(
            "postgres",
            "super-pw",
            "postgres",
            "create database db owner u",
        ),
        "the database db",
    );
    run(
        &mut psql(
            "u",
            DEV_PASSWORD,
            "db",
            "create table items (name text); insert into items values ('alpha'), ('beta')",
        ),
        "the table items",
    );
}

/// Every tool the production image promises, run in the box `id`.
fn tools(s: &BoxServer, id: &str) {
    let out = exec(
        s,
        id,
        "docker compose version; docker-compose version; git --version; node -e 'console.log(\"node\", process.version)'; \
         python3 -c 'print(\"python\", 6 * 7)'; php -r 'echo \"php \" . (6 * 7) . \"\\n\";'; \
         echo '{\"a\": {\"b\": 42}}' | jq .a.b; psql --version; pg_isready --version; redis-cli --version; \
         mkdir -p /work/hello && cd /work/hello && printf 'package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"hello from go\") }\n' >main.go && \
         (test -f go.mod || go mod init hello >/dev/null 2>&1) && go build -o hello . && ./hello",
    );
    for want in [
        "Docker Compose version 2.",
        "git version",
        "node v",
        "python 42",
        "php 42",
        "\n42\n",
        "psql (PostgreSQL) ",
        "pg_isready (PostgreSQL) ",
        "redis-cli ",
        "hello from go",
    ] {
        assert!(out.contains(want), "{want:?} not in: {out}");
    }
    assert_eq!(
        out.matches("Docker Compose version 2.").count(),
        2,
        "docker compose and docker-compose are both v2: {out}"
    );
    // A screenshot with headless Chromium, and a frame from the virtual display.
    let out = exec(
        s,
        id,
        "cd /work && timeout 120 chromium --headless --no-sandbox --disable-gpu --window-size=640,480 \
           --screenshot=/work/shot.png 'data:text/html,<h1>shot</h1>' >/work/chromium.log 2>&1; \
         ffmpeg -loglevel error -y -f x11grab -video_size 320x240 -i :99 -frames:v 1 /work/x99.png; \
         for f in shot x99; do python3 -c \"import sys; d = open(sys.argv[1], 'rb').read(); \
           print(sys.argv[1], 'png' if d[:8] == bytes.fromhex('89504e470d0a1a0a') and len(d) > 100 else 'not-png')\" /work/$f.png; done; \
         tail -5 /work/chromium.log",
    );
    assert!(
        out.contains("/work/shot.png png") && out.contains("/work/x99.png png"),
        "{out}"
    );
    // psbx-testdb: PostgreSQL 16, reset, gotest, Redis, S3.
    let out = exec(
        s,
        id,
        "psbx-testdb up t --as APP_DB_URL && . /work/.sbx/testdb/t.env && \
         psql \"$DATABASE_URL\" -At -c 'select version()' && test \"$APP_DB_URL\" = \"$TEST_DATABASE_URL\" && \
         psql -c 'create table before_reset (a int)' && psbx-testdb up t && psbx-testdb reset t && \
         psql -At -c \"select count(*) from pg_tables where tablename = 'before_reset'\" && \
         psbx-testdb url && psbx-testdb list",
    );
    assert!(
        out.contains("PostgreSQL 16.") && out.contains("t is already running"),
        "{out}"
    );
    assert!(
        out.contains("t is empty again\n0\npostgres://"),
        "reset: {out}"
    );
    let out = exec(
        s,
        id,
        "mkdir -p /work/gt/a /work/gt/b && cd /work/gt && printf 'module gt\\ngo 1.19\\n' >go.mod && \
         for p in a b; do printf 'package %s\\nimport (\"os\"; \"os/exec\"; \"testing\")\\n\
         func TestOwnDatabase(t *testing.T) {\\n\
         out, err := exec.Command(\"psql\", \"-c\", \"create table mine (a int)\").CombinedOutput()\\n\
         if err != nil { t.Fatal(string(out)) }\\n t.Log(\"database\", os.Getenv(\"PGDATABASE\"))\\n}\\n' $p >$p/a_test.go; done && \
         psbx-testdb gotest -count=1 ./... && echo gotest-ok",
    );
    assert!(out.contains("gotest-ok"), "psbx-testdb gotest: {out}");
    let redis_s3 = exec(
        s,
        id,
        "psbx-testdb up r --redis && . /work/.sbx/testdb/r.env && redis-cli -u \"$REDIS_URL\" PING && \
         psbx-testdb up b --s3 && . /work/.sbx/testdb/b.env && echo 'put and got' >/work/obj.txt && \
         aws s3 cp /work/obj.txt \"s3://$S3_BUCKET/obj.txt\" && aws s3 cp \"s3://$S3_BUCKET/obj.txt\" - && \
         psbx-testdb reset b && aws s3 ls \"s3://$S3_BUCKET/\" | wc -l",
    );
    assert!(redis_s3.contains("PONG"), "psbx-testdb --redis: {redis_s3}");
    assert!(
        redis_s3.contains("put and got\nb is empty again\n0"),
        "psbx-testdb --s3: {redis_s3}"
    );
    let out = exec(
        s,
        id,
        "psbx-testdb up m --mysql && . /work/.sbx/testdb/m.env && \
         mariadb --protocol=tcp -h 127.0.0.1 -P \"$MYSQL_PORT\" -u \"$MYSQL_USER\" \"$MYSQL_DATABASE\" -N \
           -e 'select version(); create table t (a int); select database()' && \
         psbx-testdb reset m && mariadb --protocol=tcp -h 127.0.0.1 -P \"$MYSQL_PORT\" -u test -N \
           -e \"select count(*) from information_schema.tables where table_schema = 'm'\" && psbx-testdb down m",
    );
    assert!(
        out.contains("MariaDB") && out.contains("\nm\nm is empty again\n0\n"),
        "psbx-testdb --mysql: {out}"
    );
    // psbx-toolchain: the box has no internet here, and it says so.
    let out = exec(
        s,
        id,
        "psbx-toolchain list; psbx-toolchain add dotnet; echo rc=$?",
    );
    assert!(
        out.contains("dotnet   not installed")
            && out.contains("cannot reach https://dot.net/v1/dotnet-install.sh")
            && out.contains("rc=1"),
        "{out}"
    );
}

/// A flushed `box` chain (an operator's `nft flush chain`, or a reload of a
/// ruleset that empties it) leaves the jump in place and filters nothing: the
/// server sees the whole table is not what it wrote and writes it again.
/// Boots no box (a server start, a few seconds).
#[test]
fn a_flushed_box_chain_is_put_back() {
    let s = BoxServer::start("network = true");
    let table = network_table(&s.installation());
    let listing = || {
        String::from_utf8(
            Command::new("nft")
                .args(["list", "chain", "inet", &table, "box"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    assert!(listing().contains("@denied"), "{}", listing());
    let flushed = Command::new("nft")
        .args(["flush", "chain", "inet", &table, "box"])
        .status()
        .unwrap();
    assert!(
        flushed.success(),
        "nft could not flush the chain of {table}"
    );
    assert!(!listing().contains("@denied"), "{}", listing());
    wait::until(
        "the box chain to be put back",
        Duration::from_secs(30),
        || listing().contains("ip daddr @denied counter").then_some(()),
    );
    let log = s.server.as_ref().unwrap().log.lines().join("\n");
    assert!(
        log.contains("the box network rules were removed or changed on the host"),
        "{log}"
    );
}

/// Two installations on one host: each has its own table for its own uid,
/// and one stopping removes its own table only.
#[test]
fn installations_keep_their_own_rules() {
    let a = BoxServer::start("network = true");
    let mut b = BoxServer::start("network = true");
    let (ta, tb) = (
        network_table(&a.installation()),
        network_table(&b.installation()),
    );
    assert_ne!(ta, tb);
    let uid = |table: &str| {
        let text = String::from_utf8(
            Command::new("nft")
                .args(["list", "table", "inet", table])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        text.lines()
            .find_map(|l| l.trim().strip_prefix("meta skuid "))
            .and_then(|rest| rest.split(" jump").next().map(str::to_owned))
            .unwrap_or_else(|| panic!("no uids in {table}: {text}"))
    };
    assert_ne!(uid(&ta), uid(&tb), "two installations filter the same uids");
    let (stopped, log) = b.server.take().unwrap().stop();
    assert!(stopped, "{log}");
    assert!(!table_present(&tb), "{tb} left behind");
    assert!(
        table_present(&ta),
        "stopping one installation removed another's rules"
    );
}

/// No box with a card starts or wakes while its rules cannot be put in place
/// — here another program holds a table of that name (nft's `flags owner`:
/// nobody else may change or delete it) — and the error says so; a frozen
/// box stays frozen (issue 30: a step refused before any side effect keeps
/// the box); once that program is gone, the rules are put back by themselves
/// and the box thaws. One test-image box: a boot (about 10 s), a freeze after
/// 6 s idle and a thaw (about 5 s).
#[test]
fn no_box_starts_without_its_rules() {
    let s = BoxServer::start("idle_freeze = \"6s\"\nnetwork = true");
    let table = network_table(&s.installation());
    // A box frozen before the rules go (idle past idle_freeze).
    let started = s.ok("POST", "/v1/boxes", Some(json!({"name": "kept"})));
    let id = started["id"].as_str().unwrap().to_owned();
    wait::until("the box to freeze", Duration::from_secs(120), || {
        (s.listed_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    assert!(delete_network_table(&table), "nft could not delete {table}");
    // The holder keeps its table for as long as it runs.
    struct Holder(std::process::Child);
    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut holder = Holder(
        Command::new("nft")
            .arg("-i")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    {
        use std::io::Write;
        let stdin = holder.0.stdin.as_mut().unwrap();
        writeln!(stdin, "add table inet {table} {{ flags owner; }}").unwrap();
        stdin.flush().unwrap();
    }
    wait::until("the other program's table", Duration::from_secs(10), || {
        table_present(&table).then_some(())
    });
    // Its thaw is refused before anything moves: it stays frozen (issue 30).
    let (status, body) = s.call("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "box_network_unavailable", "{body}");
    assert_eq!(
        s.listed_state(&id).as_deref(),
        Some("frozen"),
        "a refused thaw moved the box"
    );
    let (status, body) = s.call("POST", "/v1/boxes", Some(json!({"name": "refused"})));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "box_network_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be put in place")
            && message.contains("Operation not permitted"),
        "{body}"
    );
    drop(holder);
    wait::until("the rules to be put back", Duration::from_secs(30), || {
        let text = String::from_utf8(
            Command::new("nft")
                .args(["list", "table", "inet", &table])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        text.contains("jump box").then_some(())
    });
    // With the rules back, the frozen box thaws.
    let thawed = s.ok("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(thawed["state"], "running", "{thawed}");
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
}

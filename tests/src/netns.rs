//! A network namespace standing for a user's network, or for "the internet":
//! made by the test, joined to the host by a veth pair with a private /30 of
//! its own (the only route out of it), with its own hosts file
//! (`/etc/netns/<name>/hosts`, which `ip netns exec` mounts over
//! `/etc/hosts`). Test addresses of other ranges (198.51.100.0/24 for a
//! public host, 169.254.x.y for a link-local one) are put in it and routed to
//! it from the host ([`Netns::routed`]), each route checked with `ip route
//! get` before anything is sent. Processes started in it are killed, and the
//! namespace, its veth, its routes and its files removed, when the value is
//! dropped — also when the test fails. [`Listener`]s count what reached them.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct Netns {
    pub name: String,
    /// The host's end of the veth pair (where a server for the namespace listens).
    pub host_ip: Ipv4Addr,
    /// The namespace's end.
    pub ns_ip: Ipv4Addr,
    veth: String,
    etc: PathBuf,
    children: Vec<Child>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// A namespace whose `/etc/hosts` maps each `(name, address)`.
    pub fn new(hosts: &[(&str, &str)]) -> Self {
        let mut bytes = [0u8; 2];
        getrandom::fill(&mut bytes).expect("random");
        let tag = format!("{:02x}{:02x}", bytes[0], bytes[1]);
        let name = format!("psbxt{tag}");
        // 10.233.X.Y/30 with X, Y from the tag: parallel tests do not collide.
        let (x, y) = (bytes[0], bytes[1] & 0xfc);
        let host_ip = Ipv4Addr::new(10, 233, x, y + 1);
        let ns_ip = Ipv4Addr::new(10, 233, x, y + 2);
        let veth = format!("vpx{tag}");
        let peer = format!("vpn{tag}");
        let etc = PathBuf::from("/etc/netns").join(&name);
        let me = Self {
            name: name.clone(),
            host_ip,
            ns_ip,
            veth: veth.clone(),
            etc: etc.clone(),
            children: Vec::new(),
        };
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &peer,
        ]);
        ip(&["-n", &name, "link", "set", &peer, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        std::fs::create_dir_all(&etc).expect("/etc/netns/<name>");
        let mut text = String::from("127.0.0.1 localhost\n");
        for (host, addr) in hosts {
            text.push_str(&format!("{addr} {host}\n"));
        }
        std::fs::write(etc.join("hosts"), text).expect("the namespace's hosts file");
        // No resolver in the namespace: names come from its hosts file only.
        std::fs::write(etc.join("resolv.conf"), "").expect("the namespace's resolv.conf");
        me
    }

    /// An address of `net.0/24` (not .0, .1 or .255) put on the namespace's
    /// `lo` and routed to it from the host through its veth; fails the test
    /// unless `ip route get` then says the address leaves through that veth.
    pub fn routed(&mut self, net: [u8; 3]) -> Ipv4Addr {
        for _ in 0..50 {
            let mut byte = [0u8; 1];
            getrandom::fill(&mut byte).expect("random");
            if byte[0] < 2 || byte[0] == 255 {
                continue;
            }
            let addr = Ipv4Addr::new(net[0], net[1], net[2], byte[0]);
            // Taken by another test's namespace: try another.
            let added = Command::new("ip")
                .args(["route", "add", &format!("{addr}/32"), "via"])
                .arg(self.ns_ip.to_string())
                .args(["dev", &self.veth])
                .output()
                .expect("running ip");
            if !added.status.success() {
                continue;
            }
            ip(&[
                "-n",
                &self.name,
                "addr",
                "add",
                &format!("{addr}/32"),
                "dev",
                "lo",
            ]);
            self.assert_routed(addr);
            return addr;
        }
        panic!(
            "no free address in {}.{}.{}.0/24 for {}",
            net[0], net[1], net[2], self.name
        );
    }

    /// The one address `addr` (a public one a test must stand for, such as
    /// Azure's 168.63.129.16) put on the namespace's `lo` and routed to it from
    /// the host; fails the test unless `ip route get` then says it leaves
    /// through this namespace's veth (the route goes with the veth on drop).
    pub fn routed_exactly(&mut self, addr: Ipv4Addr) -> Ipv4Addr {
        let added = Command::new("ip")
            .args(["route", "add", &format!("{addr}/32"), "via"])
            .arg(self.ns_ip.to_string())
            .args(["dev", &self.veth])
            .output()
            .expect("running ip");
        assert!(
            added.status.success(),
            "cannot route {addr} to {} (another test's namespace holds it?): {}",
            self.name,
            String::from_utf8_lossy(&added.stderr)
        );
        ip(&[
            "-n",
            &self.name,
            "addr",
            "add",
            &format!("{addr}/32"),
            "dev",
            "lo",
        ]);
        self.assert_routed(addr);
        addr
    }

    /// A further address of the host (`addr`, on the host's end of the veth)
    /// that the namespace routes back to the host: a source address for the
    /// host's traffic into the namespace (`boxes.egress.snat`). It goes with
    /// the veth on drop.
    pub fn host_alias(&self, addr: Ipv4Addr) -> Ipv4Addr {
        ip(&["addr", "add", &format!("{addr}/32"), "dev", &self.veth]);
        ip(&[
            "-n",
            &self.name,
            "route",
            "add",
            &format!("{addr}/32"),
            "via",
            &self.host_ip.to_string(),
        ]);
        addr
    }

    /// Fails the test unless the host sends `addr` through this namespace's veth.
    pub fn assert_routed(&self, addr: Ipv4Addr) {
        let out = Command::new("ip")
            .args(["route", "get", &addr.to_string()])
            .output()
            .expect("running ip route get");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w == ["dev", self.veth.as_str()]),
            "{addr} does not leave through {} (ip route get: {text}): not sending anything to it",
            self.veth
        );
    }

    /// A [`Listener`] in the namespace.
    pub fn listener(&mut self, addr: Ipv4Addr, port: u16, greeting: &str) -> Listener {
        let log = self.etc.join(format!("listener-{addr}-{port}.log"));
        let mut cmd = self.command(crate::python::python().to_str().expect("utf-8 path"));
        cmd.arg(script("listener.py"))
            .args([&addr.to_string(), &port.to_string()])
            .arg(&log)
            .arg(greeting);
        let child = ready(
            cmd,
            &format!("the listener on {addr}:{port} in {}", self.name),
        );
        self.children.push(child);
        Listener {
            addr: std::net::SocketAddrV4::new(addr, port),
            log,
            child: None,
        }
    }

    /// A DNS server in the namespace on `addr:53` holding the A `records`;
    /// every other name is NXDOMAIN. Returns the log of the names it was asked.
    pub fn dns_server(&mut self, addr: Ipv4Addr, records: &[(&str, Ipv4Addr)]) -> PathBuf {
        let log = self.etc.join(format!("dns-{addr}.log"));
        let map: serde_json::Map<String, serde_json::Value> = records
            .iter()
            .map(|(name, a)| ((*name).to_owned(), a.to_string().into()))
            .collect();
        let mut cmd = self.command(crate::python::python().to_str().expect("utf-8 path"));
        cmd.arg(script("dns_server.py"))
            .arg(addr.to_string())
            .arg(serde_json::Value::Object(map).to_string())
            .arg(&log);
        let child = ready(cmd, &format!("the DNS server on {addr} in {}", self.name));
        self.children.push(child);
        log
    }

    /// Serves the files under `dir` over HTTP on `addr:port` (Python's
    /// `http.server`, "dumb" HTTP for git repositories too) and waits until
    /// it answers; returns its index for [`Netns::kill`].
    pub fn serve_files(&mut self, addr: Ipv4Addr, port: u16, dir: &std::path::Path) -> usize {
        let mut http = self.command("python3");
        http.args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            &addr.to_string(),
            "--directory",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let index = self.spawn(http);
        crate::wait::until(
            &format!("the file server on {addr}:{port} in {}", self.name),
            std::time::Duration::from_secs(10),
            || std::net::TcpStream::connect((addr, port)).ok(),
        );
        index
    }

    /// A command that runs inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// Starts `cmd` (from [`Netns::command`]) and keeps it to kill on drop;
    /// returns its index for [`Netns::kill`].
    pub fn spawn(&mut self, mut cmd: Command) -> usize {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .expect("starting a process in the namespace");
        self.children.push(child);
        self.children.len() - 1
    }

    /// Kills one process started with [`Netns::spawn`].
    pub fn kill(&mut self, index: usize) {
        if let Some(child) = self.children.get_mut(index) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A small TCP server in the namespace on `addr:port`: it greets each
    /// connection with `greeting` and a newline, then echoes what it gets.
    pub fn echo_server(&mut self, addr: &str, port: u16, greeting: &str) -> usize {
        let script = format!(
            "import socket, threading\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(({addr:?}, {port})); s.listen(64)\n\
             def serve(c):\n\
             \x20   c.sendall({greeting:?}.encode() + b'\\n')\n\
             \x20   while True:\n\
             \x20       d = c.recv(65536)\n\
             \x20       if not d: break\n\
             \x20       c.sendall(d)\n\
             \x20   c.close()\n\
             while True:\n\
             \x20   c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n"
        );
        let mut cmd = self.command("python3");
        cmd.args(["-c", &script]);
        let index = self.spawn(cmd);
        // Wait until it listens.
        for _ in 0..100 {
            let probe = self
                .command("python3")
                .args([
                    "-c",
                    &format!(
                        "import socket; socket.create_connection(({addr:?}, {port}), 1).close()"
                    ),
                ])
                .stderr(Stdio::null())
                .status()
                .expect("probing");
            if probe.success() {
                return index;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!(
            "the echo server in {} did not listen on {addr}:{port}",
            self.name
        );
    }
}

/// `tests/net/<name>`.
fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("net")
        .join(name)
}

/// Starts `cmd` and waits for the line `ready` on its stdout.
fn ready(mut cmd: Command, what: &str) -> Child {
    use std::io::BufRead;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("reading from {what}: {e}"));
    assert_eq!(line.trim(), "ready", "{what} did not start");
    child
}

/// A TCP listener that greets each connection and counts them.
pub struct Listener {
    pub addr: std::net::SocketAddrV4,
    log: PathBuf,
    /// Its process, when it runs on the host (a namespace's are the namespace's).
    child: Option<(Child, tempfile::TempDir)>,
}

impl Listener {
    /// A listener on the host itself (loopback, or one of its addresses).
    pub fn on_host(addr: Ipv4Addr, port: u16, greeting: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("accepted.log");
        let mut cmd = Command::new(crate::python::python());
        cmd.arg(script("listener.py"))
            .args([&addr.to_string(), &port.to_string()])
            .arg(&log)
            .arg(greeting);
        let child = ready(cmd, &format!("the listener on {addr}:{port}"));
        Self {
            addr: std::net::SocketAddrV4::new(addr, port),
            log,
            child: Some((child, dir)),
        }
    }

    /// The source address of each connection it accepted, in order.
    pub fn peers(&self) -> Vec<Ipv4Addr> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.rsplit_once(':')?.0.parse().ok())
            .collect()
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// Fails the test unless a connection from the host (in the host's
    /// network namespace) gets the listener's greeting.
    pub fn assert_answers_the_host(&self) {
        use std::io::Read;
        let before = self.accepted();
        let mut stream = std::net::TcpStream::connect_timeout(
            &self.addr.into(),
            std::time::Duration::from_secs(3),
        )
        .unwrap_or_else(|e| panic!("{} does not answer the host: {e}", self.addr));
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        assert!(!text.is_empty(), "{} sent no greeting", self.addr);
        crate::wait::until(
            &format!("{} to count the connection", self.addr),
            std::time::Duration::from_secs(5),
            || (self.accepted() != before).then_some(()),
        );
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some((child, _)) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Anything else still inside (a process a test started by other means).
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

//! A network namespace standing for a user's network: made by the test,
//! joined to the host by a veth pair with a private /30 of its own (the only
//! route out of it), with its own hosts file (`/etc/netns/<name>/hosts`, which
//! `ip netns exec` mounts over `/etc/hosts`). Processes started in it are
//! killed, and the namespace, its veth and its files removed, when the value
//! is dropped — also when the test fails.

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

//! AWS in tests: moto's server, its setup steps (`tests/aws/moto.py`) and
//! psbx's own identity, a moto IAM user whose key the server finds in its
//! environment, as the SDK's default chain finds it anywhere.
//!
//! Object storage (`storage.s3`, issue 33) is moto's S3 in a network
//! namespace of its own ([`Moto::start_in_netns`]): what stands for a
//! bucket in another machine, reached through the namespace's veth only.

use crate::netns::Netns;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where moto listens in its namespace (the namespace's own: always free).
const NETNS_PORT: u16 = 9000;

/// moto's server, as `tests/aws/moto_sts.py` runs it (its trust checks hold
/// across accounts): on a free loopback port, or in a namespace; killed
/// (and its namespace removed) when dropped, also when the test fails.
pub struct Moto {
    child: Option<Child>,
    /// The namespace it runs in, which kills it when dropped.
    netns: Option<Netns>,
    pub url: String,
}

impl Moto {
    pub fn start() -> Self {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aws/moto_sts.py");
        let port = crate::free_port();
        let child = Command::new(crate::python::python())
            .arg(&script)
            .args(["127.0.0.1", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting moto's server");
        let moto = Self {
            child: Some(child),
            netns: None,
            url: format!("http://127.0.0.1:{port}"),
        };
        crate::wait::until("moto's server", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        moto
    }

    /// moto's server in a network namespace made for it, at the
    /// namespace's end of its veth (a private /30, never this machine's
    /// network): fails the test, sending nothing, unless `ip route get` says
    /// that address leaves through the veth, or when the venv lacks moto or
    /// boto3 (named).
    pub fn start_in_netns() -> Self {
        let python = crate::python::python();
        crate::python::require_modules(&["moto", "boto3"]);
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aws/moto_sts.py");
        let mut netns = Netns::new(&[]);
        let addr = netns.ns_ip;
        netns.assert_routed(addr);
        let mut command = netns.command(python.to_str().expect("a UTF-8 venv path"));
        command
            .arg(&script)
            .args([&addr.to_string(), &NETNS_PORT.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        netns.spawn(command);
        crate::wait::until(
            &format!("moto's server on {addr}:{NETNS_PORT} in {}", netns.name),
            Duration::from_secs(30),
            || std::net::TcpStream::connect((addr, NETNS_PORT)).ok(),
        );
        Self {
            child: None,
            url: format!("http://{addr}:{NETNS_PORT}"),
            netns: Some(netns),
        }
    }

    /// `tests/aws/moto.py <args>`: what it printed.
    pub fn setup(&self, args: &[&str]) -> Value {
        if let Some(netns) = &self.netns {
            netns.assert_routed(netns.ns_ip);
        }
        setup(args)
    }

    /// A URL of moto's namespace where nothing listens: an endpoint that
    /// does not answer (refused at once, never a machine elsewhere).
    pub fn silent_url(&self) -> String {
        let netns = self
            .netns
            .as_ref()
            .expect("a silent URL is moto's namespace's (Moto::start_in_netns)");
        format!("http://{}:{}", netns.ns_ip, NETNS_PORT + 1)
    }

    /// Makes the S3 bucket `name`.
    pub fn bucket(&self, name: &str) {
        self.setup(&["bucket", &self.url, name]);
    }

    /// The objects of bucket `name`, as boto3 lists them.
    pub fn objects(&self, name: &str) -> Bucket {
        if let Some(netns) = &self.netns {
            netns.assert_routed(netns.ns_ip);
        }
        objects(&self.url, name)
    }
}

/// The objects of bucket `name` of moto's S3 at `endpoint`, as boto3 lists
/// them (for a process that did not start moto; [`Moto::objects`] otherwise).
pub fn objects(endpoint: &str, name: &str) -> Bucket {
    let listed = setup(&["objects", endpoint, name]);
    let map = |field: &str| -> std::collections::BTreeMap<String, Value> {
        listed[field]
            .as_object()
            .unwrap_or_else(|| panic!("moto.py objects printed no {field}: {listed}"))
            .clone()
            .into_iter()
            .collect()
    };
    Bucket {
        sizes: map("objects")
            .into_iter()
            .map(|(k, v)| (k, v.as_u64().unwrap_or_default()))
            .collect(),
        etags: map("etags")
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
            .collect(),
        uploads: listed["uploads"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_owned))
            .collect(),
    }
}

/// What a bucket holds ([`Moto::objects`]).
#[derive(Debug)]
pub struct Bucket {
    /// Each object's size, by key.
    pub sizes: std::collections::BTreeMap<String, u64>,
    /// Each object's ETag (a multipart upload's ends in `-<parts>`).
    pub etags: std::collections::BTreeMap<String, String>,
    /// The keys of multipart uploads begun and neither completed nor aborted.
    pub uploads: Vec<String>,
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The namespace (`self.netns`) kills what runs in it as it goes.
    }
}

/// `tests/aws/moto.py <args>`: what it printed.
pub fn setup(args: &[&str]) -> Value {
    crate::python::run_json_in("aws", "moto.py", args)
}

/// The server's environment for the key of `user` (what `moto.py user`
/// printed), and nothing else: no instance metadata, no profile.
pub fn identity(user: &Value) -> Vec<(&'static str, String)> {
    let key = |k: &str| {
        user[k]
            .as_str()
            .unwrap_or_else(|| panic!("moto.py user printed no {k}: {user}"))
            .to_owned()
    };
    vec![
        ("AWS_ACCESS_KEY_ID", key("accessKeyId")),
        ("AWS_SECRET_ACCESS_KEY", key("secretAccessKey")),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("AWS_CONFIG_FILE", "/dev/null".to_owned()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_owned()),
    ]
}

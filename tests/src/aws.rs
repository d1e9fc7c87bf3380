//! AWS in tests: moto's server, its setup steps (`tests/aws/moto.py`) and
//! psbx's own identity, a moto IAM user whose key the server finds in its
//! environment, as the SDK's default chain finds it anywhere.

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// moto's server on a free loopback port, as `tests/aws/moto_sts.py` runs it
/// (its trust checks hold across accounts); killed when dropped.
pub struct Moto {
    child: Child,
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
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        crate::wait::until("moto's server", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        moto
    }

    /// `tests/aws/moto.py <args>`: what it printed.
    pub fn setup(&self, args: &[&str]) -> Value {
        setup(args)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

//! AWS in tests: moto's setup steps (`tests/aws/moto.py`) and psbx's own
//! identity, a moto IAM user whose key the server finds in its environment,
//! as the SDK's default chain finds it anywhere.

use serde_json::Value;

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

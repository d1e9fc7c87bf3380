//! The command boxd runs ([`ExecRequest`]), built from what a caller gives
//! in one place for every front (the REST exec route and the MCP
//! `sandbox_exec` tool), so that both refuse the same requests with the same
//! message: a blank command, NUL bytes (which no program's argument,
//! environment or path can carry), an environment variable name that is not
//! one, a working directory that is not an absolute path in the box.

use crate::error::BoxError;
use psbx_wire::boxd::ExecRequest;

/// Where a command runs when the caller names no directory.
pub const DEFAULT_CWD: &str = "/work";

/// White space as the OpenAPI document's `\s` has it (Python's and Rust's,
/// with the information separators U+001C to U+001F).
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// What a caller asks to run, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    pub cmd: String,
    /// `None`: [`DEFAULT_CWD`].
    pub cwd: Option<String>,
    pub env: Vec<(String, String)>,
    /// Seconds after which the command's process group is killed.
    pub timeout_s: Option<u64>,
    pub background: bool,
}

impl ExecSpec {
    /// The request boxd is sent, or why there is none
    /// ([`BoxError::Invalid`], HTTP 400 `invalid_request`).
    pub fn request(
        cmd: String,
        cwd: Option<String>,
        env: Vec<(String, String)>,
        timeout_s: Option<u64>,
        background: bool,
    ) -> Result<ExecRequest, BoxError> {
        Self {
            cmd,
            cwd,
            env,
            timeout_s,
            background,
        }
        .check()
    }

    /// [`ExecSpec::request`] of a spec built by field.
    pub fn check(self) -> Result<ExecRequest, BoxError> {
        if !self.cmd.chars().any(|c| !is_space(c)) {
            return Err(BoxError::Invalid("cmd is empty".into()));
        }
        no_nul("cmd", &self.cmd)?;
        for (name, value) in &self.env {
            no_nul(&format!("env.{name}"), value)?;
        }
        for (name, _) in &self.env {
            crate::secrets::validate_name(name).map_err(|_| {
                BoxError::Invalid(format!("env: {name:?} is not an environment variable name"))
            })?;
        }
        let cwd = self.cwd.unwrap_or_else(|| DEFAULT_CWD.to_owned());
        no_nul("cwd", &cwd)?;
        if !cwd.starts_with('/') {
            return Err(BoxError::Invalid(format!(
                "cwd {cwd:?} must be an absolute path in the box, such as /work/repo"
            )));
        }
        Ok(ExecRequest {
            cmd: self.cmd,
            cwd,
            env: self.env,
            timeout_s: self.timeout_s,
            background: self.background,
        })
    }
}

/// Refuses a NUL byte in `value`, naming the field.
pub fn no_nul(field: &str, value: &str) -> Result<(), BoxError> {
    if value.contains('\0') {
        Err(BoxError::Invalid(format!(
            "{field} contains NUL (\\u0000): send text without it"
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(spec: ExecSpec) -> String {
        spec.check().unwrap_err().to_string()
    }

    fn spec(cmd: &str) -> ExecSpec {
        ExecSpec {
            cmd: cmd.into(),
            cwd: None,
            env: Vec::new(),
            timeout_s: Some(60),
            background: false,
        }
    }

    #[test]
    fn a_good_command_runs_in_work_by_default() {
        let request = spec("make test").check().unwrap();
        assert_eq!(request.cwd, "/work");
        assert_eq!(request.timeout_s, Some(60));
    }

    #[test]
    fn what_no_program_can_take_is_refused_naming_the_field() {
        assert_eq!(refused(spec(" \u{1f}\t")), "cmd is empty");
        assert!(refused(spec("echo a\0b")).starts_with("cmd contains NUL"));
        let mut env = spec("env");
        env.env = vec![("A".into(), "x\0".into())];
        assert!(refused(env.clone()).starts_with("env.A contains NUL"));
        env.env = vec![("1A".into(), "x".into())];
        assert_eq!(
            refused(env),
            "env: \"1A\" is not an environment variable name"
        );
        let mut cwd = spec("ls");
        cwd.cwd = Some("repo".into());
        assert_eq!(
            refused(cwd.clone()),
            "cwd \"repo\" must be an absolute path in the box, such as /work/repo"
        );
        cwd.cwd = Some("/work/\0".into());
        assert!(refused(cwd).starts_with("cwd contains NUL"));
    }
}

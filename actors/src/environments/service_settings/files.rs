//! The two settings files a box receives per service (spec "Use it from a
//! box"): `/work/.sbx/env/<service>.env` in docker's `--env-file` format and
//! `/work/.sbx/env/<service>.sh` with `export KEY='VALUE'` lines. The
//! `notable` summary of the same settings is re-exported here.
//!
//! `.env`: docker reads each line as `KEY=VALUE`, the value being everything
//! after the first `=` with no quote processing, and lines starting with `#`
//! are comments. A value with a line break (LF or CR) cannot be written that
//! way, so it is left out with a comment naming it and pointing at the `.sh`.
//!
//! `.sh`: every value is single-quoted, a `'` in it written `'\''`; inside
//! single quotes a POSIX shell (dash, bash, busybox ash) takes every byte
//! literally, line breaks, `$`, backslashes and spaces included.
//!
//! In both files, a name that the format cannot carry (for `.env`: empty,
//! starting with `#` or containing `=`, whitespace or a control character; for
//! `.sh`: not a shell name `[A-Za-z_][A-Za-z0-9_]*`) and a value with a NUL
//! byte are left out with a comment saying so; settings uploaded as `.env`
//! never have such names, imported ones could. Names that bash keeps
//! read-only (`UID`, `EUID`, `PPID`, `BASHOPTS`, `SHELLOPTS`,
//! `BASH_VERSINFO`) are left out of the `.sh` too: exporting one fails in bash,
//! and in `bash --posix` ends the shell that sources the file.

pub use super::notable::{Notable, NotableValue, notable};

/// The docker `--env-file` text for `service`'s settings.
pub fn env_file(service: &str, vars: &[(String, String)]) -> String {
    let mut out = String::new();
    for (key, value) in vars {
        if !env_name(key) {
            out.push_str(&format!(
                "# a setting named {key:?} cannot be written in this format: left out\n"
            ));
        } else if value.contains('\0') {
            out.push_str(&format!("# {key} contains a NUL byte: left out\n"));
        } else if value.contains(['\n', '\r']) {
            out.push_str(&format!("# {key} is multi-line: only in {service}.sh\n"));
        } else {
            out.push_str(&format!("{key}={value}\n"));
        }
    }
    out
}

/// The `export KEY='VALUE'` text that a POSIX shell sources back to the exact
/// values.
pub fn sh_file(vars: &[(String, String)]) -> String {
    let mut out = String::new();
    for (key, value) in vars {
        if !shell_name(key) {
            out.push_str(&format!(
                "# a setting named {key:?} is not a shell variable name: left out\n"
            ));
        } else if BASH_READONLY.contains(&key.as_str()) {
            out.push_str(&format!(
                "# {key} is read-only in bash: left out, it is in the .env file\n"
            ));
        } else if value.contains('\0') {
            out.push_str(&format!("# {key} contains a NUL byte: left out\n"));
        } else {
            out.push_str(&format!(
                "export {key}='{}'\n",
                value.replace('\'', r"'\''")
            ));
        }
    }
    out
}

/// Variables bash refuses to set.
const BASH_READONLY: &[&str] = &[
    "UID",
    "EUID",
    "PPID",
    "BASHOPTS",
    "SHELLOPTS",
    "BASH_VERSINFO",
];

/// A name docker's env-file reader takes as one `KEY`.
fn env_name(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with('#')
        && !key.contains(|c: char| c == '=' || c.is_whitespace() || c.is_control())
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn shell_name(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nq+/=\n-----END PRIVATE KEY-----\n";

    fn tricky() -> Vec<(String, String)> {
        vars(&[
            ("SINGLE", "it's"),
            ("DOUBLE", r#"say "hi""#),
            ("BOTH", r#"'"'"mixed'"#),
            ("DOLLAR", "$HOME and ${PATH} and $(id) and `id`"),
            ("BACKSLASH", r"C:\path\to\ and \\ double"),
            ("TRAILING", "ends with spaces  "),
            ("LEADING", "  starts with spaces"),
            ("EMPTY", ""),
            ("PEM", PEM),
            ("NON_ASCII", "héllo wörld ✓ 日本語"),
            ("QUOTE_ONLY", "'"),
            ("LITERAL_BACKSLASH_N", r"\n"),
            ("CRLF", "a\r\nb"),
            ("GLOB", "* ? [a-z] ~ ;& | > <"),
            ("EQUALS", "a=b=c"),
            ("HASH", "# not a comment"),
            ("TAB", "a\tb"),
        ])
    }

    /// Sources the file in `shell` and prints each variable back.
    fn round_trip(shell: &[&str]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.sh");
        let vars = tricky();
        std::fs::write(&path, sh_file(&vars)).unwrap();
        for (key, value) in &vars {
            let script = format!(". '{}' && printf %s \"${key}\"", path.display());
            let out = Command::new(shell[0])
                .args(&shell[1..])
                .arg("-c")
                .arg(&script)
                .env("HOME", "/should-not-appear")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{shell:?} {key}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                *value,
                "{shell:?} {key}"
            );
        }
        // Exported: a child process sees them too.
        let script = format!(". '{}' && env", path.display());
        let out = Command::new(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("NON_ASCII=héllo wörld ✓ 日本語\n"));
    }

    fn have(program: &str) -> bool {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {program}"))
            .output()
            .is_ok_and(|o| o.status.success())
    }

    #[test]
    fn sh_round_trip_sh() {
        round_trip(&["sh"]);
    }

    #[test]
    fn sh_round_trip_dash_bash_busybox() {
        for shell in [
            &["dash"][..],
            &["bash"],
            &["bash", "--posix"],
            &["busybox", "sh"],
        ] {
            if have(shell[0]) {
                round_trip(shell);
            } else {
                eprintln!("{} not installed: skipped", shell[0]);
            }
        }
    }

    #[test]
    fn sh_lines() {
        assert_eq!(
            sh_file(&vars(&[("A", "it's"), ("B", ""), ("C", "x\ny")])),
            "export A='it'\\''s'\nexport B=''\nexport C='x\ny'\n"
        );
    }

    /// docker's env-file rules: leading whitespace dropped, `#` lines are
    /// comments, `KEY=VALUE` split at the first `=`, the value as is, no
    /// quote processing; lines split at LF with a trailing CR dropped.
    fn docker_read(text: &str) -> Vec<(String, String)> {
        text.lines()
            .map(str::trim_start)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                assert!(!k.contains(char::is_whitespace), "bad key {k:?}");
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn env_file_reads_back_every_single_line_value() {
        let vars = tricky();
        let text = env_file("api", &vars);
        let single: Vec<_> = vars
            .iter()
            .filter(|(_, v)| !v.contains(['\n', '\r']))
            .cloned()
            .collect();
        assert_eq!(docker_read(&text), single);
        assert!(text.contains("# PEM is multi-line: only in api.sh\n"));
        assert!(text.contains("# CRLF is multi-line: only in api.sh\n"));
        assert!(text.contains("TRAILING=ends with spaces  \n"));
        assert!(text.contains("EMPTY=\n"));
    }

    #[test]
    fn names_and_nul_the_formats_cannot_carry() {
        let vars = vars(&[
            ("BAD NAME", "x"),
            ("dotted.name", "y"),
            ("NUL", "a\0b"),
            ("OK", "z"),
        ]);
        let env = env_file("api", &vars);
        assert_eq!(
            docker_read(&env),
            vec![
                ("dotted.name".to_string(), "y".to_string()),
                ("OK".to_string(), "z".to_string())
            ]
        );
        assert!(env.contains("# a setting named \"BAD NAME\""));
        assert!(env.contains("# NUL contains a NUL byte: left out"));
        let sh = sh_file(&vars);
        assert_eq!(
            sh.lines()
                .filter(|l| l.starts_with("export"))
                .collect::<Vec<_>>(),
            vec!["export OK='z'"]
        );
        assert!(sh.contains("# a setting named \"dotted.name\" is not a shell variable name"));
        // A name with a line break stays on its comment line.
        let sh = sh_file(&vars_newline());
        assert_eq!(sh.lines().count(), 1);
        let env = env_file("api", &vars_newline());
        assert_eq!(env.lines().count(), 1);
    }

    #[test]
    fn bash_read_only_names_stay_out_of_sh() {
        let vars = vars(&[("UID", "1000"), ("PPID", "1"), ("AFTER", "ok")]);
        let sh = sh_file(&vars);
        assert!(sh.contains("# UID is read-only in bash"));
        for shell in [&["bash"][..], &["bash", "--posix"]] {
            if !have(shell[0]) {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("svc.sh");
            std::fs::write(&path, &sh).unwrap();
            let out = Command::new(shell[0])
                .args(&shell[1..])
                .arg("-c")
                .arg(format!(". '{}' && printf %s \"$AFTER\"", path.display()))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), "ok", "{shell:?}");
        }
        assert!(env_file("api", &vars).contains("UID=1000\n"));
    }

    fn vars_newline() -> Vec<(String, String)> {
        vec![("A\nexport B".to_string(), "x".to_string())]
    }
}

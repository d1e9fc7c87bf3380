//! `psbx mcp install --client claude|codex|cursor|gemini`: what connects an MCP
//! client to psbx, in that client's own terms. With OAuth (the default) it is one
//! shell line per client ([`connect_line`]) that adds `<url>/mcp` as a remote HTTP
//! server with the client's own command (Claude Code, Gemini CLI, Codex) or, for
//! Cursor, which has none, by merging `~/.cursor/mcp.json`; and that downloads the
//! psbx skill from the server (`/skills/psbx/`, [`crate::skill`]) into the
//! directory the client reads skills from. No key is involved: the client signs in
//! when it first connects. The first start of `psbx serve` prints these lines.
//!
//! `--auth key` and `--transport stdio` give the API-key configuration instead
//! (`<url>/mcp` with a bearer token, or the local `psbx mcp`). The key's value
//! never goes into a file: each client reads it from PSBX_API_KEY through its own
//! reference syntax. `--write` merges the entry into the client's file (other
//! entries kept, written atomically) and installs the skill, instead of printing.

use crate::shell::word;
use crate::skill;
use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// Claude Code (project `.mcp.json`).
    Claude,
    /// OpenAI Codex (`~/.codex/config.toml`).
    Codex,
    /// Cursor (`~/.cursor/mcp.json`).
    Cursor,
    /// Gemini CLI (`~/.gemini/settings.json`).
    Gemini,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The server's `/mcp` endpoint over Streamable HTTP.
    Http,
    /// `psbx mcp` started by the client (needed for sandbox_sync to read local files directly).
    Stdio,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Auth {
    /// OAuth sign-in by the client (HTTP only; no key in any file or environment).
    Oauth,
    /// The API key in PSBX_API_KEY, sent as a bearer token.
    Key,
}

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// The MCP client to configure.
    #[arg(long, value_enum)]
    pub client: Client,
    #[arg(long, value_enum, default_value = "http")]
    pub transport: Transport,
    /// How the client authenticates (default: oauth over HTTP, key over stdio).
    #[arg(long, value_enum)]
    pub auth: Option<Auth>,
    /// The psbx server's URL (its base, e.g. https://psbx.example.com).
    #[arg(long, env = "PSBX_URL")]
    pub url: Option<String>,
    /// The server's name in the client's configuration.
    #[arg(long, default_value = "psbx")]
    pub name: String,
    /// Merge the entry into the client's configuration file and install the
    /// skill, instead of printing what to run.
    #[arg(long)]
    pub write: bool,
}

/// The variable the API key is read from.
const KEY_VAR: &str = "PSBX_API_KEY";

/// What to put where for one client.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The server entry, as JSON (TOML for Codex is made from it).
    pub entry: Value,
    /// The file the entry belongs in.
    pub path: PathBuf,
    /// Things to do or know: sign-in steps, the variable to export.
    pub notes: Vec<String>,
}

/// The server's base URL without a trailing slash, if it is http(s).
fn base_url(url: &str) -> anyhow::Result<&str> {
    let url = url.trim_end_matches('/');
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!(
            "--url {url:?} is not an http(s) URL: give the psbx server's base URL, e.g. https://psbx.example.com"
        );
    }
    Ok(url)
}

fn endpoint(url: &str) -> String {
    format!("{}/mcp", url.trim_end_matches('/'))
}

/// The entry and notes for a client; `home` and `cwd` place the file.
pub fn plan(
    client: Client,
    transport: Transport,
    auth: Auth,
    url: &str,
    home: &Path,
    cwd: &Path,
) -> anyhow::Result<Plan> {
    let url = base_url(url)?;
    if transport == Transport::Stdio && auth == Auth::Oauth {
        bail!(
            "--auth oauth is for --transport http: over stdio, psbx mcp calls the server with the \
             API key in {KEY_VAR}"
        );
    }
    let mcp = endpoint(url);
    let key_reference = match client {
        Client::Claude | Client::Gemini => format!("${{{KEY_VAR}}}"),
        Client::Cursor => format!("${{env:{KEY_VAR}}}"),
        Client::Codex => String::new(), // Codex names the variable instead
    };
    let bearer = format!("Bearer {key_reference}");
    let mut notes = Vec::new();
    let export = format!(
        "export {KEY_VAR}=psbx_... (a key from `psbx keys create`) in the environment the client starts in; \
         the file holds only a reference to it"
    );
    let entry = match (client, transport, auth) {
        (Client::Claude, Transport::Http, Auth::Key) => {
            notes.push(export);
            notes.push(
                "Claude Code expands ${PSBX_API_KEY} in .mcp.json headers; if a version sends it \
                 literally (the server answers 401), use --auth oauth or --transport stdio"
                    .to_owned(),
            );
            json!({"type": "http", "url": mcp, "headers": {"Authorization": bearer}})
        }
        (_, Transport::Http, Auth::Oauth) => {
            notes.push(sign_in(client));
            match client {
                Client::Claude | Client::Gemini => json!({"type": "http", "url": mcp}),
                Client::Codex | Client::Cursor => json!({"url": mcp}),
            }
        }
        (Client::Cursor, Transport::Http, Auth::Key) => {
            notes.push(export);
            json!({"url": mcp, "headers": {"Authorization": bearer}})
        }
        (Client::Gemini, Transport::Http, Auth::Key) => {
            notes.push(export);
            json!({"httpUrl": mcp, "headers": {"Authorization": bearer}})
        }
        (Client::Codex, Transport::Http, Auth::Key) => {
            notes.push(format!(
                "export {KEY_VAR}=psbx_... in the environment Codex starts in: \
                 bearer_token_env_var names the variable, Codex reads the key from it"
            ));
            json!({"url": mcp, "bearer_token_env_var": KEY_VAR})
        }
        (Client::Codex, Transport::Stdio, _) => {
            notes.push(format!(
                "export {KEY_VAR}=psbx_... in the environment Codex starts in: env_vars passes \
                 it on to psbx mcp"
            ));
            notes.push("psbx must be on the PATH Codex starts it with".to_owned());
            json!({"command": "psbx", "args": ["mcp"], "env": {"PSBX_URL": url}, "env_vars": [KEY_VAR]})
        }
        (_, Transport::Stdio, _) => {
            notes.push(export);
            notes.push("psbx must be on the PATH the client starts it with".to_owned());
            let mut entry = json!({
                "command": "psbx",
                "args": ["mcp"],
                "env": {"PSBX_URL": url, KEY_VAR: key_reference},
            });
            if client == Client::Claude
                && let Some(object) = entry.as_object_mut()
            {
                object.insert("type".into(), json!("stdio"));
            }
            entry
        }
    };
    let path = match client {
        // OAuth holds nothing to share with a project: the user's own file, as
        // `claude mcp add --scope user` writes it.
        Client::Claude if auth == Auth::Oauth => home.join(".claude.json"),
        Client::Claude => cwd.join(".mcp.json"),
        Client::Codex => std::env::var_os("CODEX_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".codex"))
            .join("config.toml"),
        Client::Cursor => home.join(".cursor/mcp.json"),
        Client::Gemini => home.join(".gemini/settings.json"),
    };
    Ok(Plan { entry, path, notes })
}

/// Puts the entry `name` into a JSON configuration (`mcpServers`), keeping the rest.
pub fn merge_json(existing: &str, name: &str, entry: &Value) -> anyhow::Result<String> {
    let mut doc: Value = if existing.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(existing)
            .context("the file is not valid JSON; fix or move it first")?
    };
    let Some(root) = doc.as_object_mut() else {
        bail!("the file's top level is not a JSON object; fix or move it first");
    };
    let servers = root
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(servers) = servers.as_object_mut() else {
        bail!("mcpServers in the file is not an object; fix it first");
    };
    servers.insert(name.to_owned(), entry.clone());
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}

fn toml_value(value: &Value) -> toml_edit::Value {
    match value {
        Value::String(s) => s.as_str().into(),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => n
            .as_i64()
            .map(toml_edit::Value::from)
            .unwrap_or_else(|| n.to_string().into()),
        Value::Array(items) => toml_edit::Value::Array(items.iter().map(toml_value).collect()),
        Value::Object(map) => {
            let mut table = toml_edit::InlineTable::new();
            for (k, v) in map {
                table.insert(k, toml_value(v));
            }
            toml_edit::Value::InlineTable(table)
        }
        Value::Null => "".into(),
    }
}

/// The entry as a Codex `[mcp_servers.<name>]` table.
fn toml_table(entry: &Value) -> toml_edit::Table {
    let mut table = toml_edit::Table::new();
    if let Some(map) = entry.as_object() {
        for (k, v) in map {
            table.insert(k, toml_edit::Item::Value(toml_value(v)));
        }
    }
    table
}

/// Puts the entry `name` into a Codex `config.toml`, keeping the rest (and its comments).
pub fn merge_toml(existing: &str, name: &str, entry: &Value) -> anyhow::Result<String> {
    let mut doc: toml_edit::DocumentMut = existing
        .parse()
        .context("the file is not valid TOML; fix or move it first")?;
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    let Some(servers) = servers.as_table_mut() else {
        bail!("mcp_servers in the file is not a table; fix it first");
    };
    servers.insert(name, toml_edit::Item::Table(toml_table(entry)));
    Ok(doc.to_string())
}

/// The whole file content the entry would give on its own (for printing).
pub fn snippet(client: Client, name: &str, entry: &Value) -> anyhow::Result<String> {
    match client {
        Client::Codex => merge_toml("", name, entry),
        _ => merge_json("", name, entry),
    }
}

/// Replaces `path` with `contents` atomically (a temporary file in the same
/// directory, renamed over it), keeping the old file's permissions.
pub fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("making a temporary file in {}", dir.display()))?;
    file.write_all(contents.as_bytes())?;
    file.as_file().sync_all()?;
    if let Ok(meta) = std::fs::metadata(path) {
        file.as_file().set_permissions(meta.permissions())?;
    }
    file.persist(path)
        .with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

/// Merges the plan's entry into its file; returns what was written.
pub fn write(client: Client, name: &str, plan: &Plan) -> anyhow::Result<String> {
    let existing = match std::fs::read_to_string(&plan.path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", plan.path.display())),
    };
    let merged = match client {
        Client::Codex => merge_toml(&existing, name, &plan.entry),
        _ => merge_json(&existing, name, &plan.entry),
    }
    .with_context(|| format!("merging into {}", plan.path.display()))?;
    write_atomically(&plan.path, &merged)?;
    Ok(merged)
}

/// Where a client reads a user's skills, under the home directory: each
/// client's own directory (Codex's is the shared `~/.agents/skills`, its
/// `$CODEX_HOME/skills` being deprecated).
pub fn skill_dir(client: Client) -> String {
    let base = match client {
        Client::Claude => ".claude/skills",
        Client::Codex => ".agents/skills",
        Client::Cursor => ".cursor/skills",
        Client::Gemini => ".gemini/skills",
    };
    format!("{base}/{}", skill::NAME)
}

/// How the person signs the client in, once it is configured.
fn sign_in(client: Client) -> String {
    match client {
        Client::Claude => {
            "sign in: `claude mcp login psbx` (or /mcp in Claude Code, then Authenticate); \
                           your browser opens psbx's sign-in page"
                .to_owned()
        }
        Client::Codex => {
            "sign in: `codex mcp login psbx` (codex mcp add starts it by itself when it \
                          finds psbx's OAuth); your browser opens psbx's sign-in page"
                .to_owned()
        }
        Client::Cursor => {
            "sign in: Cursor shows psbx as \"Needs login\" in its MCP settings; click it \
                           and your browser opens psbx's sign-in page"
                .to_owned()
        }
        Client::Gemini => "sign in: Gemini CLI opens psbx's sign-in page when it first connects \
                           (or /mcp auth psbx in a session)"
            .to_owned(),
    }
}

/// The one line that connects `client` to the server at `url` with OAuth and
/// installs the skill (what the first start prints, and `psbx mcp install`
/// without `--write`). `name` is the server's name in the client.
pub fn connect_line(client: Client, url: &str, name: &str) -> anyhow::Result<String> {
    let url = base_url(url)?;
    let mcp = word(&endpoint(url)).into_owned();
    let skill = skill_command(client, url);
    let name = word(name);
    Ok(match client {
        // `add` refuses a name that exists: a second run replaces it.
        Client::Claude => format!(
            "{{ claude mcp remove --scope user {name} >/dev/null 2>&1; true; }} && \
             claude mcp add --transport http --scope user {name} {mcp} && {skill}"
        ),
        Client::Gemini => {
            format!("gemini mcp add --scope user --transport http {name} {mcp} && {skill}")
        }
        // Last: with psbx's OAuth found, `codex mcp add` goes on to sign in.
        Client::Codex => format!("{skill} && codex mcp add {name} --url {mcp}"),
        // Cursor has no command that adds a server: its file, merged.
        Client::Cursor => format!(
            "{skill} && python3 -c 'import json,os,sys; p=os.path.expanduser(\"~/.cursor/mcp.json\"); \
             d=json.load(open(p)) if os.path.exists(p) else {{}}; \
             d.setdefault(\"mcpServers\", {{}})[sys.argv[1]]={{\"url\": sys.argv[2]}}; \
             os.makedirs(os.path.dirname(p), exist_ok=True); json.dump(d, open(p, \"w\"), indent=2)' \
             {name} {mcp}"
        ),
    })
}

/// The curl command that downloads the skill's files from the server at `url`
/// (no trailing slash) into the client's skills directory.
fn skill_command(client: Client, url: &str) -> String {
    let dir = format!("~/{}", skill_dir(client));
    let files = skill::FILES
        .iter()
        .map(|(file, path)| format!("-o {dir}/{file} {}", word(&format!("{url}{path}"))))
        .collect::<Vec<_>>()
        .join(" ");
    format!("curl -fsSL --create-dirs {files}")
}

/// Downloads the skill's files from the server at `url` (its base, no
/// trailing slash) into `dir` (replacing what is there), so the skill is the
/// one the server runs. Every file is downloaded before any is written: a
/// failed download leaves `dir` as it was.
fn install_skill(url: &str, dir: &Path) -> anyhow::Result<()> {
    let http = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let mut files = Vec::new();
    for (file, path) in skill::FILES {
        let from = format!("{url}{path}");
        let response = http
            .get(&from)
            .send()
            .with_context(|| format!("downloading the skill from {from}: is the server up?"))?;
        if !response.status().is_success() {
            bail!(
                "downloading the skill from {from}: the server answered {}; is this a psbx server \
                 of a version that serves its skill?",
                response.status()
            );
        }
        files.push((file, response.text()?));
    }
    for (file, text) in files {
        write_atomically(&dir.join(file), &text)?;
    }
    Ok(())
}

pub fn run(args: InstallArgs) -> anyhow::Result<()> {
    let given = args.url.filter(|u| !u.trim().is_empty()).ok_or_else(|| {
        anyhow::anyhow!("no server URL: pass --url https://your-psbx-server (or set PSBX_URL)")
    })?;
    let url = base_url(&given)?;
    if args.name.trim().is_empty() || args.name.contains(['.', '"', '\n']) {
        bail!("--name {:?} must be a plain name such as psbx", args.name);
    }
    let auth = args.auth.unwrap_or(match args.transport {
        Transport::Http => Auth::Oauth,
        Transport::Stdio => Auth::Key,
    });
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .context("HOME is not set: cannot tell where the client's configuration lives")?;
    let cwd = std::env::current_dir()?;
    let plan = plan(args.client, args.transport, auth, url, &home, &cwd)?;
    let skill_dir = home.join(skill_dir(args.client));
    if args.write {
        // The skill first: it fails when the server cannot be reached, before
        // any of the client's files changed.
        install_skill(url, &skill_dir)?;
        println!("installed the psbx skill in {}", skill_dir.display());
        write(args.client, &args.name, &plan)?;
        println!(
            "wrote the {} entry into {} (other entries kept)",
            args.name,
            plan.path.display()
        );
    } else if auth == Auth::Oauth {
        println!("# run this (or rerun psbx mcp install with --write):");
        println!("{}", connect_line(args.client, url, &args.name)?);
    } else {
        println!("# add to {} (or rerun with --write):", plan.path.display());
        print!("{}", snippet(args.client, &args.name, &plan.entry)?);
        println!("# and install the psbx skill:");
        println!("{}", skill_command(args.client, url));
    }
    for note in &plan.notes {
        println!("# {note}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://psbx.example.com/";

    fn p(client: Client, transport: Transport, auth: Auth) -> Plan {
        plan(
            client,
            transport,
            auth,
            URL,
            Path::new("/home/u"),
            Path::new("/repo"),
        )
        .unwrap()
    }

    #[test]
    fn http_with_a_key_references_the_variable_in_each_clients_syntax() {
        let claude = p(Client::Claude, Transport::Http, Auth::Key);
        assert_eq!(
            claude.entry,
            json!({"type": "http", "url": "https://psbx.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${PSBX_API_KEY}"}})
        );
        assert_eq!(claude.path, Path::new("/repo/.mcp.json"));

        let cursor = p(Client::Cursor, Transport::Http, Auth::Key);
        assert_eq!(
            cursor.entry,
            json!({"url": "https://psbx.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${env:PSBX_API_KEY}"}})
        );
        assert_eq!(cursor.path, Path::new("/home/u/.cursor/mcp.json"));

        let gemini = p(Client::Gemini, Transport::Http, Auth::Key);
        assert_eq!(
            gemini.entry,
            json!({"httpUrl": "https://psbx.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${PSBX_API_KEY}"}})
        );
        assert_eq!(gemini.path, Path::new("/home/u/.gemini/settings.json"));

        let codex = p(Client::Codex, Transport::Http, Auth::Key);
        let text = snippet(Client::Codex, "psbx", &codex.entry).unwrap();
        assert_eq!(
            text,
            "[mcp_servers.psbx]\nurl = \"https://psbx.example.com/mcp\"\n\
             bearer_token_env_var = \"PSBX_API_KEY\"\n"
        );
    }

    #[test]
    fn oauth_entries_carry_no_credentials_and_say_how_to_sign_in() {
        for client in [
            Client::Claude,
            Client::Codex,
            Client::Cursor,
            Client::Gemini,
        ] {
            let plan = p(client, Transport::Http, Auth::Oauth);
            let text = plan.entry.to_string();
            assert!(!text.contains("PSBX_API_KEY"), "{client:?}: {text}");
            assert!(!text.contains("headers"), "{client:?}: {text}");
            assert!(text.contains("https://psbx.example.com/mcp"), "{client:?}");
            assert!(!plan.notes.is_empty());
        }
        let codex = p(Client::Codex, Transport::Http, Auth::Oauth);
        assert!(
            codex
                .notes
                .iter()
                .any(|n| n.contains("codex mcp login psbx"))
        );
        assert!(
            plan(
                Client::Claude,
                Transport::Stdio,
                Auth::Oauth,
                URL,
                Path::new("/h"),
                Path::new("/r")
            )
            .is_err()
        );
    }

    #[test]
    fn stdio_runs_psbx_mcp_with_the_url_and_a_reference_to_the_key() {
        let claude = p(Client::Claude, Transport::Stdio, Auth::Key);
        assert_eq!(
            claude.entry,
            json!({"type": "stdio", "command": "psbx", "args": ["mcp"],
                   "env": {"PSBX_URL": "https://psbx.example.com", "PSBX_API_KEY": "${PSBX_API_KEY}"}})
        );
        let cursor = p(Client::Cursor, Transport::Stdio, Auth::Key);
        assert_eq!(cursor.entry["env"]["PSBX_API_KEY"], "${env:PSBX_API_KEY}");
        assert!(cursor.entry.get("type").is_none());
        let gemini = p(Client::Gemini, Transport::Stdio, Auth::Key);
        assert_eq!(gemini.entry["env"]["PSBX_API_KEY"], "${PSBX_API_KEY}");
        assert_eq!(gemini.entry["command"], "psbx");
        let codex = p(Client::Codex, Transport::Stdio, Auth::Key);
        assert_eq!(
            snippet(Client::Codex, "psbx", &codex.entry).unwrap(),
            "[mcp_servers.psbx]\ncommand = \"psbx\"\nargs = [\"mcp\"]\n\
             env = { PSBX_URL = \"https://psbx.example.com\" }\nenv_vars = [\"PSBX_API_KEY\"]\n"
        );
    }

    #[test]
    fn a_url_that_is_not_http_is_refused() {
        let err = plan(
            Client::Claude,
            Transport::Http,
            Auth::Key,
            "psbx.example.com",
            Path::new("/h"),
            Path::new("/r"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("not an http(s) URL"), "{err}");
    }

    #[test]
    fn write_merges_into_existing_files_without_losing_other_entries() {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        // JSON clients: another server and other settings stay.
        for client in [Client::Claude, Client::Cursor, Client::Gemini] {
            let plan = plan(
                client,
                Transport::Http,
                Auth::Key,
                URL,
                home.path(),
                cwd.path(),
            )
            .unwrap();
            std::fs::create_dir_all(plan.path.parent().unwrap()).unwrap();
            std::fs::write(
                &plan.path,
                r#"{"theme": "dark", "mcpServers": {"other": {"command": "x"}, "psbx": {"url": "old"}}}"#,
            )
            .unwrap();
            write(client, "psbx", &plan).unwrap();
            let written: Value =
                serde_json::from_str(&std::fs::read_to_string(&plan.path).unwrap()).unwrap();
            assert_eq!(written["theme"], "dark", "{client:?}");
            assert_eq!(written["mcpServers"]["other"], json!({"command": "x"}));
            assert_eq!(written["mcpServers"]["psbx"], plan.entry, "{client:?}");
            let leftovers: Vec<_> = std::fs::read_dir(plan.path.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .filter(|n| n.to_string_lossy().starts_with(".tmp"))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
        // A missing file is created, parent directories included.
        let fresh = tempfile::tempdir().unwrap();
        let plan_fresh = plan(
            Client::Gemini,
            Transport::Stdio,
            Auth::Key,
            URL,
            fresh.path(),
            cwd.path(),
        )
        .unwrap();
        write(Client::Gemini, "psbx", &plan_fresh).unwrap();
        assert!(plan_fresh.path.is_file());

        // Codex: TOML with comments and other tables kept.
        let codex = plan(
            Client::Codex,
            Transport::Http,
            Auth::Key,
            URL,
            home.path(),
            cwd.path(),
        )
        .unwrap();
        std::fs::create_dir_all(codex.path.parent().unwrap()).unwrap();
        std::fs::write(
            &codex.path,
            "# my settings\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n",
        )
        .unwrap();
        write(Client::Codex, "psbx", &codex).unwrap();
        let text = std::fs::read_to_string(&codex.path).unwrap();
        assert!(
            text.starts_with("# my settings\nmodel = \"o3\"\n"),
            "{text}"
        );
        assert!(
            text.contains("[mcp_servers.docs]\ncommand = \"docs-mcp\"\n"),
            "{text}"
        );
        assert!(text.contains("[mcp_servers.psbx]\nurl = \"https://psbx.example.com/mcp\"\nbearer_token_env_var = \"PSBX_API_KEY\"\n"), "{text}");
        let parsed: toml::Table = text.parse().unwrap();
        assert_eq!(
            parsed["mcp_servers"]["docs"]["command"].as_str(),
            Some("docs-mcp")
        );

        // A file that is not what it should be is left alone, with a reason.
        std::fs::write(&codex.path, "this is = = not toml").unwrap();
        let err = write(Client::Codex, "psbx", &codex).unwrap_err();
        assert!(format!("{err:#}").contains("not valid TOML"), "{err:#}");
        assert_eq!(
            std::fs::read_to_string(&codex.path).unwrap(),
            "this is = = not toml"
        );
    }
}

//! What `psbx serve` prints for the person who started it (stdout, not the log):
//! the URL it listens on and, on a first start, how to connect an AI first (one
//! line per client: the MCP server with OAuth sign-in, and the psbx skill; see
//! [`crate::commands::mcp`]'s `install`), then how to sign in, then the new API
//! key with a curl line. The key is printed here and nowhere else: it never
//! reaches the log.

use crate::commands::mcp::{Client, connect_line};
use psbx_actors::store::Bootstrap;

pub fn listening(url: &str) -> String {
    format!("psbx is listening on {url}")
}

/// The clients the first start shows a line for, with their names for people.
const CLIENTS: [(Client, &str, &str); 4] = [
    (Client::Claude, "Claude Code", "claude"),
    (Client::Codex, "Codex", "codex"),
    (Client::Cursor, "Cursor", "cursor"),
    (Client::Gemini, "Gemini CLI", "gemini"),
];

pub fn first_key(bootstrap: &Bootstrap, url: &str) -> String {
    let key = bootstrap.key.secret.expose();
    let account = &bootstrap.account.name;
    let mut lines = String::new();
    for (client, label, _) in CLIENTS {
        if let Ok(line) = connect_line(client, url, "psbx") {
            lines.push_str(&format!("  {label}:\n\n\x20   {line}\n\n"));
        }
    }
    format!(
        "\nConnect your AI: paste the line for your client into it (or run it in a terminal). \
         It adds psbx ({url}/mcp) with OAuth sign-in, so no key goes into any file, and installs \
         the psbx skill, the agent's guide to boxes:\n\n\
         {lines}\
         The client then opens psbx's sign-in page in your browser. Sign in as the account \
         {account:?}: give it a password first with `psbx account set-password`, or open a \
         one-time link from `psbx login-link`. The same name and password open the app, \
         {url}/app, where you answer reviews and keep secrets.\n\
         `psbx mcp install --client {names} --url {url} --write` does the same from this machine.\n\n\
         Created the account {account:?} and its first API key, for REST and scripts. It is \
         shown only this once:\n\n\
         \x20   {key}\n\n\
         Try it:\n\n\
         \x20   curl -H \"Authorization: Bearer {key}\" {url}/v1/api-keys\n\n\
         An MCP configuration with this key instead of OAuth: \
         `psbx mcp install --client claude --auth key --url {url}`. \
         More keys: `psbx keys create --name NAME`.\n",
        names = CLIENTS.map(|(_, _, name)| name).join("|"),
    )
}

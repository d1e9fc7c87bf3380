//! What `psbx serve` prints for the person who started it (stdout, not the log):
//! the URL it listens on and, on a first start, the new API key with a curl line
//! and an MCP client configuration to paste. The key is printed here and nowhere
//! else: it never reaches the log.

use psbx_actors::store::Bootstrap;

pub fn listening(url: &str) -> String {
    format!("psbx is listening on {url}")
}

pub fn first_key(bootstrap: &Bootstrap, url: &str) -> String {
    let key = bootstrap.key.secret.expose();
    let mcp = serde_json::json!({
        "mcpServers": {
            "psbx": {
                "type": "http",
                "url": format!("{url}/mcp"),
                "headers": { "Authorization": format!("Bearer {key}") }
            }
        }
    });
    format!(
        "\nCreated the account {account:?} and its first API key. It is shown only this once:\n\n\
         \x20   {key}\n\n\
         Try it:\n\n\
         \x20   curl -H \"Authorization: Bearer {key}\" {url}/v1/api-keys\n\n\
         MCP client configuration (for example Claude Code's .mcp.json):\n\n\
         {mcp}\n\n\
         More keys: `psbx keys create --name NAME`.\n",
        account = bootstrap.account.name,
        mcp = serde_json::to_string_pretty(&mcp).unwrap_or_default(),
    )
}

//! `psbx mcp`: a local MCP server on stdio that forwards every tool to a psbx
//! server and implements `sandbox_sync` itself (it can read the working tree;
//! the remote server cannot), and `psbx mcp install`, which prints or writes
//! the configuration of an MCP client for either transport.

mod install;
mod proxy;
mod remote;

use anyhow::anyhow;

pub use install::{Client, InstallArgs, connect_line};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: Option<McpCommand>,
    /// The psbx server to forward the tools to.
    #[arg(long, env = "PSBX_URL")]
    pub url: Option<String>,
    /// An API key of the account the tools act for.
    #[arg(long, env = "PSBX_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Print (or with --write, merge into the client's file) the configuration
    /// that connects an MCP client to psbx.
    Install(InstallArgs),
}

/// Runs the stdio server (no subcommand) or `install`.
pub fn run(args: McpArgs) -> anyhow::Result<()> {
    match args.command {
        Some(McpCommand::Install(install)) => install::run(install),
        None => {
            let url = args.url.filter(|u| !u.trim().is_empty()).ok_or_else(|| {
                anyhow!(
                    "PSBX_URL is not set: psbx mcp forwards the tools to a psbx server; set PSBX_URL \
                     (e.g. https://psbx.example.com) in the MCP client's configuration for this server, \
                     or pass --url"
                )
            })?;
            let key = args.key.filter(|k| !k.trim().is_empty()).ok_or_else(|| {
                anyhow!(
                    "PSBX_API_KEY is not set: psbx mcp calls the server with an API key; make one with \
                     `psbx keys create` (on the server) and set PSBX_API_KEY in the MCP client's \
                     configuration for this server"
                )
            })?;
            proxy::serve(url, key)
        }
    }
}

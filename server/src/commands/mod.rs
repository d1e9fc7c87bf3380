//! The `psbx` command line: one module per command group.

pub mod account;
pub mod boxes;
pub mod hosts;
pub mod keys;
pub mod mcp;
pub mod serve;
pub mod sync;

use crate::config::{Config, LogFormat, Overrides};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// psbx: self-hostable sandboxes for AI agents.
#[derive(Debug, Parser)]
#[command(name = "psbx", version, about)]
pub struct Cli {
    /// Configuration file (default: ./psbx.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where psbx keeps its state (default ./.psbx).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve {
        /// Address and port to listen on (default 127.0.0.1:8080; port 0 picks one).
        #[arg(long, value_name = "ADDR:PORT")]
        listen: Option<SocketAddr>,
        /// Serve HTTPS with a self-signed certificate kept under the data directory.
        #[arg(long)]
        tls_self_signed: bool,
        /// Log as `text` or `json` lines.
        #[arg(long)]
        log_format: Option<LogFormat>,
    },
    /// Show the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Manage how a person signs in to an account (for MCP clients' OAuth).
    #[command(subcommand)]
    Account(account::AccountCommand),
    /// Print a one-time link that signs a browser in to an account (15 minutes).
    LoginLink(account::LoginLinkArgs),
    /// Send a git working tree (or one commit) into a box.
    Sync(sync::SyncArgs),
    /// MCP on stdio for AI clients (forwarding to a psbx server), or `install`
    /// to configure a client.
    Mcp(mcp::McpArgs),
    /// Operators' view of boxes.
    #[command(subcommand)]
    Boxes(boxes::BoxesCommand),
    /// Operators' view of libvirt hosts and their nodes; draining a host.
    #[command(subcommand)]
    Hosts(hosts::HostsCommand),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration (every source applied), secrets redacted.
    Show,
    /// Print where this configuration keeps things, as `name=path` lines
    /// (data_dir, shared_dir, images_dir, boxes_dir, and shots_dir, or with
    /// storage.s3 the bucket and spool_dir).
    Paths,
}

/// Parses the command line and runs the command.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut overrides = Overrides {
        data_dir: cli.data_dir.clone(),
        ..Overrides::default()
    };
    let mut log_format = None;
    if let Command::Serve {
        listen,
        tls_self_signed,
        log_format: format,
    } = &cli.command
    {
        overrides.listen = *listen;
        overrides.tls_self_signed = *tls_self_signed;
        log_format = *format;
    }
    let config = Config::load(cli.config.as_deref(), &overrides)?;
    match cli.command {
        Command::Serve { .. } => {
            crate::logging::init(&config.log_level, log_format.unwrap_or(config.log_format));
            serve::run(config)
        }
        Command::Config(ConfigCommand::Show) => {
            print!("{}", config.redacted_toml()?);
            if config.database_url.is_none() {
                println!(
                    "# database: embedded PostgreSQL under {}",
                    config.shared_dir().join("pg").display()
                );
            }
            Ok(())
        }
        Command::Config(ConfigCommand::Paths) => {
            let boxes = config.boxes.settings(config.shared_dir())?;
            println!("data_dir={}", config.data_dir.display());
            println!("shared_dir={}", config.shared_dir().display());
            println!("images_dir={}", boxes.images_dir.display());
            println!("boxes_dir={}", boxes.boxes_dir.display());
            match config.storage.s3_settings()? {
                None => println!("shots_dir={}", config.shots_dir().display()),
                Some(s3) => {
                    println!("storage={}", s3.describe());
                    println!("spool_dir={}", config.spool_dir().display());
                }
            }
            Ok(())
        }
        Command::Keys(command) => {
            crate::logging::init("warn", config.log_format);
            keys::run(&config, command)
        }
        Command::Account(command) => {
            crate::logging::init("warn", config.log_format);
            account::run(&config, command)
        }
        Command::LoginLink(args) => {
            crate::logging::init("warn", config.log_format);
            account::login_link(&config, args)
        }
        Command::Sync(args) => {
            crate::logging::init("warn", config.log_format);
            sync::run(args)
        }
        Command::Mcp(args) => {
            // Stdout carries the protocol: logs go to stderr only.
            crate::logging::init("warn", config.log_format);
            mcp::run(args)
        }
        Command::Boxes(command) => {
            crate::logging::init("warn", config.log_format);
            boxes::run_boxes(&config, command)
        }
        Command::Hosts(command) => {
            crate::logging::init("warn", config.log_format);
            hosts::run(&config, command)
        }
    }
}

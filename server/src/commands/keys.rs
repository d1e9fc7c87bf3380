//! `psbx keys create|list|revoke`: manage API keys from the operator's shell,
//! straight on the database (the server need not run).

use crate::config::Config;
use crate::database::{Database, Opener};
use anyhow::{Context, bail};
use psbx_actors::ids::{AccountId, ApiKeyId};
use psbx_actors::store::{Account, Store};

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Make a new API key; its secret is printed this once.
    Create {
        /// What the key is for.
        #[arg(long, default_value = "cli")]
        name: String,
        /// The account (`acct_...`); the default account when omitted.
        #[arg(long)]
        account: Option<String>,
    },
    /// List the keys that work (never their secrets).
    List {
        #[arg(long)]
        account: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: it stops working at once.
    Revoke {
        /// The key's id, `key_...`.
        id: String,
        #[arg(long)]
        account: Option<String>,
    },
}

pub fn run(config: &Config, command: KeysCommand) -> anyhow::Result<()> {
    let database = Database::open(config, Opener::Command)?;
    let store = &database.store;
    match command {
        KeysCommand::Create { name, account } => {
            let account = resolve_account(store, account.as_deref())?;
            let made = store.create_api_key(&account.id, &name)?;
            println!("{}", made.secret.expose());
            eprintln!(
                "created {} ({:?}) for account {}; the key above is shown only this once",
                made.key.id, made.key.name, account.id
            );
        }
        KeysCommand::List { account, json } => {
            let account = resolve_account(store, account.as_deref())?;
            let mut after = None;
            if !json {
                println!("{:<26} {:<24} {:<26} LAST USED", "ID", "NAME", "CREATED");
            }
            loop {
                let page = store.list_api_keys(&account.id, after.as_ref(), 200)?;
                for key in &page.keys {
                    let created = key
                        .created_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                    let used = key
                        .last_used_at
                        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                    if json {
                        let line = serde_json::json!({
                            "id": key.id, "name": key.name,
                            "createdAt": created, "lastUsedAt": used,
                        });
                        println!("{line}");
                    } else {
                        let used = used.unwrap_or_else(|| "never".to_owned());
                        println!(
                            "{:<26} {:<24} {created:<26} {used}",
                            key.id.as_str(),
                            key.name
                        );
                    }
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        KeysCommand::Revoke { id, account } => {
            let account = resolve_account(store, account.as_deref())?;
            let id = ApiKeyId::parse(&id)?;
            if !store.revoke_api_key(&account.id, &id)? {
                bail!(
                    "account {} has no live key {id}: `psbx keys list` shows them",
                    account.id
                );
            }
            println!("revoked {id}");
        }
    }
    Ok(())
}

fn resolve_account(store: &Store, given: Option<&str>) -> anyhow::Result<Account> {
    match given {
        Some(id) => {
            let id = AccountId::parse(id)?;
            store
                .account(&id)?
                .with_context(|| format!("there is no account {id}"))
        }
        None => store
            .default_account()?
            .context("there is no account yet: start `psbx serve` once to create it"),
    }
}

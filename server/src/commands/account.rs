//! `psbx account set-password` and `psbx login-link`: the two ways a person
//! signs in on the OAuth authorize page, set up from the operator's shell
//! straight on the database (the server need not run).

use crate::config::Config;
use crate::database::{Database, Opener};
use anyhow::{Context, bail};
use psbx_actors::store::{Account, LOGIN_LINK_TTL, MIN_PASSWORD_LEN, Store};
use std::io::{BufRead, IsTerminal};

#[derive(Debug, clap::Subcommand)]
pub enum AccountCommand {
    /// Set the password that signs in to the account on the OAuth authorize page.
    /// Reads it from standard input (first line), or prompts on a terminal.
    SetPassword {
        /// The account's name or id (`acct_...`); may be left out when there
        /// is only one account.
        #[arg(long, value_name = "NAME_OR_ID")]
        account: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
pub struct LoginLinkArgs {
    /// The account's name or id (`acct_...`); may be left out when there is
    /// only one account.
    #[arg(long, value_name = "NAME_OR_ID")]
    pub account: Option<String>,
}

pub fn run(config: &Config, command: AccountCommand) -> anyhow::Result<()> {
    let database = Database::open(config, Opener::Command)?;
    let store = &database.store;
    match command {
        AccountCommand::SetPassword { account } => {
            let account = resolve(store, account.as_deref())?;
            let password = read_password(&account)?;
            store.set_password(&account.id, &password)?;
            eprintln!(
                "the password of account {} ({}) is set (browsers signed in to it are signed \
                 out): sign in with the name {:?} on the page your MCP client opens",
                account.id, account.name, account.name
            );
        }
    }
    Ok(())
}

/// `psbx login-link`: prints a one-time sign-in URL.
pub fn login_link(config: &Config, args: LoginLinkArgs) -> anyhow::Result<()> {
    let database = Database::open(config, Opener::Command)?;
    let store = &database.store;
    let account = resolve(store, args.account.as_deref())?;
    let token = store.create_login_link(&account.id)?;
    let url = config.public_url_for(config.listen);
    println!("{url}/oauth/login/{token}");
    eprintln!(
        "open this link in the browser where your MCP client's sign-in page is and press \
         \"Sign in\": it signs that browser in to account {} ({}); it works once, within {} \
         minutes",
        account.id,
        account.name,
        LOGIN_LINK_TTL.num_minutes()
    );
    Ok(())
}

/// The account a name or id means, or the only account.
fn resolve(store: &Store, given: Option<&str>) -> anyhow::Result<Account> {
    match given {
        Some(name_or_id) => {
            let mut found = store.accounts_named(name_or_id)?;
            match found.len() {
                0 => bail!("there is no account named {name_or_id:?}"),
                1 => Ok(found.remove(0)),
                n => bail!(
                    "{n} accounts are named {name_or_id:?}: give the account's id (acct_...) instead"
                ),
            }
        }
        None => store.only_account()?.context(
            "there is not exactly one account: say which with --account NAME_OR_ID \
             (or start `psbx serve` once to create the first)",
        ),
    }
}

fn read_password(account: &Account) -> anyhow::Result<String> {
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!(
            "new password for account {} (at least {MIN_PASSWORD_LEN} characters): ",
            account.name
        ))?;
        let again = rpassword::prompt_password("again: ")?;
        if first != again {
            bail!("the two passwords differ; nothing was changed");
        }
        return Ok(first);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() {
        bail!("no password on standard input");
    }
    Ok(password)
}

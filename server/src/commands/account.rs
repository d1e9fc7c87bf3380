//! `psbx account set-password` and `psbx login-link`: the two ways a person
//! signs in, on the OAuth authorize page and in the app (`<public url>/app`),
//! set up from the operator's shell straight on the database (the server need
//! not run).

use crate::config::Config;
use crate::database::{Database, Opener};
use anyhow::{Context, bail};
use psbx_actors::store::{Account, LOGIN_LINK_TTL, MIN_PASSWORD_LEN, Store};
use std::io::{BufRead, IsTerminal};

#[derive(Debug, clap::Subcommand)]
pub enum AccountCommand {
    /// Set the password that signs in to the account on the OAuth authorize page
    /// and in the app (`<public url>/app`).
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
            eprintln!("{}", password_set(&account, app_url(config).as_deref()));
        }
    }
    Ok(())
}

/// The app's address when this command can know it: `public_url`, or the
/// `listen` address when it names a port (`0` is picked at start, unknown here).
fn app_url(config: &Config) -> Option<String> {
    (config.public_url.is_some() || config.listen.port() != 0)
        .then(|| format!("{}/app", config.public_url_for(config.listen)))
}

/// What `set-password` says once the password is set: where the name and
/// password sign in (the app at `app_url`, or `/app` of the server when the
/// address is unknown; and the MCP client's sign-in page).
fn password_set(account: &Account, app_url: Option<&str>) -> String {
    let app = match app_url {
        Some(url) => format!("the app at {url}"),
        None => "the app (/app of the server)".to_owned(),
    };
    format!(
        "the password of account {} ({}) is set (browsers signed in to it are signed out): \
         sign in with the name {:?} and this password in {app}, and on the sign-in page \
         your MCP client opens",
        account.id, account.name, account.name
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> Account {
        Account {
            id: psbx_actors::ids::AccountId::parse("acct_abc123").unwrap(),
            name: "ada".to_owned(),
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn set_password_names_the_app_and_the_mcp_sign_in_page() {
        let said = password_set(&account(), Some("https://psbx.example.com/app"));
        assert!(
            said.contains("\"ada\"") && said.contains("in the app at https://psbx.example.com/app"),
            "{said}"
        );
        assert!(said.contains("your MCP client opens"), "{said}");
        let said = password_set(&account(), None);
        assert!(said.contains("/app of the server"), "{said}");
    }

    #[test]
    fn the_app_url_comes_from_the_configuration() {
        let mut config = Config::default();
        assert_eq!(
            app_url(&config).as_deref(),
            Some("http://127.0.0.1:8080/app")
        );
        config.listen = "127.0.0.1:0".parse().unwrap();
        assert_eq!(app_url(&config), None);
        config.public_url = Some("https://psbx.example.com/".to_owned());
        assert_eq!(
            app_url(&config).as_deref(),
            Some("https://psbx.example.com/app")
        );
    }
}

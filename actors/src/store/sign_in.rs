//! How a person signs in to an account in a browser (for the OAuth authorize
//! page): a password (argon2id, set with `psbx account set-password`), or a
//! one-time sign-in link (`psbx login-link`) that opens a browser session.
//! Links and sessions are random tokens stored as their SHA-256 only; a
//! session ends when it expires or when the account's password is set.
//!
//! A password check loads the hash, gives the database connection back, and
//! only then runs argon2 (tens of milliseconds and about 19 MiB each), at most
//! [`ARGON2_SLOTS`] at a time in this process: guessing cannot hold the pool.
//! Throttling failed sign-ins is the HTTP side's (it knows the caller's address).

use super::credentials::digest;
use super::schema::{accounts, login_links, web_sessions};
use super::{Account, Store, StoreError};
use crate::ids::{AccountId, random_token};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, password_hash};
use chrono::{Duration, Utc};
use diesel::prelude::*;
use std::sync::OnceLock;

pub use slots::{ARGON2_SLOTS, Argon2Slots};

/// How long a sign-in link works.
pub const LOGIN_LINK_TTL: Duration = Duration::minutes(15);
/// How long a browser stays signed in.
pub const SESSION_TTL: Duration = Duration::hours(12);
/// Shortest and longest password accepted.
pub const MIN_PASSWORD_LEN: usize = 8;
pub const MAX_PASSWORD_LEN: usize = 1024;

fn hash_password(password: &str) -> Result<String, StoreError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt)?;
    let salt = SaltString::encode_b64(&salt).map_err(password_error)?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(password_error)?
        .to_string())
}

fn password_error(e: password_hash::Error) -> StoreError {
    StoreError::Invalid(format!("cannot hash the password: {e}"))
}

fn password_matches(hash: &str, password: &str) -> bool {
    let _slot = Argon2Slots::global().take();
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// A hash no password is checked against for real, made once.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("psbx decoy password").unwrap_or_default())
}

impl Store {
    /// The accounts a person may mean by `name_or_id`: the account with that id,
    /// or every account with that name.
    pub fn accounts_named(&self, name_or_id: &str) -> Result<Vec<Account>, StoreError> {
        let mut conn = self.conn()?;
        if let Ok(id) = AccountId::parse(name_or_id) {
            let found = accounts::table
                .find(id.as_str())
                .select(Account::as_select())
                .first(&mut conn)
                .optional()?;
            if let Some(row) = found {
                return Ok(vec![row]);
            }
        }
        Ok(accounts::table
            .filter(accounts::name.eq(name_or_id))
            .order((accounts::created_at, accounts::id))
            .select(Account::as_select())
            .load(&mut conn)?
            .into_iter()
            .collect())
    }

    /// The one account, when there is exactly one.
    pub fn only_account(&self) -> Result<Option<Account>, StoreError> {
        let rows: Vec<Account> = accounts::table
            .select(Account::as_select())
            .limit(2)
            .load(&mut self.conn()?)?;
        Ok(match <[Account; 1]>::try_from(rows) {
            Ok([row]) => Some(row),
            Err(_) => None,
        })
    }

    /// Sets (or replaces) the account's password; only its argon2id hash is kept.
    pub fn set_password(&self, account: &AccountId, password: &str) -> Result<(), StoreError> {
        let length = password.chars().count();
        if !(MIN_PASSWORD_LEN..=MAX_PASSWORD_LEN).contains(&length) {
            return Err(StoreError::Invalid(format!(
                "a password must have {MIN_PASSWORD_LEN} to {MAX_PASSWORD_LEN} characters"
            )));
        }
        let hash = {
            let _slot = Argon2Slots::global().take();
            hash_password(password)?
        };
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let changed = diesel::update(accounts::table.find(account.as_str()))
                .set(accounts::password_hash.eq(Some(hash)))
                .execute(conn)?;
            if changed == 0 {
                return Err(StoreError::Invalid(format!(
                    "there is no account {account}"
                )));
            }
            // A new password signs every browser out.
            diesel::delete(web_sessions::table.filter(web_sessions::account_id.eq(account)))
                .execute(conn)?;
            Ok(())
        })
    }

    /// The account `name_or_id` names whose password is `password`, if any.
    pub fn check_password(
        &self,
        name_or_id: &str,
        password: &str,
    ) -> Result<Option<Account>, StoreError> {
        // The connection goes back to the pool before argon2 runs.
        let candidates: Vec<(Account, Option<String>)> = accounts::table
            .filter(
                accounts::name
                    .eq(name_or_id)
                    .or(accounts::id.eq(name_or_id)),
            )
            .select((Account::as_select(), accounts::password_hash))
            .load(&mut self.conn()?)?;
        if candidates.iter().all(|(_, hash)| hash.is_none()) {
            // As slow as a real check: the answer's timing does not tell which
            // account names exist or have a password.
            let _ = password_matches(decoy_hash(), password);
            return Ok(None);
        }
        Ok(candidates
            .into_iter()
            .find(|(_, hash)| {
                hash.as_deref()
                    .is_some_and(|h| password_matches(h, password))
            })
            .map(|(row, _)| row))
    }

    /// A one-time sign-in link's token for the account (shown once, stored hashed).
    pub fn create_login_link(&self, account: &AccountId) -> Result<String, StoreError> {
        let token = random_token(40)?;
        diesel::insert_into(login_links::table)
            .values((
                login_links::token_sha256.eq(&digest(&token)[..]),
                login_links::account_id.eq(account.as_str()),
                login_links::expires_at.eq(Utc::now() + LOGIN_LINK_TTL),
            ))
            .execute(&mut self.conn()?)?;
        Ok(token)
    }

    /// The account a sign-in link would sign in to, if it is unknown, unused
    /// and unexpired; the link stays usable (the confirmation page asks first).
    pub fn login_link_account(&self, token: &str) -> Result<Option<Account>, StoreError> {
        Ok(login_links::table
            .inner_join(accounts::table.on(accounts::id.eq(login_links::account_id)))
            .filter(login_links::token_sha256.eq(&digest(token)[..]))
            .filter(login_links::used_at.is_null())
            .filter(login_links::expires_at.gt(diesel::dsl::now))
            .select(Account::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// Uses a sign-in link (once, before it expires): opens a browser session for
    /// its account and returns the session's token. `None` for a link that is
    /// unknown, used or expired.
    pub fn use_login_link(&self, token: &str) -> Result<Option<(AccountId, String)>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let account: Option<AccountId> = diesel::update(
                login_links::table
                    .filter(login_links::token_sha256.eq(&digest(token)[..]))
                    .filter(login_links::used_at.is_null())
                    .filter(login_links::expires_at.gt(diesel::dsl::now)),
            )
            .set(login_links::used_at.eq(diesel::dsl::now))
            .returning(login_links::account_id)
            .get_result(conn)
            .optional()?;
            let Some(account) = account else {
                return Ok(None);
            };
            let session = insert_session(conn, &account)?;
            Ok(Some((account, session)))
        })
    }

    /// Opens a browser session for an account whose password was just
    /// checked; returns the session's token (shown once, stored hashed).
    pub fn open_session(&self, account: &AccountId) -> Result<String, StoreError> {
        let mut conn = self.conn()?;
        insert_session(&mut conn, account)
    }

    /// Ends a browser session (signing out); an unknown token is no error.
    pub fn end_session(&self, token: &str) -> Result<(), StoreError> {
        diesel::delete(
            web_sessions::table.filter(web_sessions::token_sha256.eq(&digest(token)[..])),
        )
        .execute(&mut self.conn()?)?;
        Ok(())
    }

    /// The account a browser session is signed in to, while it lasts.
    pub fn session_account(&self, token: &str) -> Result<Option<Account>, StoreError> {
        Ok(web_sessions::table
            .inner_join(accounts::table)
            .filter(web_sessions::token_sha256.eq(&digest(token)[..]))
            .filter(web_sessions::expires_at.gt(diesel::dsl::now))
            .select(Account::as_select())
            .first(&mut self.conn()?)
            .optional()?)
    }
}

/// A new session row for `account`, lasting [`SESSION_TTL`]; its token.
fn insert_session(conn: &mut PgConnection, account: &AccountId) -> Result<String, StoreError> {
    let session = random_token(40)?;
    diesel::insert_into(web_sessions::table)
        .values((
            web_sessions::token_sha256.eq(&digest(&session)[..]),
            web_sessions::account_id.eq(account),
            web_sessions::expires_at.eq(Utc::now() + SESSION_TTL),
        ))
        .execute(conn)?;
    Ok(session)
}

/// A counting semaphore around argon2: a burst of sign-ins waits its turn
/// instead of taking every core and a few MiB each.
mod slots {
    use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

    /// How many argon2 computations run at once in this process.
    pub const ARGON2_SLOTS: usize = 4;

    /// The slots, and how many callers wait for one.
    pub struct Argon2Slots {
        state: Mutex<State>,
        freed: Condvar,
    }

    #[derive(Default)]
    struct State {
        taken: usize,
        waiting: usize,
    }

    /// A slot, given back when dropped.
    pub struct Slot<'a>(&'a Argon2Slots);

    impl Argon2Slots {
        /// The process's slots.
        pub fn global() -> &'static Self {
            static SLOTS: OnceLock<Argon2Slots> = OnceLock::new();
            SLOTS.get_or_init(|| Self {
                state: Mutex::new(State::default()),
                freed: Condvar::new(),
            })
        }

        fn lock(&self) -> MutexGuard<'_, State> {
            // The state is two counters, right after any panic: keep using it.
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// Waits for a free slot.
        pub fn take(&self) -> Slot<'_> {
            let mut state = self.lock();
            state.waiting += 1;
            while state.taken >= ARGON2_SLOTS {
                state = self
                    .freed
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            state.waiting -= 1;
            state.taken += 1;
            Slot(self)
        }

        /// How many callers wait for a slot now (for tests and diagnostics).
        pub fn waiting(&self) -> usize {
            self.lock().waiting
        }
    }

    impl Drop for Slot<'_> {
        fn drop(&mut self) {
            self.0.lock().taken -= 1;
            self.0.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_with_argon2id_and_verify() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(password_matches(&hash, "correct horse"));
        assert!(!password_matches(&hash, "correct horsf"));
        assert!(!password_matches("not a hash", "correct horse"));
    }
}

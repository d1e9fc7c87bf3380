//! OAuth 2.1 for MCP clients: registered clients (RFC 7591), authorization
//! codes (one use, ten minutes, bound to client, redirect URI, PKCE challenge,
//! resource and account), grants (one authorization: the family of its tokens),
//! one-hour access tokens and rotating refresh tokens, and revocation.
//!
//! Codes and tokens are random strings handed out once and stored as their
//! SHA-256 only. The HTTP side checks the protocol's shapes; the checks that
//! need the stored values (and the one-use rules) are made here, in one
//! transaction each.

use super::credentials::{Credential, OAUTH_TOKEN_PREFIX, Principal, digest};
use super::schema::{oauth_clients, oauth_codes, oauth_grants, oauth_tokens};
use super::{Store, StoreError};
use crate::ids::{AccountId, OAuthClientId, random_token};
use chrono::{DateTime, Duration, Utc};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use std::fmt;

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_clients, check_for_backend(diesel::pg::Pg))]
struct OAuthClientRow {
    id: OAuthClientId,
    name: Option<String>,
    redirect_uris: Vec<String>,
    created_at: DateTime<Utc>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_codes, check_for_backend(diesel::pg::Pg))]
struct OAuthCodeRow {
    account_id: String,
    client_id: String,
    redirect_uri: String,
    code_challenge: String,
    resource: String,
    scope: String,
    expires_at: DateTime<Utc>,
    used_at: Option<DateTime<Utc>>,
    grant_id: Option<String>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_grants, check_for_backend(diesel::pg::Pg))]
struct OAuthGrantRow {
    id: String,
    client_id: String,
    resource: String,
    scope: String,
    revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_tokens, check_for_backend(diesel::pg::Pg))]
struct OAuthTokenRow {
    grant_id: String,
    kind: String,
    expires_at: DateTime<Utc>,
    used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

/// How long an access token works.
pub const ACCESS_TOKEN_TTL: Duration = Duration::hours(1);
/// How long an unused refresh token works.
pub const REFRESH_TOKEN_TTL: Duration = Duration::days(30);
/// How long an authorization code may wait for its exchange.
pub const CODE_TTL: Duration = Duration::minutes(10);
const REFRESH_PREFIX: &str = "psbx_rt_";
const CODE_PREFIX: &str = "psbx_ac_";

/// A client registered with `POST /oauth/register`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub id: OAuthClientId,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
    pub created_at: DateTime<Utc>,
}

impl From<OAuthClientRow> for OAuthClient {
    fn from(row: OAuthClientRow) -> Self {
        Self {
            id: row.id,
            name: row.name,
            redirect_uris: row.redirect_uris,
            created_at: row.created_at,
        }
    }
}

/// What an approved authorization request binds its code to.
#[derive(Debug, Clone, Copy)]
pub struct NewCode<'a> {
    pub account: &'a AccountId,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    /// The PKCE S256 challenge the client sent.
    pub code_challenge: &'a str,
    pub resource: &'a str,
    pub scope: &'a str,
}

/// An authorization code presented at the token endpoint, with what must match.
#[derive(Debug, Clone, Copy)]
pub struct CodeExchange<'a> {
    pub code: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    /// The S256 challenge computed from the presented `code_verifier`.
    pub challenge_of_verifier: &'a str,
    /// The `resource` parameter, if the client sent one.
    pub resource: Option<&'a str>,
}

/// Tokens just issued; shown to the client this once. `Debug` hides them.
pub struct IssuedTokens {
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in: i64,
    pub scope: String,
}

impl fmt::Debug for IssuedTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedTokens")
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Why a code or refresh token was refused (`invalid_grant`), for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

fn refused<T>(message: &str) -> Result<Result<T, Refused>, StoreError> {
    Ok(Err(Refused(message.to_owned())))
}

/// Revokes a grant and every token issued under it.
fn revoke_grant(conn: &mut PgConnection, grant: &str) -> Result<(), StoreError> {
    diesel::update(
        oauth_grants::table
            .filter(oauth_grants::id.eq(grant))
            .filter(oauth_grants::revoked_at.is_null()),
    )
    .set(oauth_grants::revoked_at.eq(diesel::dsl::now))
    .execute(conn)?;
    diesel::update(
        oauth_tokens::table
            .filter(oauth_tokens::grant_id.eq(grant))
            .filter(oauth_tokens::revoked_at.is_null()),
    )
    .set(oauth_tokens::revoked_at.eq(diesel::dsl::now))
    .execute(conn)?;
    Ok(())
}

/// A new access token and refresh token under the grant.
fn issue(conn: &mut PgConnection, grant: &OAuthGrantRow) -> Result<IssuedTokens, StoreError> {
    let access_token = format!("{OAUTH_TOKEN_PREFIX}{}", random_token(40)?);
    let refresh_token = format!("{REFRESH_PREFIX}{}", random_token(40)?);
    let now = Utc::now();
    diesel::insert_into(oauth_tokens::table)
        .values(vec![
            (
                oauth_tokens::token_sha256.eq(digest(&access_token).to_vec()),
                oauth_tokens::grant_id.eq(&grant.id),
                oauth_tokens::kind.eq("access"),
                oauth_tokens::expires_at.eq(now + ACCESS_TOKEN_TTL),
            ),
            (
                oauth_tokens::token_sha256.eq(digest(&refresh_token).to_vec()),
                oauth_tokens::grant_id.eq(&grant.id),
                oauth_tokens::kind.eq("refresh"),
                oauth_tokens::expires_at.eq(now + REFRESH_TOKEN_TTL),
            ),
        ])
        .execute(conn)?;
    Ok(IssuedTokens {
        access_token,
        refresh_token,
        expires_in: ACCESS_TOKEN_TTL.num_seconds(),
        scope: grant.scope.clone(),
    })
}

impl Store {
    /// Registers a client (RFC 7591); its redirect URIs were checked by the caller.
    pub fn register_oauth_client(
        &self,
        name: Option<&str>,
        redirect_uris: &[String],
    ) -> Result<OAuthClient, StoreError> {
        let id = format!("client_{}", random_token(24)?);
        Ok(diesel::insert_into(oauth_clients::table)
            .values((
                oauth_clients::id.eq(&id),
                oauth_clients::name.eq(name),
                oauth_clients::redirect_uris.eq(redirect_uris),
            ))
            .returning(OAuthClientRow::as_returning())
            .get_result(&mut self.conn()?)?
            .into())
    }

    /// Deletes the registered clients older than `age` that no account ever
    /// authorized (no grant); returns how many. Registration is open, so
    /// clients nobody uses must not pile up.
    pub fn expire_unused_oauth_clients(&self, age: Duration) -> Result<usize, StoreError> {
        let used = oauth_grants::table.filter(oauth_grants::client_id.eq(oauth_clients::id));
        Ok(diesel::delete(
            oauth_clients::table
                .filter(oauth_clients::created_at.lt(Utc::now() - age))
                .filter(diesel::dsl::not(diesel::dsl::exists(used))),
        )
        .execute(&mut self.conn()?)?)
    }

    pub fn oauth_client(&self, id: &str) -> Result<Option<OAuthClient>, StoreError> {
        Ok(oauth_clients::table
            .find(id)
            .select(OAuthClientRow::as_select())
            .first(&mut self.conn()?)
            .optional()?
            .map(OAuthClient::from))
    }

    /// Makes the authorization code for an approved request; returns it (once).
    pub fn create_oauth_code(&self, new: NewCode<'_>) -> Result<String, StoreError> {
        let code = format!("{CODE_PREFIX}{}", random_token(40)?);
        diesel::insert_into(oauth_codes::table)
            .values((
                oauth_codes::code_sha256.eq(digest(&code).to_vec()),
                oauth_codes::account_id.eq(new.account.as_str()),
                oauth_codes::client_id.eq(new.client_id),
                oauth_codes::redirect_uri.eq(new.redirect_uri),
                oauth_codes::code_challenge.eq(new.code_challenge),
                oauth_codes::resource.eq(new.resource),
                oauth_codes::scope.eq(new.scope),
                oauth_codes::expires_at.eq(Utc::now() + CODE_TTL),
            ))
            .execute(&mut self.conn()?)?;
        Ok(code)
    }

    /// Exchanges an authorization code for tokens. The code is spent by any
    /// attempt; presenting it again revokes the tokens issued from it.
    pub fn exchange_oauth_code(
        &self,
        ask: CodeExchange<'_>,
    ) -> Result<Result<IssuedTokens, Refused>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let hash = digest(ask.code).to_vec();
            let code: Option<OAuthCodeRow> = oauth_codes::table
                .find(&hash)
                .for_update()
                .select(OAuthCodeRow::as_select())
                .first(conn)
                .optional()?;
            let Some(code) = code else {
                return refused("the authorization code is not valid");
            };
            if code.used_at.is_some() {
                if let Some(grant) = &code.grant_id {
                    revoke_grant(conn, grant)?;
                }
                return refused(
                    "the authorization code was already used; the tokens issued from it are revoked",
                );
            }
            diesel::update(oauth_codes::table.find(&hash))
                .set(oauth_codes::used_at.eq(diesel::dsl::now))
                .execute(conn)?;
            if code.expires_at <= Utc::now() {
                return refused("the authorization code has expired");
            }
            if code.client_id != ask.client_id {
                return refused("the authorization code was issued to another client");
            }
            if code.redirect_uri != ask.redirect_uri {
                return refused("redirect_uri differs from the one in the authorization request");
            }
            if code.code_challenge != ask.challenge_of_verifier {
                return refused("code_verifier does not match the code_challenge (PKCE S256)");
            }
            if ask.resource.is_some_and(|r| r != code.resource) {
                return refused("resource differs from the one in the authorization request");
            }
            let grant = diesel::insert_into(oauth_grants::table)
                .values((
                    oauth_grants::id.eq(format!("grant_{}", random_token(20)?)),
                    oauth_grants::account_id.eq(&code.account_id),
                    oauth_grants::client_id.eq(&code.client_id),
                    oauth_grants::resource.eq(&code.resource),
                    oauth_grants::scope.eq(&code.scope),
                ))
                .returning(OAuthGrantRow::as_returning())
                .get_result(conn)?;
            diesel::update(oauth_codes::table.find(&hash))
                .set(oauth_codes::grant_id.eq(&grant.id))
                .execute(conn)?;
            Ok(Ok(issue(conn, &grant)?))
        })
    }

    /// Rotates a refresh token: a new access and refresh token; the presented one
    /// stops working. Presenting a used one revokes its whole grant.
    pub fn refresh_oauth_token(
        &self,
        presented: &str,
        client_id: &str,
        resource: Option<&str>,
    ) -> Result<Result<IssuedTokens, Refused>, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let hash = digest(presented).to_vec();
            let token: Option<OAuthTokenRow> = oauth_tokens::table
                .find(&hash)
                .filter(oauth_tokens::kind.eq("refresh"))
                .for_update()
                .select(OAuthTokenRow::as_select())
                .first(conn)
                .optional()?;
            let Some(token) = token else {
                return refused("the refresh token is not valid");
            };
            let grant: OAuthGrantRow = oauth_grants::table
                .find(&token.grant_id)
                .select(OAuthGrantRow::as_select())
                .first(conn)?;
            if grant.client_id != client_id {
                return refused("the refresh token was issued to another client");
            }
            if token.revoked_at.is_some() || grant.revoked_at.is_some() {
                return refused("the refresh token was revoked");
            }
            if token.used_at.is_some() {
                revoke_grant(conn, &grant.id)?;
                return refused(
                    "the refresh token was already used; every token of this authorization is revoked",
                );
            }
            if token.expires_at <= Utc::now() {
                return refused("the refresh token has expired");
            }
            if resource.is_some_and(|r| r != grant.resource) {
                return refused("resource differs from the one the refresh token was issued for");
            }
            diesel::update(oauth_tokens::table.find(&hash))
                .set(oauth_tokens::used_at.eq(diesel::dsl::now))
                .execute(conn)?;
            Ok(Ok(issue(conn, &grant)?))
        })
    }

    /// Revokes an access token, or a refresh token with its whole grant
    /// (RFC 7009). A token of another client, or an unknown one, is left alone;
    /// returns whether something was revoked.
    pub fn revoke_oauth_token(
        &self,
        presented: &str,
        client_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn()?;
        conn.transaction(|conn| {
            let hash = digest(presented).to_vec();
            let found: Option<(OAuthTokenRow, OAuthGrantRow)> = oauth_tokens::table
                .inner_join(oauth_grants::table)
                .filter(oauth_tokens::token_sha256.eq(&hash))
                .select((OAuthTokenRow::as_select(), OAuthGrantRow::as_select()))
                .first(conn)
                .optional()?;
            let Some((token, grant)) = found else {
                return Ok(false);
            };
            if client_id.is_some_and(|c| c != grant.client_id) {
                return Ok(false);
            }
            if token.kind == "refresh" {
                revoke_grant(conn, &grant.id)?;
            } else {
                diesel::update(oauth_tokens::table.find(&hash))
                    .set(oauth_tokens::revoked_at.eq(diesel::dsl::now))
                    .execute(conn)?;
            }
            Ok(true)
        })
    }

    /// Recognises an access token issued for one of `resources` that has
    /// neither expired nor been revoked; `None` otherwise.
    pub fn authenticate_oauth(
        &self,
        presented: &str,
        resources: &[String],
    ) -> Result<Option<Principal>, StoreError> {
        if !presented.starts_with(OAUTH_TOKEN_PREFIX) {
            return Ok(None);
        }
        let found: Option<(String, AccountId, String)> = oauth_tokens::table
            .inner_join(oauth_grants::table)
            .filter(oauth_tokens::token_sha256.eq(digest(presented).to_vec()))
            .filter(oauth_tokens::kind.eq("access"))
            .filter(oauth_tokens::revoked_at.is_null())
            .filter(oauth_tokens::expires_at.gt(diesel::dsl::now))
            .filter(oauth_grants::revoked_at.is_null())
            .filter(oauth_grants::resource.eq_any(resources))
            .select((
                oauth_grants::id,
                oauth_grants::account_id,
                oauth_grants::client_id,
            ))
            .first(&mut self.conn()?)
            .optional()?;
        Ok(found.map(|(grant_id, account_id, client_id)| Principal {
            account_id,
            credential: Credential::OAuth {
                grant_id,
                client_id,
            },
        }))
    }
}

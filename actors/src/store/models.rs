//! Rows as diesel reads and writes them. These are the database layer only:
//! the rest of the code gets the domain types built from them in the query modules.

use super::schema::{
    accounts, api_keys, oauth_clients, oauth_codes, oauth_grants, oauth_tokens, servers,
};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = accounts, check_for_backend(diesel::pg::Pg))]
pub struct AccountRow {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = api_keys, check_for_backend(diesel::pg::Pg))]
pub struct ApiKeyRow {
    pub id: String,
    pub account_id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = api_keys)]
pub struct NewApiKeyRow<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    pub name: &'a str,
    pub key_sha256: &'a [u8],
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = servers, check_for_backend(diesel::pg::Pg))]
pub struct ServerRow {
    pub id: String,
    pub hostname: String,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_clients, check_for_backend(diesel::pg::Pg))]
pub struct OAuthClientRow {
    pub id: String,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_codes, check_for_backend(diesel::pg::Pg))]
pub struct OAuthCodeRow {
    pub account_id: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    pub scope: String,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub grant_id: Option<String>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_grants, check_for_backend(diesel::pg::Pg))]
pub struct OAuthGrantRow {
    pub id: String,
    pub client_id: String,
    pub resource: String,
    pub scope: String,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = oauth_tokens, check_for_backend(diesel::pg::Pg))]
pub struct OAuthTokenRow {
    pub grant_id: String,
    pub kind: String,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

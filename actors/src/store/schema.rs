//! diesel's view of the tables created by `migrations/sql` (kept by hand in step
//! with them; the store tests run every query against the migrated schema).

diesel::table! {
    accounts (id) {
        id -> Text,
        name -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    api_keys (id) {
        id -> Text,
        account_id -> Text,
        name -> Text,
        key_sha256 -> Bytea,
        created_at -> Timestamptz,
        last_used_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    servers (id) {
        id -> Text,
        hostname -> Text,
        version -> Text,
        started_at -> Timestamptz,
        heartbeat_at -> Timestamptz,
        stopped_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(api_keys -> accounts (account_id));
diesel::allow_tables_to_appear_in_same_query!(accounts, api_keys, servers);

//! diesel's view of the tables created by `migrations/sql` (kept by hand in step
//! with them; the store tests run every query against the migrated schema).

diesel::table! {
    accounts (id) {
        id -> Text,
        name -> Text,
        created_at -> Timestamptz,
        password_hash -> Nullable<Text>,
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
        advertise -> Nullable<Text>,
    }
}

diesel::table! {
    hosts (name) {
        uri -> Text,
        server_id -> Nullable<Text>,
        accel -> Text,
        cpus -> Int4,
        memory_mib -> Int8,
        updated_at -> Timestamptz,
        name -> Text,
        owner -> Text,
        lease_epoch -> Int8,
        lease_expires_at -> Nullable<Timestamptz>,
        holder_key -> Nullable<Text>,
        draining -> Bool,
        free_cpus -> Float8,
        free_memory_mib -> Int8,
        pool -> Jsonb,
    }
}

diesel::table! {
    boxes (id) {
        id -> Text,
        account_id -> Nullable<Text>,
        host -> Text,
        state -> Text,
        failure -> Nullable<Text>,
        name -> Nullable<Text>,
        goal -> Nullable<Text>,
        image -> Text,
        size -> Int4,
        vcpus -> Int4,
        memory_mib -> Int8,
        disk_gb -> Int8,
        keep_secs -> Int8,
        spec -> Jsonb,
        boot_id -> Nullable<Text>,
        created_at -> Timestamptz,
        ready_at -> Nullable<Timestamptz>,
        last_activity_at -> Timestamptz,
        frozen_at -> Nullable<Timestamptz>,
        stopped_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    meta (key) {
        key -> Text,
        value -> Text,
    }
}

diesel::table! {
    secrets (account_id, name) {
        account_id -> Text,
        name -> Text,
        nonce -> Bytea,
        ciphertext -> Bytea,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    login_links (token_sha256) {
        token_sha256 -> Bytea,
        account_id -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    web_sessions (token_sha256) {
        token_sha256 -> Bytea,
        account_id -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
    }
}

diesel::table! {
    oauth_clients (id) {
        id -> Text,
        name -> Nullable<Text>,
        redirect_uris -> Array<Text>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    oauth_grants (id) {
        id -> Text,
        account_id -> Text,
        client_id -> Text,
        resource -> Text,
        scope -> Text,
        created_at -> Timestamptz,
        revoked_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    oauth_codes (code_sha256) {
        code_sha256 -> Bytea,
        account_id -> Text,
        client_id -> Text,
        redirect_uri -> Text,
        code_challenge -> Text,
        resource -> Text,
        scope -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
        grant_id -> Nullable<Text>,
    }
}

diesel::table! {
    oauth_tokens (token_sha256) {
        token_sha256 -> Bytea,
        grant_id -> Text,
        kind -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    environments (id) {
        id -> Text,
        account_id -> Text,
        name -> Text,
        external_base_url -> Nullable<Text>,
        aws_role_arn -> Nullable<Text>,
        aws_region -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    connections (id) {
        id -> Text,
        environment_id -> Text,
        name -> Text,
        token_sha256 -> Bytea,
        endpoints -> Jsonb,
        created_at -> Timestamptz,
        token_rotated_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    environment_services (environment_id, name) {
        environment_id -> Text,
        name -> Text,
        variable_names -> Jsonb,
        nonce -> Bytea,
        ciphertext -> Bytea,
        source -> Text,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        source_ref -> Nullable<Jsonb>,
    }
}

diesel::table! {
    uploads (token_sha256) {
        token_sha256 -> Bytea,
        account_id -> Text,
        box_id -> Text,
        dest -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(api_keys -> accounts (account_id));
diesel::joinable!(connections -> environments (environment_id));
diesel::joinable!(environment_services -> environments (environment_id));
diesel::joinable!(oauth_tokens -> oauth_grants (grant_id));
diesel::joinable!(web_sessions -> accounts (account_id));
diesel::allow_tables_to_appear_in_same_query!(
    accounts,
    api_keys,
    servers,
    hosts,
    boxes,
    meta,
    secrets,
    login_links,
    web_sessions,
    oauth_clients,
    oauth_grants,
    oauth_codes,
    oauth_tokens,
    environments,
    connections,
    environment_services,
    uploads,
    connector_sessions,
    box_egress,
    box_access,
    account_aws
);

diesel::table! {
    connector_sessions (id) {
        id -> Text,
        connection_id -> Text,
        server_id -> Text,
        connector_version -> Text,
        connected_at -> Timestamptz,
        last_seen_at -> Timestamptz,
        rtt_ms -> Nullable<Float8>,
        draining -> Bool,
    }
}

diesel::joinable!(connector_sessions -> connections (connection_id));

diesel::table! {
    box_egress (box_id) {
        box_id -> Text,
        bytes -> Int8,
        updated_at -> Timestamptz,
        internet_bytes -> Int8,
        internet_counted -> Int8,
    }
}

diesel::joinable!(box_egress -> boxes (box_id));

diesel::table! {
    takeover_links (token_hash) {
        token_hash -> Text,
        account_id -> Text,
        box_id -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(takeover_links -> accounts (account_id));

diesel::table! {
    box_access (account_id) {
        account_id -> Text,
        entries -> Array<Text>,
        updated_at -> Timestamptz,
    }
}

diesel::joinable!(box_access -> accounts (account_id));

diesel::table! {
    reviews (id) {
        id -> Text,
        account_id -> Text,
        box_id -> Text,
        title -> Text,
        summary -> Text,
        urls -> Array<Text>,
        state -> Text,
        created_at -> Timestamptz,
        answered_at -> Nullable<Timestamptz>,
        answered_by -> Nullable<Text>,
    }
}

diesel::table! {
    shots (id) {
        id -> Text,
        account_id -> Text,
        box_id -> Text,
        kind -> Text,
        mime -> Text,
        width -> Int4,
        height -> Int4,
        duration_ms -> Nullable<Int8>,
        bytes -> Int8,
        preview_bytes -> Int8,
        poster_bytes -> Int8,
        source -> Nullable<Text>,
        review_id -> Nullable<Text>,
        storage_key -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    review_items (id) {
        id -> Text,
        review_id -> Text,
        account_id -> Text,
        position -> Int4,
        text -> Text,
        shot_id -> Nullable<Text>,
        created_at -> Timestamptz,
    }
}

diesel::joinable!(reviews -> accounts (account_id));
diesel::joinable!(shots -> accounts (account_id));
diesel::joinable!(review_items -> reviews (review_id));
diesel::allow_tables_to_appear_in_same_query!(reviews, shots, review_items);
diesel::allow_tables_to_appear_in_same_query!(boxes, shots);

diesel::table! {
    box_url_keys (box_id) {
        box_id -> Text,
        key_hash -> Bytea,
        key_sealed -> Bytea,
        created_at -> Timestamptz,
    }
}

diesel::joinable!(box_url_keys -> boxes (box_id));
diesel::allow_tables_to_appear_in_same_query!(boxes, box_url_keys);

diesel::table! {
    oidc_keys (kid) {
        kid -> Text,
        public_jwk -> Jsonb,
        nonce -> Bytea,
        sealed_key -> Bytea,
        created_at -> Timestamptz,
        retired_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    account_aws (account_id) {
        account_id -> Text,
        role_arn -> Text,
        region -> Text,
        connected_at -> Timestamptz,
    }
}

diesel::table! {
    box_disk_keys (box_id) {
        box_id -> Text,
        key_sealed -> Bytea,
        created_at -> Timestamptz,
    }
}

diesel::joinable!(box_disk_keys -> boxes (box_id));

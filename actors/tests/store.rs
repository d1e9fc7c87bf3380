//! Store tests on a real PostgreSQL: each test gets its own migrated database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_actors::ids::{ApiKeyId, BoxId};
use psbx_actors::store::{Credential, PoolOptions, Store, StoreError};
use psbx_tests::TestDatabase;

/// A test's process is short-lived, like a command's: no idle connections
/// reopened in background threads, which crash the process when it exits
/// inside libpq (seen as SIGSEGV at the end of a passing test).
fn store(db: &TestDatabase) -> Store {
    Store::open(db.url(), PoolOptions::short_lived(3)).unwrap()
}

#[test]
fn first_start_creates_one_account_and_key_and_never_again() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store
        .bootstrap()
        .unwrap()
        .expect("an empty database is bootstrapped");
    assert_eq!(first.account.name, "default");
    assert_eq!(first.key.key.account_id, first.account.id);
    assert!(
        store.bootstrap().unwrap().is_none(),
        "a second start re-initialised"
    );
    // Opening again (a restart) runs no migration twice and keeps the data.
    let again = Store::open(db.url(), PoolOptions::short_lived(3)).unwrap();
    assert_eq!(
        again.default_account().unwrap().unwrap().id,
        first.account.id
    );
    let who = again
        .authenticate(first.key.secret.expose())
        .unwrap()
        .unwrap();
    assert_eq!(who.credential, Credential::ApiKey(first.key.key.id.clone()));
}

#[test]
fn concurrent_first_starts_make_exactly_one_account() {
    let db = TestDatabase::new();
    let store = store(&db);
    let made: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| store.bootstrap().unwrap().is_some()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(made.iter().filter(|m| **m).count(), 1, "{made:?}");
}

#[test]
fn only_the_sha256_of_a_key_is_stored() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let secret = first.key.secret.expose().to_owned();
    let mut conn = <diesel::PgConnection as diesel::Connection>::establish(db.url()).unwrap();
    #[derive(diesel::QueryableByName)]
    struct Dump {
        #[diesel(sql_type = diesel::sql_types::Text)]
        row: String,
    }
    use diesel::RunQueryDsl;
    let rows: Vec<Dump> = diesel::sql_query("SELECT api_keys::text AS row FROM api_keys")
        .load(&mut conn)
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        !rows[0].row.contains(&secret[5..]),
        "the key is stored in clear"
    );
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(secret.as_bytes()));
    assert!(
        rows[0].row.contains(&digest),
        "no SHA-256 in {}",
        rows[0].row
    );
}

#[test]
fn keys_authenticate_until_revoked_and_stay_in_their_account() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let account = first.account.id.clone();
    let extra = store.create_api_key(&account, "ci").unwrap();
    assert_eq!(extra.key.name, "ci");

    let who = store.authenticate(extra.secret.expose()).unwrap().unwrap();
    assert_eq!(who.account_id, account);
    assert_eq!(who.credential, Credential::ApiKey(extra.key.id.clone()));
    assert!(store.authenticate("psbx_wrong").unwrap().is_none());
    assert!(store.authenticate("").unwrap().is_none());
    assert!(store.authenticate("Bearer x").unwrap().is_none());

    // Another account cannot see or revoke this account's key.
    let other = psbx_actors::ids::AccountId::parse(&db.add_account("acct_other")).unwrap();
    assert!(
        store
            .list_api_keys(&other, None, 50)
            .unwrap()
            .keys
            .is_empty()
    );
    assert!(!store.revoke_api_key(&other, &extra.key.id).unwrap());
    assert!(store.authenticate(extra.secret.expose()).unwrap().is_some());

    assert!(store.revoke_api_key(&account, &extra.key.id).unwrap());
    assert!(
        store.authenticate(extra.secret.expose()).unwrap().is_none(),
        "revoked key works"
    );
    assert!(
        !store.revoke_api_key(&account, &extra.key.id).unwrap(),
        "revoked twice"
    );
    let listed: Vec<ApiKeyId> = store
        .list_api_keys(&account, None, 50)
        .unwrap()
        .keys
        .into_iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(listed, vec![first.key.key.id]);
}

#[test]
fn last_use_is_recorded() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let before = store
        .list_api_keys(&first.account.id, None, 10)
        .unwrap()
        .keys;
    assert!(before[0].last_used_at.is_none());
    store
        .authenticate(first.key.secret.expose())
        .unwrap()
        .unwrap();
    let after = store
        .list_api_keys(&first.account.id, None, 10)
        .unwrap()
        .keys;
    assert!(after[0].last_used_at.is_some());
}

#[test]
fn listing_pages_through_every_key_once_in_order() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = store.bootstrap().unwrap().unwrap().account.id;
    for i in 0..11 {
        store.create_api_key(&account, &format!("k{i}")).unwrap();
    }
    let mut seen = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store.list_api_keys(&account, after.as_ref(), 5).unwrap();
        assert!(page.keys.len() <= 5);
        pages += 1;
        seen.extend(page.keys.into_iter().map(|k| k.name));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut expected = vec!["first key".to_owned()];
    expected.extend((0..11).map(|i| format!("k{i}")));
    assert_eq!(seen, expected);
}

#[test]
fn key_names_are_checked() {
    let db = TestDatabase::new();
    let store = store(&db);
    let account = store.bootstrap().unwrap().unwrap().account.id;
    for bad in ["", "   ", "a\nb", &"x".repeat(101)] {
        match store.create_api_key(&account, bad) {
            Err(StoreError::Invalid(msg)) => assert!(msg.contains("name"), "{msg}"),
            other => panic!("{bad:?} accepted: {other:?}"),
        }
    }
    assert_eq!(
        store
            .create_api_key(&account, "  laptop ")
            .unwrap()
            .key
            .name,
        "laptop"
    );
}

#[test]
fn replicas_register_heartbeat_and_stop() {
    let db = TestDatabase::new();
    let store = store(&db);
    let a = store.register_server("host-a", "0.1.0").unwrap();
    let b = store.register_server("host-b", "0.1.0").unwrap();
    store.heartbeat_server(&a.id).unwrap();
    let live: Vec<_> = store
        .live_servers()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(live.contains(&a.id) && live.contains(&b.id));
    store.stop_server(&b.id).unwrap();
    let live: Vec<_> = store
        .live_servers()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(live, vec![a.id.clone()]);
    let a_now = store.live_servers().unwrap().remove(0);
    assert!(a_now.heartbeat_at >= a.heartbeat_at);
}

#[test]
fn a_wrong_database_url_is_reported_without_its_password() {
    let err = Store::open(
        "postgres://psbx:sup3rsecret@127.0.0.1:1/none",
        PoolOptions::default(),
    )
    .err()
    .expect("nothing listens on port 1");
    let text = err.to_string();
    assert!(text.contains("cannot connect"), "{text}");
    assert!(!text.contains("sup3rsecret"), "{text}");
}

fn new_box(store: &Store, account: &psbx_actors::ids::AccountId) -> psbx_actors::ids::BoxId {
    use psbx_actors::box_state::BoxState;
    use psbx_actors::store::NewBox;
    let record = store
        .insert_box(&NewBox {
            account_id: Some(account.clone()),
            ..NewBox::for_size(
                BoxId::generate().unwrap(),
                "test:///default",
                "test",
                BoxState::Running,
                1,
                psbx_actors::settings::Unit {
                    vcpus: 1,
                    memory_mib: 256,
                    disk_gb: 2,
                },
            )
        })
        .unwrap();
    record.id
}

/// Egress counted as bytes pass is added to `box_egress` by each flush, per
/// box; a box whose row is gone is skipped without failing the others.
#[tokio::test]
async fn egress_is_stored_per_box_and_added_up() {
    use psbx_actors::connectors::egress::Egress;
    use std::sync::atomic::Ordering;

    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let (a, b) = (
        new_box(&store, &first.account.id),
        new_box(&store, &first.account.id),
    );
    let egress = Egress::default();
    let gone = BoxId::parse("box_gone").unwrap();
    // What a box's stream adds as its bytes pass (the router's join,
    // `psbx_wire::splice::join_counted`, tested in `connectors::egress`).
    let send = |id: &BoxId, bytes: u64| {
        egress.counter(id).fetch_add(bytes, Ordering::Relaxed);
    };
    send(&a, 1000);
    send(&b, 7);
    send(&gone, 5);
    assert_eq!(store.box_egress(&a).unwrap(), 0);
    egress.flush(&store).await.unwrap();
    assert_eq!(store.box_egress(&a).unwrap(), 1000);
    assert_eq!(store.box_egress(&b).unwrap(), 7);
    assert_eq!(store.box_egress(&gone).unwrap(), 0);
    assert_eq!(egress.pending(&a), 0);
    // The next flush adds to what is stored.
    send(&a, 24);
    assert_eq!(egress.pending(&a), 24);
    egress.flush(&store).await.unwrap();
    assert_eq!(store.box_egress(&a).unwrap(), 1024);
    // Nothing new: nothing written, nothing lost.
    egress.flush(&store).await.unwrap();
    assert_eq!(store.box_egress(&a).unwrap(), 1024);
}

/// The host's per-box internet counters are stored as what they add: a figure
/// seen again adds nothing (a restarted server reads the same counter), a
/// counter that began again (the table rewritten) adds all it holds.
#[test]
fn internet_egress_adds_what_each_counter_figure_adds() {
    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let a = new_box(&store, &first.account.id);
    let gone = BoxId::parse("box_gone").unwrap();
    assert_eq!(store.box_internet_egress(&a).unwrap(), 0);
    store.add_internet_egress(&[(a.clone(), 1000)]).unwrap();
    assert_eq!(store.box_internet_egress(&a).unwrap(), 1000);
    store.add_internet_egress(&[(a.clone(), 1500)]).unwrap();
    store.add_internet_egress(&[(a.clone(), 1500)]).unwrap();
    assert_eq!(store.box_internet_egress(&a).unwrap(), 1500);
    // The counter began again and has counted 200 since.
    store
        .add_internet_egress(&[(a.clone(), 200), (gone.clone(), 9)])
        .unwrap();
    assert_eq!(store.box_internet_egress(&a).unwrap(), 1700);
    assert_eq!(store.box_egress(&a).unwrap(), 0, "connections' bytes apart");
    assert_eq!(store.box_internet_egress(&gone).unwrap(), 0);
}

#[derive(diesel::QueryableByName)]
struct SpecText {
    #[diesel(sql_type = diesel::sql_types::Text)]
    spec: String,
}

/// A box's spec is stored as jsonb and read back as the type it was written
/// as; a stored spec of another shape is an error naming the box, never a
/// default (a box would lose its secrets' mask).
#[test]
fn a_box_spec_reads_back_typed_and_a_malformed_one_is_an_error() {
    use diesel::{Connection, RunQueryDsl};
    use psbx_actors::spec::{BoxSpec, SealedMask, ServiceSpec};

    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let id = new_box(&store, &first.account.id);
    assert_eq!(
        store.box_by_id(&id).unwrap().unwrap().spec,
        BoxSpec::default()
    );
    let spec = BoxSpec {
        mask: Some(SealedMask {
            nonce: "00".into(),
            ciphertext: "ff".into(),
        }),
        ..BoxSpec::new(
            vec![ServiceSpec {
                name: "api".into(),
                port: Some(80),
                target_port: Some(8080),
                version: None,
                mode: Some(psbx_actors::spec::Mode::Box),
            }],
            vec!["TOKEN".into()],
            Some("dev".into()),
        )
    };
    let mut conn = diesel::PgConnection::establish(db.url()).unwrap();
    diesel::sql_query(format!(
        "update boxes set spec = '{}' where id = '{id}'",
        spec.to_json()
    ))
    .execute(&mut conn)
    .unwrap();
    assert_eq!(store.box_by_id(&id).unwrap().unwrap().spec, spec);

    // Stopped, the box keeps what it was started with, not its sealed
    // secret values (issue 30: secrets "disappear with the box").
    let other = new_box(&store, &first.account.id);
    let with_old_name = spec
        .to_json()
        .to_string()
        .replace("\"mask\"", "\"environmentMask\"");
    diesel::sql_query(format!(
        "update boxes set spec = '{with_old_name}' where id = '{other}'"
    ))
    .execute(&mut conn)
    .unwrap();
    for box_id in [&id, &other] {
        let stopped = store
            .transition_box(
                box_id,
                psbx_actors::box_state::BoxState::Running,
                psbx_actors::box_state::BoxState::Stopped,
                psbx_actors::store::Transition::default(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            stopped.spec,
            BoxSpec {
                mask: None,
                ..spec.clone()
            },
            "{box_id}"
        );
        let raw: Vec<SpecText> = diesel::sql_query(format!(
            "select spec::text as spec from boxes where id = '{box_id}'"
        ))
        .load(&mut conn)
        .unwrap();
        assert!(
            !raw[0].spec.contains("ff"),
            "a sealed value left: {}",
            raw[0].spec
        );
    }
    diesel::sql_query(format!(
        "update boxes set state = 'running', stopped_at = null where id = '{id}'"
    ))
    .execute(&mut conn)
    .unwrap();

    diesel::sql_query(format!(
        "update boxes set spec = '{{\"secrets\": \"TOKEN\"}}' where id = '{id}'"
    ))
    .execute(&mut conn)
    .unwrap();
    let err = store.box_by_id(&id).unwrap_err();
    assert!(
        matches!(&err, StoreError::Unreadable { what, .. } if what.contains(id.as_str())),
        "{err:?}"
    );
}

/// The store's compare-and-set: a transition from a state the box has left
/// moves nothing, and one its state never allows is refused as such.
#[test]
fn transitions_move_only_from_the_expected_state_and_refuse_illegal_ones() {
    use psbx_actors::box_state::BoxState;
    use psbx_actors::store::Transition;

    let db = TestDatabase::new();
    let store = store(&db);
    let first = store.bootstrap().unwrap().unwrap();
    let id = new_box(&store, &first.account.id);
    let frozen = store
        .transition_box(
            &id,
            BoxState::Running,
            BoxState::Frozen,
            Transition::default(),
        )
        .unwrap()
        .expect("a running box freezes");
    assert_eq!(frozen.state, BoxState::Frozen);
    let stale = store
        .transition_box(
            &id,
            BoxState::Running,
            BoxState::Frozen,
            Transition::default(),
        )
        .unwrap();
    assert!(stale.is_none(), "moved from a state the box had left");
    match store.transition_box(
        &id,
        BoxState::Frozen,
        BoxState::Booting,
        Transition::default(),
    ) {
        Err(StoreError::InvalidTransition(refused)) => {
            assert_eq!(
                (refused.id, refused.from, refused.to),
                (id.clone(), BoxState::Frozen, BoxState::Booting)
            );
        }
        other => panic!("an illegal transition was not refused: {other:?}"),
    }
    assert_eq!(
        store.box_by_id(&id).unwrap().unwrap().state,
        BoxState::Frozen
    );
}

/// Rows and records carry typed ids (`ids.rs`), never strings: a string id
/// could be any kind's, and the newest tables are what the next ones copy
/// (review-2 finding 7). Reads the store's sources and names every `pub`
/// field called `id` or `…_id` whose type is a `String` (bare, optional or
/// in a list), but `boot_id`, which is not psbx's.
#[test]
fn store_fields_that_hold_ids_are_typed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    assert!(
        files.len() > 10,
        "the store's files were not found in {dir:?}"
    );
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            let Some(field) = ["pub ", "pub(crate) ", "pub(super) "]
                .iter()
                .find_map(|p| line.strip_prefix(p))
            else {
                continue;
            };
            let Some((name, ty)) = field.split_once(':') else {
                continue;
            };
            let (name, ty) = (name.trim(), ty.trim().trim_end_matches(','));
            // `boot_id` is the box kernel's boot UUID (as boxd reads it),
            // no id psbx hands out.
            let holds_an_id = (name == "id" || name.ends_with("_id")) && name != "boot_id";
            if holds_an_id && ["String", "Option<String>", "Vec<String>"].contains(&ty) {
                found.push(format!("{}:{}: {line}", path.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "ids held as strings (use the types in actors/src/ids.rs):\n{}",
        found.join("\n")
    );
}

/// A stored name that is none of its enum's values reads as an error
/// naming the value, never as a default.
#[test]
fn an_unknown_stored_name_is_unreadable() {
    use psbx_actors::box_state::BoxState;
    use psbx_actors::store::read_enum;

    assert_eq!(
        read_enum(|| "a state".into(), "frozen", BoxState::parse).unwrap(),
        BoxState::Frozen
    );
    match read_enum(
        || "the state of box box_x".into(),
        "thawing",
        BoxState::parse,
    ) {
        Err(StoreError::Unreadable { what, why }) => {
            assert_eq!(what, "the state of box box_x");
            assert!(why.contains("\"thawing\""), "{why}");
        }
        other => panic!("an unknown state was read as {other:?}"),
    }
}

fn claim<'a>(
    name: &'a str,
    server_id: &'a psbx_actors::ids::ServerId,
    lease: std::time::Duration,
) -> psbx_actors::store::HostClaim<'a> {
    psbx_actors::store::HostClaim {
        name,
        uri: "qemu:///system",
        server_id,
        node_key: server_id.as_str(),
        accel: "tcg",
        cpus: 4,
        memory_mib: 8192,
        lease,
    }
}

#[test]
fn a_host_is_leased_by_one_node_renewed_released_and_taken_after_it_runs_out() {
    use psbx_actors::store::Room;
    use std::time::Duration;
    let db = TestDatabase::new();
    let store = store(&db);
    let a = store.register_server("machine-a", "0").unwrap().id;
    let b = store.register_server("machine-b", "0").unwrap().id;
    let long = Duration::from_secs(60);

    // Two hosts on one libvirtd: each its own mark, the first the installation's.
    let host_a = store
        .take_host(&claim("host-a", &a, long))
        .unwrap()
        .unwrap();
    let host_b = store
        .take_host(&claim("host-b", &b, long))
        .unwrap()
        .unwrap();
    assert_eq!(host_a.owner, store.installation_id().unwrap());
    assert_ne!(host_a.owner, host_b.owner);

    // Held: another node is refused and told who holds it.
    let held = store
        .take_host(&claim("host-a", &b, long))
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (held.server_id.as_ref(), held.hostname.as_deref()),
        (Some(&a), Some("machine-a"))
    );
    // Its holder takes it again (a restart) under a new epoch.
    let again = store
        .take_host(&claim("host-a", &a, long))
        .unwrap()
        .unwrap();
    assert_eq!(again.epoch, host_a.epoch + 1);
    assert_eq!(again.owner, host_a.owner);
    // Renewals go through at the holder's epoch only.
    let room = Room::default();
    assert!(
        store
            .renew_host("host-a", &a, again.epoch, long, &room)
            .unwrap()
    );
    assert!(
        !store
            .renew_host("host-a", &a, host_a.epoch, long, &room)
            .unwrap()
    );
    assert!(
        !store
            .renew_host("host-a", &b, again.epoch, long, &room)
            .unwrap()
    );

    // A released lease is free at once.
    store.release_host("host-a", &a, again.epoch).unwrap();
    let listed = store.list_hosts().unwrap();
    let row = listed.iter().find(|h| h.name == "host-a").unwrap();
    assert!(!row.leased, "{row:?}");
    let by_b = store
        .take_host(&claim("host-a", &b, long))
        .unwrap()
        .unwrap();
    assert_eq!(by_b.epoch, again.epoch + 1);
    // The old holder's renewal now fails: it is fenced.
    assert!(
        !store
            .renew_host("host-a", &a, again.epoch, long, &room)
            .unwrap()
    );

    // A node restarted after a crash (a new id, the same node key) takes its
    // lease back at once.
    let reborn = store.register_server("machine-b", "0").unwrap().id;
    let mut same_node = claim("host-a", &reborn, long);
    same_node.node_key = b.as_str();
    let back = store.take_host(&same_node).unwrap().unwrap();
    assert_eq!(back.epoch, by_b.epoch + 1);
    let b = reborn;
    let by_b = back;

    // A lease that runs out is free without a release.
    let short = Duration::from_millis(300);
    assert!(
        store
            .renew_host("host-a", &b, by_b.epoch, short, &room)
            .unwrap()
    );
    assert!(
        store
            .take_host(&claim("host-a", &a, long))
            .unwrap()
            .is_err()
    );
    std::thread::sleep(Duration::from_millis(600));
    assert!(store.take_host(&claim("host-a", &a, long)).unwrap().is_ok());
}

#[test]
fn a_host_recorded_by_its_uri_takes_the_nodes_name_with_its_boxes() {
    use std::time::Duration;
    let db = TestDatabase::new();
    let store = store(&db);
    let a = store.register_server("machine-a", "0").unwrap().id;
    let installation = store.installation_id().unwrap();
    // As the migration leaves a host of an earlier version.
    db.execute(&format!(
        "INSERT INTO hosts (uri, name, owner, server_id, accel, cpus, memory_mib) \
         VALUES ('qemu:///system', 'qemu:///system', '{installation}', '{a}', 'tcg', 4, 8192)"
    ));
    db.execute(
        "INSERT INTO boxes (id, host, state, image, size, vcpus, memory_mib, disk_gb, keep_secs) \
         VALUES ('box_old1', 'qemu:///system', 'pooled', 'test', 1, 1, 512, 4, 0)",
    );
    let taken = store
        .take_host(&claim("machine-a", &a, Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    assert_eq!(taken.owner, installation, "its domains keep their mark");
    assert_eq!(store.live_boxes_on_host("machine-a").unwrap().len(), 1);
    assert_eq!(store.list_hosts().unwrap().len(), 1);
}

#[test]
fn placements_at_once_never_take_more_room_than_a_host_published() {
    use psbx_actors::store::Room;
    use std::time::Duration;
    let db = TestDatabase::new();
    let store = store(&db);
    let long = Duration::from_secs(60);
    // No host yet: none takes boxes.
    assert!(!store.hosts_open().unwrap());
    let mut epochs = Vec::new();
    for (host, machine) in [("host-a", "a"), ("host-b", "b")] {
        let id = store.register_server(machine, "0").unwrap().id;
        let taken = store.take_host(&claim(host, &id, long)).unwrap().unwrap();
        epochs.push((host, id, taken.epoch));
    }
    // host-a has room for three boxes of 1 GiB, host-b for two; host-b has
    // one in its pool.
    for ((host, id, epoch), (mib, pooled)) in epochs.iter().zip([(3072, 0), (2048, 1)]) {
        let room = Room {
            free_cpus: 16.0,
            free_memory_mib: mib,
            pool: [(1, pooled)].into_iter().collect(),
        };
        assert!(store.renew_host(host, id, *epoch, long, &room).unwrap());
    }
    // Eight placements at once, from eight connections.
    let placed: Vec<Option<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let store = Store::open(db.url(), PoolOptions::short_lived(1)).unwrap();
                s.spawn(move || store.place_box(1, 1, 1024, &[]).unwrap().map(|p| p.host))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let on = |host: &str| placed.iter().filter(|p| p.as_deref() == Some(host)).count();
    // Three cold on host-a, the pooled one and two cold on host-b; two refused.
    assert_eq!(
        (on("host-a"), on("host-b"), on("")),
        (3, 3, 0),
        "{placed:?}"
    );
    assert_eq!(placed.iter().filter(|p| p.is_none()).count(), 2);
    // Refused for want of room, not of hosts.
    assert!(store.hosts_open().unwrap());
    // A draining host takes nothing; one tried already is passed over.
    let (host, id, epoch) = &epochs[0];
    let room = Room {
        free_cpus: 16.0,
        free_memory_mib: 4096,
        pool: Default::default(),
    };
    assert!(store.renew_host(host, id, *epoch, long, &room).unwrap());
    assert_eq!(
        store.place_box(1, 1, 1024, &["host-a".to_owned()]).unwrap(),
        None
    );
    assert!(store.set_host_draining("host-a", true).unwrap());
    assert_eq!(store.place_box(1, 1, 1024, &[]).unwrap(), None);
    // host-b's lease given back, host-a draining: no host takes boxes.
    assert!(store.hosts_open().unwrap());
    let (host, id, epoch) = &epochs[1];
    store.release_host(host, id, *epoch).unwrap();
    assert!(!store.hosts_open().unwrap());
}

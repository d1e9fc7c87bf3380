//! What the server's HTTP tests share: a fresh, migrated database with its
//! first account and key, and the app's state on it (the one `psbx serve`
//! assembles, with a test vault and without a libvirt host).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use actix_web::http::header;
use psbx_actors::box_state::BoxState;
use psbx_actors::ids::{AccountId, BoxId};
use psbx_actors::secrets::Secrets;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::store::{Bootstrap, NewBox, PoolOptions, Store};
use psbx_server::app::{self, AppState};
use psbx_server::config::{BoxesConfig, Config};
use psbx_server::host::HostChoice;
use psbx_tests::TestDatabase;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The public URL the test app believes it has.
pub const URL: &str = "http://localhost:8080";

pub struct Fixture {
    pub db: TestDatabase,
    pub store: Store,
    pub first: Bootstrap,
}

pub fn fixture() -> Fixture {
    fixture_with(PoolOptions::short_lived(4))
}

/// [`fixture`] with a store of its own pool options (an app serving on a
/// fake host wants more connections).
pub fn fixture_with(pool: PoolOptions) -> Fixture {
    let db = TestDatabase::new();
    let store = Store::open(db.url(), pool).unwrap();
    let first = store.bootstrap().unwrap().unwrap();
    Fixture { db, store, first }
}

impl Fixture {
    /// The first account's API key.
    pub fn key(&self) -> String {
        self.first.key.secret.expose().to_owned()
    }
}

/// A second account of the fixture's database, with an API key.
pub fn other_account(f: &Fixture) -> String {
    let id = psbx_actors::ids::AccountId::generate().unwrap();
    f.db.add_account(id.as_str());
    f.store
        .create_api_key(&id, "other")
        .unwrap()
        .secret
        .expose()
        .to_owned()
}

/// The app's state on the fixture's database, with the default configuration.
pub async fn state(f: &Fixture) -> AppState {
    state_with(f, &Config::default()).await
}

pub async fn state_with(f: &Fixture, config: &Config) -> AppState {
    let secrets = Secrets::new(f.store.clone(), Vault::from_key(&[9u8; 32])).unwrap();
    let id = psbx_actors::ids::ServerId::parse("srv_test").unwrap();
    let parts = app::Parts::new(f.store.clone(), secrets, Default::default(), URL, id)
        .with_host(HostChoice::Off("no libvirt host in the HTTP tests".into()));
    AppState::assemble(config, parts).await.unwrap()
}

pub fn bearer(key: &str) -> (header::HeaderName, String) {
    (header::AUTHORIZATION, format!("Bearer {key}"))
}

/// A box of `account` in `state`, as a row (no VM), with a goal pages must escape.
pub fn a_box(f: &Fixture, account: &AccountId, state: BoxState) -> String {
    let unit = psbx_actors::settings::Unit {
        vcpus: 1,
        memory_mib: 256,
        disk_gb: 1,
    };
    let id = BoxId::generate().unwrap();
    f.store
        .insert_box(&NewBox {
            account_id: Some(account.clone()),
            goal: Some("try the <home> page".into()),
            ..NewBox::for_size(id.clone(), "test:///", "test", state, 1, unit)
        })
        .unwrap();
    id.to_string()
}

/// Every log line the test process writes (its subscriber is global: each
/// test runs in a process of its own under nextest).
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Captured(writer.clone()))
            .try_init();
        buffer
    })
    .clone()
}

struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Makes `<dir>/images/test`, an image the fake host "boots" (a manifest and
/// empty files), and answers `<dir>/images`.
pub fn fake_image(dir: &std::path::Path) -> std::path::PathBuf {
    let images = dir.join("images");
    let image = images.join("test");
    std::fs::create_dir_all(&image).unwrap();
    std::fs::write(
        image.join("manifest.json"),
        r#"{"kernel": "vmlinuz", "initrd": "initrd.img", "disk": "disk.qcow2", "cmdline": "console=ttyS0"}"#,
    )
    .unwrap();
    for file in ["vmlinuz", "initrd.img", "disk.qcow2"] {
        std::fs::write(image.join(file), b"").unwrap();
    }
    images
}

/// `[boxes]` of an app on the fake host: boxes of 1 vCPU, 256 MiB and 1 GB
/// from the fake image in `images` (`fake_image`), no pool and no network,
/// frozen after `idle_freeze` without activity.
pub fn fake_host_boxes(images: std::path::PathBuf, idle_freeze: &str) -> BoxesConfig {
    BoxesConfig {
        images_dir: Some(images),
        image: "test".into(),
        unit_vcpus: 1,
        unit_memory_mib: 256,
        unit_disk_gb: 1,
        pool_size: 0,
        network: false,
        idle_freeze: idle_freeze.into(),
        // The fake's disks take no space: the machine's free space does not matter.
        disk_margin_gb: 0,
        disk_overcommit: 100.0,
        ..BoxesConfig::default()
    }
}

/// Every file under `dir`, its folders' included (none when it is missing).
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A listener on a free loopback port, and its URL.
pub fn loopback() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    (listener, url)
}

/// The real app served on `listener` as `psbx serve` assembles it, on an
/// actix system of a thread of its own.
pub struct Serving {
    pub handle: actix_web::dev::ServerHandle,
    /// The app's shot storage, for tests that store shots directly.
    pub shots: psbx_actors::shots::Shots,
    pub thread: std::thread::JoinHandle<()>,
}

/// The app with the fake host `fake` in place of libvirt (8 CPUs, 8 GiB).
pub fn serve_on_fake_host(
    store: &Store,
    server_id: &str,
    fake: psbx_actors::hypervisor::fake::FakeHypervisor,
    config: Config,
    listener: std::net::TcpListener,
    workers: usize,
) -> Serving {
    use psbx_actors::host::Connected;
    let fake = Connected {
        host: Arc::new(fake),
        resources: psbx_actors::hypervisor::HostResources {
            cpus: 8,
            memory_mib: 8192,
        },
        accel: psbx_actors::hypervisor::Accel::Tcg,
    };
    serve(
        store,
        server_id,
        HostChoice::Hypervisor(fake),
        config,
        listener,
        workers,
    )
}

/// The app with no box host (an API-only node: box calls answer 503).
pub fn serve_without_host(
    store: &Store,
    server_id: &str,
    config: Config,
    listener: std::net::TcpListener,
) -> Serving {
    let off = HostChoice::Off("an API-only node in the tests".into());
    serve(store, server_id, off, config, listener, 1)
}

fn serve(
    store: &Store,
    server_id: &str,
    host: HostChoice,
    config: Config,
    listener: std::net::TcpListener,
    workers: usize,
) -> Serving {
    let url = config.public_url.clone().expect("the config's public URL");
    let server_id = psbx_actors::ids::ServerId::parse(server_id).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let store = store.clone();
    let thread = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let secrets = Secrets::new(store.clone(), Vault::from_key(&[9u8; 32])).unwrap();
            let parts = app::Parts::new(store, secrets, Default::default(), &url, server_id)
                .with_host(host);
            let state = AppState::assemble(&config, parts).await.unwrap();
            let shots = state.shots.clone();
            let running = actix_web::HttpServer::new(move || app::build(state.clone()))
                .workers(workers)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
            tx.send((running.handle(), shots)).unwrap();
            running.await.unwrap();
        });
    });
    let (handle, shots) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the app started");
    Serving {
        handle,
        shots,
        thread,
    }
}

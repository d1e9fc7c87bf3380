//! The world the box API's stories run in: the real app as `psbx serve`
//! assembles it (`common::serve_on_fake_host`), on loopback, on the fake
//! hypervisor, whose boxes are served by boxd's real services in this
//! process (`boxd::in_process`, put behind the fake through its hook,
//! `FakeHypervisor::serve_guests_with`), each box with a `/work` and a
//! `/run/psbx` of its own under the world's temporary directory.
//!
//! A command runs in its box's `/work` (that directory), but one that names
//! `/work/...` in its text names this machine's `/work` (where checkouts may
//! live): the stories use paths relative to the working directory.
//!
//! Dropped, it stops the app, kills every background command its boxes
//! still run and removes its directories; its database goes with
//! `TestDatabase`.

use crate::common;
use actix_web::dev::ServerHandle;
use boxd::in_process::InProcess;
use psbx_actors::hypervisor::fake::{FakeHypervisor, Guest, GuestBoxd, Serving};
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::config::Config;
use psbx_tests::TestDatabase;
use psbx_wire::boxd::BoxInfo;
use psbx_wire::mux::Incoming;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The app on a fake host whose boxes run boxd's real services.
pub struct World {
    pub url: String,
    /// The first account's API key.
    pub key: String,
    pub store: Store,
    guests: Arc<Guests>,
    handle: ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    runtime: tokio::runtime::Runtime,
    pub db: TestDatabase,
    _dir: tempfile::TempDir,
}

/// boxd's services for each boot of a fake domain, and every one made, to
/// end them all when the world ends.
struct Guests {
    root: PathBuf,
    /// By domain: the box's `/work` here.
    works: Mutex<BTreeMap<String, PathBuf>>,
    booted: Mutex<Vec<Arc<RealBoxd>>>,
}

/// One boot's boxd, as the fake's hook takes it.
struct RealBoxd(InProcess);

impl Guest for RealBoxd {
    fn serve(&self, incoming: Incoming) -> Serving {
        Box::pin(self.0.serve(incoming))
    }

    fn halt(&self) {
        self.0.halt();
    }
}

impl GuestBoxd for Guests {
    fn boot(&self, domain: &str, boot_id: &str) -> Arc<dyn Guest> {
        // The disk (`/work`) lasts as long as the domain; `/run/psbx` is
        // a tmpfs: one per boot.
        let dir = self.root.join(domain);
        let work = dir.join("work");
        let info = BoxInfo {
            protocol: psbx_wire::PROTOCOL_VERSION,
            version: format!("in-process {}", boxd::VERSION),
            boot_id: boot_id.to_owned(),
            features: vec![],
        };
        let boxd = InProcess::start(work.clone(), dir.join(format!("run-{boot_id}")), info)
            .expect("boxd's directories for a fake box");
        self.works.lock().unwrap().insert(domain.to_owned(), work);
        let boxd = Arc::new(RealBoxd(boxd));
        self.booted.lock().unwrap().push(boxd.clone());
        boxd
    }
}

impl World {
    /// A fresh database, the app on loopback on a fake host (8 CPUs, 8 GiB)
    /// for boxes of 1 vCPU / 256 MiB without network, no pool and no idle
    /// freeze within an hour (the VM harness's defaults).
    pub fn start() -> Self {
        let common::Fixture { db, store, first } =
            common::fixture_with(PoolOptions::short_lived(8));
        let server = store.register_server("box-api", "0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let images = common::fake_image(dir.path());
        let (listener, url) = common::loopback();
        let config = Config {
            data_dir: dir.path().join("data"),
            public_url: Some(url.clone()),
            boxes: common::fake_host_boxes(images, "1h"),
            ..Config::default()
        };
        std::fs::create_dir_all(&config.data_dir).unwrap();
        let fake = FakeHypervisor::new(&format!("fake:///{}", db.name()));
        let guests = Arc::new(Guests {
            root: dir.path().join("guests"),
            works: Mutex::default(),
            booted: Mutex::default(),
        });
        fake.serve_guests_with(guests.clone());
        let served =
            common::serve_on_fake_host(&store, server.id.as_str(), fake, config, listener, 2);
        Self {
            url,
            key: first.key.secret.expose().to_owned(),
            store,
            guests,
            handle: served.handle,
            thread: Some(served.thread),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            db,
            _dir: dir,
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        psbx_tests::api::call(&self.url, &self.key, method, path, body)
    }

    /// `POST /v1/boxes/{id}/exec` with `body`, which must answer 200.
    pub fn exec(&self, id: &str, body: Value) -> Value {
        let (status, result) = self.call("POST", &format!("/v1/boxes/{id}/exec"), Some(body));
        assert_eq!(status, 200, "{result}");
        result
    }

    /// [`World::call`], failing the test unless the answer is a 2xx.
    pub fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        psbx_tests::api::ok(&self.url, &self.key, method, path, body)
    }

    /// A second account (`id`, `acct_...`) with an API key; the key.
    pub fn key_of_new_account(&self, id: &str) -> String {
        let account = self.db.add_account(id);
        let account = psbx_actors::ids::AccountId::parse(&account).unwrap();
        let key = self.store.create_api_key(&account, "other").unwrap();
        key.secret.expose().to_owned()
    }

    /// The `v` column of every row `sql` selects.
    pub fn db_query(&self, sql: &str) -> Vec<String> {
        use diesel::{Connection, RunQueryDsl};
        #[derive(diesel::QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::Text)]
            v: String,
        }
        let mut conn = diesel::PgConnection::establish(self.db.url()).unwrap();
        let rows: Vec<V> = diesel::sql_query(sql).load(&mut conn).unwrap();
        rows.into_iter().map(|r| r.v).collect()
    }

    /// Where box `id`'s `/work` is (its domain's name holds its id).
    pub fn work_of(&self, id: &str) -> PathBuf {
        let works = self.guests.works.lock().unwrap();
        let found: Vec<&PathBuf> = works
            .iter()
            .filter(|(domain, _)| domain.contains(id))
            .map(|(_, work)| work)
            .collect();
        match found.as_slice() {
            [work] => (*work).clone(),
            _ => panic!("no one fake domain of box {id} ran boxd: {works:?}"),
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.runtime.block_on(self.handle.stop(false));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Also after a failed test, whose boxes were not stopped.
        let mut booted = self.guests.booted.lock().unwrap_or_else(|e| e.into_inner());
        for boxd in booted.drain(..) {
            boxd.halt();
        }
    }
}

/// An exec result's stdout text.
pub fn stdout(result: &Value) -> &str {
    result["stdout"]["text"].as_str().unwrap()
}

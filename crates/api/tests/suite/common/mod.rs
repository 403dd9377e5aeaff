//! Shared by the API's black-box suites: the embedded profile's API wired as `switchboard serve`
//! wires it (scripted model, two workers, the shipped prices, the HTTP webhook caller, tenant
//! bundles loaded at start, the admin key in the data directory), served on a free loopback port
//! from a thread of its own, and an HTTP client with one key. What needs the binary itself
//! (flags, signals, the header read timeout of its server loop) is tested in `crates/cli`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use switchboard_embedded::api::{api_state, ensure_admin_key};
use switchboard_embedded::keys::{generate_api_key, hash_api_key};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, QueueConfig, ScriptedModel, SqliteStore};
use switchboard_engine::{ConfigService, NoSecrets, SystemClock};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/support")
}

/// What `serve` is started with: the flags the suites use, with `serve`'s defaults.
struct Options {
    script: PathBuf,
    tenants: Vec<PathBuf>,
    rate_limit: usize,
    read_timeout: Duration,
    secrets_file: Option<PathBuf>,
    /// `--allow-private-webhooks`: tools (webhooks, MCP servers) on loopback over http.
    allow_private: bool,
}

impl Options {
    fn parse(script: &Path, flags: &[&str]) -> Self {
        let mut o = Options {
            script: script.to_owned(),
            tenants: vec![],
            rate_limit: 600,
            read_timeout: Duration::from_secs(10),
            secrets_file: None,
            allow_private: false,
        };
        // The one flag without a value.
        o.allow_private = flags.contains(&"--allow-private-webhooks");
        let flags: Vec<&str> = flags.iter().copied().filter(|f| *f != "--allow-private-webhooks").collect();
        for pair in flags.chunks(2) {
            match pair {
                ["--tenant", file] => o.tenants.push(PathBuf::from(file)),
                ["--rate-limit", n] => o.rate_limit = n.parse().unwrap(),
                ["--secrets-file", file] => o.secrets_file = Some(PathBuf::from(file)),
                ["--read-timeout", s] => o.read_timeout = Duration::from_secs(s.parse().unwrap()),
                other => panic!("the in-process server does not take {other:?}"),
            }
        }
        o
    }
}

/// A running server; stopped, its workers drained and its database closed, when dropped.
pub struct Server {
    pub base: String,
    /// The admin key the server created in its data directory on first start.
    pub admin: String,
    /// Let go of before the server stops, which waits for every handle on the database.
    store: Option<SqliteStore>,
    runtime: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with_script(data_dir, &examples().join("script.json"), extra)
    }

    /// Starts with another scripted-model file.
    pub fn start_with_script(data_dir: &Path, script: &Path, extra: &[&str]) -> Self {
        let options = Options::parse(script, extra);
        let data_dir = data_dir.to_owned();
        let (ready, started) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // A runtime of its own, so that a test blocking its thread (raw sockets) never stalls it.
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let embedded = open(&data_dir, &options).await;
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let base = format!("http://{}", listener.local_addr().unwrap());
                let app = switchboard_api::routes(api_state(&embedded, options.rate_limit, options.read_timeout));
                let started = (base, embedded.store.clone(), tokio::runtime::Handle::current());
                ready.send((started, embedded.data_dir.join("admin.key"))).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move { stopped.await.ok().unwrap_or(()) })
                    .await
                    .unwrap();
                embedded.close(Duration::from_secs(5)).await;
            });
        });
        let ((base, store, runtime), admin_file) = started.recv().unwrap();
        let admin = std::fs::read_to_string(admin_file).unwrap().trim().to_owned();
        Self { base, admin, store: Some(store), runtime, stop: Some(stop), thread: Some(thread) }
    }

    fn store(&self) -> &SqliteStore {
        self.store.as_ref().unwrap()
    }

    /// Runs `work` on the server's runtime and waits for it, from a test's thread or runtime.
    fn run<T: Send>(&self, work: impl std::future::Future<Output = T> + Send) -> T {
        std::thread::scope(|s| s.spawn(|| self.runtime.block_on(work)).join().unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.store.take();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The embedded runtime as `serve` opens it.
async fn open(data_dir: &Path, o: &Options) -> Arc<Embedded> {
    let model = Arc::new(ScriptedModel::from_file(&o.script).unwrap());
    let model = Arc::new(switchboard_models::DefaultModel::new(model, None));
    let secrets: Arc<dyn switchboard_engine::Secrets> = match &o.secrets_file {
        Some(path) => Arc::new(switchboard_embedded::FileSecrets::open(path).unwrap()),
        None => Arc::new(NoSecrets),
    };
    let policy = WebhookPolicy { allow_http: o.allow_private, allow_private: o.allow_private };
    let webhooks = Arc::new(HttpWebhookCaller::new(policy, secrets.clone()).unwrap());
    let visibility = Duration::from_secs(120);
    let options = EmbeddedOptions {
        workers: 2,
        webhooks,
        secrets,
        turn_budget: Some(visibility.mul_f64(0.75)),
        queue: QueueConfig { visibility_timeout: visibility, max_receives: 5, ..QueueConfig::default() },
        ..EmbeddedOptions::default()
    };
    let embedded = Arc::new(Embedded::open(data_dir, model, Arc::new(SystemClock), options).unwrap());
    for path in &o.tenants {
        Bundle::from_file(path, &SystemClock).unwrap().install(&embedded.store).await.unwrap();
    }
    ensure_admin_key(&embedded).await.unwrap();
    embedded.start_workers();
    embedded
}

/// A tenant made as `switchboard tenants create` makes it; returns its key.
pub fn create_tenant(server: &Server, id: &str) -> String {
    let store = Arc::new(server.store().clone());
    let tenant = id.parse().unwrap();
    let created = server.run(ConfigService::new(store.clone(), store).create_tenant(&tenant, &format!("Tenant {id}")));
    assert!(created.unwrap(), "tenant '{id}' already exists");
    tenant_key(server, id)
}

/// Another key for an existing tenant, as `switchboard tenants key` issues it: its owner's.
pub fn tenant_key(server: &Server, id: &str) -> String {
    role_key(server, id, "owner", switchboard_domain::access::Role::Owner)
}

/// A viewer's key of tenant `id` that expired an hour ago.
pub fn expired_key(server: &Server, id: &str, principal: &str) -> String {
    let expired = chrono::Utc::now() - chrono::Duration::hours(1);
    key_for(server, id, principal, switchboard_domain::access::Role::Viewer, Some(expired))
}

/// A key of tenant `id` for `principal` in `role`.
pub fn role_key(server: &Server, id: &str, principal: &str, role: switchboard_domain::access::Role) -> String {
    key_for(server, id, principal, role, None)
}

/// A key of tenant `id` for `principal` in `role`, working until `expires_at`.
fn key_for(
    server: &Server,
    id: &str,
    principal: &str,
    role: switchboard_domain::access::Role,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
) -> String {
    let key = generate_api_key().unwrap();
    let tenant = id.parse().unwrap();
    let hash = hash_api_key(&key);
    let new =
        switchboard_embedded::store::NewKey { key_hash: &hash, tenant: Some(&tenant), principal, role, expires_at };
    server.run(server.store().add_api_key(new)).unwrap();
    key
}

// Not every suite uses every piece of the harness.
#[allow(unused_imports)]
pub use switchboard_testkit::client::{Api, Reply, raw};

/// The JSON pointers of a problem+json answer's errors, in order (none for any other answer).
pub fn pointers(r: &Reply) -> Vec<String> {
    r.body["errors"]
        .as_array()
        .map(|a| a.iter().map(|e| e["pointer"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

impl switchboard_testkit::client::Base for Server {
    fn base(&self) -> &str {
        &self.base
    }
}

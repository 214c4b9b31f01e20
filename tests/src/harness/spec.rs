//! [`Sandbox`] and [`NodeSpec`]: where a node's files live and what its configuration says.
//!
//! A spec writes a complete configuration file (the harness's defaults plus whatever the
//! test [`NodeSpec::set`]), so a node never reads `cluster.toml` or `ENGRAM__*` variables
//! by accident. Nothing here starts a process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::Rng;
use serde_json::Value;
use tempfile::TempDir;

use super::Node;
use super::client::KeyRing;

/// A temporary directory holding the nodes' configurations and data; removed when the
/// sandbox and every spec and node made from it are gone.
#[derive(Debug, Clone)]
pub struct Sandbox {
    dir: Arc<TempDir>,
    keys: Arc<KeyRing>,
}

impl Sandbox {
    /// A fresh, empty sandbox.
    ///
    /// # Panics
    /// If no temporary directory can be made.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("engram-harness-")
            .tempdir()
            .expect("temporary directory");
        // Every node of the sandbox is configured with this root admin key.
        let root: String = (0..4)
            .map(|_| format!("{:016x}", rand::random::<u64>()))
            .collect();
        let sandbox = Sandbox {
            dir: Arc::new(dir),
            keys: Arc::new(KeyRing::new(root.clone())),
        };
        write_secret(&sandbox.admin_key_file(), &root);
        let cookie: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        write_secret(&sandbox.cookie_file(), &cookie);
        sandbox
    }

    /// The keys of the sandbox's clients (the root admin key among them).
    pub fn keys(&self) -> &Arc<KeyRing> {
        &self.keys
    }

    /// The file holding the root admin key.
    pub fn admin_key_file(&self) -> PathBuf {
        self.path().join("admin.key")
    }

    /// The sandbox's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster cookie every node of the sandbox reads (`cluster.cookie-file`): random,
    /// mode 0600.
    pub fn cookie_file(&self) -> PathBuf {
        self.path().join("cluster.cookie")
    }

    /// The SQLite file that [`Sandbox::shared_node`] nodes share.
    pub fn shared_sqlite(&self) -> PathBuf {
        self.path().join("shared.sqlite")
    }

    /// A node `id` with its own data directory and its own SQLite file in it.
    pub fn node(&self, id: &str) -> NodeSpec {
        let data_dir = self.path().join(id);
        let sqlite = data_dir.join("engram.sqlite");
        NodeSpec::new(self, id, data_dir, sqlite)
    }

    /// A node `id` with its own data directory whose store is the sandbox's shared SQLite
    /// file, as the nodes of a local cluster share one.
    pub fn shared_node(&self, id: &str) -> NodeSpec {
        NodeSpec::new(self, id, self.path().join(id), self.shared_sqlite())
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

/// What to start: a node id, its files and its settings.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    id: String,
    data_dir: PathBuf,
    sqlite: PathBuf,
    /// `table -> key -> TOML literal`.
    settings: BTreeMap<String, BTreeMap<String, String>>,
    /// A command the node is started under (e.g. `ip netns exec NAME`), if any.
    wrapper: Vec<String>,
    keys: Arc<KeyRing>,
    /// The CA the harness's clients trust for the gateway, when it serves HTTPS.
    gateway_ca: Option<PathBuf>,
    _sandbox: Arc<TempDir>,
}

impl NodeSpec {
    fn new(sandbox: &Sandbox, id: &str, data_dir: PathBuf, sqlite: PathBuf) -> Self {
        let spec = NodeSpec {
            id: id.to_owned(),
            data_dir,
            sqlite,
            settings: BTreeMap::new(),
            wrapper: Vec::new(),
            keys: sandbox.keys.clone(),
            gateway_ca: None,
            _sandbox: sandbox.dir.clone(),
        };
        let (data_dir, sqlite) = (path_str(&spec.data_dir), path_str(&spec.sqlite));
        let admin_key = path_str(&sandbox.admin_key_file());
        let cookie = path_str(&sandbox.cookie_file());
        spec.set("node.id", id)
            .set("security.admin-key-file", admin_key)
            .set("cluster.cookie-file", cookie)
            .set("node.data-dir", data_dir)
            .set("storage.sqlite.path", sqlite)
            .set("http.listen", "127.0.0.1:0")
            .set("cluster.listen", "127.0.0.1:0")
            .set("log.level", "info")
            .set("log.format", "text")
            // The generative model (2 GB, seconds per message) only where a test asks for it.
            .set("distillation.model", false)
    }

    /// Sets `key` (dotted, as in `cluster.toml`: `memory.idle-timeout`,
    /// `storage.sqlite.synchronous`) to `value` (a string, number, bool or array of them).
    ///
    /// # Panics
    /// If the key has no table or the value is an object or null.
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        let (table, name) = key
            .rsplit_once('.')
            .unwrap_or_else(|| panic!("{key:?}: expected table.key"));
        let value = value.into();
        assert!(
            !matches!(value, Value::Object(_) | Value::Null),
            "{key}: {value} has no TOML form here"
        );
        // A JSON string, number, bool or array of them is also a TOML literal.
        self.settings
            .entry(table.to_owned())
            .or_default()
            .insert(name.to_owned(), value.to_string());
        self
    }

    /// Serves the gateway over HTTPS only, with the PEM files `cert` (chain) and `key`; the
    /// harness's clients of this node speak `https://` and trust only `ca`.
    pub fn https(mut self, cert: &Path, key: &Path, ca: &Path) -> Self {
        self.gateway_ca = Some(ca.to_owned());
        self.set("http.tls-cert-file", path_str(cert))
            .set("http.tls-key-file", path_str(key))
    }

    /// Links the node to its peers with mutual TLS: `ca` signs every node's certificate,
    /// `cert` and `key` are this node's (issued for `cluster.tls-server-name`).
    pub fn cluster_tls(self, ca: &Path, cert: &Path, key: &Path) -> Self {
        self.set("cluster.tls-ca-file", path_str(ca))
            .set("cluster.tls-cert-file", path_str(cert))
            .set("cluster.tls-key-file", path_str(key))
    }

    /// The CA the harness trusts for this node's gateway, when it serves HTTPS.
    pub fn gateway_ca(&self) -> Option<&Path> {
        self.gateway_ca.as_deref()
    }

    /// Starts the node under `wrapper` (a command and its arguments, the node's command line
    /// appended), e.g. `ip netns exec NAME` to run it in a network namespace.
    pub fn wrapped(mut self, wrapper: Vec<String>) -> Self {
        self.wrapper = wrapper;
        self
    }

    /// The command the node is started under, if any.
    pub fn wrapper(&self) -> &[String] {
        &self.wrapper
    }

    /// The node id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The node's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The keys its clients use.
    pub fn keys(&self) -> &Arc<KeyRing> {
        &self.keys
    }

    /// The node's SQLite file.
    pub fn sqlite_path(&self) -> &Path {
        &self.sqlite
    }

    /// Where the configuration file is written.
    pub fn config_path(&self) -> PathBuf {
        self.data_dir.with_extension("toml")
    }

    /// The configuration file's text.
    pub fn toml(&self) -> String {
        let mut text = format!(
            "# written by the engram-tests harness for node {}\n",
            self.id
        );
        for (table, keys) in &self.settings {
            text.push_str(&format!("\n[{table}]\n"));
            for (key, value) in keys {
                text.push_str(&format!("{key} = {value}\n"));
            }
        }
        text
    }

    /// Starts the node; see [`Node::start`].
    pub async fn start(&self) -> Node {
        Node::start(self.clone()).await
    }

    /// Runs `engram-node run` on this spec, which must refuse to start; returns what it
    /// printed on stderr.
    ///
    /// # Panics
    /// If the node started (exited 0), or its binary cannot run.
    pub async fn refused_start(&self) -> String {
        std::fs::create_dir_all(self.data_dir()).expect("data directory");
        std::fs::write(self.config_path(), self.toml()).expect("configuration written");
        let config = self.config_path();
        let run = tokio::task::spawn_blocking(move || {
            std::process::Command::new(super::node_binary().expect("engram-node"))
                .args(["run", "--config"])
                .arg(config)
                .env_remove("ENGRAM_ADMIN_KEY")
                .output()
                .expect("engram-node runs")
        })
        .await
        .expect("the run's thread");
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(!run.status.success(), "the node started: {stderr}");
        stderr
    }
}

/// Writes `text` to a new file at `path` that only its owner may read (a secret file).
///
/// # Panics
/// If the file cannot be written.
pub fn write_secret(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn path_str(path: &Path) -> String {
    path.to_str().expect("temporary paths are UTF-8").to_owned()
}

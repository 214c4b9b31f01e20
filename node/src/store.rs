//! Opens the configured storage backend as an [`engram_storage::Store`] with the configured
//! retry policy, and closes it.
//!
//! The node talks to storage only through `engram_storage`; this module only turns
//! `[storage]` settings into the storage crate's options. Opening blocks (file creation,
//! FoundationDB's network thread), so it runs on a blocking thread.

use engram_storage::Store;

use crate::config::{Backend, Config};
use crate::error::{Error, Result};

/// Opens the store named by `config.storage`, creating `node.data-dir` for SQLite.
pub async fn open(config: &Config) -> Result<Store> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || open_blocking(&config))
        .await
        .map_err(|err| Error::Io {
            step: "opening the store".to_owned(),
            source: err.into(),
        })?
}

fn open_blocking(config: &Config) -> Result<Store> {
    let store = match config.storage.backend {
        Backend::Sqlite => {
            let dir = &config.node.data_dir;
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                step: format!("creating node.data-dir {}", dir.display()),
                source,
            })?;
            let path = config.sqlite_path();
            let sqlite = &config.storage.sqlite;
            Store::sqlite_with(&path, sqlite.options(), sqlite.group_commit())
                .map_err(Error::storage("opening the sqlite store"))?
        }
        Backend::Fdb => open_fdb(config)?,
    };
    Ok(store.with_retry(config.storage.retry.policy()))
}

#[cfg(feature = "fdb")]
fn open_fdb(config: &Config) -> Result<Store> {
    Store::fdb(config.storage.fdb.options()).map_err(Error::storage("connecting to foundationdb"))
}

#[cfg(not(feature = "fdb"))]
fn open_fdb(_config: &Config) -> Result<Store> {
    // `Config::validate` refuses this before we get here; keep the message for callers that
    // skip validation.
    Err(Error::Storage {
        step: "opening the fdb store",
        source: engram_storage::Error::Open(
            "this engram-node was built without the `fdb` feature".to_owned(),
        ),
    })
}

/// Drops the store and, for FoundationDB, stops the client's network thread, which must
/// happen once before the process exits.
pub fn close(store: Store, backend: Backend) {
    let name = store.backend();
    drop(store);
    match backend {
        Backend::Sqlite => {}
        Backend::Fdb => {
            #[cfg(feature = "fdb")]
            engram_storage::fdb::shutdown();
        }
    }
    tracing::debug!(backend = name, "store closed");
}

#[cfg(test)]
mod tests {
    use super::open_blocking;
    use crate::config::Config;

    #[test]
    fn the_default_configuration_commits_with_synchronous_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.node.data_dir = dir.path().to_owned();
        let store = open_blocking(&config).unwrap();
        assert!(
            store.durable_commits().unwrap(),
            "the node's sqlite connection must commit with synchronous = FULL"
        );
    }
}

//! Opens the configured storage backend as an [`engram_storage::Store`] with the configured
//! retry policy, and closes it.
//!
//! The node talks to storage only through `engram_storage`; this module only turns
//! `[storage]` settings into the storage crate's options. Opening blocks (file creation,
//! FoundationDB's network thread), so it runs on a blocking thread.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
            restrict(dir, 0o700)?;
            for file in sqlite_files(&path) {
                if file.exists() {
                    restrict(&file, 0o600)?;
                }
            }
            let sqlite = &config.storage.sqlite;
            Store::sqlite_with(&path, sqlite.options(), sqlite.group_commit())
                .map_err(Error::storage("opening the sqlite store"))?
        }
        Backend::Fdb => open_fdb(config)?,
    };
    Ok(store.with_retry(config.storage.retry.policy()))
}

/// The store file and the WAL and shared-memory files SQLite keeps beside it.
fn sqlite_files(path: &Path) -> [PathBuf; 3] {
    let beside = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [path.to_owned(), beside("-wal"), beside("-shm")]
}

/// Takes every permission of group and others off `path` (made by an earlier version, or
/// under another umask), leaving `mode` at most: the data directory 0700, store files 0600.
fn restrict(path: &Path, mode: u32) -> Result<()> {
    let io = |source| Error::Io {
        step: format!("restricting {} to mode {mode:04o}", path.display()),
        source,
    };
    let now = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
    if now & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(now & mode)).map_err(io)?;
        tracing::info!(path = %path.display(), from = format!("{now:04o}"), to = format!("{:04o}", now & mode), "restricted a data file open to group or others");
    }
    Ok(())
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

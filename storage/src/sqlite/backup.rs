//! Online backups of a SQLite store: a consistent copy of the whole file taken while nodes
//! keep writing to it (`engram-node backup`).
//!
//! The copy is made with `VACUUM INTO`, which reads the store in one read transaction (a
//! snapshot: every write committed before it began, none after) and writes a compacted
//! database without a WAL. It is written to a temporary file next to the target, checked
//! (`PRAGMA quick_check`), made durable, and only then renamed to the target name, so a crash
//! or a failed check never leaves a file under the backup's name that is not a whole backup.
//! Values stay as stored: sealed values stay sealed under the deployment's master keys.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::map_err;
use crate::error::{Error, Result};

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The backup file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Copies the store at `from` into a new file `to` while other connections may write to it.
/// Refuses a `to` that exists, and a `from` that is not there (it never creates a store).
pub fn backup(from: &Path, to: &Path, busy_timeout: Duration) -> Result<Backup> {
    if to.exists() {
        return Err(Error::Open(format!(
            "{} exists: a backup never overwrites a file",
            to.display()
        )));
    }
    let partial = partial_path(to);
    // A leftover of an interrupted backup is not anyone's data.
    let _ = std::fs::remove_file(&partial);
    let result = copy(from, &partial, busy_timeout).and_then(|()| publish(&partial, to));
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result?;
    let bytes = std::fs::metadata(to)
        .map_err(|e| Error::Open(format!("{}: {e}", to.display())))?
        .len();
    Ok(Backup {
        path: to.to_owned(),
        bytes,
    })
}

/// The temporary name of a backup being written.
fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_owned();
    name.push(".partial");
    to.with_file_name(name)
}

fn copy(from: &Path, partial: &Path, busy_timeout: Duration) -> Result<()> {
    // Read-write without create: a missing store is an error, not a new empty one; WAL
    // readers need the shared-memory file writable.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(from, flags)
        .map_err(|e| Error::Open(format!("{}: {e}", from.display())))?;
    conn.busy_timeout(busy_timeout).map_err(map_err)?;
    let target = partial
        .to_str()
        .ok_or_else(|| Error::Open(format!("{}: not a UTF-8 path", partial.display())))?;
    conn.execute("VACUUM INTO ?1", [target]).map_err(map_err)?;
    drop(conn);

    let copy = Connection::open_with_flags(partial, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| Error::Open(format!("{}: {e}", partial.display())))?;
    let check: String = copy
        .query_row("PRAGMA quick_check", [], |row| row.get(0))
        .map_err(map_err)?;
    if check != "ok" {
        return Err(Error::Open(format!(
            "the copy failed its integrity check: {check}"
        )));
    }
    Ok(())
}

/// Makes the finished copy durable and gives it its name.
fn publish(partial: &Path, to: &Path) -> Result<()> {
    let io = |what: &Path, e: std::io::Error| Error::Open(format!("{}: {e}", what.display()));
    File::open(partial)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(partial, e))?;
    std::fs::rename(partial, to).map_err(|e| io(to, e))?;
    // The rename itself is durable once the directory is synced.
    let dir = to
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

#[cfg(test)]
mod tests;

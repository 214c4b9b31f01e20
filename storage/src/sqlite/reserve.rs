//! Room kept on the store's filesystem for the node's own writes once the disk fills: a file
//! of `reserve` bytes beside the database, written out in full (a sparse file would hold no
//! room). When a transaction fails because the disk is full, the file is removed, so that the
//! small writes a node cannot do without (its heartbeat and leases, audit entries) find room
//! while clients' writes are refused ([`crate::Store::disk_full`], answered 507 by the node)
//! and reads go on. Once the filesystem has room for the reserve twice over, the reserve is
//! written again and writes are accepted again.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The reserve file of one store and whether it is released.
#[derive(Debug)]
pub(crate) struct Reserve {
    path: PathBuf,
    dir: PathBuf,
    bytes: u64,
    /// Whether the file is absent: never made yet, or removed for a full disk.
    released: AtomicBool,
}

impl Reserve {
    /// The reserve of the database at `db`, made now if the filesystem has room for it;
    /// `None` when `bytes` is 0.
    pub(crate) fn keep(db: &Path, bytes: u64) -> Option<Reserve> {
        if bytes == 0 {
            return None;
        }
        let dir = db
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_owned);
        let mut name = db.file_name().unwrap_or_default().to_owned();
        name.push(".reserve");
        let reserve = Reserve {
            path: dir.join(name),
            dir,
            bytes,
            released: AtomicBool::new(true),
        };
        let kept = std::fs::metadata(&reserve.path).is_ok_and(|m| m.len() == bytes);
        if kept {
            reserve.released.store(false, Ordering::SeqCst);
        } else if !reserve.refill() {
            tracing::warn!(
                path = %reserve.path.display(),
                bytes,
                "the store's filesystem has no room for its reserve: writes are refused until it has"
            );
        }
        Some(reserve)
    }

    /// Bytes free on the filesystem for this process, if it can tell.
    fn free(&self) -> Option<u64> {
        let stat = rustix::fs::statvfs(&self.dir).ok()?;
        Some(stat.f_bavail.saturating_mul(stat.f_frsize))
    }

    /// Writes the reserve out if the filesystem has room for it twice over; whether it is
    /// kept now.
    fn refill(&self) -> bool {
        if self
            .free()
            .is_none_or(|free| free < self.bytes.saturating_mul(2))
        {
            return false;
        }
        let written = (|| -> std::io::Result<()> {
            let mut file = std::fs::File::create(&self.path)?;
            let block = vec![0u8; 64 * 1024];
            let mut left = self.bytes;
            while left > 0 {
                let n = usize::try_from(left.min(block.len() as u64)).unwrap_or(block.len());
                file.write_all(&block[..n])?;
                left -= n as u64;
            }
            file.sync_all()
        })();
        match written {
            Ok(()) => {
                if self.released.swap(false, Ordering::SeqCst) {
                    tracing::info!(bytes = self.bytes, "the store's reserve is kept again");
                }
                true
            }
            Err(err) => {
                let _ = std::fs::remove_file(&self.path);
                tracing::warn!(error = %err, "the store's reserve could not be written");
                false
            }
        }
    }

    /// Removes the reserve after a write failed for a full disk, once; whether it was
    /// removed now.
    pub(crate) fn release(&self) -> bool {
        let now = !self.released.swap(true, Ordering::SeqCst);
        if now {
            let _ = std::fs::remove_file(&self.path);
            tracing::warn!(
                bytes = self.bytes,
                "the store's disk is full: its reserve is released for the node's own writes; \
                 clients' writes are refused until there is room again"
            );
        }
        now
    }

    /// Whether the reserve is released (not kept now), without trying to make it again.
    pub(crate) fn released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Whether clients' writes are to be refused: the reserve is released and the filesystem
    /// has not room enough to make it again.
    pub(crate) fn full(&self) -> bool {
        self.released.load(Ordering::SeqCst) && !self.refill()
    }
}

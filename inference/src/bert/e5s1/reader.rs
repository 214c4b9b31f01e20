//! A cursor over an E5S1 image: little-endian fields, each read checked against the end of
//! the file, failing with the file's path and what was being read.

use std::path::Path;

use crate::error::{Error, Result};

/// Reads little-endian fields, failing with the file's path on truncation.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`, read from `path`.
    pub(super) fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Reader {
            bytes,
            pos: 0,
            path,
        }
    }

    pub(super) fn error(&self, reason: String) -> Error {
        Error::Format {
            path: self.path.to_path_buf(),
            reason,
        }
    }

    pub(super) fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        let slice = self
            .pos
            .checked_add(len)
            .and_then(|end| self.bytes.get(self.pos..end));
        let slice = slice
            .ok_or_else(|| self.error(format!("truncated in the {what} at byte {}", self.pos)))?;
        self.pos += len;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0_u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub(super) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(super) fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }

    /// An i32 count, which must not be negative.
    pub(super) fn count(&mut self, what: &str) -> Result<usize> {
        let value = self.i32(what)?;
        usize::try_from(value).map_err(|_| self.error(format!("negative {what} {value}")))
    }
}

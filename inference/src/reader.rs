//! A cursor over a model file's bytes (an E5S1 image, a GGUF header): little-endian fields,
//! each read checked against the end of the bytes, failing with the file's path and what was
//! being read.

use std::path::Path;

use crate::error::{Error, Result};

/// The whole of the model file `path`: [`Error::ModelMissing`] when it is not there.
pub(crate) fn read_model_file(path: &Path) -> Result<Vec<u8>> {
    if !path.is_file() {
        return Err(Error::ModelMissing {
            path: path.to_path_buf(),
        });
    }
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads little-endian fields, failing with the file's path on truncation.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`, read from `path`.
    pub(crate) fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Reader {
            bytes,
            pos: 0,
            path,
        }
    }

    pub(crate) fn error(&self, reason: String) -> Error {
        Error::Format {
            path: self.path.to_path_buf(),
            reason,
        }
    }

    pub(crate) fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
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

    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// Bytes read so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }

    /// An i32 count, which must not be negative.
    pub(crate) fn count(&mut self, what: &str) -> Result<usize> {
        let value = self.i32(what)?;
        usize::try_from(value).map_err(|_| self.error(format!("negative {what} {value}")))
    }
}

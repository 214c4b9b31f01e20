//! An on-disk cache of embeddings for the retrieval benchmark, so that reruns skip the
//! encoder: one append-only file per model of records (key: u64, dimension: u32, values:
//! f32 ...; little-endian), the key a 64-bit FNV-1a hash of model name, role and text.
//!
//! A torn last record (an interrupted run) is ignored on load. Nothing here is product code.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The cache of one model.
#[derive(Debug)]
pub struct EmbeddingCache {
    path: Option<PathBuf>,
    vectors: HashMap<u64, Vec<f32>>,
}

/// 64-bit FNV-1a of the parts, each followed by a 0xff separator.
pub fn key(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

impl EmbeddingCache {
    /// A cache that keeps nothing on disk.
    pub fn in_memory() -> Self {
        EmbeddingCache {
            path: None,
            vectors: HashMap::new(),
        }
    }

    /// Opens (or starts) the cache file `dir/<model>.bin`.
    pub fn open(dir: &Path, model: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{model}.bin"));
        let mut vectors = HashMap::new();
        if path.exists() {
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let mut at = 0;
            while at + 12 <= bytes.len() {
                let key = u64::from_le_bytes(bytes[at..at + 8].try_into()?);
                let dim = u32::from_le_bytes(bytes[at + 8..at + 12].try_into()?) as usize;
                let end = at + 12 + dim * 4;
                if end > bytes.len() {
                    break;
                }
                let vector = bytes[at + 12..end]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                vectors.insert(key, vector);
                at = end;
            }
        }
        Ok(EmbeddingCache {
            path: Some(path),
            vectors,
        })
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    /// The vector under `key`.
    pub fn get(&self, key: u64) -> Option<&[f32]> {
        self.vectors.get(&key).map(Vec::as_slice)
    }

    /// Adds vectors and appends them to the file.
    pub fn insert(&mut self, entries: Vec<(u64, Vec<f32>)>) -> Result<()> {
        if let Some(path) = &self.path {
            let file: File = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            let mut out = BufWriter::new(file);
            for (key, vector) in &entries {
                out.write_all(&key.to_le_bytes())?;
                out.write_all(&u32::try_from(vector.len())?.to_le_bytes())?;
                for x in vector {
                    out.write_all(&x.to_le_bytes())?;
                }
            }
            out.flush()?;
        }
        self.vectors.extend(entries);
        Ok(())
    }
}

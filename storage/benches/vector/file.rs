//! The vector bench's real embeddings: the file that `embed_corpus`
//! (`tests/src/bin/embed_corpus.rs`) writes. The `storage` crate may not depend on `inference`,
//! so the vectors are made there and read here.
//!
//! Format: a 20-byte header, [`MAGIC`] then the dimension, the number of corpus rows and the
//! number of query rows as `u32` little-endian; then the corpus rows, then the query rows, each
//! `dimension` `f32` little-endian.

use std::path::{Path, PathBuf};

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"ENGRVEC1";
const HEADER_LEN: usize = 20;

/// A file's vectors.
pub struct Vectors {
    /// Length of every row.
    pub dimension: usize,
    /// The rows to index, in file order.
    pub corpus: Vec<Vec<f32>>,
    /// The rows to search for.
    pub queries: Vec<Vec<f32>>,
}

/// `path` as given if absolute, else from the workspace root: `cargo bench` runs the bench in
/// `storage/`, while `embed_corpus` writes from the root.
pub fn resolve(path: &str) -> PathBuf {
    let path = Path::new(path);
    let path = if path.is_absolute() {
        path.to_owned()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
    };
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// Reads `path`; panics with the reason if it is not a whole file of this format.
pub fn load(path: &Path) -> Vectors {
    let bytes = std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e} (make it with `cargo run --release -p engram-tests --bin embed_corpus`)",
            path.display()
        )
    });
    assert!(
        bytes.len() >= HEADER_LEN && bytes[..8] == MAGIC[..],
        "{} is not an embed_corpus file",
        path.display()
    );
    let field = |i: usize| {
        let at = 8 + 4 * i;
        u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize
    };
    let (dimension, n_corpus, n_queries) = (field(0), field(1), field(2));
    let expected = HEADER_LEN + (n_corpus + n_queries) * dimension * 4;
    assert!(
        dimension > 0 && bytes.len() == expected,
        "{}: {} bytes, the header announces {expected}",
        path.display(),
        bytes.len()
    );
    let mut rows = bytes[HEADER_LEN..].chunks_exact(dimension * 4).map(|row| {
        row.chunks_exact(4)
            .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
            .collect::<Vec<f32>>()
    });
    let corpus = rows.by_ref().take(n_corpus).collect();
    let queries = rows.collect();
    Vectors {
        dimension,
        corpus,
        queries,
    }
}

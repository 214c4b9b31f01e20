//! Build script: keeps libtorch's CUDA library linked into this crate's own test binaries and
//! passes libtorch's directory on to the binaries that depend on this crate.
//!
//! torch-sys links `torch_cuda`, but rustc links with `--as-needed`, so a binary that uses no
//! CUDA symbol directly drops it and `Cuda::is_available()` then says false even on a GPU
//! machine (tch issues #980 and #907). Link arguments of a library's build script reach only
//! that package's own binaries and tests, so every binary crate that runs an encoder repeats
//! them in its own `build.rs`, reading `DEP_ENGRAM_INFERENCE_LIBTORCH_LIB` set from here.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    // Metadata for dependents (`links = "engram_inference"`).
    println!("cargo:libtorch_lib={lib}");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch");
    }
}

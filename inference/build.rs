//! Build script: compiles the int8 linear layers' shim over libtorch (`cpp/qlinear.cpp`),
//! keeps libtorch's CUDA library linked into this crate's own test binaries, and passes
//! libtorch's directory on to the binaries that depend on this crate.
//!
//! torch-sys links `torch_cuda`, but rustc links with `--as-needed`, so a binary that uses no
//! CUDA symbol directly drops it and `Cuda::is_available()` then says false even on a GPU
//! machine (tch issues #980 and #907). Link arguments of a library's build script reach only
//! that package's own binaries and tests. The node does not link the CUDA half: it loads it
//! at run time where NVIDIA's driver is (`src/cuda.rs`), finding it through the rpath its own
//! `build.rs` sets from `DEP_ENGRAM_INFERENCE_LIBTORCH_LIB`, passed on from here.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cpp/qlinear.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    // libtorch's headers sit beside its libraries (the torch wheel's and the zip's layout),
    // and the shim is compiled with the flags torch-sys compiles its own wrapper with.
    let include = Path::new(&lib).join("../include");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .file("cpp/qlinear.cpp")
        .compile("engram_qlinear");
    // Metadata for dependents (`links = "engram_inference"`).
    println!("cargo:libtorch_lib={lib}");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch");
    }
}

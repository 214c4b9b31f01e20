//! Build script: libtorch's libraries are found through the rpath. The node links libtorch's
//! CPU library only (rustc's `--as-needed` drops `libtorch_cuda.so`, which it names no symbol
//! of): on a machine without a GPU, CUDA's libraries would hold about 230 MB of its memory.
//! Where NVIDIA's driver is, `engram_inference` loads the CUDA half the first time a device
//! is chosen, found by this rpath. engram-inference's build script passes libtorch's folder
//! on.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(lib) = std::env::var("DEP_ENGRAM_INFERENCE_LIBTORCH_LIB") else {
        return;
    };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}

//! Build script: keep libtorch's CUDA library linked so `cuda_if_available()` sees GPUs
//! (tch issues #980, #907). engram-inference's build script passes libtorch's folder on.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(lib) = std::env::var("DEP_ENGRAM_INFERENCE_LIBTORCH_LIB") else {
        return;
    };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch");
    }
}

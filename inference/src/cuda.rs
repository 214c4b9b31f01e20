//! libtorch's CUDA half, loaded only where NVIDIA's driver is.
//!
//! A binary that links `libtorch_cuda.so` loads it, cuBLAS and the rest of CUDA's libraries
//! at start-up, GPU or not: on a CPU-only machine about 230 MB of the node's resident memory
//! (their pages, and 82 MB of cuBLASLt's zero-initialised data). The node links libtorch's
//! CPU library only, and [`load_cuda`] loads the CUDA half (its symbols global, for the
//! process's life) the first time a device is chosen, where the driver's library
//! `libcuda.so.1` loads: libtorch's CUDA hooks register as it loads, and `tch::Cuda` then
//! sees the GPUs. Binaries that link it anyway (this crate's tests and benches) find it
//! already loaded.

use std::sync::OnceLock;

/// Whether libtorch's CUDA half is in the process, once asked.
static LOADED: OnceLock<bool> = OnceLock::new();

/// Loads `libtorch_cuda.so` where NVIDIA's driver library loads; returns whether libtorch's
/// CUDA half is in the process (without a driver no GPU could be used anyway).
pub fn load_cuda() -> bool {
    *LOADED.get_or_init(|| {
        #[allow(unsafe_code)]
        // SAFETY: `dlopen` with constant, NUL-terminated names; the handles are never closed,
        // so nothing they loaded is unloaded while in use.
        unsafe {
            let driver = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if driver.is_null() {
                return false;
            }
            let torch = libc::dlopen(
                c"libtorch_cuda.so".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_GLOBAL,
            );
            if torch.is_null() {
                tracing::warn!(
                    "NVIDIA's driver is present but libtorch_cuda.so did not load: the node runs on the CPU"
                );
                return false;
            }
            true
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without NVIDIA's driver (its control device absent) nothing is loaded and no GPU is
    /// seen; with it, libtorch's CUDA half is in the process (this test binary links it).
    #[test]
    fn cuda_loads_only_where_the_driver_is() {
        let driver = std::path::Path::new("/dev/nvidiactl").exists();
        assert_eq!(load_cuda(), driver, "driver present: {driver}");
        if !driver {
            assert_eq!(crate::cuda_devices(), 0);
        }
    }
}

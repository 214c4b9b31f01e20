//! Handing the load's freed memory back to the system. A load reads every weight in float32
//! and keeps its int8 codes: glibc serves the codes (under its 32 MB mmap threshold, which a
//! freed float32 weight raises to that) from its heaps, between the freed float32 buffers and
//! file blocks, and keeps those holes. For the 1.5B in int8 rows the process held 3.5 GB
//! resident after the load and 2.2 GB once trimmed (`docs/benchmarks.md`, "Memory").

/// Returns the free pages of glibc's heaps to the system (`malloc_trim`); nothing elsewhere.
pub(super) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` takes no pointer and frees nothing in use: it walks glibc's own
    // arenas under their locks and advises the kernel that their free pages are unneeded.
    unsafe {
        libc::malloc_trim(0);
    }
}

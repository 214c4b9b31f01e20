//! glibc's allocator, which serves libtorch's tensors (the node's own Rust allocations go to
//! mimalloc): its settings at start-up, and handing its freed pages back to the system.
//!
//! By default glibc maps a block of its own only above a threshold that each freed mapped
//! block raises, up to 32 MB: after a decoder's load has freed its float32 weights, every
//! tensor below 32 MB (int8 codes, activations, KV caches) comes from glibc's heaps, one per
//! thread that allocates, and the holes between them stay resident. [`tune_allocator`] fixes
//! the threshold at [`MMAP_THRESHOLD`] (a weight is mapped and unmapped whole; a decoding
//! step's activations and KV caches, smaller, reuse the heaps), the heap top's trim at
//! [`TRIM_THRESHOLD`] and the heaps at [`ARENA_MAX`] (docs/decisions/0023).

/// Blocks of at least this many bytes get a mapping of their own (glibc's default starts at
/// 128 KiB and rises with each freed mapped block).
pub const MMAP_THRESHOLD: i32 = 4 << 20;

/// Free memory at the top of a heap beyond this many bytes is returned at once. Not glibc's
/// 128 KiB: a question's forward pass frees and takes back tensors of tens of kilobytes
/// operator after operator, and a heap trimmed past 128 KiB gave them back to the system and
/// faulted them in again each time, a third more time for a lone question (M4 under
/// `GLIBC_TUNABLES`: 7.0 against 9.3-10.9 ms). What stays over it is returned by
/// [`release_free_memory`].
pub const TRIM_THRESHOLD: i32 = 32 << 20;

/// glibc's heaps at most (its default: eight per core).
pub const ARENA_MAX: i32 = 2;

/// Sets glibc's allocator as the module says, unless `GLIBC_TUNABLES` names any of its malloc
/// settings (the operator's then stand, and glibc's defaults for the others). Call it first
/// in `main`, before any thread starts. Returns whether it set them.
pub fn tune_allocator() -> bool {
    if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
        return false;
    }
    set_allocator()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_allocator() -> bool {
    let settings = [
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (libc::M_ARENA_MAX, ARENA_MAX),
    ];
    settings.iter().all(|&(param, value)| {
        // SAFETY: `mallopt` takes two integers and changes glibc's allocator settings under
        // its own lock; it touches no memory of the caller's, and blocks allocated before keep
        // working under the new settings.
        unsafe { libc::mallopt(param, value) == 1 }
    })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_allocator() -> bool {
    false
}

/// Returns the free pages of glibc's heaps to the system (`malloc_trim`): after a decoder's
/// load, and when decoding goes idle (its KV caches and activations freed).
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` takes no pointer and frees nothing in use: it walks glibc's own
    // arenas under their locks and advises the kernel that their free pages are unneeded.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_are_accepted_and_a_trim_runs() {
        // Whatever the environment, setting them again is harmless.
        if std::env::var("GLIBC_TUNABLES").is_err() && cfg!(target_env = "gnu") {
            assert!(tune_allocator());
        }
        let block = vec![1_u8; 8 << 20];
        drop(block);
        release_free_memory();
    }
}

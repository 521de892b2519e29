//! The process's "OS randomness", drawn from the schedule's seed on a
//! schedule's thread: what makes the drivers under simulation replay.
//!
//! redis-rs's cluster driver iterates std `HashMap`s (whose hasher keys std
//! draws once per thread from `getrandom(2)`) and picks a random node with
//! `rand`'s thread generator (seeded from `getrandom(2)` too). This module
//! defines the C function `getrandom`, exported from the simulator's binary
//! (build.rs: `--export-dynamic-symbol=getrandom`), so that both std (which
//! finds it with `dlsym`) and the `getrandom` crate (likewise) call it
//! instead of libc's. On a thread that [`seed`]ed it, it fills the buffer
//! from the seed (splitmix64); on any other thread it asks the kernel, as
//! libc's would. Every schedule runs on a thread of its own
//! (`schedule::run`), so each thread's hasher keys and generator come from
//! its schedule's seed alone. madsim intercepts the same call for the same
//! reason.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Seeds this thread's `getrandom` (None: the kernel's again).
pub fn seed(seed: Option<u64>) {
    STATE.with(|s| s.set(seed));
}

/// Fills `buf` from this thread's seed; false if it has none.
fn fill(buf: &mut [u8]) -> bool {
    STATE.with(|s| {
        let Some(mut state) = s.get() else {
            return false;
        };
        for chunk in buf.chunks_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
        s.set(Some(state));
        true
    })
}

/// `getrandom(2)` as glibc declares it.
///
/// # Safety
///
/// `buf` must be valid for writes of `len` bytes, as for libc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getrandom(
    buf: *mut libc::c_void,
    len: libc::size_t,
    flags: libc::c_uint,
) -> libc::ssize_t {
    if len > 0 {
        // SAFETY: the caller's promise, as for libc's getrandom.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        if fill(bytes) {
            return len as libc::ssize_t;
        }
    }
    // SAFETY: the kernel's call with the caller's arguments.
    unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) as libc::ssize_t }
}

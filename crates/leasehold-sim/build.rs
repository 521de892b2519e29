//! Exports the simulator's own `getrandom` from its binary, so that std and
//! the `getrandom` crate, which look the function up with `dlsym`, find it
//! before libc's (src/entropy.rs says why). A binary built without the
//! simulation seam has no such function, and the flag then does nothing.

fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=getrandom");
}

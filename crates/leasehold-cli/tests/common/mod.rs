//! What the CLI's integration tests share: the binary, a temporary
//! directory, and reading a child's pipe without blocking the test.

#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;

/// The binary, with a clean environment for the variables it reads (every
/// `LEASEHOLD_*` and `RUST_LOG`), and backtraces switched on so a panic
/// would show.
pub fn leasehold() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LEASEHOLD_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    cmd
}

/// Reads `pipe` to its end on a thread; the text arrives on the channel.
pub fn read_in_background(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

/// A fresh temporary directory, removed on drop.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("leasehold-cli-test-")
        .tempdir()
        .expect("temp dir")
}

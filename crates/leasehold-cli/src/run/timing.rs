//! Bench builds only (feature `bench`): when `LEASEHOLD_BENCH_RUN_TIMES`
//! names a file, `run` and its launcher append when each step of a run
//! happened, one line per step: `RUN_PID STEP MICROS` (CLOCK_MONOTONIC,
//! the same clock in every process). `leasehold bench run-stampede` reads
//! them to break a job's overhead down. Without the feature, or without
//! the variable, [`mark`] does nothing.

/// The variable naming the file.
#[cfg(feature = "bench")]
pub(crate) const VAR: &str = "LEASEHOLD_BENCH_RUN_TIMES";

/// Appends `step` of the run `run_pid` (this process's, or the launcher's
/// parent) with the time now.
#[cfg(feature = "bench")]
pub(crate) fn mark(run_pid: nix::unistd::Pid, step: &str) {
    use std::io::Write;
    use std::sync::OnceLock;
    static FILE: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os(VAR)?;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .ok()
    });
    if let Some(mut file) = file.as_ref() {
        let micros = crate::measure::monotonic_ns() / 1000;
        // One write(2) per line with O_APPEND: lines of processes never mix.
        let _ = file.write_all(format!("{run_pid} {step} {micros}\n").as_bytes());
    }
}

/// Nothing, in a build without `bench`.
#[cfg(not(feature = "bench"))]
pub(crate) fn mark(_run_pid: nix::unistd::Pid, _step: &str) {}

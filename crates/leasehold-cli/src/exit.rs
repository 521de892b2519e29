//! Exit codes (sysexits) and the failure that carries one.

use std::sync::atomic::{AtomicBool, Ordering};

use leasehold::Error;

/// EX_USAGE: the command line was wrong, including what only shows against
/// the server: a semaphore whose users disagree on its number of permits.
pub(crate) const USAGE: u8 = 64;
/// EX_DATAERR: a lock's key holds data of another type.
pub(crate) const DATAERR: u8 = 65;
/// EX_UNAVAILABLE: Redis unreachable, unsupported or failing, or the TLS
/// handshake with it failed; a program we need (redis-server for the demo)
/// is missing.
pub(crate) const UNAVAILABLE: u8 = 69;
/// EX_SOFTWARE: the lease was lost while the command ran (it may have run
/// without the lock), or an internal error.
pub(crate) const SOFTWARE: u8 = 70;
/// EX_TEMPFAIL: the lock is busy, the wait timed out, or the token does not
/// own the lock; trying again later may work.
pub(crate) const TEMPFAIL: u8 = 75;
/// EX_NOPERM: Redis refused the credentials or a permission.
pub(crate) const NOPERM: u8 = 77;
/// What shells return for a command that could not be executed.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// What shells return for a command that was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit code for an error from the library. The one place the mapping
/// lives.
///
/// `UpgradeRefused` (an owner holding reads asked to write) cannot happen
/// through this tool, where each process is a fresh owner holding one
/// guard; it maps to USAGE because the only way to cause it is a caller
/// reusing one owner for a read and then a write, and nothing was run.
pub(crate) fn code_for(err: &Error) -> u8 {
    match err {
        Error::InvalidArgument(_)
        | Error::PermitsMismatch { .. }
        | Error::UpgradeRefused { .. } => USAGE,
        Error::WrongType { .. } => DATAERR,
        Error::Unreachable { .. }
        | Error::Tls { .. }
        | Error::QuorumNotReached { .. }
        | Error::Unsupported(_)
        | Error::Redis(_) => UNAVAILABLE,
        Error::Lost { .. } => SOFTWARE,
        Error::Timeout { .. } | Error::NotOwner { .. } => TEMPFAIL,
        Error::Auth { .. } => NOPERM,
        // A variant added to the library after this tool was written: an
        // error we cannot classify is an internal one.
        _ => SOFTWARE,
    }
}

/// Set once `--json` is known: failures are reported as JSON objects.
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// Reports failures as JSON objects on stderr from now on (`--json`).
pub(crate) fn json_errors() {
    JSON_ERRORS.store(true, Ordering::Relaxed);
}

/// Set by `-q`: warnings are not printed.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Prints no warnings from now on (`-q`).
pub(crate) fn quiet() {
    QUIET.store(true, Ordering::Relaxed);
}

/// Prints a warning on stderr: `leasehold: warning: MESSAGE`, or under
/// `--json` a [`json_line`] at level WARN; nothing with `-q`.
pub(crate) fn warning(message: impl Into<String>) {
    if !QUIET.load(Ordering::Relaxed) {
        say("warning", &one_line(message.into()));
    }
}

/// Prints a notice of what leasehold does (a lost lease, a command's
/// leftovers stopped) on stderr: `leasehold: MESSAGE`, or under `--json` a
/// [`json_line`] at level INFO.
pub(crate) fn notice(message: impl Into<String>) {
    say("notice", &one_line(message.into()));
}

/// One line of `--json` on stderr, in the one schema every line there
/// shares, the library's events included (main.rs): `timestamp` (RFC 3339,
/// UTC), `level` (`ERROR`, `WARN`, `INFO`, ...), `message`, and fields of
/// its own (an error's `exit_code`).
pub(crate) fn json_line(level: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        "level": level,
        "message": message,
    })
}

/// One line on stderr, text or JSON (a warning at level WARN, a notice at
/// INFO).
fn say(what: &str, message: &str) {
    if JSON_ERRORS.load(Ordering::Relaxed) {
        let level = if what == "warning" { "WARN" } else { "INFO" };
        eprintln!("{}", json_line(level, message));
    } else if what == "warning" {
        eprintln!("leasehold: warning: {message}");
    } else {
        eprintln!("leasehold: {message}");
    }
}

/// Why the program stops: the line to print (without the `leasehold: `
/// prefix) and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code.
    pub(crate) code: u8,
    /// One line saying what went wrong and what to do.
    pub(crate) message: String,
}

impl Failure {
    /// A failure with an explicit exit code.
    pub(crate) fn with_code(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: one_line(message.into()),
        }
    }

    /// A usage error (exit 64).
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::with_code(USAGE, message)
    }

    /// Prints the failure as one line on stderr (under `--json` a JSON
    /// object of [`json_line`]'s schema at level ERROR, with `exit_code`) and returns its exit code.
    /// A failure that exits 0 prints nothing: only a conflict the user made
    /// exit 0 (`-E 0`, "skip quietly", as `flock -n` does) is one, and a
    /// line on stderr would have cron mail every skip.
    pub(crate) fn report(&self) -> u8 {
        if self.code == 0 {
            return 0;
        }
        if JSON_ERRORS.load(Ordering::Relaxed) {
            let mut object = json_line("ERROR", &self.message);
            object["exit_code"] = self.code.into();
            eprintln!("{object}");
        } else {
            eprintln!("leasehold: {}", self.message);
        }
        self.code
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        let code = code_for(&err);
        match err {
            // The library's text names its own setter; here the flag.
            Error::Timeout { name, waited } => Failure::with_code(
                code,
                format!(
                    "timed out after {} waiting for lock {name:?}: another holder kept it; \
                     wait longer (--wait) or check who holds it (`leasehold status {name}`)",
                    crate::output::short(waited)
                ),
            ),
            Error::Unreachable { addr, source } => Failure::with_code(
                code,
                format!(
                    "cannot reach Redis at {addr}: {source}; check that the server runs and \
                     that --url (or LEASEHOLD_URL) names it"
                ),
            ),
            Error::Tls { addr, source } => Failure::with_code(
                code,
                format!(
                    "TLS with Redis at {addr} failed: {source}; check --tls-ca (the CA that \
                     signed the server's certificate), that the certificate names the host in \
                     --url, and --tls-cert/--tls-key if the server asks for a client certificate"
                ),
            ),
            Error::CloseIncomplete { failed, first } => Failure::with_code(
                code,
                format!(
                    "could not release {failed} lease(s) at exit; they expire by their TTL \
                     (first error: {first})"
                ),
            ),
            err => Failure::with_code(code, err.to_string()),
        }
    }
}

/// Joins the lines of a message, so every error stays one line on stderr
/// even when an underlying error's text spans several.
pub(crate) fn one_line(message: String) -> String {
    if !message.contains(['\n', '\r']) {
        return message;
    }
    message
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_wait_that_runs_out_names_the_flag_not_the_library_call() {
        let failure = Failure::from(Error::Timeout {
            name: "jobs".into(),
            waited: Duration::from_secs(5),
        });
        assert_eq!(failure.code, TEMPFAIL);
        assert!(failure.message.contains("--wait"), "{}", failure.message);
        assert!(!failure.message.contains(".wait()"), "{}", failure.message);
        assert!(
            failure.message.contains("leasehold status jobs"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn connection_errors_name_the_flags() {
        let io = || redis::RedisError::from((redis::ErrorKind::Io, "refused"));
        let failure = Failure::from(Error::Unreachable {
            addr: "127.0.0.1:1".into(),
            source: io(),
        });
        assert!(failure.message.contains("--url"), "{}", failure.message);
        let failure = Failure::from(Error::Tls {
            addr: "127.0.0.1:1".into(),
            source: io(),
        });
        assert!(failure.message.contains("--tls-ca"), "{}", failure.message);
        assert!(
            !failure.message.contains("tls_ca_cert"),
            "{}",
            failure.message
        );
    }

    fn redis_err(kind: redis::ErrorKind) -> redis::RedisError {
        redis::RedisError::from((kind, "test"))
    }

    #[test]
    fn every_library_error_maps_to_its_sysexits_code() {
        let name = || "n".to_owned();
        let cases = [
            (Error::InvalidArgument("x".into()), USAGE),
            (
                Error::PermitsMismatch {
                    name: name(),
                    permits: 3,
                    held_with: 2,
                },
                USAGE,
            ),
            (Error::UpgradeRefused { name: name() }, USAGE),
            (Error::WrongType { key: "k".into() }, DATAERR),
            (
                Error::Unreachable {
                    addr: "a".into(),
                    source: redis_err(redis::ErrorKind::Io),
                },
                UNAVAILABLE,
            ),
            (
                Error::QuorumNotReached {
                    acquired: 1,
                    needed: 2,
                    node_errors: vec!["n1: refused".into()],
                },
                UNAVAILABLE,
            ),
            (Error::Unsupported("old".into()), UNAVAILABLE),
            (
                Error::Tls {
                    addr: "a".into(),
                    source: redis_err(redis::ErrorKind::Io),
                },
                UNAVAILABLE,
            ),
            (
                Error::Redis(redis_err(redis::ErrorKind::Parse)),
                UNAVAILABLE,
            ),
            (Error::Lost { name: name() }, SOFTWARE),
            (
                Error::Timeout {
                    name: name(),
                    waited: Duration::from_secs(1),
                },
                TEMPFAIL,
            ),
            (Error::NotOwner { name: name() }, TEMPFAIL),
            (
                Error::Auth {
                    source: redis_err(redis::ErrorKind::AuthenticationFailed),
                },
                NOPERM,
            ),
        ];
        for (err, code) in cases {
            assert_eq!(code_for(&err), code, "{err:?}");
            let failure = Failure::from(err);
            assert_eq!(failure.code, code);
            assert!(!failure.message.contains('\n'));
        }
    }

    #[test]
    fn messages_are_joined_to_one_line() {
        assert_eq!(one_line("a\n  b\r\n\nc".into()), "a b c");
        assert_eq!(one_line("plain".into()), "plain");
    }
}

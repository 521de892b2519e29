//! One Python exception per [`leasehold::Error`] variant a user handles
//! differently, all under `leasehold.Error`, mapped in one place.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(leasehold, Error, PyException, "Every error of leasehold.");
create_exception!(
    leasehold,
    Timeout,
    Error,
    "The wait ran out while another holder kept the lock."
);
create_exception!(
    leasehold,
    Lost,
    Error,
    "The lease was lost (it expired or another owner took it)."
);
create_exception!(
    leasehold,
    NotOwner,
    Error,
    "This token does not own the lock; nothing was changed."
);
create_exception!(
    leasehold,
    StaleFence,
    Error,
    "A write was rejected: a newer fence was already seen."
);
create_exception!(
    leasehold,
    UpgradeRefused,
    Error,
    "A read-write lock owner holding reads asked to write."
);
create_exception!(
    leasehold,
    PermitsMismatch,
    Error,
    "Clients of one semaphore disagree on its number of permits."
);
create_exception!(
    leasehold,
    QuorumNotReached,
    Error,
    "Redlock: too few nodes agreed."
);
create_exception!(
    leasehold,
    Closed,
    Error,
    "The client was closed and takes no more locks."
);
create_exception!(
    leasehold,
    InvalidArgument,
    Error,
    "An argument out of bounds or malformed."
);
create_exception!(
    leasehold,
    WrongType,
    Error,
    "A key holds a value no leasehold lock of this kind wrote."
);
create_exception!(leasehold, Unreachable, Error, "Redis could not be reached.");
create_exception!(leasehold, AuthError, Error, "Redis refused access.");
create_exception!(
    leasehold,
    Unsupported,
    Error,
    "Not supported by this client or server."
);
create_exception!(
    leasehold,
    RedisError,
    Error,
    "Any other error Redis or the connection reported."
);
create_exception!(
    leasehold,
    UsedAfterFork,
    Error,
    "A client or guard of the parent process was used after fork()."
);

/// Adds every exception to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("Lost", py.get_type::<Lost>())?;
    m.add("NotOwner", py.get_type::<NotOwner>())?;
    m.add("StaleFence", py.get_type::<StaleFence>())?;
    m.add("UpgradeRefused", py.get_type::<UpgradeRefused>())?;
    m.add("PermitsMismatch", py.get_type::<PermitsMismatch>())?;
    m.add("QuorumNotReached", py.get_type::<QuorumNotReached>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("WrongType", py.get_type::<WrongType>())?;
    m.add("Unreachable", py.get_type::<Unreachable>())?;
    m.add("AuthError", py.get_type::<AuthError>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("RedisError", py.get_type::<RedisError>())?;
    m.add("UsedAfterFork", py.get_type::<UsedAfterFork>())?;
    Ok(())
}

/// The Python exception for `err`, with the library's message (which says
/// what to do).
pub(crate) fn to_py(err: leasehold::Error) -> PyErr {
    use leasehold::Error as E;
    let message = err.to_string();
    match err {
        E::Timeout { .. } => Timeout::new_err(message),
        E::Lost { .. } => Lost::new_err(message),
        E::NotOwner { .. } => NotOwner::new_err(message),
        E::StaleFence { .. } => StaleFence::new_err(message),
        E::UpgradeRefused { .. } => UpgradeRefused::new_err(message),
        E::PermitsMismatch { .. } => PermitsMismatch::new_err(message),
        E::QuorumNotReached { .. } | E::ReplicasNotReached { .. } => {
            QuorumNotReached::new_err(message)
        }
        E::Closed | E::CloseIncomplete { .. } => Closed::new_err(message),
        E::InvalidArgument(_) => InvalidArgument::new_err(message),
        E::WrongType { .. } => WrongType::new_err(message),
        E::Unreachable { .. } | E::Tls { .. } => Unreachable::new_err(message),
        E::Auth { .. } => AuthError::new_err(message),
        E::Unsupported(_) => Unsupported::new_err(message),
        _ => RedisError::new_err(message),
    }
}

/// The error of a client or guard used in a process forked from the one
/// that made it (`made_in`): its runtime's threads did not survive the
/// fork, so any call would hang.
pub(crate) fn forked(what: &str, made_in: u32) -> PyErr {
    UsedAfterFork::new_err(format!(
        "this {what} was made in process {} and cannot be used in this child process (pid {}) \
         after fork(): its background threads did not survive the fork. Make a new \
         leasehold.Client in the child (the parent's locks stay the parent's)",
        made_in,
        std::process::id()
    ))
}

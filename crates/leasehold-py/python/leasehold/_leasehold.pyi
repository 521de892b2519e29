"""Type stubs of the extension module (the Rust core)."""

from typing import Any, Callable, Optional

class Error(Exception):
    """Every error of leasehold."""

class Timeout(Error):
    """The wait ran out while another holder kept the lock."""

class Lost(Error):
    """The lease was lost (it expired or another owner took it)."""

class NotOwner(Error): ...
class StaleFence(Error): ...
class UpgradeRefused(Error): ...
class PermitsMismatch(Error): ...
class QuorumNotReached(Error): ...
class Closed(Error): ...
class InvalidArgument(Error): ...
class WrongType(Error): ...
class Unreachable(Error): ...
class AuthError(Error): ...
class Unsupported(Error): ...
class RedisError(Error): ...

class UsedAfterFork(Error):
    """A client or guard of the parent process was used after fork()."""

_Done = Callable[[bool, Any], None]

class Abort:
    def abort(self) -> None: ...

class Guard:
    """A held lock: lease, hold, permit, leadership or several locks at once.

    Renewed while it lives; released in the background when collected.
    Safe to use and release from any thread.
    """

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def fence(self) -> int:
        """The fencing token (TypeError for a multi_lock guard: see fences)."""
    @property
    def fences(self) -> dict[str, int]: ...
    @property
    def token(self) -> str:
        """The owner token: a capability, do not log it whole."""
    @property
    def term(self) -> int: ...
    @property
    def valid_for(self) -> float:
        """Seconds the lease is certain to last; 0.0 once lost or released."""
    @property
    def released(self) -> bool: ...
    def is_lost(self) -> bool: ...
    def lost_reason(self) -> Optional[str]: ...
    def extend(self, ttl: float, done: Optional[_Done] = None) -> Any:
        """Sets the lease to end `ttl` seconds from now; raises Lost if gone."""
    def release(self, done: Optional[_Done] = None) -> Any:
        """Gives the lock back; raises Lost if it was gone."""
    def lost(self, timeout: Optional[float] = None, done: Optional[_Done] = None) -> Any:
        """Blocks until lost or released (True) or `timeout` passes (False)."""
    def __enter__(self) -> "Guard": ...
    def __exit__(self, *exc: Any) -> None: ...

class Core:
    @staticmethod
    def connect(
        topology: str,
        urls: list[str],
        master: Optional[str] = None,
        options: Optional[dict[str, Any]] = None,
        done: Optional[_Done] = None,
    ) -> Any: ...
    def acquire(
        self,
        kind: str,
        names: list[str],
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        once: bool = False,
        owner: Optional[str] = None,
        permits: int = 1,
        value: str = "",
        done: Optional[_Done] = None,
    ) -> Any: ...
    def close(self, done: Optional[_Done] = None) -> Any: ...
    def is_closed(self) -> bool: ...
    @property
    def prefix(self) -> str: ...

"""leasehold: distributed locks on Redis, from the Rust library's core.

The same locks, keys and guarantees as the Rust crate and the `leasehold`
command line: fencing tokens, renewal by a watchdog, event-driven FIFO
waiting and a lost-lease signal. A Python holder and a Rust holder of one
name exclude each other, and fences rise across them.

    import leasehold
    client = leasehold.Client.connect("redis://127.0.0.1:6379")
    with client.lock("orders:42", ttl=30, wait=5) as guard:
        write(guard.fence)
    client.close()

Durations are seconds (int or float) or `datetime.timedelta`. Every wait
releases the GIL and stops at Ctrl-C (KeyboardInterrupt), leaving nothing
held. For asyncio, see `leasehold.aio`.
"""

from __future__ import annotations

import threading
from typing import Iterable, Optional

from . import _common
from ._common import Seconds
from ._leasehold import (
    AuthError,
    Closed,
    Error,
    Guard,
    InvalidArgument,
    Lost,
    NotOwner,
    PermitsMismatch,
    QuorumNotReached,
    RedisError,
    StaleFence,
    Timeout,
    Unreachable,
    Unsupported,
    UpgradeRefused,
    UsedAfterFork,
    WrongType,
)

__all__ = [
    "AuthError",
    "Client",
    "Closed",
    "Election",
    "Error",
    "Guard",
    "InvalidArgument",
    "Lock",
    "Lost",
    "NotOwner",
    "PermitsMismatch",
    "QuorumNotReached",
    "RedisError",
    "RwLock",
    "StaleFence",
    "Timeout",
    "Unreachable",
    "Unsupported",
    "UpgradeRefused",
    "UsedAfterFork",
    "WrongType",
]


class Lock:
    """A lock handle (cheap; nothing is sent until `acquire`).

    Made by `Client.lock`, `fair_lock`, `reentrant_lock`, `semaphore` and
    `multi_lock`. Use as a context manager, or call `acquire()` /
    `try_acquire()` for a `Guard` (itself a context manager).
    """

    def __init__(self, core, kind: str, names: list[str], ttl, wait, **extra):
        self._core = core
        self._kind = kind
        self._names = names
        self._ttl = _common.seconds(ttl, "ttl")
        self._wait = _common.seconds(wait, "wait")
        self._extra = extra
        # What `with` took, per thread: a handle shared by threads gives
        # each `with` block back its own guard.
        self._held = threading.local()

    def acquire(self) -> Guard:
        """Waits up to `wait` seconds (the library's default when None) and
        returns the guard; raises `leasehold.Timeout` if still held then."""
        return self._core.acquire(
            self._kind, self._names, self._ttl, self._wait, False, **self._extra
        )

    def try_acquire(self) -> Optional[Guard]:
        """One try: the guard, or None when someone else holds it."""
        return self._core.acquire(
            self._kind, self._names, self._ttl, self._wait, True, **self._extra
        )

    def __enter__(self) -> Guard:
        guard = self.acquire()
        self._stack().append(guard)
        return guard

    def __exit__(self, *exc) -> None:
        self._stack().pop().__exit__(*exc)

    def _stack(self) -> list[Guard]:
        if not hasattr(self._held, "guards"):
            self._held.guards = []
        return self._held.guards

    def __repr__(self) -> str:
        return f"<leasehold.Lock {self._kind} {self._names!r}>"


class RwLock:
    """A read-write lock handle: many readers or one writer. As in Rust,
    `read()` and `write()` acquire (waiting up to `wait`) and return the
    guard, itself a context manager (`with rw.read() as guard:`);
    `try_read()` / `try_write()` try once (None when busy)."""

    def __init__(self, core, name: str, ttl, wait, owner: Optional[str]):
        self._read = Lock(core, "read", [name], ttl, wait, owner=owner)
        self._write = Lock(core, "write", [name], ttl, wait, owner=owner)

    def read(self) -> Guard:
        return self._read.acquire()

    def try_read(self) -> Optional[Guard]:
        return self._read.try_acquire()

    def write(self) -> Guard:
        return self._write.acquire()

    def try_write(self) -> Optional[Guard]:
        return self._write.try_acquire()


class Election:
    """An election handle: `campaign(value)` waits to lead, `try_campaign`
    tries once; both give a `Guard` whose `term` is its fence."""

    def __init__(self, core, name: str, ttl, wait):
        self._lock = lambda value: Lock(core, "election", [name], ttl, wait, value=value)

    def campaign(self, value: str) -> Guard:
        return self._lock(value).acquire()

    def try_campaign(self, value: str) -> Optional[Guard]:
        return self._lock(value).try_acquire()


class Client:
    """A connection to Redis (one server, Redlock nodes, a Cluster or
    Sentinel), shared by threads. Closed at interpreter exit."""

    def __init__(self, core) -> None:
        self._core = core
        _common.track(core)

    @classmethod
    def connect(cls, url: str, **options) -> "Client":
        """One Redis: `redis://host:port`, `rediss://` for TLS, `unix://`.
        Options as the Rust ClientBuilder's: prefix, username, password,
        command_timeout, node_timeout, failover_wait, fence_memory,
        tls_ca_cert (PEM bytes), tls_client_cert ((cert, key) PEM bytes)."""
        return cls(_leasehold.Core.connect("url", [url], None, _common.options(options)))

    @classmethod
    def redlock(cls, urls: Iterable[str], **options) -> "Client":
        """Redlock over independent masters (a majority must agree)."""
        return cls(_leasehold.Core.connect("redlock", list(urls), None, _common.options(options)))

    @classmethod
    def cluster(cls, urls: Iterable[str], **options) -> "Client":
        """A Redis Cluster, from any of its nodes."""
        return cls(_leasehold.Core.connect("cluster", list(urls), None, _common.options(options)))

    @classmethod
    def sentinel(cls, urls: Iterable[str], master_name: str, **options) -> "Client":
        """The master that Sentinels name `master_name`, followed across failovers."""
        return cls(
            _leasehold.Core.connect("sentinel", list(urls), master_name, _common.options(options))
        )

    def lock(self, name: str, ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None) -> Lock:
        """A lease lock (not reentrant)."""
        return Lock(self._core, "lock", [name], ttl, wait)

    def fair_lock(self, name: str, ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None) -> Lock:
        """A lock whose waiters are served in arrival order."""
        return Lock(self._core, "fair_lock", [name], ttl, wait)

    def reentrant_lock(
        self,
        name: str,
        ttl: Optional[Seconds] = None,
        wait: Optional[Seconds] = None,
        owner: Optional[str] = None,
    ) -> Lock:
        """A lock the same owner may take again (`owner`, or this handle)."""
        return Lock(self._core, "reentrant_lock", [name], ttl, wait, owner=owner)

    def rw_lock(
        self,
        name: str,
        ttl: Optional[Seconds] = None,
        wait: Optional[Seconds] = None,
        owner: Optional[str] = None,
    ) -> RwLock:
        """Many readers or one writer."""
        return RwLock(self._core, name, ttl, wait, owner)

    def semaphore(
        self, name: str, permits: int, ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None
    ) -> Lock:
        """`permits` holders at once, each permit its own lease."""
        return Lock(self._core, "semaphore", [name], ttl, wait, permits=permits)

    def multi_lock(
        self, names: Iterable[str], ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None
    ) -> Lock:
        """Several locks, all or none, one fence per name (`guard.fences`)."""
        return Lock(self._core, "multi_lock", list(names), ttl, wait)

    def election(self, name: str, ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None) -> Election:
        """A leader election."""
        return Election(self._core, name, ttl, wait)

    @property
    def prefix(self) -> str:
        return self._core.prefix

    def close(self) -> None:
        """Releases every lease this client holds and stops renewing."""
        self._core.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


from . import aio  # noqa: E402  (leasehold.aio after the names it mirrors)

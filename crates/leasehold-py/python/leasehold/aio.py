"""leasehold for asyncio: the same names as `leasehold`, awaited.

    client = await leasehold.aio.Client.connect("redis://127.0.0.1:6379")
    async with client.lock("orders:42", ttl=30, wait=5) as guard:
        await write(guard.fence)
    await client.close()

The calls run on leasehold's own threads and resolve on the calling event
loop. Cancelling an awaiting task cancels the call: a cancelled acquire
leaves nothing held. Guards are shared with the sync API (`leasehold.Guard`),
so one may be released from another thread or task.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Optional

from . import _common
from ._common import Seconds
from ._leasehold import Core, Guard, Lost

__all__ = ["Client", "Election", "Lock", "RwLock", "AsyncGuard"]


def _settle(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    if fut.done():
        return  # cancelled meanwhile; a guard in `value` is released when dropped
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


async def _call(start: Callable[[Callable[[bool, Any], None]], Any]) -> Any:
    """Runs `start(done)`, a core call that reports through `done`, and
    awaits its outcome; cancelling this cancels the call."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def done(ok: bool, value: Any) -> None:
        loop.call_soon_threadsafe(_settle, fut, ok, value)

    handle = start(done)
    try:
        return await fut
    except asyncio.CancelledError:
        handle.abort()
        raise


class AsyncGuard:
    """A held lock, for asyncio: the sync `leasehold.Guard`'s properties,
    with `extend`, `release` and `lost` awaited."""

    def __init__(self, guard: Guard) -> None:
        self.sync = guard

    fence = property(lambda self: self.sync.fence)
    fences = property(lambda self: self.sync.fences)
    token = property(lambda self: self.sync.token)
    name = property(lambda self: self.sync.name)
    kind = property(lambda self: self.sync.kind)
    term = property(lambda self: self.sync.term)
    valid_for = property(lambda self: self.sync.valid_for)
    released = property(lambda self: self.sync.released)

    def is_lost(self) -> bool:
        return self.sync.is_lost()

    def lost_reason(self) -> Optional[str]:
        return self.sync.lost_reason()

    async def extend(self, ttl: Seconds) -> None:
        await _call(lambda done: self.sync.extend(_common.seconds(ttl, "ttl"), done))

    async def release(self) -> None:
        await _call(lambda done: self.sync.release(done))

    async def lost(self) -> None:
        """Resolves when the lease is lost (or this guard is released)."""
        await _call(lambda done: self.sync.lost(None, done))

    async def __aenter__(self) -> "AsyncGuard":
        return self

    async def __aexit__(self, *exc) -> None:
        if self.released:
            return
        try:
            await self.release()
        except Lost:
            pass

    def __repr__(self) -> str:
        return repr(self.sync)


class Lock:
    """A lock handle for asyncio: `await acquire()`, `await try_acquire()`,
    `async with`."""

    def __init__(self, core, kind, names, ttl, wait, **extra):
        self._core = core
        self._args = (kind, names, _common.seconds(ttl, "ttl"), _common.seconds(wait, "wait"))
        self._extra = extra
        # What `async with` took, per task: a handle shared by tasks gives
        # each block back its own guard.
        self._held: dict[Any, list[AsyncGuard]] = {}

    async def _take(self, once: bool):
        kind, names, ttl, wait = self._args
        guard = await _call(
            lambda done: self._core.acquire(kind, names, ttl, wait, once, done=done, **self._extra)
        )
        return None if guard is None else AsyncGuard(guard)

    async def acquire(self) -> AsyncGuard:
        return await self._take(False)

    async def try_acquire(self) -> Optional[AsyncGuard]:
        return await self._take(True)

    async def __aenter__(self) -> AsyncGuard:
        guard = await self.acquire()
        self._held.setdefault(asyncio.current_task(), []).append(guard)
        return guard

    async def __aexit__(self, *exc) -> None:
        task = asyncio.current_task()
        stack = self._held[task]
        guard = stack.pop()
        if not stack:
            del self._held[task]
        await guard.__aexit__(*exc)


class _Acquiring:
    """What `RwLock.read()` / `.write()` return: awaitable (`guard = await
    rw.read()`) and an async context manager (`async with rw.read() as
    guard:`), as both are how one takes a hold."""

    def __init__(self, lock: Lock) -> None:
        self._lock = lock

    def __await__(self):
        return self._lock.acquire().__await__()

    async def __aenter__(self) -> AsyncGuard:
        return await self._lock.__aenter__()

    async def __aexit__(self, *exc) -> None:
        await self._lock.__aexit__(*exc)


class RwLock:
    """A read-write lock handle for asyncio: `await rw.read()` or `async
    with rw.read() as guard:` (likewise `write`), `await rw.try_read()`."""

    def __init__(self, core, name, ttl, wait, owner):
        self._read = Lock(core, "read", [name], ttl, wait, owner=owner)
        self._write = Lock(core, "write", [name], ttl, wait, owner=owner)

    def read(self) -> _Acquiring:
        return _Acquiring(self._read)

    async def try_read(self) -> Optional[AsyncGuard]:
        return await self._read.try_acquire()

    def write(self) -> _Acquiring:
        return _Acquiring(self._write)

    async def try_write(self) -> Optional[AsyncGuard]:
        return await self._write.try_acquire()


class Election:
    def __init__(self, core, name, ttl, wait):
        self._lock = lambda value: Lock(core, "election", [name], ttl, wait, value=value)

    async def campaign(self, value: str) -> AsyncGuard:
        return await self._lock(value).acquire()

    async def try_campaign(self, value: str) -> Optional[AsyncGuard]:
        return await self._lock(value).try_acquire()


class Client:
    """`leasehold.Client` for asyncio: `await Client.connect(url)`."""

    def __init__(self, core) -> None:
        self._core = core
        _common.track(core)

    @classmethod
    async def _connect(cls, topology, urls, master, options) -> "Client":
        opts = _common.options(options)
        core = await _call(lambda done: Core.connect(topology, urls, master, opts, done))
        return cls(core)

    @classmethod
    async def connect(cls, url: str, **options) -> "Client":
        return await cls._connect("url", [url], None, options)

    @classmethod
    async def redlock(cls, urls: Iterable[str], **options) -> "Client":
        return await cls._connect("redlock", list(urls), None, options)

    @classmethod
    async def cluster(cls, urls: Iterable[str], **options) -> "Client":
        return await cls._connect("cluster", list(urls), None, options)

    @classmethod
    async def sentinel(cls, urls: Iterable[str], master_name: str, **options) -> "Client":
        return await cls._connect("sentinel", list(urls), master_name, options)

    def lock(self, name: str, ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None) -> Lock:
        return Lock(self._core, "lock", [name], ttl, wait)

    def fair_lock(self, name: str, ttl: Optional[Seconds] = None, wait: Optional[Seconds] = None) -> Lock:
        return Lock(self._core, "fair_lock", [name], ttl, wait)

    def reentrant_lock(self, name: str, ttl=None, wait=None, owner: Optional[str] = None) -> Lock:
        return Lock(self._core, "reentrant_lock", [name], ttl, wait, owner=owner)

    def rw_lock(self, name: str, ttl=None, wait=None, owner: Optional[str] = None) -> RwLock:
        return RwLock(self._core, name, ttl, wait, owner)

    def semaphore(self, name: str, permits: int, ttl=None, wait=None) -> Lock:
        return Lock(self._core, "semaphore", [name], ttl, wait, permits=permits)

    def multi_lock(self, names: Iterable[str], ttl=None, wait=None) -> Lock:
        return Lock(self._core, "multi_lock", list(names), ttl, wait)

    def election(self, name: str, ttl=None, wait=None) -> Election:
        return Election(self._core, name, ttl, wait)

    @property
    def prefix(self) -> str:
        return self._core.prefix

    async def close(self) -> None:
        await _call(lambda done: self._core.close(done))

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

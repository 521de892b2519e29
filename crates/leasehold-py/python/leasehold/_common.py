"""What the sync and asyncio faces share: argument conversion and the atexit close."""

from __future__ import annotations

import atexit
import datetime
import threading
import weakref
from typing import Any, Optional, Union

from . import _leasehold

Seconds = Union[float, int, datetime.timedelta]


def seconds(value: Optional[Seconds], what: str) -> Optional[float]:
    """`value` (seconds as a number, or a timedelta) as float seconds."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _leasehold.InvalidArgument(
            f"{what} must be seconds (a number) or a datetime.timedelta, not {type(value).__name__}"
        )
    return float(value)


def options(given: dict[str, Any]) -> dict[str, Any]:
    """Client options, durations converted to seconds."""
    out = dict(given)
    for key in ("command_timeout", "node_timeout", "failover_wait", "fence_memory"):
        if key in out:
            out[key] = seconds(out[key], key)
    return out


# Every live client's core, closed at interpreter exit so nothing stays held
# for its TTL (a dropped guard's background release would not run any more).
_live: "weakref.WeakSet[_leasehold.Core]" = weakref.WeakSet()
_live_lock = threading.Lock()
_pid = None


def track(core: _leasehold.Core) -> None:
    import os

    global _pid
    with _live_lock:
        if _pid != os.getpid():
            # A forked child does not close its parent's clients.
            _live.clear()
            _pid = os.getpid()
        _live.add(core)


@atexit.register
def _close_all() -> None:
    import os

    if _pid != os.getpid():
        return
    with _live_lock:
        cores = list(_live)
    for core in cores:
        if not core.is_closed():
            try:
                core.close()
            except BaseException:  # noqa: BLE001 - exiting: nothing to report to
                pass

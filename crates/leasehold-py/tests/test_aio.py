"""The asyncio API against a real server."""

from __future__ import annotations

import asyncio

import pytest

import leasehold
import leasehold.aio


def run(coro):
    return asyncio.run(coro)


def test_tasks_exclude_each_other(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        inside, count = [0], [0]

        async def work():
            for _ in range(10):
                async with client.lock("n", ttl=10, wait=30):
                    inside[0] += 1
                    assert inside[0] == 1
                    n = count[0]
                    await asyncio.sleep(0.001)
                    count[0] = n + 1
                    inside[0] -= 1

        await asyncio.gather(*(work() for _ in range(8)))
        await client.close()
        return count[0]

    assert run(main()) == 80


def test_a_cancelled_acquire_leaves_nothing_held(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        holder = await client.lock("busy").acquire()
        waiter = asyncio.ensure_future(client.lock("busy", wait=60).acquire())
        await asyncio.sleep(0.2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.release()
        again = await client.lock("busy", wait=2).acquire()
        await again.release()
        await client.close()

    run(main())


def test_lost_resolves_when_the_lease_is_gone(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        guard = await client.lock("doomed", ttl=0.6).acquire()
        server.command("FLUSHALL")
        await asyncio.wait_for(guard.lost(), timeout=5)
        assert guard.is_lost()
        with pytest.raises(leasehold.Lost):
            await guard.release()
        assert await client.lock("doomed").try_acquire() is not None
        await client.close()

    run(main())


def test_timeout_and_extend(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        guard = await client.semaphore("s", 1, ttl=5).acquire()
        with pytest.raises(leasehold.Timeout):
            await client.semaphore("s", 1, wait=0.2).acquire()
        await guard.extend(30)
        assert guard.valid_for > 25
        await guard.release()
        await client.close()

    run(main())


def test_one_handle_shared_by_tasks_gives_each_block_its_own_guard(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        lock = client.lock("shared-handle", wait=30)
        fences = []

        async def work():
            async with lock as guard:
                fences.append(guard.fence)
                await asyncio.sleep(0.005)
                assert not guard.released

        await asyncio.gather(*(work() for _ in range(4)))
        assert fences == sorted(fences) and len(set(fences)) == 4
        assert await lock.try_acquire() is not None
        await client.close()

    run(main())


def test_an_async_guard_is_its_own_context_manager(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        async with await client.lock("cm").acquire() as guard:
            assert await client.lock("cm").try_acquire() is None
        assert guard.released
        await client.close()

    run(main())


def test_rw_lock_read_and_write_are_awaited_or_entered(server):
    async def main():
        client = await leasehold.aio.Client.connect(server.url)
        rw = client.rw_lock("cfg")
        r1 = await rw.read()
        async with rw.read() as r2:
            assert r2.kind == "read" and await rw.try_write() is None
        await r1.release()
        async with rw.write():
            assert await rw.try_read() is None
        assert await rw.try_write() is not None
        await client.close()

    run(main())

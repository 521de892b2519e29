"""The sync API against a real server: exclusion across threads and
processes, fences across Python and the Rust CLI, the lost signal, FIFO
waiters, Ctrl-C, fork, and exit with guards held."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import leasehold


def test_threads_exclude_each_other_and_fences_rise(client):
    inside, seen, fences, errors = [0], [], [], []
    lock = client.lock("counter", ttl=10, wait=30)

    def work():
        for _ in range(10):
            try:
                with lock as guard:
                    inside[0] += 1
                    if inside[0] != 1:
                        errors.append("two holders at once")
                    fences.append(guard.fence)
                    value = len(seen)
                    time.sleep(0.001)
                    seen.append(value)
                    inside[0] -= 1
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen == list(range(80))
    assert fences == sorted(fences) and len(set(fences)) == 80


WORKER = textwrap.dedent(
    """
    import os, sys, leasehold
    url, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = leasehold.Client.connect(url)
    for _ in range(rounds):
        with client.lock("file", ttl=10, wait=60) as guard:
            with open(path) as f:
                n = int(f.read())
            with open(path, "w") as f:
                f.write(str(n + 1))
    client.close()
    """
)


def test_processes_exclude_each_other(server, tmp_path):
    path = tmp_path / "count"
    path.write_text("0")
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, server.url, str(path), "25"])
        for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    assert path.read_text() == "100"


def test_fences_rise_across_python_and_the_cli_and_they_exclude_each_other(client, server, cli):
    first = client.lock("shared").acquire()
    busy = subprocess.run(
        [cli, "--url", server.url, "run", "shared", "--no-wait", "--", "true"],
        capture_output=True, text=True, timeout=30,
    )
    assert busy.returncode == 75, busy.stderr
    fence_py = first.fence
    first.release()
    ran = subprocess.run(
        [cli, "--url", server.url, "run", "shared", "--", "sh", "-c", "echo $LEASEHOLD_FENCE"],
        capture_output=True, text=True, timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    fence_cli = int(ran.stdout.strip())
    again = client.lock("shared").acquire()
    assert fence_py < fence_cli < again.fence
    again.release()


def test_a_lease_deleted_behind_its_back_is_reported_lost(client, server):
    guard = client.lock("doomed", ttl=0.6).acquire()
    assert not guard.is_lost()
    assert server.command("FLUSHALL") == "+OK"
    # The watchdog renews at ttl/3 and finds the lease gone.
    assert guard.lost(timeout=5) is True
    assert guard.is_lost()
    assert guard.valid_for == 0.0
    with pytest.raises(leasehold.Lost):
        guard.release()


def queued(server, name) -> int:
    """Waiters in the lock's FIFO queue, read from the server (the library's
    key layout: <prefix>:{<name>}:queue)."""
    key = f"leasehold:{{{name}}}:queue"
    kind = server.command("TYPE", key)
    count = {"+list": "LLEN", "+zset": "ZCARD", "+none": None}[kind]
    return 0 if count is None else int(server.command(count, key)[1:])


def test_fair_lock_serves_waiters_in_arrival_order(client, server):
    holder = client.fair_lock("queue").acquire()
    order, threads = [], []
    for i in range(3):
        def wait(i=i):
            with client.fair_lock("queue", wait=30):
                order.append(i)
        t = threading.Thread(target=wait)
        t.start()
        threads.append(t)
        # The next waiter starts only once this one is queued.
        deadline = time.monotonic() + 10
        while queued(server, "queue") != i + 1:
            assert time.monotonic() < deadline, "waiter never queued"
            time.sleep(0.01)
    holder.release()
    for t in threads:
        t.join(timeout=30)
    assert order == [0, 1, 2]


def test_a_guard_is_released_from_another_thread(client):
    guard = client.lock("handed").acquire()
    t = threading.Thread(target=guard.release)
    t.start()
    t.join()
    assert guard.released
    assert client.lock("handed").try_acquire() is not None


def test_durations_are_seconds_or_timedelta_and_bad_ones_are_named(client):
    import datetime

    guard = client.lock("d", ttl=datetime.timedelta(seconds=20)).acquire()
    assert 15 < guard.valid_for <= 20
    guard.release()
    with pytest.raises(leasehold.InvalidArgument, match="ttl"):
        client.lock("d", ttl="30s")
    with pytest.raises(leasehold.InvalidArgument, match="unknown option"):
        leasehold.Client.connect("redis://127.0.0.1:1", bogus=1)


CTRL_C = textwrap.dedent(
    """
    import sys, time, leasehold
    client = leasehold.Client.connect(sys.argv[1])
    print("waiting", flush=True)
    try:
        client.lock("busy", wait=60).acquire()
    except KeyboardInterrupt:
        print(time.monotonic(), flush=True)
        sys.exit(3)
    """
)


def test_ctrl_c_stops_a_blocking_wait_within_100ms_and_leaves_nothing_held(client, server):
    holder = client.lock("busy").acquire()
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, server.url], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.3)  # well inside its wait (nothing checked depends on it)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        out, _ = child.communicate(timeout=10)
    finally:
        child.kill()
    assert child.returncode == 3, "the wait did not stop at SIGINT"
    caught = float(out)
    assert caught - sent < 0.1
    holder.release()
    # The interrupted waiter took nothing and holds no place: the lock is
    # taken again at once.
    again = client.lock("busy", wait=2).acquire()
    again.release()


FORK = textwrap.dedent(
    """
    import os, sys, leasehold
    client = leasehold.Client.connect(sys.argv[1])
    guard = client.lock("parent").acquire()
    pid = os.fork()
    if pid == 0:
        try:
            client.lock("x").try_acquire()
            code = 1
        except leasehold.UsedAfterFork as e:
            code = 10 if "after fork" in str(e) else 2
        try:
            guard.release()
            code = 1
        except leasehold.UsedAfterFork:
            pass
        fresh = leasehold.Client.connect(sys.argv[1])
        if fresh.lock("parent").try_acquire() is not None:
            code = 4  # the parent's lock must still be the parent's
        fresh.close()
        # A normal exit: atexit, then the parent's client and guard
        # collected in the child, must neither hang nor release the
        # parent's lock.
        sys.exit(code)
    _, status = os.waitpid(pid, 0)
    guard.release()  # still the parent's: the child released nothing
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_child_gets_a_clear_error_and_a_client_of_its_own_works(server):
    done = subprocess.run([sys.executable, "-c", FORK, server.url], timeout=60)
    assert done.returncode == 10


EXIT_HOLDING = textwrap.dedent(
    """
    import sys, leasehold
    client = leasehold.Client.connect(sys.argv[1])
    guard = client.lock("left", ttl=60).acquire()
    kept = [client.semaphore("pool", 2, ttl=60).acquire()]
    print(guard.fence, flush=True)
    """
)


def test_exit_with_guards_held_releases_them(client, server):
    out = subprocess.run(
        [sys.executable, "-c", EXIT_HOLDING, server.url],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert int(out.stdout)
    # Freed at exit, not after the 60 s TTL.
    assert client.lock("left").try_acquire() is not None
    assert client.semaphore("pool", 2).try_acquire() is not None
    assert client.semaphore("pool", 2).try_acquire() is not None


def test_every_kind_through_the_one_guard(client):
    r1 = client.rw_lock("cfg").read()
    r2 = client.rw_lock("cfg").read()
    assert client.rw_lock("cfg").try_write() is None
    r1.release(), r2.release()
    with client.rw_lock("cfg").write() as w:
        assert w.kind == "write" and client.rw_lock("cfg").try_read() is None
    assert client.rw_lock("cfg").try_read() is not None
    re = client.reentrant_lock("re", owner="job-7")
    a, b = re.acquire(), re.acquire()
    assert client.reentrant_lock("re", owner="other").try_acquire() is None
    b.release(), a.release()
    m = client.multi_lock(["b", "a"]).acquire()
    assert sorted(m.fences) == ["a", "b"]
    with pytest.raises(TypeError, match="fences"):
        m.fence
    assert client.lock("a").try_acquire() is None
    m.release()
    lead = client.election("sched").campaign("host-a")
    assert client.election("sched").try_campaign("host-b") is None
    assert lead.term == lead.fence
    lead.release()


def test_one_handle_shared_by_threads_gives_each_block_its_own_guard(client):
    lock = client.lock("shared-handle", wait=30)
    fences, errors = {}, []

    def work(i):
        try:
            with lock as guard:
                fences[i] = guard.fence
                time.sleep(0.005)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(fences.values())) == 4
    assert lock.try_acquire() is not None


GIL = textwrap.dedent(
    """
    import socket, sys, threading, time, leasehold
    url, port = sys.argv[1], int(sys.argv[2])
    client = leasehold.Client.connect(url)

    def queued():
        with socket.create_connection(("127.0.0.1", port)) as s:
            key = "leasehold:{busy}:queue"
            s.sendall(f"*2\\r\\n$4\\r\\nTYPE\\r\\n${len(key)}\\r\\n{key}\\r\\n".encode())
            return s.recv(100) != b"+none\\r\\n"

    holder = client.fair_lock("busy").acquire()
    t = threading.Thread(target=lambda: client.fair_lock("busy", wait=30).acquire().release())
    t.start()
    # This thread runs Python while the other waits in acquire(): only if
    # that wait released the GIL.
    deadline = time.monotonic() + 20
    while not queued():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    holder.release()
    t.join()
    print("ok")
    """
)


def test_a_blocking_wait_releases_the_gil(server):
    done = subprocess.run(
        [sys.executable, "-c", GIL, server.url, str(server.port)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_a_guard_is_its_own_context_manager(client):
    with client.lock("cm").acquire() as guard:
        assert client.lock("cm").try_acquire() is None
    assert guard.released
    with client.lock("cm").acquire() as guard:
        guard.release()  # released inside: the block's end does nothing more
    assert client.lock("cm").try_acquire() is not None

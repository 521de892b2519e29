"""A private redis-server per test on a free loopback port, as the Rust
suites' test kit starts theirs. The binary: $LEASEHOLD_REDIS_SERVER (the
test command sets Valkey 8's or Redis 6.2's), else redis-server on PATH.
A missing binary fails the test loudly; nothing is skipped."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def server_binary() -> str:
    binary = os.environ.get("LEASEHOLD_REDIS_SERVER") or shutil.which("redis-server")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail(
            "no redis-server: install it (apt-get install redis-server) or set "
            "LEASEHOLD_REDIS_SERVER to a server binary",
            pytrace=False,
        )
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="leasehold-py-")
        self.port = free_port()
        self.log = os.path.join(self.dir, "server.log")
        self.proc = subprocess.Popen(
            [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir, "--logfile", self.log],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.command("PING") == "+PONG":
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{self.read_log()}")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str) -> str:
        """One command over RESP; the reply's first line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            out = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
            s.sendall(out.encode())
            return s.makefile("rb").readline().decode().rstrip("\r\n")

    def read_log(self) -> str:
        try:
            return pathlib.Path(self.log).read_text()
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server(request):
    srv = Server()
    yield srv
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(f"== server log (port {srv.port})\n{srv.read_log()}")
    srv.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def client(server):
    import leasehold

    c = leasehold.Client.connect(server.url)
    yield c
    c.close()


@pytest.fixture
def cli() -> str:
    """The `leasehold` binary of this build (target/debug), as the test
    command builds it; $LEASEHOLD_EXE names another."""
    exe = os.environ.get("LEASEHOLD_EXE") or str(ROOT / "target" / "debug" / "leasehold")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"no {exe}: build it with `cargo build -p leasehold-cli`", pytrace=False)
    return exe

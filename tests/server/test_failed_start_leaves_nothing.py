"""A start of ``xinserve serve`` that cannot serve (its gRPC port or its metrics port is taken)
exits 3 with a message naming the address, and creates no data directory, key or audit
database: the listeners are probed before the engine is imported, and bind before the audit
log is opened. A start the audit log refuses (exit 6) removes the key and directories it
created, and keeps a key an earlier start made (service.lifecycle.start_footprint).

The gRPC port is held by a grpc server with grpc's default options, which turn
``SO_REUSEPORT`` on under Linux: a second server that left it on too would share the port
silently instead of failing.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from service.frontends.grpc.server import Frontend, ListenError
from service.lifecycle.server import AuditOpenFailed, Server
from service.lifecycle.start_footprint import StartFootprint
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import Settings, load_settings
from tests.conftest import REPO, TINY
from trust.server_key import ensure_server_key

_CLI = "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))"


@contextmanager
def grpc_server_holding_a_port() -> Iterator[int]:
    """A plain grpc server (default options: SO_REUSEPORT on) listening on a free loopback port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    try:
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        yield port
    finally:
        server.stop(None).wait()


@contextmanager
def socket_holding_a_port() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]
    finally:
        sock.close()


def serve(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``xinserve serve`` (stdout and stderr captured)."""
    return subprocess.Popen(
        [sys.executable, "-c", _CLI, "serve", "--data-dir", str(data_dir), "--builtin-model", TINY, *args],
        cwd=REPO,
        env={**os.environ, "XDG_DATA_HOME": str(data_dir.parent / "xdg")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Exit status and stderr of ``proc``; killed (and waited for) if it runs past 600 s."""
    try:
        _, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"xinserve serve did not exit within 600 s: {stderr[-3000:]}")
    return proc.returncode, stderr


def test_a_start_whose_port_is_taken_exits_3_and_creates_no_data_dir(tmp_path: Path) -> None:
    # Both starts run at once; the listener probe refuses them before the engine import.
    grpc_case = tmp_path / "grpc" / "fresh" / "data"
    metrics_case = tmp_path / "metrics" / "fresh" / "data"
    with grpc_server_holding_a_port() as port, socket_holding_a_port() as metrics_port:
        procs = [
            serve(grpc_case, "--listen", f"127.0.0.1:{port}", "--no-metrics"),
            serve(metrics_case, "--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{metrics_port}"),
        ]
        try:
            results = [finish(p) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    expected = [
        (grpc_case, f"cannot listen on 127.0.0.1:{port} (listen.plaintext)"),
        (metrics_case, f"cannot listen on 127.0.0.1:{metrics_port} (metrics_listen)"),
    ]
    for (rc, stderr), (data_dir, message) in zip(results, expected, strict=True):
        assert rc == 3, stderr[-3000:]
        assert message in stderr, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        fresh = data_dir.parent
        assert not fresh.exists(), sorted(str(p) for p in fresh.rglob("*"))


@pytest.mark.asyncio(loop_scope="session")
async def test_frontend_refuses_a_port_another_grpc_server_holds(tmp_path: Path) -> None:
    # A grpc.aio server is made on a running loop (the session's): a synchronous test has no
    # current loop once earlier tests ran theirs.
    with grpc_server_holding_a_port() as port:
        settings = load_settings(
            overrides={
                "data_dir": str(tmp_path / "data"),
                "listen": {"plaintext": [f"127.0.0.1:{port}"]},
                "metrics_listen": None,
            }
        )
        with pytest.raises(ListenError) as err:
            Frontend(*shared_core(Runtime(settings), settings), settings, "cpu")
    assert str(err.value).startswith(f"cannot listen on 127.0.0.1:{port} (listen.plaintext)")
    assert not (tmp_path / "data").exists()


def _fresh_start(tmp_path: Path, **audit: object) -> Settings:
    """A start on the fresh data directory ``tmp_path/fresh/data`` (nothing there yet)."""
    return load_settings(
        overrides={
            "data_dir": str(tmp_path / "fresh" / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "builtin_models": [TINY],
            "audit": {"node_id": "refused-start", **audit},
        }
    )


def _files(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its content (None for a directory)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.mark.asyncio(loop_scope="session")
async def test_a_start_whose_audit_store_cannot_be_created_leaves_no_key(tmp_path: Path) -> None:
    # The database's directory cannot be made (a file is in the way; this holds for root too).
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    settings = _fresh_start(tmp_path, path=str(blocker / "audit.db"))
    with pytest.raises(AuditOpenFailed) as err:
        await Server.create(settings)
    assert err.value.exit_code == 6
    assert str(err.value).startswith("the audit log cannot be opened: "), str(err.value)
    fresh = tmp_path / "fresh"
    assert not fresh.exists(), sorted(_files(fresh))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_bad_content_key_refuses_the_start_before_the_key_is_made(tmp_path: Path) -> None:
    # content_capture's key is read only when the audit log opens.
    content_key = tmp_path / "content.key"
    content_key.write_text("not an SM4 key\n")
    settings = _fresh_start(tmp_path, content_capture=True, content_key_path=str(content_key))
    with pytest.raises(AuditOpenFailed, match="SM4 content key"):
        await Server.create(settings)
    fresh = tmp_path / "fresh"
    assert not fresh.exists(), sorted(_files(fresh))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_refused_start_keeps_the_key_an_earlier_start_made(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "data"
    ensure_server_key(data_dir / "keys" / "server-sm2.pem")
    before = _files(tmp_path / "fresh")
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    with pytest.raises(AuditOpenFailed):
        await Server.create(_fresh_start(tmp_path, path=str(blocker / "audit.db")))
    assert _files(tmp_path / "fresh") == before


def test_nothing_is_removed_while_another_process_holds_the_audit_database(tmp_path: Path) -> None:
    settings = _fresh_start(tmp_path)
    footprint = StartFootprint.note(settings)
    key, db = settings.audit.signing_key_path, settings.audit.path
    assert key is not None
    # What another start made meanwhile, and the writer lock it holds (as audit.stores.sqlite).
    for path in (key, db, db.with_name(db.name + ".lock")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    fd = os.open(db.with_name(db.name + ".lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert footprint.remove_created() == []
        assert key.exists() and db.exists()
    finally:
        os.close(fd)
    removed = footprint.remove_created()
    assert key in removed and db in removed
    assert not (tmp_path / "fresh").exists(), sorted(_files(tmp_path / "fresh"))

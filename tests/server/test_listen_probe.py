"""A busy listener address refuses ``xinserve serve`` (exit 3, ``cannot listen on ADDRESS
(SETTING): Address already in use``) before the engine is imported, and the probe binds the
way each listener binds (service.core.listen_probe)."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from service.core.listen_probe import ListenError, configured_listeners, probe, probe_listeners
from service.settings.config import load_settings
from tests.conftest import REPO, TINY

IN_USE = os.strerror(errno.EADDRINUSE)

# Runs the CLI's entry in a child and reports, once it returned, which engine modules that
# process imported: the refusal has happened by then, so the answer does not depend on timing.
_CLI_THEN_MODULES = (
    "import json, sys\n"
    "from service.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "watched = ('vllm', 'service.lifecycle.server', 'engine_backends.vllm_engine')\n"
    "loaded = sorted(m for m in watched if m in sys.modules)\n"
    "print('MODULES=' + json.dumps(loaded))\n"
    "sys.exit(rc)\n"
)


@contextmanager
def listening(family: int = socket.AF_INET, host: str = "127.0.0.1", port: int = 0) -> Iterator[int]:
    """A plain listening socket (no SO_REUSEADDR) on ``host``; yields its port."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen()
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _serve_cli(tmp_path: Path, *args: str) -> tuple[int, str, list[str]]:
    """Exit status, stderr and the engine modules imported of ``xinserve serve ARGS``."""
    data_dir = tmp_path / "fresh" / "data"
    result = subprocess.run(
        [sys.executable, "-c", _CLI_THEN_MODULES, "serve", "--data-dir", str(data_dir), "--builtin-model", TINY, *args],
        cwd=REPO,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("MODULES=")]
    assert lines, (result.stdout[-2000:], result.stderr[-3000:])
    assert not (tmp_path / "fresh").exists(), sorted(str(p) for p in (tmp_path / "fresh").rglob("*"))
    return result.returncode, result.stderr, json.loads(lines[-1].removeprefix("MODULES="))


@pytest.mark.parametrize(
    ("setting", "flags"),
    [
        ("listen.plaintext", lambda port: ["--listen", f"127.0.0.1:{port}", "--no-metrics"]),
        (
            "listen.http",
            lambda port: ["--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}", "--no-metrics"],
        ),
        ("metrics_listen", lambda port: ["--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{port}"]),
    ],
)
def test_a_busy_port_refuses_serve_before_the_engine_is_imported(tmp_path, setting, flags):
    with listening() as port:
        rc, stderr, engine_modules = _serve_cli(tmp_path, *flags(port))
    assert rc == 3, stderr[-3000:]
    assert f"xinserve serve: cannot listen on 127.0.0.1:{port} ({setting}): {IN_USE}" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert engine_modules == [], stderr[-3000:]


def _settings(tmp_path: Path, **listen: list[str]):
    return load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"], **listen},
            "metrics_listen": None,
        }
    )


@pytest.mark.parametrize("setting", ["listen.plaintext", "listen.tls", "listen.http", "listen.https", "metrics_listen"])
def test_each_setting_refuses_a_busy_ipv4_port(setting):
    with listening() as port:
        with pytest.raises(ListenError) as err:
            probe(setting, f"127.0.0.1:{port}")
    assert str(err.value) == f"cannot listen on 127.0.0.1:{port} ({setting}): {IN_USE}"


@pytest.mark.parametrize("setting", ["listen.plaintext", "listen.http", "metrics_listen"])
def test_each_setting_refuses_a_busy_ipv6_port(setting):
    if not _ipv6_loopback():
        pytest.skip("this host cannot bind ::1 (IPv6 off): nothing to hold")
    with listening(socket.AF_INET6, "::1") as port:
        with pytest.raises(ListenError) as err:
            probe(setting, f"[::1]:{port}")
    assert str(err.value) == f"cannot listen on [::1]:{port} ({setting}): {IN_USE}"


def test_probe_listeners_names_the_first_busy_address_of_the_settings(tmp_path):
    with listening() as port:
        settings = _settings(tmp_path, http=["127.0.0.1:0", f"127.0.0.1:{port}"])
        assert ("listen.http", f"127.0.0.1:{port}") in configured_listeners(settings)
        with pytest.raises(ListenError, match=f"127.0.0.1:{port} \\(listen.http\\)"):
            probe_listeners(settings)
    probe_listeners(settings)  # released: nothing left bound by the probe either
    assert not (tmp_path / "data").exists()


def test_a_port_whose_old_connection_lingers_in_time_wait_is_not_refused():
    # A restarted server finds its port's last connections in TIME_WAIT; like its listeners
    # (SO_REUSEADDR), the probe binds anyway.
    old = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    old.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc's listener sets it
    with ExitStack() as stack:
        stack.callback(old.close)
        old.bind(("127.0.0.1", 0))
        old.listen()
        port = old.getsockname()[1]
        client = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=60))
        accepted, _ = old.accept()
        accepted.close()  # the server side closes first: it is the side left in TIME_WAIT
        assert client.recv(1) == b""
    # the client closed too (ExitStack) and the listener is gone: only TIME_WAIT holds the port
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        plain.bind(("127.0.0.1", port))
        lingering = False
    except OSError as exc:
        assert exc.errno == errno.EADDRINUSE, exc
        lingering = True
    finally:
        plain.close()
    if not lingering:
        pytest.skip("the kernel released the TIME_WAIT connection already: nothing lingers to probe against")
    for setting in ("listen.plaintext", "listen.http", "metrics_listen"):
        probe(setting, f"127.0.0.1:{port}")


def test_grpc_listens_on_the_resolved_addresses_that_bind_and_http_on_the_first():
    # grpc serves a host name on every address it resolves to that binds (refusing only when
    # none does); the HTTP listener binds the name's first IPv4 address only.
    resolved = {info[4][0] for info in socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)}
    if not {"127.0.0.1", "::1"} <= resolved or not _ipv6_loopback():
        pytest.skip(f"localhost resolves to {sorted(resolved)} here, not to both 127.0.0.1 and ::1")
    with listening() as port:
        try:
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as v6:
                v6.bind(("::1", port))
        except OSError:
            pytest.skip(f"[::1]:{port} is taken by another process")
        probe("listen.plaintext", f"localhost:{port}")
        with pytest.raises(ListenError, match=f"localhost:{port} \\(listen.http\\)"):
            probe("listen.http", f"localhost:{port}")
        with listening(socket.AF_INET6, "::1", port):
            with pytest.raises(ListenError, match=f"localhost:{port} \\(listen.plaintext\\): {IN_USE}"):
                probe("listen.plaintext", f"localhost:{port}")


def test_grpc_unix_socket_addresses_are_not_probed(tmp_path):
    # grpc binds ``unix:PATH`` itself (and replaces a stale socket file): there is no TCP
    # address to resolve, and resolving one would refuse a valid listener.
    probe("listen.tls", f"unix:{tmp_path}/xinserve.sock:1")
    assert not (tmp_path / "xinserve.sock:1").exists()


def test_the_listeners_own_checks_word_a_busy_port_like_the_probe():
    # The probe is racy: the listeners check again when they bind, with the same message.
    from service.frontends.openai.listener import _bind
    from service.lifecycle.server import start_metrics_listener

    with listening() as port:
        address = f"127.0.0.1:{port}"
        with pytest.raises(ListenError) as metrics_err:
            httpd = start_metrics_listener(address)
            httpd.shutdown()  # reached only if it bound: stop it before the test fails
            httpd.server_close()
        with pytest.raises(ListenError) as http_err:
            _bind(address, "listen.http").close()
    assert str(metrics_err.value) == f"cannot listen on {address} (metrics_listen): {IN_USE}"
    assert str(http_err.value) == f"cannot listen on {address} (listen.http): {IN_USE}"

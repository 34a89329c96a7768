"""A real rsyslog collector for the anchor-shipping tests (Debian's ``rsyslog`` +
``rsyslog-openssl``, installed by scripts/bootstrap).

It listens with ``imtcp`` (octet-counted or LF framing; TLS through the ``ossl`` network
stream driver when a PKI is given) and writes every message as received (``%rawmsg%``, one
per line) to ``stream.log``: the file an auditor would hand to ``xinserve audit verify --anchor``.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.pki import Pki

RSYSLOGD = shutil.which("rsyslogd") or ("/usr/sbin/rsyslogd" if Path("/usr/sbin/rsyslogd").exists() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Rsyslog:
    """One rsyslogd process in ``directory``; ``start()`` (again after ``stop()``) keeps the port."""

    def __init__(
        self, directory: Path, *, pki: Pki | None = None, port: int | None = None, require_client_cert: bool = False
    ) -> None:
        if RSYSLOGD is None:
            raise RuntimeError("rsyslogd is not installed (run scripts/bootstrap)")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = pki
        self.require_client_cert = require_client_cert
        self.port = port or free_port()
        self.stream = self.dir / "stream.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _config(self) -> str:
        tls_global = ""
        module = 'module(load="imtcp")'
        if self.pki is not None:
            tls_global = (
                f' DefaultNetstreamDriverCAFile="{self.pki.ca_cert}"'
                f' DefaultNetstreamDriverCertFile="{self.pki.server_cert}"'
                f' DefaultNetstreamDriverKeyFile="{self.pki.server_key}"'
            )
            auth = "x509/certvalid" if self.require_client_cert else "anon"
            module = (
                f'module(load="imtcp" StreamDriver.Name="ossl" StreamDriver.Mode="1" StreamDriver.AuthMode="{auth}")'
            )
        return f"""
global(workDirectory="{self.dir}" maxMessageSize="64k"{tls_global})
{module}
input(type="imtcp" port="{self.port}" ruleset="anchors")
template(name="raw" type="string" string="%rawmsg%\\n")
ruleset(name="anchors") {{
  action(type="omfile" file="{self.stream}" template="raw" flushOnTXEnd="on" asyncWriting="off")
}}
"""

    def start(self, timeout_s: float = 60.0) -> None:
        conf = self.dir / "rsyslog.conf"
        conf.write_text(self._config(), encoding="utf-8")
        log = (self.dir / "rsyslogd.out").open("ab")
        self.proc = subprocess.Popen(
            [str(RSYSLOGD), "-n", "-f", str(conf), "-i", str(self.dir / "rsyslogd.pid")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rsyslogd exited: {(self.dir / 'rsyslogd.out').read_text(errors='replace')}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.1)
        raise RuntimeError("rsyslogd did not start listening")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def lines(self) -> list[str]:
        if not self.stream.exists():
            return []
        return [ln for ln in self.stream.read_text(encoding="utf-8").splitlines() if ln]

    def wait_for(self, predicate, timeout_s: float = 60.0) -> list[str]:  # type: ignore[no-untyped-def]
        """Poll ``stream.log`` until ``predicate(lines)`` holds; return the lines (or fail)."""
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self.lines()
            if predicate(lines):
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"rsyslog did not receive what was expected; got {len(lines)} lines")
            time.sleep(0.1)

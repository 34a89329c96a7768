"""A start refused while the models are being set up (after the listeners bound and the audit
log opened) stops its listeners before the refusal propagates: nothing keeps the port."""

from __future__ import annotations

import socket

import pytest

from engine_backends.errors import PlatformError
from service.app import Server
from service.config import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_start_refused_while_building_models_releases_its_listener(tmp_path):
    port = _free_port()
    model = tmp_path / "model"
    model.mkdir()
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": [f"127.0.0.1:{port}"]},
            "metrics_listen": None,
            "models": [{"name": "m", "path": str(model), "engine": {"quantization": "fp8"}}],
            "audit": {"path": str(tmp_path / "audit.db"), "node_id": "refused-start"},
        }
    )
    with pytest.raises(PlatformError, match="quantization 'fp8' has no kernel on cpu"):
        await Server.create(settings)
    with socket.socket() as s:  # raises EADDRINUSE while the refused server still listens
        s.bind(("127.0.0.1", port))

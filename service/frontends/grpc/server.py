"""A gRPC front end: one grpc.aio server with its listeners over the call core and the
inference operations it shares with the other front end."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from service.core.listen_probe import ListenError
from service.core.tls_material import TlsMaterial, load_tls_material
from service.frontends.grpc.attestation_servicer import AttestationServicer
from service.frontends.grpc.audit_servicer import AuditServicer
from service.frontends.grpc.inference_servicer import InferenceServicer
from service.frontends.grpc.interceptors import CallPipeline
from service.frontends.grpc.model_servicer import ModelServicer
from service.frontends.grpc.reflection import enable_reflection
from service.frontends.grpc.server_servicer import ServerServicer
from service.operations.inference import Inference
from service.pipeline.call_core import CallCore
from service.settings.auth import TrustedProxySettings
from service.settings.config import Settings
from xinserve.v1 import (
    attestation_pb2,
    attestation_pb2_grpc,
    audit_pb2,
    audit_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
    model_pb2,
    model_pb2_grpc,
    server_pb2,
    server_pb2_grpc,
)


def server_options(settings: Settings) -> list[tuple[str, int]]:
    """Channel arguments: bounded messages, keepalive that tolerates Java/Go client pings.

    A unary Generate writes nothing while the engine decodes, so client keepalive pings
    in that window must not count as strikes (vLLM's own gRPC launcher,
    vllm/entrypoints/launchers/grpc_server.py, does the same): no strike limit, pings
    accepted every 10 s even without data, and without active calls. ``SO_REUSEPORT`` is
    off (grpc turns it on by default on Linux): a second server on a taken port fails to
    bind instead of silently sharing the port's connections with the first.
    """
    size = settings.limits.max_message_bytes
    return [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", size),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.so_reuseport", 0),
    ]


def server_credentials(material: TlsMaterial) -> grpc.ServerCredentials:
    """TLS credentials from the checked PEM files; with a client CA, client certificates are required."""
    pair = (material.key_pem, material.cert_chain_pem)
    if material.client_ca_pem is not None:
        return grpc.ssl_server_credentials([pair], root_certificates=material.client_ca_pem, require_client_auth=True)
    return grpc.ssl_server_credentials([pair])


def _bound(add: Callable[[str], int], address: str, setting: str) -> int:
    """``add(address)`` (``grpc.aio.Server.add_insecure_port``/``add_secure_port``): the port bound.

    Raises:
        ListenError: grpc could not bind the address (grpc raises RuntimeError without the reason).
    """
    try:
        return add(address)
    except RuntimeError:
        raise ListenError(
            f"cannot listen on {address} ({setting}): the address is in use by another process "
            "or not available on this host"
        ) from None


def _unix_address(listen: str) -> str:
    """The grpc address of a trusted gateway's socket ``unix:/path``, after removing a stale
    socket file there (a listener that died without unlinking it).

    Raises:
        ListenError: the path exists and is not a socket, or its directory does not exist.
    """
    path = Path(listen.removeprefix("unix:"))
    if not path.parent.is_dir():
        raise ListenError(f"cannot listen on {listen} (auth.trusted_proxies): no such directory")
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ListenError(f"cannot listen on {listen} (auth.trusted_proxies): the path exists and is not a socket")
        path.unlink()
    return f"unix:{path}"


class Frontend:
    """Builds and runs one grpc.aio server over ``core`` (and its runtime).

    The TLS files are read and checked (``load_tls_material``) before anything binds. The
    listeners bind when it is built (``start`` begins serving on them); with
    ``grpc.so_reuseport`` off, an address another server holds is refused (ListenError)
    instead of being shared with it.

    Args:
        core: the call core (identity, policy, admission, audit), shared with the HTTP
            front end; built once by ``service.lifecycle.wiring.shared_core``.
        inference: the inference operations, shared the same way.
        settings: which listeners to open, TLS and limits.
        device: device kind reported by ModelService/ServerService.

    Raises:
        TlsMaterialError: with ``listen.tls``, a TLS file cannot be read, is not PEM of its
            kind, or the key does not match the certificate.
        ListenError: a listener cannot bind.
    """

    def __init__(self, core: CallCore, inference: Inference, settings: Settings, device: str) -> None:
        material = load_tls_material(settings.tls) if settings.listen.tls else None
        runtime = core.runtime
        self.runtime = runtime
        self.settings = settings
        self.core = core
        self.inference = inference
        spki = material.leaf_spki_sha256 if material is not None else None
        self.health = health_aio.HealthServicer()
        self._servicers = (
            InferenceServicer(self.inference),
            ModelServicer(runtime, device, core.policy),
            ServerServicer(runtime, device),
            AuditServicer(runtime),
            AttestationServicer(runtime, spki),
        )
        self.server = self._server(None)
        self.ports: dict[str, int] = {}
        for address in settings.listen.plaintext:
            self.ports[address] = _bound(self.server.add_insecure_port, address, "listen.plaintext")
        if material is not None:
            creds = server_credentials(material)
            for address in settings.listen.tls:
                self.ports[address] = _bound(lambda a: self.server.add_secure_port(a, creds), address, "listen.tls")
        self.proxy_servers: list[grpc.aio.Server] = []
        for proxy in settings.auth.trusted_proxies:
            server = self._server(proxy)
            _bound(server.add_insecure_port, _unix_address(proxy.listen), "auth.trusted_proxies")
            self.proxy_servers.append(server)

    def _server(self, proxy: TrustedProxySettings | None) -> grpc.aio.Server:
        """A grpc.aio server with every service; on a trusted gateway's listener (``proxy``)
        its forwarded client identity is the caller's."""
        server = grpc.aio.server(interceptors=[CallPipeline(self.core, proxy)], options=server_options(self.settings))
        inference, model, server_state, audit, attestation = self._servicers
        inference_pb2_grpc.add_InferenceServiceServicer_to_server(inference, server)
        model_pb2_grpc.add_ModelServiceServicer_to_server(model, server)
        server_pb2_grpc.add_ServerServiceServicer_to_server(server_state, server)
        audit_pb2_grpc.add_AuditServiceServicer_to_server(audit, server)
        attestation_pb2_grpc.add_AttestationServiceServicer_to_server(attestation, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if self.settings.reflection:
            names = [
                inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name,
                model_pb2.DESCRIPTOR.services_by_name["ModelService"].full_name,
                server_pb2.DESCRIPTOR.services_by_name["ServerService"].full_name,
                audit_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
                attestation_pb2.DESCRIPTOR.services_by_name["AttestationService"].full_name,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            ]
            enable_reflection(names, server)
        return server

    async def start(self) -> None:
        await self.runtime.attach_health(self.health)
        await self.server.start()
        for server, proxy in zip(self.proxy_servers, self.settings.auth.trusted_proxies, strict=True):
            await server.start()
            os.chmod(proxy.listen.removeprefix("unix:"), proxy.socket_mode)

    async def stop(self, grace: float | None) -> None:
        """Stop listening (``grpc.aio.Server.stop``). With no grace (0 or None: the drain's
        grace is over), inference calls still running are first answered UNAVAILABLE with
        reason ``DRAINING`` (``CallCore.stop_running``), on both front ends sharing the core."""
        if not grace:
            await self.core.stop_running()
        await asyncio.gather(self.server.stop(grace), *(s.stop(grace) for s in self.proxy_servers))

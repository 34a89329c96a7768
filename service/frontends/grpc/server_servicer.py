"""``xinserve.v1.ServerService``: versions, capabilities and load."""

from __future__ import annotations

import asyncio
import importlib.metadata

from audit.config import AuditSettings
from service.core.reasons import Reason
from service.core.status import not_found
from service.frontends.grpc.attestation_servicer import tee_status
from service.runtime.device_monitor import device_message, ensure_monitor
from service.runtime.state import Runtime
from xinserve.v1 import server_pb2, server_pb2_grpc

# Revision of the xinserve.v1 contract implemented here; bump on every additive change.
SCHEMA_REVISION = 4
# The contract at each revision: SHA-256 of protoc's FileDescriptorSet of proto/xinserve/v1
# (files in byte order of their paths, no source info, so comments do not count). A change
# to proto/ fails tests/server/test_schema_revision.py until the revision is bumped and the
# new digest recorded under it. Revision 2: Device fields and DeviceHealth, attestation and
# audit services, ChatRequest.allow_special_tokens, model/LoRA status fields. Revision 3:
# GetServerInfoResponse.audit (AuditStatus); chat tools, tool_choice and tool calls.
# Revision 4: ErrorReason (errors.proto), the catalogue of ErrorInfo reasons.
SCHEMA_DESCRIPTOR_SHA256 = {
    1: "1fed430721a022c611bf60fcec6396dccdc3f9c02e95debda70fb780ee008fe1",
    2: "0ffe0ab2ac81405b8a31a0987423c96674b39f1efd9aa620a2c8b7ba69a5a9b0",
    3: "9600a25ca5f1d7c0b8dbb2106eda2846d59d81688467f4a8baba5e430cc2e15c",
    4: "5ebab2e2d958548c86fb9e0d8e9e556f1fdcfabafec3c7a14bf707e19fbc7f81",
}
# Oldest client revision still served correctly.
MIN_CLIENT_REVISION = 1
# How long GetServerInfo waits for the device inventory's first reading after start (the
# reading itself runs in the monitor's thread, never on the request path).
_FIRST_READING_WAIT_SECONDS = 15.0


def audit_status(audit: AuditSettings) -> server_pb2.AuditStatus:
    """The audit log's off-host anchor as GetServerInfo reports it (``AuditSettings.anchor_posture``)."""
    posture = audit.anchor_posture
    return server_pb2.AuditStatus(
        anchor=posture,
        anchor_waiver=(audit.anchor_waiver or "") if posture == "waived" else "",
        require_anchor=audit.require_anchor,
    )


def server_version() -> str:
    try:
        return importlib.metadata.version("xinserve")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class ServerServicer(server_pb2_grpc.ServerServiceServicer):
    def __init__(self, runtime: Runtime, device: str) -> None:
        self._rt = runtime
        self._device = device
        devices = runtime.settings.devices
        self._devices = ensure_monitor(device, devices.refresh_seconds, devices.tool_timeout)

    async def GetServerInfo(self, request, context):
        ready = self._rt.ready_engines()
        infos = [engine.info for _, engine in ready]
        limits = self._rt.settings.limits
        caps = server_pb2.Capabilities(
            structured_output_modes=[
                server_pb2.STRUCTURED_OUTPUT_MODE_JSON_SCHEMA,
                server_pb2.STRUCTURED_OUTPUT_MODE_REGEX,
                server_pb2.STRUCTURED_OUTPUT_MODE_CHOICE,
                server_pb2.STRUCTURED_OUTPUT_MODE_GRAMMAR,
                server_pb2.STRUCTURED_OUTPUT_MODE_JSON_OBJECT,
            ],
            max_logprobs=min((i.max_logprobs for i in infos), default=0),
            lora=any(i.lora_adapters for i in infos),
            prefix_caching=any(i.prefix_caching for i in infos),
            max_n=limits.max_n,
            max_stop_sequences=limits.max_stop_sequences,
            max_embed_inputs=limits.max_embed_inputs,
        )
        read_at, devices = self._devices.snapshot()
        if not read_at:  # just started: wait for the first reading (else DEGRADED "not read yet")
            await asyncio.to_thread(self._devices.wait_first, _FIRST_READING_WAIT_SECONDS)
            read_at, devices = self._devices.snapshot()
        return server_pb2.GetServerInfoResponse(
            server_version=server_version(),
            schema_revision=SCHEMA_REVISION,
            min_client_revision=MIN_CLIENT_REVISION,
            backend="vllm",
            backend_version=infos[0].backend_version if infos else "",
            devices=[device_message(d, read_at) for d in devices],
            capabilities=caps,
            tee=tee_status(self._rt),
            audit=audit_status(self._rt.settings.audit),
        )

    async def GetLoad(self, request, context):
        engines = self._rt.ready_engines()
        if request.model:
            engines = [(n, e) for n, e in engines if n == request.model]
            if not engines and request.model not in self._rt.models:
                raise not_found("model", request.model, Reason.MODEL_NOT_FOUND)
        running = waiting = 0
        usage = 0.0
        for _, engine in engines:
            load = engine.load()
            running += load.running
            waiting += load.waiting
            usage = max(usage, load.kv_cache_usage)
        adm = self._rt.admission
        return server_pb2.GetLoadResponse(
            running=running, waiting=waiting, kv_cache_usage=usage, in_flight=adm.in_flight, queued=adm.queued
        )

"""``xinserve.v1.AttestationService``: TEE evidence bound to the TLS channel and the served models.

Report data (trust.tee.binding.channel_report_data):
``SM3(u32be(len(nonce)) ‖ nonce ‖ SHA-256(server certificate SPKI) ‖ u32be(n) ‖ sorted manifest
digests)``, zero-padded to 64 bytes. Refused with FAILED_PRECONDITION when the server has no TEE
provider, or the call did not come over TLS (nothing to bind to); INVALID_ARGUMENT for a nonce
outside 16..64 bytes. Each call is audited twice: the call's own ``rpc`` record and an
``attestation_collected`` event (purpose ``client``) with the SM3 of the nonce and of the evidence.
"""

from __future__ import annotations

import grpc

from audit import EventType
from service.core.logs import get_logger
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, invalid_argument
from service.runtime.state import ModelState, Runtime
from trust.sm3 import sm3_hex
from trust.tee.binding import MAX_NONCE, MIN_NONCE, channel_report_data
from trust.tee.errors import EvidenceError
from trust.tee.evidence import TEE_NONE
from xinserve.v1 import attestation_pb2, attestation_pb2_grpc

log = get_logger("xinserve.attestation")


def tee_status(runtime: Runtime) -> attestation_pb2.TeeStatus:
    """What GetServerInfo reports about the TEE."""
    hook = runtime.tee
    if hook is None:
        return attestation_pb2.TeeStatus(tee=TEE_NONE)
    return attestation_pb2.TeeStatus(tee=hook.tee, recorded=hook.recorded, keys_from_kbs=hook.keys_from_kbs)


def _over_tls(context: grpc.aio.ServicerContext) -> bool:
    return context.auth_context().get("transport_security_type") == [b"ssl"]


class AttestationServicer(attestation_pb2_grpc.AttestationServiceServicer):
    def __init__(self, runtime: Runtime, spki_hash: bytes | None) -> None:
        self._rt = runtime
        self._spki = spki_hash

    def _served_digests(self) -> list[str]:
        return sorted(
            e.manifest_digest for e in self._rt.models.values() if e.state is ModelState.READY and e.manifest_digest
        )

    async def GetAttestation(self, request, context):
        nonce = bytes(request.nonce)
        if not MIN_NONCE <= len(nonce) <= MAX_NONCE:
            raise invalid_argument(
                [FieldViolation("nonce", f"must be {MIN_NONCE} to {MAX_NONCE} bytes, got {len(nonce)}")]
            )
        hook = self._rt.tee
        if hook is None or hook.tee == TEE_NONE:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, "the server runs without a TEE", Reason.NO_TEE)
        if self._spki is None or not _over_tls(context):
            raise RpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "attestation is bound to the TLS channel: call it over a TLS listener",
                Reason.ATTESTATION_NEEDS_TLS,
            )
        digests = self._served_digests()
        report_data = channel_report_data(nonce, self._spki, digests)
        try:
            evidence = await hook.collect_for(report_data)
        except EvidenceError as exc:
            log.error("attestation_failed", reason=exc.reason.value, detail=exc.detail)
            await self._rt.audit_event(
                EventType.ATTESTATION_COLLECTED, "UNAVAILABLE", purpose="client", reason=exc.reason.value
            )
            raise RpcError(
                grpc.StatusCode.UNAVAILABLE, "the TEE evidence provider failed", Reason.ATTESTATION_FAILED
            ) from None
        await hook.audit_evidence(self._rt, evidence, "client", nonce_sm3=sm3_hex(nonce), models=len(digests))
        return attestation_pb2.GetAttestationResponse(
            tee=evidence.tee,
            evidence=evidence.raw,
            aux_evidence=evidence.aux,
            report_data=evidence.report_data,
            spki_sha256=self._spki,
            manifest_digests=digests,
            recorded=evidence.recorded,
        )

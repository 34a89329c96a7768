"""Container health check: exit 0 if the local server's ``grpc.health.v1`` status is SERVING.

Usage: ``python -m service.healthcheck [HOST:PORT] [SERVICE]`` (defaults 127.0.0.1:50051 and "").
Exit codes: 0 SERVING, 1 anything else (not serving, unreachable, timeout).
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "127.0.0.1:50051"
    service = argv[1] if len(argv) > 1 else ""
    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
        except grpc.RpcError as exc:
            print(f"unhealthy: {exc.code().name}", file=sys.stderr)
            return 1
    ok = reply.status == health_pb2.HealthCheckResponse.SERVING
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

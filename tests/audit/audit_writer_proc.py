"""A writer process for the crash tests: appends concurrently and prints each acknowledged seq.

Usage: python audit_writer_proc.py sqlite PATH KEY_PEM | postgresql DSN KEY_PEM
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from pydantic import SecretStr

from audit.config import AuditSettings, StoreKind
from audit.log import AuditLog
from audit.records import AuditRecord, EventType
from trust.sm2 import Sm2PrivateKey


async def main(kind: str, where: str, key: Sm2PrivateKey) -> None:
    if kind == "postgresql":
        settings = AuditSettings(
            store=StoreKind.POSTGRESQL, dsn=SecretStr(where), node_id="node-a", retention_enabled=False
        )
    else:
        settings = AuditSettings(store=StoreKind.SQLITE, path=Path(where), node_id="node-a")
    log = await AuditLog.open(settings, key)
    print("open", flush=True)

    async def client(c: int) -> None:
        i = 0
        while True:
            seq = await log.append(
                AuditRecord(event=EventType.RPC, principal=f"client-{c}", request_id=f"{c}-{i}", outcome="OK")
            )
            sys.stdout.write(f"{seq}\n")
            sys.stdout.flush()
            i += 1

    await asyncio.gather(*(client(c) for c in range(32)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Sm2PrivateKey.from_pem(Path(sys.argv[3]).read_bytes())))

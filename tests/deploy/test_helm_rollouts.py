"""The chart's rollouts and storage: the Deployment strategy per mode, the audit log and the
server key never on an emptyDir unless waived, the PDB where it protects something, the LWS
leader waiting for its Ray workers, and what a second server on one SQLite audit store gets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.lifecycle.server import AuditOpenFailed, open_audit
from service.settings.config import load_settings
from tests.deploy.helm import (
    POSTGRESQL,
    RenderError,
    by_kind,
    config_of,
    container_of,
    render,
    skip_without_helm,
    validate_all,
)

skip_without_helm()

PG = POSTGRESQL


def _pod_spec(objects: list[dict]) -> dict:
    (deployment,) = by_kind(objects, "Deployment")
    return deployment["spec"]["template"]["spec"]


def _volumes(spec: dict) -> dict[str, dict]:
    return {v["name"]: v for v in spec["volumes"]}


SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
NO_SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
NO_SURGE_SETS = (
    "strategy.type=RollingUpdate",
    "strategy.rollingUpdate.maxSurge=0",
    "strategy.rollingUpdate.maxUnavailable=1",
)
RECREATE = {"type": "Recreate"}


@pytest.mark.parametrize(
    ("sets", "strategy", "data"),
    [
        # The default install: SQLite on a ReadWriteOnce PVC: a surge pod could never start.
        ((), RECREATE, "persistentVolumeClaim"),
        (("persistence.accessModes={ReadWriteMany}",), RECREATE, "persistentVolumeClaim"),
        # Cards held: a surge pod needs a second set.
        ((*PG, "chip=ascend", "devicesPerPod=8"), RECREATE, "emptyDir"),
        ((*PG, "chip=cpu", "replicaCount=3"), SURGE, "emptyDir"),
        ((*PG, "chip=cuda", "devicesPerPod=1", *NO_SURGE_SETS), NO_SURGE, "emptyDir"),
        (NO_SURGE_SETS, NO_SURGE, "persistentVolumeClaim"),
    ],
)
def test_strategy_and_data_volume_per_mode(sets, strategy, data):
    objects = render(*sets)
    validate_all(objects)
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["strategy"] == strategy
    volumes = _volumes(_pod_spec(objects))
    assert data in volumes["data"]
    if data == "emptyDir":  # PostgreSQL: the key from its Secret, not the emptyDir
        assert volumes["server-key"]["secret"] == {"secretName": "server-key"}
        mounts = {m["name"]: m for m in container_of(objects)["volumeMounts"]}
        assert mounts["server-key"] == {"name": "server-key", "mountPath": "/etc/xinserve/server-key", "readOnly": True}
        audit = config_of(objects)["audit"]
        assert audit["signing_key_path"] == "/etc/xinserve/server-key/server-sm2.pem"
        assert audit["store"] == "postgresql" and audit["archive_dir"] == "/var/lib/xinserve-archive"
        assert volumes["audit-archive"]["persistentVolumeClaim"] == {"claimName": "audit-archive"}
    else:
        (pvc,) = by_kind(objects, "PersistentVolumeClaim")
        assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        assert "signing_key_path" not in config_of(objects)["audit"]  # <data_dir>/keys on the PVC


@pytest.mark.parametrize("surge", [None, "1", "25%"])
def test_a_surging_rolling_update_refused_with_the_sqlite_log(surge):
    sets = ["strategy.type=RollingUpdate"] + ([f"strategy.rollingUpdate.maxSurge={surge}"] if surge else [])
    with pytest.raises(RenderError, match="cannot take the audit database's writer lock"):
        render(*sets)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("persistence.enabled=false",), "/dangerouslyAllowEphemeralAuditLog"),  # the schema
        (("mode=leaderworkerset",), "/dangerouslyAllowEphemeralAuditLog"),
        (PG[:2], "set audit.serverKey.secretName"),
        ((*PG[:2], "mode=leaderworkerset"), "set audit.serverKey.secretName"),
        (PG[:3], r"needs audit\.postgresql\.archiveVolume"),
    ],
)
def test_audit_log_or_server_key_on_an_emptydir_refused_unless_waived(sets, message):
    with pytest.raises(RenderError, match=message):
        render(*sets)
    objects = render(*sets, "dangerouslyAllowEphemeralAuditLog=true")
    validate_all(objects)
    workloads = by_kind(objects, "Deployment") or by_kind(objects, "LeaderWorkerSet")
    assert workloads and not by_kind(objects, "PersistentVolumeClaim")


def test_two_servers_on_one_sqlite_store_the_second_is_refused(tmp_path: Path):
    """What a surge pod on the same node got: the rendered configuration, its data directory
    one directory here, opened twice through the server's own start path."""
    config = config_of(render())
    config["data_dir"] = str(tmp_path)
    config["audit"]["path"] = str(tmp_path / "audit" / "audit.db")
    config["audit"]["writer_lock_wait_s"] = 0.5
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = load_settings(path)

    import asyncio

    async def both() -> str:
        first = await open_audit(settings)
        try:
            with pytest.raises(AuditOpenFailed) as refused:
                await open_audit(settings)
            assert refused.value.another_writer and refused.value.exit_code == 6
            return str(refused.value)
        finally:
            await first.close()

    message = asyncio.run(both())
    assert message == "the audit log cannot be opened: another process is writing this audit database"


@pytest.mark.parametrize(
    ("sets", "rendered"),
    [
        ((), False),  # one pod: a budget protects nothing (or blocks drains for good)
        ((*PG, "replicaCount=2"), True),
        ((*PG, "autoscaling.enabled=true"), True),
        ((*PG, "mode=leaderworkerset"), False),  # one group
        ((*PG, "mode=leaderworkerset", "replicaCount=2"), True),
    ],
)
def test_pdb_only_where_it_protects_something_and_covers_the_group(sets, rendered):
    objects = render(*sets)
    validate_all(objects)
    pdbs = by_kind(objects, "PodDisruptionBudget")
    assert bool(pdbs) is rendered
    if not pdbs:
        return
    (pdb,) = pdbs
    assert pdb["spec"]["maxUnavailable"] == 1
    selector = pdb["spec"]["selector"]["matchLabels"]
    (lws,) = by_kind(objects, "LeaderWorkerSet") or [None]
    if lws is None:
        assert selector == {"app.kubernetes.io/name": "xinserve", "app.kubernetes.io/instance": "rel"}
    else:  # the LWS controller puts this label on every pod of the set, workers included
        assert selector == {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"]}


def test_lws_leader_waits_for_its_workers_and_autoscaling_refused():
    objects = render(*PG, "mode=leaderworkerset", "lws.size=3", "lws.workerWaitSeconds=300")
    validate_all(objects)
    (lws,) = by_kind(objects, "LeaderWorkerSet")
    script = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"][0]
    lines = script.strip().splitlines()
    assert lines[0].startswith("ray start --head") and lines[0].endswith("|| exit 1")
    assert lines[1] == "python3 /etc/xinserve/config/wait-for-ray-workers.py --nodes 3 --timeout 300 || exit 1"
    assert lines[2].startswith("exec xinserve serve")
    (cm,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-config")]
    shipped = Path(__file__).resolve().parents[2] / "deploy/helm/xinserve/files/wait-for-ray-workers.py"
    assert cm["data"]["wait-for-ray-workers.py"] == shipped.read_text()
    with pytest.raises(RenderError, match=r"autoscaling\.enabled is not supported with mode=leaderworkerset"):
        render(*PG, "mode=leaderworkerset", "autoscaling.enabled=true")


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("config.audit.path=/tmp/audit.db", "config.audit.path"),
        ("config.data_dir=/tmp/x", "config.data_dir"),
        ("config.audit.signing_key_path=/tmp/k.pem", "config.audit.signing_key_path"),
        ("config.audit.store=sqlite", "config.audit.store"),
    ],
)
def test_config_block_cannot_move_the_audit_log_or_the_key(override, key):
    with pytest.raises(RenderError, match=key.replace(".", r"\.")):
        render(override)
    render("config.audit.retention_days=200")  # other audit settings still merge

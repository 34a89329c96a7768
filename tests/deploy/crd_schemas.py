"""Validation of the chart's custom resources (ServiceMonitor, PrometheusRule, KEDA
ScaledObject, LeaderWorkerSet, InferencePool) against their projects' own CRD schemas, vendored in ``tests/deploy/crds``
(see its README: source tag, commit, licence, how they were slimmed).

A CRD's ``openAPIV3Schema`` is a structural OpenAPI v3 schema; the API server prunes fields
it does not declare, so here, as kubernetes-validate's strict mode does for built-in kinds,
an undeclared field is an error: every object schema with ``properties`` and neither
``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields`` is closed.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

CRDS = Path(__file__).resolve().parent / "crds"
FILES = {
    "ServiceMonitor": "servicemonitor.json",
    "ScaledObject": "scaledobject.json",
    "LeaderWorkerSet": "leaderworkerset.json",
    "PrometheusRule": "prometheusrule.json",
    "InferencePool": "inferencepool.json",
}


def _closed(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _closed(v) for k, v in node.items()}
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


@cache
def crd(kind: str) -> dict[str, Any]:
    """The vendored CRD record of ``kind`` (group, version, source, licence, schema)."""
    return json.loads((CRDS / FILES[kind]).read_text())


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    record = crd(kind)
    schema = _closed(copy.deepcopy(record["openAPIV3Schema"]))
    # apiVersion, kind and metadata are the API server's, checked below.
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def errors(obj: dict[str, Any]) -> list[str]:
    """Every way ``obj`` departs from its CRD's schema, as "path: message" strings."""
    kind = obj["kind"]
    record = crd(kind)
    found = []
    if obj.get("apiVersion") != f"{record['group']}/{record['version']}":
        found.append(f"apiVersion: {obj.get('apiVersion')!r} is not {record['group']}/{record['version']}")
    if not obj.get("metadata", {}).get("name"):
        found.append("metadata.name: missing")
    for error in _validator(kind).iter_errors(obj):
        found.append(f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}")
    return found

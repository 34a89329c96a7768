"""Turn a CustomResourceDefinition into the JSON file the chart's tests validate against.

Usage: ``python tests/deploy/crds/slim_crd.py VERSION < crd.yaml > kind.json``. Keeps the
``openAPIV3Schema`` of the served ``VERSION`` and drops every ``description`` (the bulk of
the file). ``--pod-templates PATH...`` (dotted property paths) replaces the embedded
PodTemplateSpec schemas there by an open object: the tests validate those pod templates
against core/v1 with kubernetes-validate instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("version")
    parser.add_argument("--pod-templates", nargs="*", default=[])
    parser.add_argument("--source", required=True, help="repository, tag, commit and path, recorded in the file")
    args = parser.parse_args()
    crd = yaml.safe_load(sys.stdin)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == args.version]
    schema = _strip(version["schema"]["openAPIV3Schema"])
    for path in args.pod_templates:
        node = schema
        *parents, last = path.split(".")
        for part in parents:
            node = node["properties"][part]
        node["properties"][last] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    out = {
        "group": crd["spec"]["group"],
        "kind": crd["spec"]["names"]["kind"],
        "version": args.version,
        "source": args.source,
        "licence": "Apache-2.0",
        "pod_templates": args.pod_templates,
        "openAPIV3Schema": schema,
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

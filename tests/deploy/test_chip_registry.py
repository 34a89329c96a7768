"""The chip registry (engine_backends/devices/registry.py) against what is kept outside Python:
the Helm chart's chips (values and values schema), deploy/docker/images.toml, the README's
``--device`` lists and docs/deploy.md's supported-vLLM and inventory tables."""

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from engine_backends.devices import CHIPS, KINDS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "xinserve"
NAMES = [c.name for c in CHIPS]
BY_NAME = {c.name: c for c in CHIPS}


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _code(cell: str) -> str:
    found = re.match(r"`([^`]+)`", cell)
    return found.group(1) if found else ""


def test_the_chart_offers_each_chip_with_its_registry_resource():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    profiles = values["chipProfiles"]
    assert list(profiles) == NAMES
    for name, entry in profiles.items():
        assert entry["device"] == name
        assert entry["resource"] == BY_NAME[name].k8s_resource, name
        assert entry["imageTag"].endswith(f"-{BY_NAME[name].image}"), name
    assert set(schema["properties"]["chip"]["enum"]) == set(NAMES)
    device_enum = schema["properties"]["chipProfiles"]["additionalProperties"]["properties"]["device"]["enum"]
    assert set(device_enum) == set(NAMES)


def test_images_toml_has_each_chips_image_with_a_vllm_in_its_range():
    images = tomllib.loads((ROOT / "deploy" / "docker" / "images.toml").read_text())
    assert set(images) == {c.image for c in CHIPS}
    for chip in CHIPS:
        version = Version(images[chip.image]["vllm_version"])
        if chip.vllm.specifier is not None:
            assert chip.vllm.specifier.contains(version, prereleases=True), f"{chip.name}: {version}"


def test_the_readme_device_lists_are_the_registry_in_its_order():
    readme = (ROOT / "README.md").read_text()
    flag = re.search(r"`--device ([a-z0-9|-]+)`", readme)
    assert flag is not None and flag.group(1).split("|") == ["auto", *NAMES]
    row = re.search(r"^\| `engine.device` \| `--device` \| `auto` \| (.*) \|$", readme, re.M)
    assert row is not None and re.findall(r"`([a-z0-9-]+)`", row.group(1)) == ["auto", *NAMES]


def _deploy_table(heading: str) -> list[list[str]]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index(heading) :]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


def test_docs_deploy_supported_vllm_table_is_the_registry():
    rows = _deploy_table("## Supported vLLM per chip")
    assert sorted(_code(r[0]) for r in rows) == sorted(NAMES)
    for name_cell, distribution, supported, plugin, env, resource in rows:
        chip = BY_NAME[_code(name_cell)]
        assert distribution.split(" ")[0] == chip.vllm.distribution, chip.name
        if chip.vllm.specifier is None:
            assert "Requires-Dist" in supported, chip.name
        else:
            assert SpecifierSet(supported) == chip.vllm.specifier, chip.name
        assert plugin == chip.vllm.plugin or (chip.vllm.plugin is None and plugin.startswith("built in")), chip.name
        assert (_code(env) or None) == chip.profile.visible_devices_env, chip.name
        assert _code(resource) == chip.k8s_resource, chip.name


def test_docs_deploy_inventory_table_names_every_kind():
    rows = _deploy_table("## Device inventory and health")
    assert sorted(r[0] for r in rows) == sorted(KINDS)


@pytest.mark.parametrize("kind", sorted({c.device for c in CHIPS}))
def test_the_chips_of_one_kind_share_its_reader_and_vllm_range(kind):
    chips = [c for c in CHIPS if c.device == kind]
    assert [c.profile.chip for c in chips].count("") == 1, f"{kind}: one default chip"
    assert len({c.reader for c in chips}) == 1 and len({c.vllm for c in chips}) == 1, kind


def test_chip_names_and_images_are_distinct():
    assert len(set(NAMES)) == len(NAMES)
    assert len({c.image for c in CHIPS}) == len(CHIPS)

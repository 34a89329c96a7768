"""``xinserve devices`` and ``xinserve serve --print-engine-args``."""

import json

import pytest

from service.cli import main


def test_devices_lists_this_hosts_cpu(capsys, fake_tools):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("cpu:0  ") and out[0].rstrip().split("  ")[-2] == "OK"


def test_devices_finds_an_installed_vendor_tool(capsys, fake_tools):
    fake_tools.printing("cnmon", "cnmon_mlu370-x8.txt")
    assert main(["devices", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["kind"], r["index"]) for r in rows] == [("cpu", 0), ("mlu", 0), ("mlu", 1)]
    assert rows[2]["name"] == "MLU370-X8" and rows[2]["health"] == "ok"


@pytest.mark.parametrize(
    ("fixture", "kind", "name"),
    [("xpu-smi_intel-arc-a770.txt", "xpu", "Intel(R) Arc(TM) A770"), ("xpu-smi_kunlun-p800.txt", "kunlun", None)],
)
def test_devices_tells_intels_xpu_smi_from_kunlunxins(capsys, fake_tools, fixture, kind, name):
    """Intel's and Kunlunxin's tools are both ``xpu-smi``: the kind is the one whose parser
    reads the tool's output."""
    fake_tools.printing("xpu-smi", fixture)
    main(["devices", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["kind"] for r in rows} == {"cpu", kind}
    assert all(r["health"] == "ok" for r in rows if r["kind"] == kind)
    if name is not None:
        assert rows[1]["name"] == name


def test_devices_missing_tool_is_reported_with_exit_1(capsys, fake_tools):
    assert main(["devices", "--device", "ascend"]) == 1
    assert capsys.readouterr().out.strip() == (
        "ascend:0  DEGRADED  npu-smi not found (not on PATH nor in the vendor's usual directories)"
    )


@pytest.mark.parametrize("value", ["0", "-1", "601", "inf", "nan"])
def test_devices_bad_timeout(capsys, value):
    assert main(["devices", "--timeout", value]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_print_engine_args_shows_values_sources_and_reasons(capsys, tmp_path):
    code = main(
        ["serve", "--print-engine-args", "--device", "cpu", "--data-dir", str(tmp_path), "--max-model-len", "512"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "device: cpu" in out
    assert "enforce_eager = True    [cpu profile] the CPU backend has no graph capture" in out
    assert "max_model_len = 512    [configuration]" in out


def _sections(out: str) -> dict[str, dict[str, str]]:
    """{section title: {argument: "value    [source] why"}} of --print-engine-args' output."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = sections[line[:-1]] = {}
        elif line.startswith("  ") and " = " in line:
            name, _, rest = line.strip().partition(" = ")
            current[name] = rest
    return sections


def test_print_engine_args_shows_each_built_in_model_without_building_it(capsys, tmp_path):
    from engine_backends.builtin_models import DEFAULT_BUILTINS, builtin_serving_options

    code = main(
        ["serve", "--print-engine-args", "--device", "cpu", "--data-dir", str(tmp_path), "--max-model-len", "512"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    sections = _sections(out)
    assert list(sections) == [f"built-in model {name}" for name in DEFAULT_BUILTINS]
    for name in DEFAULT_BUILTINS:
        args = sections[f"built-in model {name}"]
        _, options = builtin_serving_options(name)
        for option, value in options.items():
            if option == "max_model_len":
                assert args[option].startswith("512    [configuration]"), args[option]
            else:
                assert args[option].startswith(f"{value!r}    [model] "), (name, option, args[option])
        assert args["enforce_eager"].startswith("True    [cpu profile]")
    assert not (tmp_path / "models").exists(), "printing built nothing"


def test_print_engine_args_shows_a_configured_models_own_section_and_the_large_model_rule(capsys, tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    (big / "model-00001.safetensors").open("wb").truncate(70 * 10**9)  # sparse: ~35 B parameters
    config = tmp_path / "xinserve.yaml"
    config.write_text(
        f"engine:\n  device: cpu\n  max_num_seqs: 4\nmodels:\n  - name: big\n    path: {big}\n"
        "    engine:\n      max_num_seqs: 2\n"
    )
    code = main(["serve", "--print-engine-args", "--config", str(config), "--data-dir", str(tmp_path / "data")])
    out = capsys.readouterr().out
    assert code == 0, out
    args = _sections(out)["model big"]
    assert args["max_num_seqs"].startswith("2    [model configuration]")
    assert args["max_num_batched_tokens"].startswith("512    [large-model rule] ~35 B parameters")
    assert args["enable_chunked_prefill"].startswith("True    [large-model rule]")

"""``xinserve devices`` and ``xinserve serve --print-engine-args``."""

import json

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


def test_devices_missing_tool_is_reported_with_exit_1(capsys, fake_tools):
    assert main(["devices", "--device", "ascend"]) == 1
    assert capsys.readouterr().out.strip() == (
        "ascend:0  DEGRADED  npu-smi not found (not on PATH nor in the vendor's usual directories)"
    )


def test_devices_bad_timeout(capsys):
    assert main(["devices", "--timeout", "0"]) == 2
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

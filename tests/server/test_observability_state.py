"""Logs name an exception by its type chain (frames only at debug level), never by its message,
and Prometheus exports each model's state and the build's versions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.runtime.model_metrics import ModelStateCollector
from service.runtime.state import ModelEntry, ModelState
from tests.conftest import REPO

_LOG_BOTH = """
import logging, sys, structlog
from service.core import logs
logs.configure(sys.argv[1], sys.argv[2])
try:
    try:
        raise KeyError("SECRET-PROMPT-TEXT /srv/models/private")
    except KeyError as inner:
        raise RuntimeError("engine core died: SECRET-PROMPT-TEXT") from inner
except RuntimeError:
    logging.getLogger("vllm.v1.engine").error("from the stdlib", exc_info=True)
    structlog.get_logger("xinserve.test").error("from structlog", exc_info=True)
"""


def _log(log_format: str, level: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _LOG_BOTH, log_format, level],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "SECRET-PROMPT-TEXT" not in result.stderr and "/srv/models" not in result.stderr, result.stderr
    assert "traceback object" not in result.stderr
    return result.stderr


def test_json_log_names_an_exception_chain_by_type_without_its_message_or_frames():
    lines = [json.loads(line) for line in _log("json", "info").splitlines() if line.startswith("{")]
    assert {line["event"] for line in lines} == {"from the stdlib", "from structlog"}
    for line in lines:
        assert line["exception"] == [{"type": "builtins.RuntimeError"}, {"type": "builtins.KeyError"}]


def test_json_log_at_debug_adds_the_frames_but_never_the_message():
    lines = [json.loads(line) for line in _log("json", "debug").splitlines() if line.startswith("{")]
    assert {line["event"] for line in lines} >= {"from the stdlib", "from structlog"}
    for line in (x for x in lines if x["event"] in ("from the stdlib", "from structlog")):
        outer, inner = line["exception"]
        assert (outer["type"], inner["type"]) == ("builtins.RuntimeError", "builtins.KeyError")
        assert outer["frames"] and set(outer["frames"][0]) == {"filename", "lineno", "name"}


def test_console_log_names_the_exception_types_only():
    text = _log("console", "info")
    assert text.count("builtins.RuntimeError") == 2 and text.count("caused by builtins.KeyError") == 2
    assert "Traceback" not in text and 'File "' not in text


def test_model_state_gauge_follows_each_model():
    models = {
        "a": ModelEntry("a", "generate", Path("/nonexistent"), state=ModelState.READY),
        "b": ModelEntry("b", "embed", Path("/nonexistent"), state=ModelState.FAILED),
    }
    collector = ModelStateCollector()
    collector.models = lambda: models
    collector.build = {"version": "1.2.3", "engine": "vllm", "engine_version": "0.32.0"}
    samples = {(s.labels.get("model"), s.labels.get("state")): s.value for f in collector.collect() for s in f.samples}
    assert samples[("a", "ready")] == 1 and samples[("a", "failed")] == 0 and samples[("a", "loading")] == 0
    assert samples[("b", "failed")] == 1 and samples[("b", "ready")] == 0
    models["a"].state = ModelState.FAILED
    samples = {(s.labels.get("model"), s.labels.get("state")): s.value for f in collector.collect() for s in f.samples}
    assert samples[("a", "ready")] == 0 and samples[("a", "failed")] == 1
    build = [s for f in collector.collect() if f.name == "xinserve_build_info" for s in f.samples]
    assert [(s.labels, s.value) for s in build] == [
        ({"engine": "vllm", "engine_version": "0.32.0", "version": "1.2.3"}, 1.0)
    ]


def test_build_info_is_in_the_exposition():
    families = {f.name for f in text_string_to_metric_families(generate_latest(REGISTRY).decode())}
    assert {"xinserve_build_info", "xinserve_model_state"} <= families

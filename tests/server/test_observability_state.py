"""JSON logs render an exception as structured data (not ``<traceback object at …>``), and
Prometheus exports each model's state and the build's versions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.model_metrics import ModelStateCollector
from service.runtime import ModelEntry, ModelState
from tests.conftest import REPO

_LOG_BOTH = """
import logging, structlog
from service import logs
logs.configure("json", "info")
try:
    raise RuntimeError("engine core died")
except RuntimeError:
    logging.getLogger("vllm.v1.engine").error("from the stdlib", exc_info=True)
    structlog.get_logger("xinserve.test").error("from structlog", exc_info=True)
"""


def test_json_log_renders_exc_info_as_structured_exception():
    result = subprocess.run(
        [sys.executable, "-c", _LOG_BOTH], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert {line["event"] for line in lines} == {"from the stdlib", "from structlog"}, result.stderr
    for line in lines:
        assert "traceback object" not in json.dumps(line)
        (exc,) = line["exception"]
        assert exc["exc_type"] == "RuntimeError" and exc["exc_value"] == "engine core died"
        assert exc["frames"] and all("locals" not in f for f in exc["frames"])


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

"""Prometheus metrics of the served models and of the build, read from the runtime at scrape.

- ``xinserve_model_state{model, state}``: 1 for the model's current state (``loading``,
  ``ready``, ``failed``), 0 for the others, so ``xinserve_model_state{state="ready"} == 0``
  alerts on a model that cannot serve (a dead engine included);
- ``xinserve_build_info{version, engine, engine_version}``: always 1, labels say what runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.runtime.state import ModelEntry, ModelState


class ModelStateCollector(Collector):
    """Set ``models`` to a callable returning the runtime's models (``Runtime.models``) and
    ``build`` to the build-info labels; until then only the build info is exported."""

    def __init__(self) -> None:
        self.models: Callable[[], Mapping[str, ModelEntry]] = dict
        self.build: dict[str, str] = {"version": "0+unknown", "engine": "vllm", "engine_version": "unknown"}

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "xinserve_model_state",
            "1 for each model's current state (loading, ready, failed), 0 for the others.",
            labels=["model", "state"],
        )
        for name, entry in self.models().items():
            for s in ModelState:
                state.add_metric([name, s.value], 1.0 if entry.state is s else 0.0)
        info = GaugeMetricFamily(
            "xinserve_build_info", "Always 1; the labels name the running build.", labels=sorted(self.build)
        )
        info.add_metric([self.build[k] for k in sorted(self.build)], 1.0)
        yield from (state, info)


MODEL_STATE = ModelStateCollector()
REGISTRY.register(MODEL_STATE)


def export_runtime(models: Callable[[], Mapping[str, ModelEntry]], version: str, engine_version: str) -> None:
    """Export the state of ``models()`` and the build's versions (called once at start)."""
    MODEL_STATE.models = models
    MODEL_STATE.build = {"version": version, "engine": "vllm", "engine_version": engine_version}

"""The metric names a PromQL expression reads (enough of PromQL for dashboards: selectors,
label matchers, ranges, aggregations with by/without, functions, arithmetic)."""

from __future__ import annotations

import re

_FUNCTIONS = {
    "abs", "absent", "avg", "avg_over_time", "bottomk", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count", "count_over_time", "delta", "deriv", "exp", "floor", "group", "histogram_quantile", "idelta",
    "increase", "irate", "label_replace", "ln", "log2", "log10", "max", "max_over_time", "min", "min_over_time",
    "quantile", "quantile_over_time", "rate", "round", "scalar", "sort", "sort_desc", "sqrt", "stddev", "sum",
    "sum_over_time", "time", "timestamp", "topk", "vector", "and", "or", "unless", "by", "without", "on",
    "ignoring", "group_left", "group_right", "bool", "offset",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w:.])[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in ``expr``; raises ValueError when it has none."""
    text = _STRING.sub("", expr)
    text = _MATCHERS.sub("", text)
    text = _GROUPING.sub("", text)
    text = _RANGE.sub("", text)
    names = {name for name in _IDENT.findall(text) if name not in _FUNCTIONS}
    if not names:
        raise ValueError(f"no metric in {expr!r}")
    return names

"""The metric names a PromQL expression reads, and the metric names podium exports.

Not a PromQL parser: a tokenizer that knows enough of the grammar to tell a metric name from a
function, a keyword, a label name in a grouping clause and anything inside a label matcher or a
string. promtool (tests/monitoring/test_promtool.py) parses the rules for real; this runs without
it, in the unit tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client import CollectorRegistry

from webhook.serve.metrics import Metrics

#: Keywords, operators spelled as words and the aggregation operators (``sum by (le) (...)``:
#: not followed by a parenthesis); any other identifier followed by ``(`` is a function.
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
     "unless", "offset", "atan2", "inf", "nan", "sum", "min", "max", "avg", "group", "stddev",
     "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)  # fmt: skip
#: Clauses whose parenthesised list holds label names, not expressions.
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})

_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      |(?P<matcher>\{[^}]*\})
      |(?P<range>\[[^\]]*\])
      |(?P<number>(?:\d+(?:ms|[smhdwy]))+|\d+(?:\.\d*)?(?:e[+-]?\d+)?|0x[0-9a-fA-F]+)
      |(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
      |(?P<open>\()
      |(?P<other>\S)""",
    re.VERBOSE,
)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (``podium_x_total`` in ``rate(podium_x_total[5m])``)."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr)]
    names: set[str] = set()
    skip_list = False
    for i, (kind, text) in enumerate(tokens):
        following = tokens[i + 1][0] if i + 1 < len(tokens) else None
        if skip_list:
            skip_list = text != ")"
            continue
        if kind != "name":
            continue
        lowered = text.lower()
        if lowered in LABEL_LISTS:
            skip_list = following == "open"
        elif lowered not in KEYWORDS and following != "open":
            names.add(text)
    return names


def exported_names(registry: CollectorRegistry | None = None) -> set[str]:
    """Every series name podium's registry can expose: a counter's ``_total`` (and
    ``_created``), a histogram's ``_bucket``, ``_sum``, ``_count``, a gauge's own name."""
    registry = registry if registry is not None else Metrics().registry
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    return {
        family.name + suffix for family in registry.collect() for suffix in suffixes[family.type]
    }


def unknown_metrics(exprs: Iterator[str] | list[str], exported: set[str]) -> dict[str, set[str]]:
    """Per expression, the metric names it reads that podium does not export."""
    found = {expr: metric_names(expr) - exported for expr in exprs}
    return {expr: names for expr, names in found.items() if names}

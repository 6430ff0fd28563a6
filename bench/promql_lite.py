"""Just enough PromQL to evaluate the Grafana dashboard's own expressions in Python.

Why: the dashboard picture in docs/ must come from real metrics and from
the very expressions the dashboard ships, without a Prometheus server on
the machine. This evaluates, over scrapes held in memory, the subset the
dashboard uses:

- selectors with ``=``, ``!=``, ``=~``, ``!~`` matchers, with or without a range;
- ``rate``, ``irate``, ``increase`` (counter resets handled, no extrapolation);
- ``sum``/``max``/``min``/``avg``/``count`` with ``by (...)`` or ``without (...)``;
- ``histogram_quantile(φ, ...)`` with Prometheus' linear interpolation;
- ``+ - * /`` between vectors (one-to-one on equal label sets) and scalars.

Anything else raises ``PromQLError``, so a dashboard change that needs more
fails loudly instead of drawing something wrong.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]

#: A step is "current" for this long after its last sample (Prometheus' lookback).
LOOKBACK_S = 300.0


class PromQLError(ValueError):
    pass


@dataclass
class Series:
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class Store:
    """Scraped samples: series name + labels -> (time, value) points in time order."""

    def __init__(self) -> None:
        self.series: dict[str, dict[Labels, Series]] = {}

    def add(self, t: float, name: str, labels: dict[str, str], value: float) -> None:
        key = frozenset(labels.items())
        s = self.series.setdefault(name, {}).setdefault(key, Series())
        s.times.append(t)
        s.values.append(value)

    def mark_stale(self, t: float, label: str, value: str) -> None:
        """A failed scrape: the target's series end here (Prometheus' staleness markers)."""
        for by_labels in self.series.values():
            for labels, s in by_labels.items():
                if (label, value) in labels and s.times and not math.isnan(s.values[-1]):
                    s.times.append(t)
                    s.values.append(math.nan)


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
    | (?P<dur>\[\s*\d+[smh]\s*\])
    | (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<op>=~|!~|!=|[-+*/(){},=])
    | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    )""",
    re.VERBOSE,
)

_AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "max": max,
    "min": min,
    "avg": lambda xs: sum(xs) / len(xs),
    "count": len,
}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise PromQLError(f"cannot read {text[pos:]!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _seconds(duration: str) -> float:
    body = duration.strip("[] ")
    return float(body[:-1]) * {"s": 1, "m": 60, "h": 3600}[body[-1]]


Node = Callable[[float], "Vector | float"]


class _Parser:
    def __init__(self, text: str, store: Store) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.store = store

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise PromQLError(f"expected {value!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.expr()
        if self.peek() is not None:
            raise PromQLError(f"unexpected {self.peek()!r}")
        return node

    def expr(self) -> Node:
        node = self.product()
        while (tok := self.peek()) is not None and tok[1] in "+-":
            self.take()
            node = _binary(tok[1], node, self.product())
        return node

    def product(self) -> Node:
        node = self.term()
        while (tok := self.peek()) is not None and tok[1] in "*/":
            self.take()
            node = _binary(tok[1], node, self.term())
        return node

    def labels(self) -> list[str]:
        self.take("(")
        names = []
        while self.peek() != ("op", ")"):
            names.append(self.take()[1])
            if self.peek() == ("op", ","):
                self.take()
        self.take(")")
        return names

    def term(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            number = float(value)
            return lambda _t: number
        if value == "(":
            node = self.expr()
            self.take(")")
            return node
        if kind != "ident":
            raise PromQLError(f"unexpected {value!r}")
        if value in _AGGREGATIONS:
            grouping: tuple[str, list[str]] | None = None
            if self.peek() in (("ident", "by"), ("ident", "without")):
                grouping = (self.take()[1], self.labels())
            self.take("(")
            inner = self.expr()
            self.take(")")
            if grouping is None and self.peek() in (("ident", "by"), ("ident", "without")):
                grouping = (self.take()[1], self.labels())
            return _aggregate(_AGGREGATIONS[value], inner, grouping)
        if value in ("rate", "irate", "increase"):
            self.take("(")
            selector, window = self.selector(self.take()[1])
            self.take(")")
            if window is None:
                raise PromQLError(f"{value} needs a range")
            return _rate(self.store, value, selector, window)
        if value == "histogram_quantile":
            self.take("(")
            phi = float(self.take()[1])
            self.take(",")
            inner = self.expr()
            self.take(")")
            return _histogram_quantile(phi, inner)
        selector, window = self.selector(value)
        if window is not None:
            raise PromQLError("a range vector outside rate()")
        return _instant(self.store, selector)

    def selector(self, name: str) -> tuple[tuple[str, list[tuple[str, str, str]]], float | None]:
        matchers: list[tuple[str, str, str]] = []
        if self.peek() == ("op", "{"):
            self.take("{")
            while self.peek() != ("op", "}"):
                label = self.take()[1]
                op = self.take()[1]
                text = self.take()[1][1:-1].encode().decode("unicode_escape")
                matchers.append((label, op, text))
                if self.peek() == ("op", ","):
                    self.take()
            self.take("}")
        window = None
        tok = self.peek()
        if tok is not None and tok[0] == "dur":
            window = _seconds(self.take()[1])
        return (name, matchers), window


def _matches(labels: Labels, matchers: list[tuple[str, str, str]]) -> bool:
    d = dict(labels)
    for label, op, text in matchers:
        v = d.get(label, "")
        ok = {
            "=": v == text,
            "!=": v != text,
            "=~": re.fullmatch(text, v) is not None,
            "!~": re.fullmatch(text, v) is None,
        }[op]
        if not ok:
            return False
    return True


def _select(
    store: Store, selector: tuple[str, list[tuple[str, str, str]]]
) -> list[tuple[Labels, Series]]:
    name, matchers = selector
    return [(k, s) for k, s in store.series.get(name, {}).items() if _matches(k, matchers)]


def _instant(store: Store, selector: tuple[str, list[tuple[str, str, str]]]) -> Node:
    def at(t: float) -> Vector:
        out: Vector = {}
        for labels, s in _select(store, selector):
            j = _last_at(s.times, t)
            if j >= 0 and t - s.times[j] <= LOOKBACK_S and not math.isnan(s.values[j]):
                out[labels] = s.values[j]
        return out

    return at


def _last_at(times: list[float], t: float) -> int:
    lo, hi = 0, len(times)
    while lo < hi:
        mid = (lo + hi) // 2
        if times[mid] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def _drop_name(labels: Labels) -> Labels:
    return frozenset(kv for kv in labels if kv[0] != "__name__")


def _rate(
    store: Store, fn: str, selector: tuple[str, list[tuple[str, str, str]]], window: float
) -> Node:
    def at(t: float) -> Vector:
        out: Vector = {}
        for labels, s in _select(store, selector):
            end = _last_at(s.times, t)
            start = _last_at(s.times, t - window) + 1
            points = [
                (s.times[j], s.values[j])
                for j in range(start, end + 1)
                if not math.isnan(s.values[j])  # stale markers carry no value
            ]
            if fn == "irate":
                points = points[-2:]
            if len(points) < 2 or math.isnan(s.values[end]):
                continue
            increase = 0.0
            for (_, before), (_, after) in itertools.pairwise(points):
                delta = after - before
                increase += delta if delta >= 0 else after  # a counter reset
            elapsed = points[-1][0] - points[0][0]
            if elapsed <= 0:
                continue
            out[_drop_name(labels)] = increase if fn == "increase" else increase / elapsed
        return out

    return at


def _aggregate(
    op: Callable[[list[float]], float], inner: Node, grouping: tuple[str, list[str]] | None
) -> Node:
    def at(t: float) -> Vector | float:
        v = inner(t)
        if not isinstance(v, dict):
            raise PromQLError("aggregation of a scalar")
        groups: dict[Labels, list[float]] = {}
        for labels, value in v.items():
            if grouping is None:
                key: Labels = frozenset()
            elif grouping[0] == "by":
                key = frozenset(kv for kv in labels if kv[0] in grouping[1])
            else:
                key = frozenset(
                    kv for kv in labels if kv[0] not in grouping[1] and kv[0] != "__name__"
                )
            groups.setdefault(key, []).append(value)
        return {k: op(vs) for k, vs in groups.items()}

    return at


def _histogram_quantile(phi: float, inner: Node) -> Node:
    def at(t: float) -> Vector | float:
        v = inner(t)
        if not isinstance(v, dict):
            raise PromQLError("histogram_quantile of a scalar")
        groups: dict[Labels, list[tuple[float, float]]] = {}
        for labels, value in v.items():
            d = dict(labels)
            if "le" not in d:
                continue
            key = frozenset(kv for kv in labels if kv[0] not in ("le", "__name__"))
            groups.setdefault(key, []).append((float(d["le"]), value))
        out: Vector = {}
        for key, buckets in groups.items():
            q = _quantile(phi, sorted(buckets))
            if not math.isnan(q):
                out[key] = q
        return out

    return at


def _quantile(phi: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' bucketQuantile: linear interpolation inside the bucket."""
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return math.nan
    total = buckets[-1][1]
    if total <= 0:
        return math.nan
    rank = phi * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return buckets[-2][0]


def _binary(op: str, left: Node, right: Node) -> Node:
    fn: Callable[[float, float], float] = {
        "+": lambda a, b: a + b,
        "-": lambda a, b: a - b,
        "*": lambda a, b: a * b,
        "/": lambda a, b: a / b if b else math.nan,
    }[op]

    def at(t: float) -> Vector | float:
        a, b = left(t), right(t)
        if isinstance(a, dict) and isinstance(b, dict):
            out = {k: fn(a[k], b[k]) for k in a.keys() & b.keys()}
            return {k: x for k, x in out.items() if not math.isnan(x)}
        if isinstance(a, dict):
            return {k: fn(x, float(b)) for k, x in a.items()}  # type: ignore[arg-type]
        if isinstance(b, dict):
            return {k: fn(float(a), x) for k, x in b.items()}
        return fn(a, b)

    return at


def compile_expr(text: str, store: Store) -> Node:
    """``text`` as a function of evaluation time -> instant vector (or scalar)."""
    return _Parser(text, store).parse()

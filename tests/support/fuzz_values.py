"""Hypothesis strategies for the values in fuzzed request bodies
(tests/integration/broker/test_fuzz_http.py).

Values are built from a request model's JSON schema (:mod:`broker.http.schemas`),
so a new field or route is fuzzed without a change here. Each field is valid
most of the time (at or inside its bounds) and otherwise mutated: one past a
bound, the wrong type, a huge number, ``NaN``, a very long string; an object
at times lacks a required field or has an unknown or misspelt one. So a body
is often wrong in one place only, and each check is reached. Fields whose
values mean something to the broker (tokens, job ids, statuses, write ids,
prefixes) draw from lists of their own (:data:`BY_NAME`).

A generated body is a Python value that may hold ``orjson.Fragment`` pieces:
JSON text orjson would not write itself (integers past 64 bits, ``NaN``).
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from hypothesis import strategies as st

from broker.limits import MAX_DEPTH

#: One field in this many is mutated (made invalid).
MUTATE_ONE_IN = 8

#: JSON numbers orjson cannot write: integers past 64 bits (exact), -0, underflow.
BIG_NUMBERS = [orjson.Fragment(t) for t in (
    b"18446744073709551617", b"-18446744073709551617", b"1180591620717411303424", b"-0",
    b"1E-400")]
#: Numbers no JSON parser of the broker takes: non-finite literals, overflow.
NON_FINITE = [orjson.Fragment(t) for t in (
    b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1" + b"0" * 400)]
ODD_NUMBERS = BIG_NUMBERS + NON_FINITE

CONTROL_TEXT = ["\x1b[2J\x1b[H", "\x1b]0;owned\x07", "a\x00b", "line\nbreak", "tab\there",
                "\u202eevil", "\ud7ff\ue000", "ü", "队列", "\U0001d518"]

LONG_TEXT = "z" * 5000

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(CONTROL_TEXT), st.sampled_from(BIG_NUMBERS))


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Draw from each strategy in proportion to its weight. (``st.one_of`` takes a
    strategy given twice once, so repeating one does not weigh it.)"""
    total = sum(w for w, _ in choices)

    def pick(i: int) -> st.SearchStrategy[Any]:
        for w, strategy in choices:
            if i < w:
                return strategy
            i -= w
        raise AssertionError(i)

    return st.integers(0, total - 1).flatmap(pick)


def nested(depth: int) -> Any:
    """A list nested ``depth`` levels deep."""
    return orjson.Fragment(b"[" * depth + b"]" * depth)


#: Any JSON value a payload may be: small trees, long strings, nesting at the limit.
JSON_VALUES = st.one_of(
    st.recursive(SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
        max_leaves=10),
    st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH]).map(nested),
    st.sampled_from([1000, 70_000]).map(lambda n: "x" * n))

#: Values of some type, for a field that wants another.
WRONG_TYPES = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, -1, 1.5, "1", "", "true", [], {}, [1], {"a": 1}, LONG_TEXT]),
    st.sampled_from(ODD_NUMBERS))


def _long(n: int, c: str = "x") -> str:
    return c * n


_WRITE_IDS = ["w1", "w2", "part/0", _long(300, "w")]
_HOSTILE_PATHS = ["..", "../x", "/abs", "w1/", "w//x", ".w", "w\n", "ü", "-w"]

#: Field name -> (values its model takes, values it refuses). Valid tokens never
#: appear: a real token would settle a seeded job and start background writes.
BY_NAME: dict[str, tuple[list[Any], list[Any]]] = {
    "token": (["j0000000003.999999", "j0000000001.999999x", "j9999999999.1", "j", "x",
               "j0000000003", ".1", _long(300, "t"), "ü", "\x1b[2J"],
              ["", _long(301, "t"), LONG_TEXT]),
    "ids": (["j0000000001", "j0000000002", "j0000000005", "j9999999999", "", "x", "j-1",
             "j" + "0" * 40, "..", "ü", _long(1000)], [LONG_TEXT]),
    "statuses": (["pending", "claimed", "dead", "completed", "PENDING", "", "delayed", "all",
                  "dead\n", "ü"], [LONG_TEXT]),
    "keep": ([*_WRITE_IDS, *_HOSTILE_PATHS, ""], [_long(301, "w"), LONG_TEXT]),
    "write_id": ([*_WRITE_IDS, *_HOSTILE_PATHS], ["", _long(301, "w"), LONG_TEXT]),
    "prefix": (["w", "w1", "part/", ".", "../", "../../outside/", "../../../outside/x",
                "/etc", "a//b", "w\n", _long(300, "p")], ["", _long(301, "p"), LONG_TEXT]),
    "once": (["once-1", "once-2", _long(512, "o"), "\n"], ["", _long(513, "o"), LONG_TEXT]),
    "worker": (["w", "worker-1", _long(200, "w"), *CONTROL_TEXT[:3]],
               ["", _long(201, "w"), LONG_TEXT]),
    "key": (["k1", "k2", _long(512, "k"), "k\n"], ["", _long(513, "k"), LONG_TEXT]),
    "error": (["boom", "", _long(5000, "e"), *CONTROL_TEXT[:3]], []),
    # a claim may wait: short valid waits only (a paused queue waits them out)
    "wait_s": ([0, 0.0, 0.001, 0.01, -0.0],
               [-1, math.nextafter(0.0, -1.0), math.nextafter(3600.0, math.inf), 3601, 1e308,
                "0", True, orjson.Fragment(b"NaN"), orjson.Fragment(b"1e999")]),
}


def _bounds(schema: dict[str, Any]) -> tuple[Any, Any]:
    return schema.get("minimum", schema.get("exclusiveMinimum")), \
        schema.get("maximum", schema.get("exclusiveMaximum"))


def _valid_integers(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = _bounds(schema)
    lo = -(2**63) if lo is None else lo
    hi = 2**63 - 1 if hi is None else hi
    return st.one_of(st.sampled_from([lo, hi, min(max(0, lo), hi)]), st.integers(lo, hi))


def _bad_integers(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = _bounds(schema)
    bad: list[Any] = [2**63 - 1, -(2**63), *ODD_NUMBERS, 0.5, LONG_TEXT]
    for b in (lo, hi):
        if b is not None:
            bad += [float(b), b + 0.5]
    bad += [lo - 1] if lo is not None else []
    bad += [hi + 1] if hi is not None else []
    return st.sampled_from(bad)


def _valid_numbers(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = _bounds(schema)
    lo = -1e300 if lo is None else lo
    hi = 1e300 if hi is None else hi
    whole = [int(b) for b in (lo, hi) if abs(b) < 2**63]  # a JSON integer is a number too
    return st.one_of(st.sampled_from([lo, hi, (lo + hi) / 2, *whole]), st.floats(lo, hi))


def _bad_numbers(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = _bounds(schema)
    bad: list[Any] = [1e308, -1e308, *NON_FINITE, LONG_TEXT]
    if lo is not None:
        bad += [math.nextafter(lo, -math.inf), lo - 1]
    if hi is not None:
        bad += [math.nextafter(hi, math.inf), hi * 2 + 1]
    return st.sampled_from(bad)


def _valid_strings(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    top = min(hi if hi is not None else 16, 16)
    edges = ["x" * max(lo, 1)] + (["x" * hi, "é" * hi] if hi is not None else [])
    return st.one_of(st.sampled_from(edges), st.text(min_size=max(lo, 0), max_size=max(top, lo)))


def _bad_strings(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    bad = [LONG_TEXT] + (["x" * (lo - 1)] if lo else []) + \
        (["x" * (hi + 1)] if hi is not None else [])
    return st.sampled_from(bad)


class SchemaValues:
    """Strategies for the values a JSON schema (of a pydantic model) describes."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs = schema.get("$defs", {})
        self.root = schema

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        return self.defs[ref.rsplit("/", 1)[1]] if ref else schema

    def value(self, schema: dict[str, Any], name: str = "", depth: int = 0) -> Any:
        """A valid value mostly; one in :data:`MUTATE_ONE_IN` an invalid one."""
        schema = self.resolve(schema)
        good, bad = self.valid(schema, name, depth), self.invalid(schema, name)
        return weighted((MUTATE_ONE_IN - 1, good), (1, bad))

    def valid(self, schema: dict[str, Any], name: str, depth: int) -> st.SearchStrategy[Any]:
        schema = self.resolve(schema)
        if "anyOf" in schema:
            return st.one_of([self.valid(s, name, depth) for s in schema["anyOf"]])
        kind = schema.get("type")
        if kind in ("string", "number", "integer") and name in BY_NAME:
            return st.sampled_from(BY_NAME[name][0])
        if kind == "object":
            return self.obj(schema, depth)
        if kind == "array":
            item_name = "token" if name == "tokens" else name
            item = self.resolve(schema.get("items", {}))
            items = st.sampled_from(BY_NAME[item_name][0]) if item_name in BY_NAME else \
                self.value(item, item_name, depth + 1)
            return st.lists(items, min_size=schema.get("minItems", 0),
                            max_size=max(min(schema.get("maxItems", 4), 4),
                                         schema.get("minItems", 0)))
        if kind == "integer":
            return _valid_integers(schema)
        if kind == "number":
            return _valid_numbers(schema)
        if kind == "string":
            return _valid_strings(schema)
        return _simple(kind)

    def invalid(self, schema: dict[str, Any], name: str) -> st.SearchStrategy[Any]:
        kinds = [s.get("type") for s in schema.get("anyOf", [schema])]
        item_name = "token" if name == "tokens" else name
        if item_name in BY_NAME and BY_NAME[item_name][1]:
            named = st.sampled_from(BY_NAME[item_name][1])
            if "array" in kinds:
                return st.one_of(named, st.lists(named, min_size=1, max_size=2))
            # wait_s lists its wrong types itself: a valid 1.5 would make a claim wait
            return named if name == "wait_s" else weighted((2, named), (1, WRONG_TYPES))
        typed = [{"integer": _bad_integers, "number": _bad_numbers,
                  "string": _bad_strings}[k](s)
                 for k, s in zip(kinds, schema.get("anyOf", [schema]), strict=True)
                 if k in ("integer", "number", "string")]
        if not kinds or kinds == [None]:  # any JSON value: too deep, not finite
            typed.append(st.sampled_from([nested(MAX_DEPTH + 1), nested(5000), *NON_FINITE]))
        return st.one_of(*typed, st.just(LONG_TEXT), WRONG_TYPES)

    def obj(self, schema: dict[str, Any] | None = None, depth: int = 0) -> st.SearchStrategy[Any]:
        """An object with its required properties and some optional ones; at times a
        required one missing, or an unknown or misspelt one added."""
        schema = self.resolve(schema or self.root)
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))

        @st.composite
        def build(draw: st.DrawFn) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, sub in props.items():
                keep = draw(st.integers(0, 19)) < 19 if name in required else draw(st.booleans())
                if keep:
                    out[name] = draw(self.value(sub, name, depth + 1)) if depth < 4 else \
                        draw(WRONG_TYPES)
            if draw(st.integers(0, 5)) == 5:
                out[draw(unknown_names(list(props)))] = draw(SCALARS)
            return out

        return build()


def _simple(kind: str | None) -> st.SearchStrategy[Any]:
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return JSON_VALUES  # no type: any JSON value (a payload or result)


def unknown_names(known: list[str]) -> st.SearchStrategy[str]:
    """Field names a model does not have: misspellings of its own, and others."""
    typos = [n[:i] + n[i + 1:i + 2] + n[i] + n[i + 2:] for n in known
             for i in range(len(n) - 1) if n[i] != n[i + 1]][:40]
    others = ["status", "all", "id", "x", "", "__proto__", "prioirty", "jobs ", "Jobs"]
    return st.sampled_from([n for n in typos + others if n not in known] or others)

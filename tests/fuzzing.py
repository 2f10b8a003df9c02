"""Hypothesis strategies over a tool's JSON input schema: schema-valid calls and deliberately bad ones.

Used by tests/test_fuzz_tools.py (a few examples per tool) and bench/fuzz_bench.py (a larger run).
`tool_calls(schema)` draws (kind, args): kind is "valid", or the way the call was made bad:
wrong_type, missing_required, unknown_key, huge_string, non_finite, out_of_range, bad_date,
deep_nesting. Every bad kind is checked against the schema on its own (jsonschema on the one
property) when drawn, so "bad" means the schema refuses it, not that the tool happens to.
`check_call` runs one call in process and returns what it saw; the caller asserts on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from worldfactory.runtime.episode import MESSAGE_CHARS, QUOTE_CHARS

HUGE_CHARS = (50_000, 400_000)  # a huge string's length range (the schemas cap strings at 2,000)
MAX_ERROR_CHARS = MESSAGE_CHARS + 64  # short() appends "... (N characters in all)"
IMPOSSIBLE_DATES = ["2026-02-30", "9999-99-99", "2026-13-01", "2025-02-29", "2026-04-31", "0000-00-00",
                    "2026-00-10", "2026-1-01", "2026-02-3O", "２０２６-01-01"]
NON_FINITE = [math.inf, -math.inf, math.nan]
WRONG_VALUES = ["x", "", "12", 1.5, -0.5, True, False, None, [], [1], {}, {"a": 1}, 0, -1, 2**63]
KINDS = ("valid", "wrong_type", "missing_required", "unknown_key", "huge_string", "non_finite", "out_of_range",
         "bad_date", "deep_nesting")
_FORMATS = Draft202012Validator.FORMAT_CHECKER
# The MCP client's own serializer stops at 254 levels, so drawn values nest at most this deep; the
# fuzz adds one 10,000-level value in process.
MCP_DEPTH = 250


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return Draft202012Validator(schema, format_checker=_FORMATS).is_valid(value)


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return schema["anyOf"] if "anyOf" in schema else [schema]


def value_of(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the property's schema accepts (edges included: bounds, max length, leap days)."""
    if "anyOf" in schema:
        return st.one_of([value_of(s) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        lo, hi = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1)
        return st.one_of(st.integers(lo, min(hi, lo + 200)), st.sampled_from([lo, hi]), st.integers(lo, hi))
    if kind == "number":
        lo, hi = schema.get("minimum", -1e15), schema.get("maximum", 1e15)
        return st.one_of(st.floats(lo, hi, allow_nan=False, allow_infinity=False),
                         st.integers(math.ceil(lo), math.floor(min(hi, lo + 10_000))), st.sampled_from([lo, hi]))
    if kind == "string":
        if schema.get("format") == "date":
            return st.one_of(st.dates(date(1900, 1, 1), date(2100, 12, 31)),
                             st.sampled_from([date(2024, 2, 29), date(1, 1, 1), date(9999, 12, 31)])
                             ).map(date.isoformat)
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 200)
        return st.one_of(st.text(min_size=lo, max_size=min(hi, 40)),
                         st.sampled_from(["'; DROP TABLE users; --", "%", "_", "\x00", "Robert'); --"]),
                         st.just("é" * hi))
    return st.from_type(object)


def _wrong_value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(WRONG_VALUES).filter(lambda v: not _valid(schema, v))


def _huge() -> st.SearchStrategy[str]:
    """A long run of one character, so an echo of more than a prefix is easy to spot in a message."""
    return st.tuples(st.sampled_from("xQ7é"), st.integers(*HUGE_CHARS)).map(lambda t: t[0] * t[1])


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _out_of_range(schema: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for b in _branches(schema):
        if b.get("type") in ("integer", "number"):
            if "minimum" in b:
                out += [b["minimum"] - 1, -(10**30)]
            if "maximum" in b:
                out += [b["maximum"] + 1, 10**30, 2**64]
            if b.get("type") == "number":
                out += [1e300, -1e300]
    return [v for v in out if not _valid(schema, v)]


def _is_date(schema: dict[str, Any]) -> bool:
    return any(b.get("format") == "date" for b in _branches(schema))


def _is_numeric(schema: dict[str, Any]) -> bool:
    return any(b.get("type") in ("integer", "number") for b in _branches(schema))


def valid_args(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    return st.fixed_dictionaries({k: value_of(props[k]) for k in props if k in required},
                                 optional={k: value_of(props[k]) for k in props if k not in required})


def tool_calls(schema: dict[str, Any]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(kind, args) for one tool: valid calls about a third of the time, the rest bad in one way."""
    props: dict[str, Any] = schema.get("properties", {})
    required = list(schema.get("required", []))
    base = valid_args(schema)
    names = sorted(props)

    def with_prop(kind: str, pick: list[str], values: Any) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        return st.tuples(base, st.sampled_from(pick), st.data()).map(
            lambda t: (kind, {**t[0], t[1]: t[2].draw(values(props[t[1]]))}))

    options = [base.map(lambda a: ("valid", a)), base.map(lambda a: ("valid", a)),
               st.tuples(base, st.text(min_size=1, max_size=20).filter(lambda k: k not in props) | _huge(),
                         st.sampled_from(WRONG_VALUES)).map(lambda t: ("unknown_key", {**t[0], t[1]: t[2]}))]
    if names:
        options += [with_prop("wrong_type", names, _wrong_value),
                    with_prop("huge_string", names, lambda s: _huge()),
                    with_prop("deep_nesting", names, lambda s: st.tuples(st.integers(20, MCP_DEPTH), st.sampled_from(
                        [1, "x", None])).map(lambda t: _nested(*t)))]
    if required:
        options.append(st.tuples(base, st.sampled_from(required)).map(
            lambda t: ("missing_required", {k: v for k, v in t[0].items() if k != t[1]})))
    numeric = [n for n in names if _is_numeric(props[n])]
    if numeric:
        options.append(with_prop("non_finite", numeric, lambda s: st.sampled_from(NON_FINITE)))
        options.append(with_prop("out_of_range", numeric, lambda s: st.sampled_from(_out_of_range(s))))
    dates = [n for n in names if _is_date(props[n])]
    if dates:
        options.append(with_prop("bad_date", dates, lambda s: st.sampled_from(IMPOSSIBLE_DATES)))
    return st.one_of(options)


def longest_run(text: str, value: Any) -> int:
    """How many characters of a huge value's single repeated character appear in a row in text."""
    if not isinstance(value, str) or len(value) < HUGE_CHARS[0]:
        return 0
    ch, best, run = value[0], 0, 0
    for c in text:
        run = run + 1 if c == ch else 0
        best = max(best, run)
    return best


def huge_values(args: Any) -> list[str]:
    if not isinstance(args, dict):
        return []
    return [x for kv in args.items() for x in kv if isinstance(x, str) and len(x) >= HUGE_CHARS[0]]


@dataclass
class Counts:
    """What a fuzz run saw: calls per kind, and which were refused or accepted."""

    calls: int = 0
    refused: int = 0
    accepted: int = 0
    crashes: int = 0  # an exception out of the runtime
    refused_changed_state: int = 0
    not_sent: int = 0  # calls the transport cannot carry as drawn (non-finite numbers over MCP)
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [calls, refused]

    def add(self, kind: str, ok: bool) -> None:
        self.calls += 1
        self.accepted += ok
        self.refused += not ok
        row = self.by_kind.setdefault(kind, [0, 0])
        row[0] += 1
        row[1] += not ok

    def line(self) -> str:
        kinds = ", ".join(f"{k} {c}/{r}" for k, (c, r) in sorted(self.by_kind.items()))
        return (f"{self.calls} calls, {self.refused} refused, {self.accepted} accepted, {self.crashes} crashes, "
                f"{self.refused_changed_state} refused calls changed state, {self.not_sent} not sent "
                f"(per kind calls/refused: {kinds})")


def problems(tool: str, kind: str, args: Any, ok: bool, error: str | None) -> list[str]:
    """What is wrong with one call's outcome: a bad call accepted, a schema-valid call that failed the schema
    check or crashed the tool's code, or a refusal whose message is too long or echoes a huge value."""
    found = []
    if kind == "valid" and not ok and (error or "").startswith((f"{tool} failed: ", f"{tool} failed in the database")):
        found.append(f"a schema-valid call crashed the tool: {error[:300]}")
    if kind != "valid" and ok:
        found.append(f"a {kind} call was accepted")
    if kind == "valid" and not ok and (error or "").startswith("invalid arguments"):
        found.append(f"a schema-valid call failed the schema check: {error[:300]}")
    if not ok:
        text = error or ""
        if not text:
            found.append("a refused call has no message")
        if len(text) > MAX_ERROR_CHARS:
            found.append(f"a {len(text)}-character error message")
        for value in huge_values(args):
            if longest_run(text, value) > QUOTE_CHARS:
                found.append(f"the message echoes {longest_run(text, value)} characters of a "
                             f"{len(value)}-character value: {text[:200]}")
    return found


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    return isinstance(value, list) and any(_non_finite(v) for v in value)


def _mcp_text(res: Any) -> str:
    return " ".join(getattr(b, "text", "") for b in res.content)


def fuzz_world(world: Any, max_examples: int, strict: bool = True) -> tuple[Counts, Counts, list[str]]:
    """Fuzz every tool of a world: each drawn call goes to an episode in process (Episode.call) and, the
    same call, to a second episode behind the in-memory MCP server, so the two stay in lockstep.

    Returns the in-process counts, the MCP counts and the problems found. strict: raise on the first
    problem (inside hypothesis, so it shrinks to a small failing call); otherwise collect them all.
    """
    from anyio.from_thread import start_blocking_portal
    from hypothesis import HealthCheck, Phase, given, settings
    from mcp import Client

    from worldfactory.runtime.mcp_server import build_server

    local, remote = Counts(), Counts()
    found: list[str] = []
    ep, served = world.episode(), world.episode()
    server = build_server(world, served)

    def report(what: str) -> None:
        found.append(what)
        if strict:
            raise AssertionError(what)

    with start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(server)) as client:
        def over_mcp(name: str, args: Any) -> tuple[bool, str | None]:
            res = portal.call(client.call_tool, name, args)
            return not res.is_error, _mcp_text(res) if res.is_error else None

        def fuzz_tool(name: str, schema: dict[str, Any]) -> None:
            @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
            @given(tool_calls(schema))
            def one(call: tuple[str, dict[str, Any]]) -> None:
                kind, args = call
                outcome = {}
                for counts, episode, send in ((local, ep, None), (remote, served, over_mcp)):
                    if send is not None and _non_finite(args):
                        # the in-memory client's JSON writes inf and nan as null: the server would see
                        # a different call, so this one is only made in process
                        counts.not_sent += 1
                        continue
                    where = "in process" if send is None else "over MCP"
                    before = episode.state_key()
                    try:
                        if send is None:
                            step = episode.call(name, args)
                            ok, error = step.ok, step.error
                        else:
                            ok, error = send(name, args)
                    except Exception as exc:  # nothing may raise out of the runtime
                        counts.crashes += 1
                        report(f"{name} {kind} {where}: raised {type(exc).__name__}: {str(exc)[:300]}")
                        return
                    finally:
                        episode.trace.clear()  # huge arguments must not pile up in the trace
                    counts.add(kind, ok)
                    if not ok and episode.state_key() != before:
                        counts.refused_changed_state += 1
                        report(f"{name} {kind} {where}: a refused call changed the episode's state")
                    for p in problems(name, kind, args, ok, error):
                        report(f"{name} {kind} {where}: {p}")
                    outcome[where] = ok
                if len(set(outcome.values())) > 1:
                    report(f"{name} {kind}: in process and over MCP disagree ({outcome}) on {str(args)[:200]}")
                if ep.state_key() != served.state_key():
                    report(f"{name} {kind}: the two episodes' states differ after the same call")

            one()

        for entry in world.tool_manifest:
            fuzz_tool(entry["name"], entry["input_schema"])
    for bad in ([1, 2], "x", 7):  # not a JSON object: only in process (the MCP client sends objects)
        name = world.tool_manifest[0]["name"]
        before = ep.state_key()
        step = ep.call(name, bad)  # type: ignore[arg-type]
        local.add("wrong_type", step.ok)
        if step.ok or ep.state_key() != before:
            report(f"{name}: non-object arguments {bad!r} were accepted or changed state")
    entry = next(t for t in world.tool_manifest if t["input_schema"].get("properties"))
    for key in ("deep", next(iter(entry["input_schema"]["properties"]))):  # an unknown key, then a declared one
        before = ep.state_key()
        try:
            step = ep.call(entry["name"], {key: _nested(10_000, "x")})
        except Exception as exc:
            local.crashes += 1
            report(f"{entry['name']}: a 10,000-level value under {key!r} raised {type(exc).__name__}")
            continue
        finally:
            ep.trace.clear()
        local.add("deep_nesting", step.ok)
        if step.ok or ep.state_key() != before or len(step.error or "") > MAX_ERROR_CHARS:
            report(f"{entry['name']}: a 10,000-level value under {key!r} was accepted or changed state")
    step = ep.call("z" * HUGE_CHARS[0], {})
    local.add("unknown_tool", step.ok)
    if step.ok or len(step.error or "") > MAX_ERROR_CHARS or "z" * (QUOTE_CHARS + 1) in (step.error or ""):
        report(f"an unknown tool with a huge name: {(step.error or '')[:200]}")
    ep.close()
    served.close()
    return local, remote, found

"""sweep: act on every record in one state that a business condition picks out (a date cut-off:
"every open claim filed on or before 2026-05-01"), SWEEP_MIN to SEARCH_MAX calls; filed as bulk tasks.
A table with no searchable date gets a routine close-out of the whole status ("Month-end tidy-up:
archive every sent email"), unless the step is destructive."""

from __future__ import annotations

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from ..workflow import id_param, render_verb
from .builder import SEARCH_MAX, Sweep, TaskBuilder, sweep_calls
from .driver import Plan, Stream
from .words import cap, in_state, when

FAMILY = "bulk"
QUOTA = 7
TRIES = None  # every sweep may be tried
PHRASES = ["{Verb}.", "Please {verb}.", "Bulk job: {verb}."]
ROUTINES = ["Month-end tidy-up", "Quarter-end close-out", "Before the audit"]  # why a whole status is swept
SWEEP_MIN = 48


def candidates(b: TaskBuilder) -> Stream:
    return Stream([s for s in b.sweeps() if len(s.rows) >= SWEEP_MIN])


def plan(b: TaskBuilder, candidate: Sweep) -> Plan | None:
    table, tr, state, args, rows = candidate
    obj = f"every {in_state(table.singular, state)}"
    dates = [c for c in table.columns if c.type == "date" and c.name in table.search]
    dated = sorted((r[dates[0].name], r["id"]) for r in rows if r[dates[0].name]) if dates else []
    if len(dated) < SWEEP_MIN:  # no date to cut on: a routine close-out, never a destructive one
        if tr.destructive:
            return None
        verb = render_verb(tr, obj, args)
        return Plan(f"{b.rng.choice(ROUTINES)}: {verb}.", sweep_calls(candidate), table.name)
    day = dates[0]
    cutoff = dated[b.rng.randint(SWEEP_MIN, len(dated)) - 1][0]
    chosen = [r for r in rows if r[day.name] and r[day.name] <= cutoff]
    verb = render_verb(tr, f"{obj} {when(day, cutoff, 'on or before')}", args)
    assert table.workflow is not None
    search = ToolCall(tool=f"search_{table.name}",
                      args={table.workflow.column: state, f"{day.name}_to": cutoff, "limit": SEARCH_MAX})
    calls = [search] + [ToolCall(tool=tr.name, args={id_param(table): r["id"], **args}) for r in chosen]
    return Plan(fill(b.rng.choice(PHRASES), Verb=cap(verb), verb=verb), calls, table.name)

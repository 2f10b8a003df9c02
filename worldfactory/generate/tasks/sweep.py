"""sweep: act on every record in one state (SWEEP_MIN to SEARCH_MAX calls); filed as bulk tasks."""

from __future__ import annotations

from ..workflow import render_verb
from .builder import Sweep, TaskBuilder, sweep_calls
from .driver import Plan, Stream
from .words import cap, human

FAMILY = "bulk"
QUOTA = 7
TRIES = None  # every sweep may be tried
PHRASES = ["{Verb}.", "Please {verb}, all of them.", "Bulk job: {verb}."]
SWEEP_MIN = 48


def candidates(b: TaskBuilder) -> Stream:
    return Stream([s for s in b.sweeps() if len(s.rows) >= SWEEP_MIN])


def plan(b: TaskBuilder, candidate: Sweep) -> Plan:
    table, tr, state, args, _ = candidate
    verb = render_verb(tr, f"every {human(state)} {table.singular}", args)
    return Plan(b.rng.choice(PHRASES).format(Verb=cap(verb), verb=verb), sweep_calls(candidate), table.name)

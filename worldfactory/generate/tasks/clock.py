"""What the world's clock allows a task to ask: no step that contradicts today.

A task is drawn only where the clock allows the action it asks for (issue 31). A step is refused when:
- `done_ahead`: it marks as done (the audit's DONE_STATUSES: completed, no_show, delivered) a record whose
  plan date lies after today (a visit scheduled next month marked completed);
- `lapse_early`: it marks as lapsed (LAPSE_STATUSES: overdue, expired, missed) a record whose plan or period
  date has not passed (an invoice due next year marked overdue);
- `schedule_past`: it schedules (SCHEDULE_STATUSES) a record whose plan date has already passed;
- `param_past` / `param_ahead`: it writes a parameter into a plan date before today, or into an event date
  after today.
Dates are read by their meaning (worldfactory/dates.py `date_meaning`); a record with no such date is allowed.
"""

from __future__ import annotations

from typing import Any

from worldfactory.audit import DONE_STATUSES
from worldfactory.dates import date_meaning
from worldfactory.spec import TableDef, Transition

LAPSE_STATUSES = frozenset({"overdue", "past_due", "expired", "lapsed", "missed", "no_show", "defaulted"})
SCHEDULE_STATUSES = frozenset({"scheduled", "booked", "planned", "confirmed"})
REASONS = ("done_ahead", "lapse_early", "schedule_past", "param_past", "param_ahead")


def _schedules(status: str) -> bool:
    return status in SCHEDULE_STATUSES or status.endswith("_scheduled")


def clock_refusal(table: TableDef, tr: Transition, row: dict[str, Any], args: dict[str, Any],
                  today: str) -> tuple[str, str] | None:
    """(reason, what) when the clock forbids the transition on the row with these arguments, else None."""
    dates = {c.name: date_meaning(c) for c in table.columns if c.type == "date"}
    plans = [n for n, m in dates.items() if m == "plan" and row.get(n)]
    bounds = [n for n, m in dates.items() if m in ("plan", "period") and row.get(n)]
    if tr.to in LAPSE_STATUSES:
        early = [n for n in bounds if row[n] >= today]
        if early:
            return "lapse_early", f"{tr.name} marks it {tr.to} but its {early[0]} {row[early[0]]} has not passed"
    elif tr.to in DONE_STATUSES:
        ahead = [n for n in plans if row[n] > today]
        if ahead:
            return "done_ahead", f"{tr.name} marks it {tr.to} but its {ahead[0]} {row[ahead[0]]} is after today"
    if _schedules(tr.to):
        past = [n for n in plans if row[n] < today]
        if past:
            return "schedule_past", f"{tr.name} schedules it but its {past[0]} {row[past[0]]} has passed"
    for col, value in tr.set.items():
        given = args.get(value[1:]) if isinstance(value, str) and value.startswith("$") else None
        if col not in dates or not isinstance(given, str):
            continue
        if dates[col] == "plan" and given < today:
            return "param_past", f"{tr.name} sets {col} to {given}, before today"
        if dates[col] == "event" and given > today:
            return "param_ahead", f"{tr.name} sets {col} to {given}, after today"
    return None

"""What a date column means on a world's clock: an event that happened, a plan that may lie ahead, or a period
bound. Declared by a pack (`date_meaning`), else inferred from the column's name; here, below the packs, so
`check-pack`, the seed stage, the realism audit and the task families read one rule."""

from __future__ import annotations

import re

from worldfactory.spec import ColumnDef, DateMeaning

# First match wins; a name no rule matches is an event ("created_on", "filed_on", "paid_on", "at").
MEANING_RULES: tuple[tuple[str, DateMeaning], ...] = (
    (r"^period_|_ending$|(^|_)ends?_(on|date)$|^return_date$|expires|renews|(^|_)due(_|$)|needed_by|cutoff|"
     r"^next_", "period"),
    (r"scheduled|planned|starts?_(on|date)$|_for$|event_date|arrival|departure|pickup_date|check_in|shift_date|"
     r"held_on|interview_date|expected", "plan"),
)


def date_meaning(col: ColumnDef) -> DateMeaning:
    """The column's declared meaning, else the first of MEANING_RULES its name matches, else an event."""
    if col.date_meaning is not None:
        return col.date_meaning
    for pattern, meaning in MEANING_RULES:
        if re.search(pattern, col.name):
            return meaning
    return "event"

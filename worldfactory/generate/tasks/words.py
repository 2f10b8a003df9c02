"""Words every task family shares: how values are said and how tools are named."""

from __future__ import annotations

import re
from typing import Any

from worldfactory.spec import ColumnDef, TableDef

from ..workflow import slug


def human(value: Any) -> str:
    """A stored value as a person says it (``in_review`` -> ``in review``)."""
    return str(value).replace("_", " ")


def cap(text: str) -> str:
    """The text with its first letter upper-cased, the rest untouched."""
    return text[:1].upper() + text[1:]


PREPOSITIONS = ("under", "on", "in", "at", "awaiting", "pending", "for", "with", "out", "off", "past")


def in_state(noun: str, state: Any) -> str:
    """A record (or records) in a workflow status as a person says it: "open claim", "claim under review",
    "lease with status notice given" (an adjective before the noun only when the status is one word)."""
    words = human(state).split()
    if len(words) == 1:
        return f"{words[0]} {noun}"
    if words[0] in PREPOSITIONS:
        return f"{noun} {' '.join(words)}"
    return f"{noun} with status {' '.join(words)}"


def when(col: ColumnDef, value: Any, bound: str = "") -> str:
    """A date column and its value as a clause after a noun: "filed on 2026-03-02", "starting on ...",
    "with incident date ..."; ``bound`` ("on or before") makes it a cut-off."""
    if col.name.endswith("_on") and not col.label:
        words = col.name[:-3].split("_")
        if words[-1].endswith("s") and not words[-1].endswith("ss"):  # starts_on: "starting on"
            words[-1] = words[-1][:-1] + "ing"
        return f"{' '.join(words)} {bound or 'on'} {value}"
    return f"with {col.human} {bound + ' ' if bound else ''}{value}"


def a_or_an(word: str) -> str:
    """The indefinite article a person puts before the word ("an inspection", "a unit", "an hour")."""
    w = word.lower()
    if w.startswith(("hour", "honest", "honor", "heir")):
        return "an"
    if w.startswith(("uni", "use", "usu", "uti", "eu", "one", "once")) or w[:1] not in "aeiou":
        return "a"
    return "an"


def of_parent(col: ColumnDef, parent: TableDef, said: str) -> str:
    """A record's link to its parent through a reference column: "of policyholder X" when the column
    is just the parent's name, "requested by user X" when it is a verb's agent, else "whose leasing agent is
    user X"."""
    if col.human == parent.singular:
        return f"of {said}"
    if col.human.endswith(" by"):
        return f"{col.human} {said}"
    if col.human.endswith(f" {parent.singular}") and said.startswith(f"{parent.singular} "):
        said = said[len(parent.singular) + 1:]  # "whose booked resource is Quartz 28", the noun said once
    return f"whose {col.human} is {said}"


def tool_name(table: TableDef, kind: str) -> str:
    """The generated per-record tool of a table: ``get``, ``update`` or ``create`` + its singular."""
    return f"{kind}_{slug(table.singular)}"


WH_NOUNS = {"why": "reason", "how": "way", "when": "time", "where": "place", "who": "person"}


def param_noun(name: str, description: str | None) -> str:
    """A step parameter as a noun phrase after "the": its description where that is one, a wh-clause made
    one ("why the ticket is escalated" -> "reason the ticket is escalated"; found blind: "the why the ticket
    is escalated"), else its name in words ("what needs correcting" -> "correction" from ``correction``)."""
    words = (description or "").split()
    plain = name.removesuffix("_id").replace("_", " ")
    if not words:
        return plain
    first = words[0].lower()
    if first == "how" and len(words) > 2 and words[1] in ("much", "many"):
        return " ".join(["amount" if words[1] == "much" else "number of", *words[2:]])
    if first in WH_NOUNS and len(words) > 1:
        return " ".join([WH_NOUNS[first], *words[1:]])
    if first in ("what", "which", "whether", "whom", "whose"):
        return plain
    if first in ("the", "a", "an") and len(words) > 1:  # "the kind of defect found": the caller says "the"
        return " ".join(words[1:])
    return " ".join(words)


def unit_after(verb: str, slot: str, name: str) -> str | None:
    """The word after a parameter's slot in a verb that names what the value counts, where it is the
    parameter's own ("for {hours_worked} hours", "a {recommendation} recommendation", "with {hours} labor
    hours"): said with the slot, left out with it. A unit is one word, or two where the second is the own one."""
    m = re.search(re.escape("{" + slot + "}") + r"\"?\s+([a-z]+)(?:\s+([a-z]+))?\b", verb)
    if m is None:
        return None
    stems = {w.rstrip("s") for w in name.split("_")}
    if m.group(1).rstrip("s") in stems:
        return m.group(1)
    return f"{m.group(1)} {m.group(2)}" if m.group(2) and m.group(2).rstrip("s") in stems else None

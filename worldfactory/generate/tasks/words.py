"""Words every task family shares: how values are said and how tools are named."""

from __future__ import annotations

from typing import Any

from worldfactory.spec import TableDef

from ..workflow import slug


def human(value: Any) -> str:
    """A stored value as a person says it (``in_review`` -> ``in review``)."""
    return str(value).replace("_", " ")


def cap(text: str) -> str:
    """The text with its first letter upper-cased, the rest untouched."""
    return text[:1].upper() + text[1:]


def tool_name(table: TableDef, kind: str) -> str:
    """The generated per-record tool of a table: ``get``, ``update`` or ``create`` + its singular."""
    return f"{kind}_{slug(table.singular)}"

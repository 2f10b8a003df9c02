"""Filling placeholders without str.format: pack, brief and model text is data, never a template.

str.format reads attribute lookups ({obj.__class__}), indexes and format specs ({obj:>50000000})
out of the template, so a template that carries a department name or a label runs that text.
`fill` replaces only plain ``{name}`` placeholders whose name it is given, in one pass: what it
puts in is never read again, and every other brace stays as written. `numbered` gives a code
generator's value ({n} or {n:06d}, nothing else).
"""

from __future__ import annotations

import re
from typing import Any

PLACEHOLDER = re.compile(r"\{(\w+)\}")
CODE_FIELD = re.compile(r"\{n(?::(0?)(\d{1,2})d)?\}")  # {n}, {n:6d}, {n:06d}
CODE_WIDTH_MAX = 20


def fill(template: str, **values: Any) -> str:
    """The template with each ``{name}`` given in values replaced by str(value), literally, in one pass."""
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        return str(values[key]) if key in values else m.group(0)

    return PLACEHOLDER.sub(sub, template)


def code_problem(pattern: str) -> str | None:
    """Why a `code` pattern is not a plain numbered code, or None: only {n} and {n:0Wd} (W <= 20)."""
    rest = CODE_FIELD.sub("", pattern)
    if "{" in rest or "}" in rest:
        return (f"code must hold only {{n}} or {{n:0Wd}} (W at most {CODE_WIDTH_MAX}) and no other braces, "
                f"e.g. 'CLM-{{n:06d}}'")
    for m in CODE_FIELD.finditer(pattern):
        if m.group(2) and int(m.group(2)) > CODE_WIDTH_MAX:
            return f"code width {m.group(2)} is over {CODE_WIDTH_MAX}"
    return None


def numbered(pattern: str, n: int) -> str:
    """A code pattern's value for row number n (pattern checked by code_problem)."""
    def sub(m: re.Match[str]) -> str:
        width = min(int(m.group(2) or 0), CODE_WIDTH_MAX)
        return str(n).rjust(width, "0" if m.group(1) else " ")

    return CODE_FIELD.sub(sub, pattern)

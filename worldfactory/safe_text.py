"""Text from packs, briefs and models, made safe to write where people and line readers look.

A JSON line may hold U+2028 and U+2029 raw, but str.splitlines() (and JavaScript) break lines there,
so `json_line` escapes them. A terminal runs escape sequences (ESC [ ... colours, moves the cursor,
retitles the window), and bidi controls reorder what is shown, so `printable` writes every control
character of such text as its escape instead.
"""

from __future__ import annotations

import re

LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029"}
# C0 controls but tab and newline, DEL, C1 controls, the line/paragraph separators, bidi marks and overrides
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def json_line(text: str) -> str:
    """A JSON text (one line of a .jsonl file) with U+2028/U+2029 written as escapes: the same JSON value."""
    for raw, escaped in LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text


def printable(text: str) -> str:
    """The text with each control character (terminal escapes included) written as its escape."""
    return CONTROLS.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)

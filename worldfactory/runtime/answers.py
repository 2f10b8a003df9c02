"""Answer normalisation: the exact comparison a verifier makes for question tasks."""

from __future__ import annotations

import re
from typing import Any

AnswerType = str  # "int" | "number" | "date" | "text" | "list" | "reason"


def _text(value: Any) -> str:
    return re.sub(r"[\s_]+", " ", str(value)).strip().casefold()


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, int | float):
        return float(value)
    return float(re.sub(r"[,$\s]", "", str(value)))


def normalize_answer(value: Any, kind: AnswerType | None) -> Any:
    """Normalise an answer for comparison; returns None when it cannot be read as `kind`."""
    if value is None:
        return None
    try:
        if kind == "int":
            number = _number(value)
            return int(number) if number == int(number) else None
        if kind == "number":
            return round(_number(value), 2)
        if kind == "list":
            items = value if isinstance(value, list) else re.split(r"[;,\n]", str(value))
            return sorted(_text(v) for v in items if _text(v))
        return _text(value)
    except (TypeError, ValueError, OverflowError):
        return None


def answers_match(expected: Any, given: Any, kind: AnswerType | None) -> bool:
    """Exact after normalisation; a "reason" (why a request was declined) must name the expected rule."""
    want = normalize_answer(expected, kind)
    got = normalize_answer(given, kind)
    if kind == "reason":
        return bool(want) and got is not None and want in got
    return want is not None and want == got

"""Answer grading: an answer is read as the kind of value the question asks for, then compared.

Counts and amounts are numbers (an amount to the cent, with or without "$" and thousands
separators), dates are calendar dates whatever the spelling, lists are compared without regard to
order, text without regard to case and spacing. A "reason" (why a request was declined) is resolved
to the business rules it names, by name (`max_booking_hours`), label ("maximum booking length in
hours") or id: it must name the expected rule and no other, so naming another rule or listing every
rule fails. Substrings do not count: "approval limit" inside "pay run approval limit" is the longer
rule only. A label's trailing unit ("... in days") may be left out, as tool descriptions do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, NamedTuple

AnswerType = str  # "int" | "number" | "date" | "text" | "list" | "reason"
CENT = Decimal("0.01")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_CURRENCY = re.compile(r"(?i)\b(?:usd|us dollars?|dollars?)\b|[$€£]")
_DATE_FORMATS = ("%B %d, %Y", "%B %d %Y", "%d %B %Y", "%d %B, %Y", "%b %d, %Y", "%b %d %Y", "%d %b %Y", "%Y/%m/%d",
                 "%A, %B %d, %Y", "%A %B %d %Y", "%A, %d %B %Y")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b|\b\d{4}/\d{2}/\d{2}\b")
_MONTHS = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_WORDS = re.compile(rf"(?i)\b{_MONTHS}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b"
                         rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS},?\s+\d{{4}}\b")
_RECORD_CODE = re.compile(r"(?i)\b[a-z]+(?:-[a-z]+)*[-#]\d[\w-]*|\b[a-z]+\d[\w-]*|#\d+")
_RULE_ID = re.compile(r"(?:the )?(?:business )?(?:rule )?(?:id )?(?:no |number )?(\d+)")


class RuleRef(NamedTuple):
    """The ways an answer may name one business rule."""

    id: int | None
    name: str
    label: str


def _text(value: Any) -> str:
    text = re.sub(r"[\s_]+", " ", str(value)).strip().casefold()
    return text.strip(" \"'`.").strip()


def _words(value: Any) -> str:
    """Lower-case words only: punctuation, underscores and hyphens are spaces (for finding rule names)."""
    return " ".join(re.sub(r"[^\w]+|_", " ", str(value).casefold()).split())


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, int | float | Decimal):
        number = Decimal(str(value))
    else:
        text = _CURRENCY.sub("", str(value)).strip().strip(".").replace(" ", "")
        try:
            number = Decimal(text.replace(",", ""))
        except InvalidOperation:  # a sentence: it must state exactly one value
            number = _stated_number(str(value))
    if not number.is_finite():
        raise ValueError("not a finite number")
    return number


def _stated_number(sentence: str) -> Decimal:
    """The one number a sentence states: "There are 3 archived documents on claim CLM-000267 as of
    2026-01-10." states 3. Record numbers (CLM-000267, INV-00090) and dates are names, not values, so
    they are set aside; what is left must be one value ("3 or 4" is a hedge and states none)."""
    text = _DATE_WORDS.sub(" ", _ISO_DATE.sub(" ", _CURRENCY.sub("", sentence)))
    text = _RECORD_CODE.sub(" ", text)
    values = {Decimal(found.replace(",", "")) for found in _NUMBER.findall(text)}
    if len(values) != 1:
        raise ValueError(f"not one number: {sentence!r}")
    return values.pop()


def _date(value: Any) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    text = " ".join(str(value).replace(",", ", ").split()).strip(" .")
    text = text.replace(" ,", ",")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}(?:[T ].*)?", text):
        return date.fromisoformat(text[:10]).isoformat()
    plain = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text)
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(plain, fmt).date().isoformat()
        except ValueError:
            continue
    raise ValueError(f"not a date: {value!r}")


def _items(value: Any) -> list[Any]:
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    text = str(value).strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
            if isinstance(parsed, list):
                return parsed
        except ValueError:
            pass
    parts = re.split(r"[;,\n]", text)
    return [re.sub(r"(?i)^\s*(?:and|[-*•])\s+", "", p) for p in parts]


def normalize_answer(value: Any, kind: AnswerType | None) -> Any:
    """An answer as the value it is read as; None when it cannot be read as `kind`."""
    if value is None:
        return None
    try:
        if kind == "int":
            number = _decimal(value)
            return int(number) if number == number.to_integral_value() else None
        if kind == "number":
            return float(_decimal(value).quantize(CENT, rounding=ROUND_HALF_UP))
        if kind == "date":
            return _date(value)
        if kind == "list":
            return sorted(t for t in (_text(v) for v in _items(value)) if t)
        if kind == "reason":
            return _words(_joined(value))
        return _text(value)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return None


def _joined(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(str(v) for v in value.values())
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    return str(value)


def rules_named(answer: Any, rules: Sequence[RuleRef]) -> set[str]:
    """The names of the rules an answer names: by id (the whole answer), or by name or label as words.

    A mention inside a longer mention of another rule ("approval limit" in "pay run approval limit")
    is that longer rule's.
    """
    if answer is None or isinstance(answer, bool):
        return set()
    text = _words(_joined(answer))
    by_id = re.fullmatch(_RULE_ID, text)
    if by_id is not None:
        wanted = int(by_id.group(1))
        return {r.name for r in rules if r.id == wanted}
    spans: list[tuple[int, int, str]] = []
    phrases = {rule.name: {_words(rule.name), _words(rule.label)} - {""} for rule in rules}
    for rule in rules:  # "manager time-off approval limit in days" is also what its tool says: without "in days"
        short = re.sub(r" in \w+$", "", _words(rule.label))
        if short and not any(short in p for n, p in phrases.items() if n != rule.name):
            phrases[rule.name].add(short)
    for rule in rules:
        for phrase in phrases[rule.name]:
            spans += [(m.start(), m.end(), rule.name)
                      for m in re.finditer(rf"(?<!\w){re.escape(phrase)}(?!\w)", text)]
    return {name for start, end, name in spans
            if not any(s <= start and end <= e and e - s > end - start and n != name for s, e, n in spans)}


def _expected_rule(expected: Any, rules: Sequence[RuleRef]) -> RuleRef:
    want = _words(expected)
    for rule in rules:
        if want in (_words(rule.name), _words(rule.label)):
            return rule
    return RuleRef(None, str(expected), str(expected))  # a rule the world does not list: matched by its own words


def answers_match(expected: Any, given: Any, kind: AnswerType | None, rules: Sequence[RuleRef] = ()) -> bool:
    """Whether `given` is the expected answer, read as `kind`.

    For a "reason" the expected answer names one rule; `rules` are the world's business rules
    (every one an answer could name), and the answer must name the expected rule and no other.
    """
    if kind == "reason":
        rule = _expected_rule(expected, rules)
        known = list(rules) if rule in rules else [*rules, rule]
        return rules_named(given, known) == {rule.name}
    want = normalize_answer(expected, kind)
    got = normalize_answer(given, kind)
    return want is not None and want == got

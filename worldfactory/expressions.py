"""Guard expressions: a small arithmetic language over a record and a step's parameters.

A guard's `field` may be an expression instead of a single reference, so a pack can cap a computed
value without a derived column: `(param.new_rent - row.monthly_rent) / row.monthly_rent <= rule`;
a `{calc: ...}` value in `set` and effects writes one (`row.refills_remaining - 1`).
The language has numbers, `row.<column>`, `param.<name>`, `ref.<column>.<name>` (a column of the
record that the row's `ref` column <column> points at: `ref.invoice_id.amount_paid`), + - * /,
unary minus and parentheses; nothing else parses (no names, calls, attributes of anything else,
comparisons or subscripts), and it is evaluated by walking the parsed tree, never by `eval`. A
missing operand or a division by zero makes the value None, which fails the guard, in the
generated tool and in task generation alike, because both evaluate through `evaluate` here.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Iterable
from typing import Any

OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
SOURCES = ("row", "param")
RELATED = "ref"  # ref.<ref column>.<column of the row it points at>
MAX_LENGTH = 200


class ExpressionError(ValueError):
    """An expression outside the language; the message says which part."""


def is_expression(text: str) -> bool:
    """Whether a guard field is an expression rather than one `row.`/`param.` reference."""
    kind, _, name = text.partition(".")
    return not (kind in SOURCES and name.isidentifier())


def _related(node: ast.expr) -> tuple[str, str] | None:
    """(ref column, column) of a `ref.<column>.<name>` read, or None."""
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name) and node.value.value.id == RELATED):
        return node.value.attr, node.attr
    return None


@functools.lru_cache(maxsize=512)
def parse(text: str) -> ast.expr:
    """The checked tree of an expression; ExpressionError for anything outside the language."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"not an arithmetic expression ({exc.msg})") from None
    inner: set[int] = set()  # the `ref.<column>` halves of related reads, checked with their read
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        pair = _related(node)
        if pair is not None:
            if pair[0].startswith("_") or pair[1].startswith("_"):
                raise ExpressionError(f"'{ast.unparse(node)}': names cannot start with '_'")
            inner.update({id(node.value), id(node.value.value)})  # type: ignore[attr-defined]
            continue
        if isinstance(node, ast.BinOp):
            if type(node.op) not in OPERATORS:
                raise ExpressionError(f"operator '{ast.unparse(node)}' is not one of + - * /")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub):
                raise ExpressionError(f"'{ast.unparse(node)}': only unary minus is allowed")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ExpressionError(f"{node.value!r} is not a number")
        elif isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id in SOURCES) or node.attr.startswith("_"):
                raise ExpressionError(f"'{ast.unparse(node)}': only row.<column>, param.<name> and "
                                      f"ref.<column>.<column> can be read")
        elif isinstance(node, ast.Name):
            if node.id not in SOURCES:
                raise ExpressionError(f"'{node.id}' is not row.<column>, param.<name>, ref.<column>.<column> "
                                      "or a number")
        elif not isinstance(node, ast.operator | ast.unaryop | ast.expr_context):
            raise ExpressionError(f"'{ast.unparse(node)}' is not arithmetic")
    return tree


def related_columns(texts: Iterable[str]) -> list[str]:
    """The ref columns whose related records the texts read (`ref.<column>.<name>`), once each, in order."""
    return list(dict.fromkeys(name.split(".")[0] for text in texts
                              for kind, name in references(text) if kind == RELATED))


def references(text: str) -> list[tuple[str, str]]:
    """The (row|param|ref, name) pairs an expression reads, in order of first use; a related read's name is
    `<ref column>.<column>`."""
    out: list[tuple[str, str]] = []
    for node in ast.walk(parse(text)):
        related = _related(node)
        if related is not None:
            pair = (RELATED, ".".join(related))
            if pair not in out:
                out.append(pair)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in SOURCES:
            pair = (node.value.id, node.attr)
            if pair not in out:
                out.append(pair)
    return out


def related_key(column: str, name: str) -> str:
    """The key under which a row read for guards carries a related value: `ref.invoice_id.amount_paid`."""
    return f"{RELATED}.{column}.{name}"


def evaluate(text: str, row: dict[str, Any], params: dict[str, Any]) -> float | str | None:
    """The expression's value for a record and a step's arguments; None when an operand is missing or
    a division is by zero. A related read `ref.<column>.<name>` is the row's value under that key
    (`related_key`), which whoever reads the row adds (the tool from the related record). A bare related
    read of text (a parent's status) is that text, for `==` and `!=`; arithmetic is over numbers."""

    def walk(node: ast.expr) -> float | None:
        if isinstance(node, ast.Constant):
            return float(node.value)
        related = _related(node)
        if related is not None:
            value = row.get(related_key(*related))
            return None if value is None else float(value)
        if isinstance(node, ast.Attribute):
            value = (row if node.value.id == "row" else params).get(node.attr)  # type: ignore[attr-defined]
            return None if value is None else float(value)
        if isinstance(node, ast.UnaryOp):
            inner = walk(node.operand)
            return None if inner is None else -inner
        assert isinstance(node, ast.BinOp)
        left, right = walk(node.left), walk(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        return OPERATORS[type(node.op)](left, right)

    tree = parse(text)
    related = _related(tree)
    if related is not None and isinstance(row.get(related_key(*related)), str):
        return str(row[related_key(*related)])
    return walk(tree)

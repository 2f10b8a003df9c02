"""The world's policy handbook, written from its pack's rules into the ``handbook_sections`` table.

Tools refuse what a guard forbids; a handbook says more, as a company's policies do: when a rule applies,
its exceptions, and whom to tell. Each rule that guards a workflow step gets a section with three parts:

- the rule (the tool enforces it): the step only when the guard holds, otherwise its alternative;
- a near-limit exception (no tool enforces it): within ``BAND`` of the limit the step is not taken either,
  the alternative is, as if past the limit;
- an escalation path: each time the exception applies, the rule's reviewer (a named staff user with
  approval rights) is emailed with a given subject.

Rules no step uses get a section that states them. The handbook tasks (tasks/handbook.py) depend on the
three parts together; read tools (search and get) come with the table, as for every table.
"""

from __future__ import annotations

import math
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from worldfactory import constraints
from worldfactory.expressions import is_expression
from worldfactory.fill import fill
from worldfactory.seeds import stage_rng
from worldfactory.spec import Guard, TableDef, Transition, WorldSpec

from .rows import fetch_dicts
from .tasks.words import a_or_an, unit_after
from .workflow import guard_holds

TABLE = "handbook_sections"
BAND = 0.1  # the near-limit band: within 10% of the limit, on the side the tool allows
MIN_NEAR = 3  # records a guard on a record's own field must have in its band (seeded where the draw left fewer)
UPPER = ("<=", "<")  # a limit from above: the band lies just under it
LOWER = (">=", ">")  # a minimum: the band lies just over it


@dataclass(frozen=True)
class HandbookRule:
    """One guarded step as the handbook states it."""

    rule: str
    table: TableDef
    step: Transition
    alternative: Transition
    guard: Guard
    reviewer_id: int | None

    @property
    def title(self) -> str:
        return f"{self.step.name.replace('_', ' ').capitalize()}: {self.rule.replace('_', ' ')}"

    def subject(self, row: dict[str, Any]) -> str:
        """The escalation email's subject for a record: by its label, or by its id where it has none."""
        said = row[self.table.label] if self.table.label else f"#{row['id']}"
        return f"Near-limit review: {self.table.singular} {said}"

    @property
    def subject_form(self) -> str:
        """The subject as the handbook writes it, for any record."""
        said = (f"<its {self.table.column(self.table.label).human}>" if self.table.label else "#<its id>")
        return f"Near-limit review: {self.table.singular} {said}"


SLOT = re.compile(r"\s+(?:because of|for|by|to|with|at|on|as|of|from|noting)?\s*(?:(?:a|an|the) )?(?:the \w+ )?"
                  r"\(?\"?\{(?!obj\})(\w+)\}\"?\)?(?: (\w+))?")


def _plain_verb(t: Transition, obj: str) -> str:
    """A step's verb without its parameters: "approve the claim", "deny the claim"; the words that lead into
    a slot go with it ("void {obj} because of a {reason}": "void a paycheck", found blind as "void a paycheck
    because of a"), and so does a unit after it that is the parameter's own ("for {hours} hours")."""
    def drop(m: re.Match[str]) -> str:
        unit = m.group(2)
        return f" {unit}" if unit and unit_after(t.verb, m.group(1), m.group(1)) is None else ""

    return fill(SLOT.sub(drop, t.verb), obj=obj).strip()


def band(rule: HandbookRule, limit: float) -> tuple[float, float] | None:
    """The values the exception covers: (low, high), both ends included. Whole numbers for a whole-number
    field, rounded inward ("33.3 to 37 rooms" reads as a fraction of a room; 34 to 37 covers the same rooms)."""
    if rule.guard.op in UPPER:
        low, high = round(limit * (1 - BAND), 2), limit
    elif rule.guard.op in LOWER:
        low, high = limit, round(limit * (1 + BAND), 2)
    else:
        return None
    return (float(math.ceil(low)), float(math.floor(high))) if _whole(rule) else (low, high)


def _whole(rule: HandbookRule) -> bool:
    """Whether the guarded field holds whole numbers (an integer column, or an integer step parameter)."""
    kind, _, name = rule.guard.field.partition(".")
    if kind == "row":
        col = next((c for c in rule.table.columns if c.name == name), None)
        return col is not None and col.type == "integer"
    param = next((p for p in rule.step.params if p.name == name), None)
    return param is not None and param.type == "integer"


def guard_value(rule: HandbookRule, row: dict[str, Any], args: dict[str, Any]) -> Any:
    kind, _, name = rule.guard.field.partition(".")
    return row.get(name) if kind == "row" else args.get(name)


def in_band(rule: HandbookRule, row: dict[str, Any], args: dict[str, Any], rules: dict[str, float]) -> bool:
    """Whether the tool allows the step but the exception forbids it."""
    limits = band(rule, rules[rule.rule])
    value = guard_value(rule, row, args)
    if limits is None or value is None or not guard_holds(rule.guard, row, args, rules):
        return False
    return limits[0] <= float(value) <= limits[1]


def steps_by_name(spec: WorldSpec, conn: sqlite3.Connection) -> dict[str, HandbookRule]:
    """The handbook's rules by the step they guard (none where the world has no handbook): what `in_band`
    is asked about, by task generation and by the inbox's requests alike."""
    return {hr.step.name: hr for hr in handbook_rules(spec, conn)} if spec.has_table(TABLE) else {}


def handbook_rules(spec: WorldSpec, conn: sqlite3.Connection) -> list[HandbookRule]:
    """Every rule-guarded step with an alternative, on a labelled table, in spec order."""
    reviewers = [r["id"] for r in fetch_dicts(
        conn, "SELECT u.id FROM users u JOIN roles r ON r.id = u.role_id WHERE u.id > 1 AND u.active = 1 "
        "AND r.can_approve = 1 ORDER BY u.id")] if spec.has_table("users") and spec.has_table("roles") else []
    out: list[HandbookRule] = []
    for table in spec.tables:
        if not table.workflow:
            continue
        steps = {tr.name: tr for tr in table.workflow.transitions}
        for tr in table.workflow.transitions:
            alt = steps.get(tr.otherwise or "")
            guard = next((g for g in tr.guards if g.rule), None)
            if alt is None or guard is None or is_expression(guard.field) or guard.op not in UPPER + LOWER:
                continue
            reviewer = reviewers[len(out) % len(reviewers)] if reviewers else None
            out.append(HandbookRule(guard.rule or "", table, tr, alt, guard, reviewer))
    return out


def _amount(table: TableDef, rule: HandbookRule, value: float) -> str:
    name = rule.guard.field.partition(".")[2]
    col = next((c for c in table.columns if c.name == name), None)
    param = next((p for p in rule.step.params if p.name == name), None)
    money = (col is not None and col.type == "money") or (param is not None and param.type == "money")
    return f"${value:,.2f}" if money else f"{value:g}"


def _field_words(rule: HandbookRule) -> str:
    name = rule.guard.field.partition(".")[2]
    col = next((c for c in rule.table.columns if c.name == name), None)
    return col.human if col is not None else name.replace("_", " ")


def sections(spec: WorldSpec, conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """The handbook's rows: one section per guarded step, then one per rule no step uses."""
    rules = {r.name: r for r in spec.rules}
    rows: list[dict[str, Any]] = []
    used: set[str] = set()
    for hr in handbook_rules(spec, conn):
        rule = rules.get(hr.rule)
        limit = spec.brief.rules.get(hr.rule)
        if rule is None or limit is None:
            continue
        used.add(hr.rule)
        obj = f"{a_or_an(hr.table.singular)} {hr.table.singular}"
        step, alt = _plain_verb(hr.step, obj), _plain_verb(hr.alternative, "it")
        low, high = band(hr, limit) or (limit, limit)
        field = _field_words(hr)
        side = "under" if hr.guard.op in UPPER else "over"
        parts = [
            f"Rule ({rule.label}, now {_amount(hr.table, hr, limit)}): {step} only when "
            f"{hr.guard.says or 'the rule allows it'}; "
            f"otherwise {alt} instead. The {hr.step.name} tool refuses a step past the limit.",
            f"Exception (no tool enforces it): when the {field} is just {side} the {rule.label}, from "
            f"{_amount(hr.table, hr, low)} to {_amount(hr.table, hr, high)} inclusive, do not "
            f"{_plain_verb(hr.step, 'it')}; "
            f"{alt} instead, as if it were past the limit.",
        ]
        reviewer = fetch_dicts(conn, "SELECT u.full_name, d.name AS dept FROM users u LEFT JOIN departments d "
                                     "ON d.id = u.department_id WHERE u.id = ?", (hr.reviewer_id,)) \
            if hr.reviewer_id is not None and spec.has_table("departments") else []
        if reviewer:
            who = reviewer[0]
            parts.append(f"Escalation: each time the exception applies, email the rule's reviewer, {who['full_name']} "
                         f"({who['dept']}), at their address on their user record, with the subject "
                         f"\"{hr.subject_form}\" "
                         f"and a short note. Nothing else needs a report.")
        rows.append({"title": hr.title, "topic": hr.rule, "body": " ".join(parts), "reviewer_id": hr.reviewer_id})
    for rule in spec.rules:
        if rule.name in used or rule.name not in spec.brief.rules:
            continue
        value = spec.brief.rules[rule.name]
        text = (f"{rule.label.capitalize()}: {value:g}." + (f" {rule.description}" if rule.description else "")
                + " A reference value: where a tool applies it, the tool says so; it changes no decision in the "
                "other sections of this handbook.")  # an agent must not guess it into a step (found solving blind)
        rows.append({"title": rule.label.capitalize(), "topic": rule.name, "body": text, "reviewer_id": None})
    return rows


def _broken(spec: WorldSpec, conn: sqlite3.Connection) -> int:
    """How many rows break the world's invariants and cross-record constraints now: a near-limit move that
    raises it (a paycheck's pay no longer its lines' total, a room total no longer rate times nights) is
    taken back."""
    rows = sum(int(conn.execute(inv.sql).fetchone()[0] or 0) for inv in spec.invariants)
    return rows + len(constraints.check(spec, conn))


def seed_near_limit(spec: WorldSpec, conn: sqlite3.Connection) -> int:
    """Move records past a limit into its near-limit band where the draw left fewer than MIN_NEAR there.

    A guard on the record's own field (``row.<column>``) decides by what was seeded: with no record in the
    band, the exception never applies, and a policy that obeys only the tools' refusals passes every
    handbook task (commerce's returns: 12 requested, none within 10% under the refund limit). Records past
    the limit come into the band, drawn from their own stream; at least as many stay past it. A guard on
    a step's argument (the value is the task's) needs none. The number of records moved."""
    rng = stage_rng(spec.brief.generation_seed, "handbook")
    moved = 0
    broken: int | None = None
    for hr in handbook_rules(spec, conn):
        kind, _, name = hr.guard.field.partition(".")
        limit = spec.brief.rules.get(hr.rule)
        col = next((c for c in hr.table.columns if c.name == name), None)
        limits = band(hr, limit) if limit is not None else None
        if kind != "row" or col is None or col.type not in ("money", "number", "integer") or limits is None:
            continue
        states = [s for s in hr.step.from_ if s in hr.alternative.from_]
        assert hr.table.workflow is not None
        marks = ", ".join("?" * len(states))
        rows = fetch_dicts(conn, f"SELECT id, {name} AS v FROM {hr.table.name} WHERE "
                                 f"{hr.table.workflow.column} IN ({marks}) AND {name} IS NOT NULL ORDER BY id",
                           tuple(states))
        near = [r for r in rows if limits[0] <= float(r["v"]) <= limits[1]]
        past = [r for r in rows if not guard_holds(hr.guard, {name: r["v"]}, {}, spec.brief.rules)]
        count = min(MIN_NEAR - len(near), len(past) // 2)
        if count <= 0:
            continue
        low, high = limits
        for r in rng.sample(past, count):
            value = round(low + (high - low) * rng.uniform(0.2, 0.8), 2)
            value = float(round(value)) if col.type == "integer" else value
            broken = _broken(spec, conn) if broken is None else broken
            conn.execute("SAVEPOINT near_limit")
            conn.execute(f"UPDATE {hr.table.name} SET {name} = ? WHERE id = ?", (value, r["id"]))
            if _broken(spec, conn) > broken:
                conn.execute("ROLLBACK TO near_limit")
            else:
                moved += 1
            conn.execute("RELEASE near_limit")
    return moved


def seed_handbook(spec: WorldSpec, conn: sqlite3.Connection) -> None:
    """Write the handbook into its table, where the world has one (inside the caller's transaction), after
    seeding the near-limit records its exception needs."""
    if not spec.has_table(TABLE):
        return
    seed_near_limit(spec, conn)
    for i, row in enumerate(sections(spec, conn), start=1):
        conn.execute(f"INSERT INTO {TABLE} (id, title, topic, body, reviewer_id) VALUES (?, ?, ?, ?, ?)",
                     (i, row["title"], row["topic"], row["body"], row["reviewer_id"]))

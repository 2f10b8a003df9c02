"""The words of the conversation: the draft request and the repair request.

The protocol is fixed (outside tools speak it too): the draft asks for the whole domain pack as
one JSON object through `response_format` `{"type": "json_schema", "json_schema": {"name":
"domain_pack", "schema": <the pack format's JSON Schema>}}`, and the reply's message content is
that JSON. A repair is a follow-up user message in the same conversation that quotes the error
(a validation message with its field path, or the failing stage, check and reason) and asks for
the whole corrected pack. Everything here is a pure function of the brief and the templates, so
the same brief asks the same request, byte for byte (the reply cache relies on it).
"""

from __future__ import annotations

import json
from typing import Any

from worldfactory.briefs import TextBrief
from worldfactory.packs import pack_schema
from worldfactory.templates import TemplateSet

SCHEMA_NAME = "domain_pack"

SYSTEM = """\
You design the business software of a fictional company for WorldFactory, which builds it into a \
world an AI agent is trained and tested in: a SQLite database of consistent operational records, \
tools over it, and tasks with verifiable outcomes. You write one domain pack: the business's own \
tables, workflows and rules, in the pack language whose JSON Schema is the response format. Reply \
with the whole pack as one JSON object and nothing else.

How a pack works:
- `name` is a slug of your own (lowercase letters, digits, '-') for this business.
- `anchor` is the core table (say `jobs` for a repair shop); shared modules attach notes, documents \
and emails to it. Give it a `label` column (a unique code such as {{code: "JOB-{{n:05d}}"}}) so people \
can name its rows.
- `modules` composes shared modules; always include `org` (users, roles, business rules). A table \
name must not repeat one of the modules' tables. Available modules:
{modules}
- Every column needs a generator (`gen`) unless it is a `ref` to another table. A column with `enum` \
lists its values; a workflow's status column needs an `enum`, and its `choice` should give weight \
to every status a transition starts from.
- A workflow transition becomes a tool: `from` statuses, `to` status, a `verb` with {{obj}} for the \
record, `guards` that check a declared rule (`rule`) with a refusal `message` and what it `says` \
when it holds, and `otherwise`: the transition to take instead when a rule guard fails.
- `rules` are policy values (limits, thresholds) that guards enforce. Invariants are one SELECT \
each that counts rows breaking a rule and returns 0 on the generated data; `derive` is one UPDATE, \
INSERT or DELETE each. SQL may only use the pack's and its modules' tables.
- Format strings (`code`, `template`, `verb`) use plain placeholders like {{n}}, {{n:04d}}, {{obj}}.
- At most {max_tables} tables and {max_rows} rows a table. Texts are data shown to people: write \
plain business language.

A small example pack:
{example}
"""

EXAMPLE: dict[str, Any] = {
    "name": "tool-rental", "title": "Tool rental", "company_noun": "tool rental company", "anchor": "rentals",
    "modules": ["org", "crm", "email", "notes", "audit"], "departments": ["Counter", "Yard", "Accounts"],
    "rules": [{"name": "deposit_waiver_limit", "value": 150, "label": "deposit waiver limit"}],
    "invariants": [{"name": "a waived deposit is never more than the fee",
                    "sql": "SELECT count(*) FROM rentals WHERE waived > fee + 0.005"}],
    "tables": [{
        "name": "rentals", "singular": "rental", "label": "reference", "rows": 40,
        "columns": [
            {"name": "reference", "unique": True, "gen": {"code": "RNT-{n:04d}"}},
            {"name": "account_id", "type": "integer", "ref": "accounts"},
            {"name": "started_on", "type": "date", "gen": {"days_ago": [120, 0]}},
            {"name": "fee", "type": "money", "minimum": 0, "gen": {"money": [20, 400]}},
            {"name": "waived", "type": "money", "minimum": 0, "gen": {"const": 0}},
            {"name": "status", "enum": ["out", "returned", "closed"],
             "gen": {"choice": ["out", "returned", "closed"], "weights": [4, 3, 2]}}],
        "search": ["reference", "account_id", "status"],
        "create": ["reference", "account_id", "fee"],
        "create_defaults": {"started_on": "$today", "status": "out", "waived": 0},
        "workflow": {"transitions": [
            {"name": "return_with_waiver", "from": ["out"], "to": "returned",
             "verb": "take back {obj} and waive its fee", "description": "Take a rental back, waiving its fee.",
             "guards": [{"field": "row.fee", "op": "<=", "rule": "deposit_waiver_limit",
                         "message": "the fee exceeds the deposit waiver limit",
                         "says": "its fee is within our deposit waiver limit"}],
             "otherwise": "return_rental", "set": {"waived": "row.fee"}},
            {"name": "return_rental", "from": ["out"], "to": "returned", "verb": "take back {obj}",
             "description": "Take a rental back."},
            {"name": "close_rental", "from": ["returned"], "to": "closed", "verb": "close {obj}",
             "description": "Close a returned rental."}]},
    }],
}


def response_format() -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": pack_schema("domain")}}


def _modules(templates: TemplateSet) -> str:
    lines = []
    for name, m in sorted(templates.modules.items()):
        rules = f"; rules: {', '.join(r.name for r in m.rules)}" if m.rules else ""
        lines.append(f"  - {name} ({m.title}): tables {', '.join(t.name for t in m.tables)}{rules}")
    return "\n".join(lines)


def system_message(templates: TemplateSet, max_tables: int, max_rows: int) -> str:
    """The same for every brief: it names the shared modules, never the hand-written domain packs (adding a
    pack must not change every cached request; a name that collides is refused by the checks instead)."""
    return SYSTEM.format(modules=_modules(templates), max_tables=max_tables, max_rows=max_rows,
                         example=json.dumps(EXAMPLE))


def brief_message(brief: TextBrief, templates: TemplateSet) -> str:
    ctype = templates.company_types[brief.company_type]
    parts = [f"Draft the domain pack for this business (the company is a {ctype.title.lower()}"
             + (f", named {brief.company_name}" if brief.company_name else "") + ").", "", brief.description]
    if brief.rules:
        values = ", ".join(f"{k} = {v:g}" for k, v in sorted(brief.rules.items()))
        parts += ["", f"Declare these policy values as rules (the company sets them): {values}."]
    return "\n".join(parts)


def repair_message(where: str, error: str) -> str:
    """Quote the error, ask for the whole corrected pack (the protocol's repair turn)."""
    return (f"The pack you sent does not work yet. {where}:\n\n{error}\n\n"
            f"Correct it and reply with the whole corrected domain pack as one JSON object (all of it, "
            f"not only the changed parts).")


def draft_request(model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    """The request body, exactly as sent and as hashed for the cache."""
    return {"model": model, "messages": messages, "response_format": response_format(), "temperature": 0}

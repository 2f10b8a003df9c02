"""WorldSpec -> tools.py (generated Python) and tools.json (MCP manifests).

Per table: search and get; create and update where the template allows; one tool per workflow
transition, with its state check, business-rule guards and side effects. The manifest carries
each tool's JSON schema, MCP annotations, provenance label and probe calls (valid and invalid)
that the sandbox runs before the stage is accepted.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from worldfactory import GENERATOR_VERSION
from worldfactory.expressions import is_expression, references, related_columns
from worldfactory.generate.tasks.words import a_or_an
from worldfactory.generate.workflow import id_param, slug
from worldfactory.spec import (
    ColumnDef,
    ColumnType,
    Effect,
    Param,
    TableDef,
    Transition,
    WorldSpec,
    calc_of,
    date_after_of,
)
from worldfactory.templates import TemplateError

ToolKind = Literal["search", "get", "create", "update", "transition"]
PROVENANCE = "local-twin"
SEARCH_LIMIT_DEFAULT = 25
SEARCH_LIMIT_MAX = 500
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # SQLite's 64-bit integers
NUMBER_LIMIT = 1e15  # numbers and money: finite, and within what a REAL holds exactly to the cent
PY_TYPES = {"integer": "int", "number": "float", "money": "float", "text": "str", "date": "str", "boolean": "bool"}


class ParamSpec(BaseModel):
    name: str
    type: ColumnType
    required: bool = True
    enum: list[str] | None = None
    minimum: float | None = None
    maximum: float | None = None
    default: Any = None
    ref: str | None = None
    description: str = ""
    free_text: bool = False


class ToolSpec(BaseModel):
    name: str
    kind: ToolKind
    table: str
    description: str
    params: list[ParamSpec]
    read_only: bool
    destructive: bool
    idempotent: bool
    provenance: str = PROVENANCE
    transition: str | None = None
    examples: dict[str, Any] = Field(default_factory=dict)


def _param_from_column(spec: WorldSpec, col: ColumnDef, *, required: bool, name: str | None = None) -> ParamSpec:
    return ParamSpec(
        name=name or col.name,
        type=col.type,
        required=required,
        enum=col.enum,
        minimum=col.minimum if col.type != "integer" or not col.ref else 1,
        maximum=col.maximum,
        ref=col.ref,
        description=_column_description(spec, col),
        free_text=col.free_text,
    )


def _column_description(spec: WorldSpec, col: ColumnDef) -> str:
    """A column as a parameter: what it is, and for a reference the table it points at and how to find the id."""
    if col.description:
        return col.description
    if col.ref and spec.has_table(col.ref):
        states = f"; it must be {' or '.join(col.ref_states)}" if col.ref_states else ""
        return f"{col.human} ({_ref_said(spec, col.ref)}{states})"
    if col.poly_ref:
        return f"{col.human} (id of a record in the table that {col.poly_ref.replace('_', ' ')} names)"
    if col.type == "date":
        return f"{col.human} (YYYY-MM-DD)"
    return col.human


def _ref_said(spec: WorldSpec, table: str) -> str:
    """'id of a claim, a row of table claims; search_claims finds it': which table, and the tool that finds the id."""
    noun = _noun(spec, table)
    said = f"id of {a_or_an(noun)} {noun}, a row of table {table}"
    finder = f"search_{table}"
    return f"{said}; {finder} finds it" if finder not in spec.brief.omitted_tools else said


def _param_from_transition(spec: WorldSpec, p: Param) -> ParamSpec:
    if p.ref:  # the id of a row of another table: the tool reads that row first
        said = _ref_said(spec, p.ref)
        return ParamSpec(name=p.name, type="integer", minimum=1, ref=p.ref,
                         description=f"{p.description} ({said})" if p.description else said)
    return ParamSpec(name=p.name, type=p.type, enum=p.enum, minimum=p.minimum, maximum=p.maximum,
                     description=p.description, free_text=p.free_text)


def _noun(spec: WorldSpec, table: str) -> str:
    return spec.table(table).singular


def tool_specs(spec: WorldSpec) -> list[ToolSpec]:
    """Every tool of a world, in a stable order."""
    tools: list[ToolSpec] = []
    for t in spec.tables:
        tools.append(_search_tool(spec, t))
        tools.append(_get_tool(t))
        if t.create is not None:
            tools.append(_create_tool(spec, t))
        if t.update:
            tools.append(_update_tool(spec, t))
        for tr in t.workflow.transitions if t.workflow else []:
            tools.append(_transition_tool(spec, t, tr))
    tools = [x for x in tools if x.name not in spec.brief.omitted_tools]  # this variant's structure
    for x in tools:  # the agent learns the world's today where it writes dates
        if any(p.type == "date" for p in x.params):
            x.description += f" Dates are YYYY-MM-DD; today is {spec.brief.clock}."
    names = [x.name for x in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise TemplateError(f"world {spec.brief.world_id}: tool names defined twice: {', '.join(dupes)}")
    return tools


def _search_tool(spec: WorldSpec, t: TableDef) -> ToolSpec:
    params: list[ParamSpec] = []
    for name in t.search:
        col = t.column(name)
        if col.type == "date":
            params.append(ParamSpec(name=f"{name}_from", type="date", required=False,
                                    description=f"earliest {col.human} (inclusive)"))
            params.append(ParamSpec(name=f"{name}_to", type="date", required=False,
                                    description=f"latest {col.human} (inclusive)"))
        else:  # a filter finds records by the column's value: a write's guidance (`description`) is not for it
            p = _param_from_column(spec, col.model_copy(update={"description": ""}), required=False)
            p.minimum = None if not col.ref else 1
            p.maximum = None
            params.append(p)
    params.append(ParamSpec(name="limit", type="integer", required=False, minimum=1, maximum=SEARCH_LIMIT_MAX,
                            default=SEARCH_LIMIT_DEFAULT, description="most results to return"))
    params.append(ParamSpec(name="offset", type="integer", required=False, minimum=0, default=0,
                            description="results to skip, for paging"))
    by = ", ".join(c.replace("_", " ") for c in t.search) or "nothing (lists all)"
    return ToolSpec(
        name=f"search_{t.name}", kind="search", table=t.name, params=params,
        description=(f"Search {t.plural_name.replace('_', ' ')} by {by}. Text filters match any part of the value, "
                     f"ignoring case; dates take from/to bounds. Results come in id order, {SEARCH_LIMIT_DEFAULT} "
                     f"at a time by default; pass offset=next_offset for more. {t.description}").strip(),
        read_only=True, destructive=False, idempotent=True,
    )


def _get_tool(t: TableDef) -> ToolSpec:
    return ToolSpec(
        name=f"get_{slug(t.singular)}", kind="get", table=t.name,
        params=[ParamSpec(name=id_param(t), type="integer", minimum=1, description=f"id of the {t.singular}")],
        description=f"Get one {t.singular} by its id, with every field.",
        read_only=True, destructive=False, idempotent=True,
    )


def _create_tool(spec: WorldSpec, t: TableDef) -> ToolSpec:
    covered = set(t.create or []) | set(t.create_defaults)
    missing = [c.name for c in t.columns if not c.nullable and c.name not in covered]
    if missing:
        raise TemplateError(
            f"table '{t.name}': field 'create' leaves required columns without a value: {', '.join(missing)}; "
            f"add them to 'create' or 'create_defaults'"
        )
    params = [_param_from_column(spec, t.column(c), required=not t.column(c).nullable) for c in t.create or []]
    codes = [t.column(c).human for c in auto_codes(t)]
    filled = f" Its {', '.join(codes)} is given by the system and returned." if codes else ""
    return ToolSpec(
        name=f"create_{slug(t.singular)}", kind="create", table=t.name, params=params,
        description=f"Create {a_or_an(t.singular)} {t.singular}.{filled} {t.description}".strip(),
        read_only=False, destructive=False, idempotent=False,
    )


def auto_codes(t: TableDef) -> list[str]:
    """Columns numbered by a `code` generator that a create call neither takes nor defaults: the tool fills them,
    so a new record has its number (as a seeded one does) and can be found by it."""
    covered = set(t.create or []) | set(t.create_defaults)
    return [c.name for c in t.columns if c.name not in covered and isinstance(c.gen, dict) and "code" in c.gen]


def _update_tool(spec: WorldSpec, t: TableDef) -> ToolSpec:
    params = [ParamSpec(name=id_param(t), type="integer", minimum=1, description=f"id of the {t.singular}")]
    params += [_param_from_column(spec, t.column(c), required=False) for c in t.update]
    fields = ", ".join(c.replace("_", " ") for c in t.update)
    return ToolSpec(
        name=f"update_{slug(t.singular)}", kind="update", table=t.name, params=params,
        description=f"Change the {fields} of {a_or_an(t.singular)} {t.singular}; give only the fields to change.",
        read_only=False, destructive=False, idempotent=True,
    )


def _transition_tool(spec: WorldSpec, t: TableDef, tr: Transition) -> ToolSpec:
    assert t.workflow is not None
    column = t.workflow.column
    params = [ParamSpec(name=id_param(t), type="integer", minimum=1, description=f"id of the {t.singular}")]
    params += [_param_from_transition(spec, p) for p in tr.params]
    allowed = " or ".join(tr.from_)
    text = f"{tr.description} Allowed when the {t.singular}'s {column} is {allowed}; sets it to {tr.to}."
    for g in tr.guards:
        text += " " + _refusal(g.message, g.rule)
    for e in tr.effects:
        noun = _noun(spec, e.table) if spec.has_table(e.table) else e.table.replace("_", " ")
        if e.create is not None:
            text += f" Also creates {a_or_an(noun)} {noun} record."
        else:
            fields = " and ".join(k.replace("_", " ") for k in e.values)
            when = " when the condition holds" if e.when else ""
            text += f" Also updates the {fields} of its {noun}{when}."
    return ToolSpec(
        name=tr.name, kind="transition", table=t.name, params=params, description=text.strip(),
        read_only=False, destructive=tr.destructive, idempotent=False, transition=tr.name,
    )


_MODAL = re.compile(r"\b(cannot|can't|must not|may not|never)\b")


def _refusal(message: str, rule: str | None) -> str:
    """A guard as a sentence of its tool's description: "Refused when the refund exceeds the limit (business
    rule refund_limit)." A message that states the constraint ("paid amount cannot exceed ...") is said as is."""
    clause = message.split(";")[0].strip().rstrip(".")
    named = f" (business rule {rule})" if rule else ""
    if _MODAL.search(clause):
        return f"{clause[:1].upper()}{clause[1:]}{named}."
    return f"Refused when {clause}{named}."


# --- JSON schema ----------------------------------------------------------------------------


def _base_schema(p: ParamSpec) -> dict[str, Any]:
    if p.enum:
        return {"type": "string", "enum": list(p.enum)}
    schema: dict[str, Any] = {
        "integer": {"type": "integer"},
        "number": {"type": "number"},
        "money": {"type": "number"},
        "text": {"type": "string", "minLength": 1, "maxLength": 2000},
        "date": {"type": "string", "pattern": DATE_PATTERN, "format": "date"},  # a real calendar date
        "boolean": {"type": "boolean"},
    }[p.type].copy()
    if p.type == "integer":
        schema["minimum"] = max(INT_MIN, int(p.minimum)) if p.minimum is not None else INT_MIN
        schema["maximum"] = min(INT_MAX, int(p.maximum)) if p.maximum is not None else INT_MAX
    elif p.type in ("number", "money"):
        schema["minimum"] = max(-NUMBER_LIMIT, p.minimum) if p.minimum is not None else -NUMBER_LIMIT
        schema["maximum"] = min(NUMBER_LIMIT, p.maximum) if p.maximum is not None else NUMBER_LIMIT
    return schema


def input_schema(tool: ToolSpec) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in tool.params:
        base = _base_schema(p)
        if p.description:
            base["description"] = p.description
        if p.required:
            required.append(p.name)
            props[p.name] = base
        else:
            desc = base.pop("description", None)
            entry: dict[str, Any] = {"anyOf": [base, {"type": "null"}], "default": p.default}
            if desc:
                entry["description"] = desc
            props[p.name] = entry
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def manifest(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """tools.json: what an MCP client or a harness needs to know about each tool."""
    return [
        {
            "name": t.name,
            "kind": t.kind,
            "table": t.table,
            "description": t.description,
            "input_schema": input_schema(t),
            "annotations": {"read_only_hint": t.read_only, "destructive_hint": t.destructive,
                            "idempotent_hint": t.idempotent},
            "provenance": t.provenance,
            "examples": t.examples,
        }
        for t in tools
    ]


# --- source generation ----------------------------------------------------------------------


# Strings from packs, briefs or models reach the generated source only as Python literals
# (checked by parsing them back), and names only after matching IDENTIFIER: data cannot add code.
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _ident(name: str, what: str) -> str:
    """A name the generated code uses as an identifier: lower-case letters, digits, underscores, not a keyword."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or \
            name.startswith("__"):
        raise TemplateError(f"{what} {name!r:.80} is not a valid name (lower-case letters, digits and underscores, "
                            f"starting with a letter)")
    return name


def _literal(text: str, indent: str = "") -> str:
    """A string literal for generated source: a readable triple-quoted block when that is exact, else repr."""
    plain = all(ch == "\n" or (ch.isprintable() and ch not in '"\\') for ch in text)
    literal = '"""' + text.replace("\n", "\n" + indent) + '"""' if plain else repr(text)
    if ast.literal_eval(literal) != (text.replace("\n", "\n" + indent) if plain else text):
        literal = repr(text)
    return literal


def _annotation(p: ParamSpec) -> str:
    base = f"Literal[{', '.join(repr(v) for v in p.enum)}]" if p.enum else PY_TYPES[p.type]
    return base if p.required else f"{base} | None"


def _signature(tool: ToolSpec) -> str:
    parts = []
    for p in tool.params:
        ann = _annotation(p)
        parts.append(f"{p.name}: {ann}" if p.required else f"{p.name}: {ann} = {p.default!r}")
    return "db: ToolDB, *, " + ", ".join(parts) if parts else "db: ToolDB"


def _code_expr(table: TableDef, column: str) -> str:
    """`$code`: the next code of the column's own `code` generator, numbered by the new row's id."""
    gen = table.column(column).gen  # kept as written: a name or a one-kind mapping
    pattern = gen.get("code") if isinstance(gen, dict) else None
    if not isinstance(pattern, str):
        raise TemplateError(f"table '{table.name}' column '{column}': $code needs a {{code: ...}} generator")
    return f"db.next_code({table.name!r}, {pattern!r})"


def _value_expr(value: Any, row_var: str = "row", id_var: str | None = None) -> str:
    relative = date_after_of(value)
    if relative is not None:  # {date_after: <date>, days: <N or rule>}: counted from the world's clock
        start, days = relative
        count = f"db.rule({days!r})" if isinstance(days, str) else repr(days)
        return f"db.days_after({_value_expr(start, row_var, id_var)}, {count})"
    if isinstance(value, str):
        if value == "$today":
            return "db.today"
        if value == "$actor":
            return "db.actor"
        if value == "$id" and id_var:
            return id_var
        if value.startswith("$"):
            return _ident(value[1:], "value reference")
        if value.startswith("row."):
            return f"{row_var}[{value[4:]!r}]"
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value)


def _docstring(tool: ToolSpec) -> list[str]:
    lines = [tool.description]
    if tool.params:
        lines.append("")
        lines.append("Args:")
        for p in tool.params:
            lines.append(f"    {p.name}: {p.description or p.name}")
    return ["    " + _literal("\n".join(lines) + "\n", "    ")]


def _render(spec: WorldSpec, tool: ToolSpec, audit: bool) -> list[str]:
    t = spec.table(tool.table)
    _ident(tool.name, "tool name")
    for p in tool.params:
        _ident(p.name, f"parameter of {tool.name}")
    head = [
        f"@tool(read_only={tool.read_only}, destructive={tool.destructive}, idempotent={tool.idempotent}, "
        f"provenance={tool.provenance!r})",
        f"def {tool.name}({_signature(tool)}) -> dict[str, Any]:",
        *_docstring(tool),
    ]
    body: list[str] = []
    key = slug(t.singular)
    if tool.kind == "search":
        filters = []
        for p in tool.params:
            if p.name in ("limit", "offset"):
                continue
            if p.name.endswith("_from") and p.type == "date" and p.name[:-5] in t.search:
                filters.append(f"({p.name[:-5]!r}, '>=', {p.name})")
            elif p.name.endswith("_to") and p.type == "date" and p.name[:-3] in t.search:
                filters.append(f"({p.name[:-3]!r}, '<=', {p.name})")
            else:
                op = "contains" if p.type == "text" and not p.enum else "="
                filters.append(f"({p.name!r}, {op!r}, {p.name})")
        body.append(f"    filters = [{', '.join(filters)}]")
        body.append("    return db.search(" + repr(t.name) + ", filters, limit=limit or "
                    f"{SEARCH_LIMIT_DEFAULT}, offset=offset or 0)")
    elif tool.kind == "get":
        body.append(f"    return {{{key!r}: db.get({t.name!r}, {id_param(t)}, {t.singular!r})}}")
    elif tool.kind == "create":
        for p in tool.params:
            if p.ref:
                body += _ref_check(spec, t.column(p.name), p.name, p.required)
        body += _fills(spec, t, tool)
        values = [f"{p.name!r}: {_coerce(p)}" for p in tool.params]
        values += [f"{k!r}: {_code_expr(t, k) if v == '$code' else _value_expr(v)}"
                   for k, v in t.create_defaults.items()]
        values += [f"{k!r}: {_code_expr(t, k)}" for k in auto_codes(t)]
        body.append(f"    new_id = db.insert({t.name!r}, {{{', '.join(values)}}})")
        if audit:
            body.append(f"    db.audit({tool.name!r}, {t.name!r}, new_id)")
        body.append(f"    return {{{key!r}: db.get({t.name!r}, new_id, {t.singular!r})}}")
    elif tool.kind == "update":
        idp = id_param(t)
        fields = [p for p in tool.params if p.name != idp]
        body.append(f"    db.get({t.name!r}, {idp}, {t.singular!r})")
        body.append("    changes = {k: v for k, v in {" + ", ".join(f"{p.name!r}: {_coerce(p)}" for p in fields)
                    + "}.items() if v is not None}")
        names = ", ".join(p.name for p in fields)
        body.append("    if not changes:")
        body.append(f"        raise ToolError({'nothing to change: give at least one of ' + names!r})")
        for p in fields:
            if p.ref:
                body += _ref_check(spec, t.column(p.name), p.name, False)
        body.append(f"    db.update({t.name!r}, {idp}, changes)")
        if audit:
            body.append(f"    db.audit({tool.name!r}, {t.name!r}, {idp})")
        body.append(f"    return {{{key!r}: db.get({t.name!r}, {idp}, {t.singular!r})}}")
    else:
        body += _render_transition(spec, t, tool, audit)
    return head + body


def _ref_check(spec: WorldSpec, col: ColumnDef, name: str, required: bool) -> list[str]:
    """The referenced record must exist, and be in one of the column's `ref_states` when it has them."""
    assert col.ref is not None
    target = spec.table(col.ref)
    read = f"db.get({col.ref!r}, {name}, {target.singular!r})"
    lines = [f"    {read}"]
    if col.ref_states:
        state = target.workflow.column if target.workflow else None
        if state is None or any(s not in (target.column(state).enum or []) for s in col.ref_states):
            raise TemplateError(f"column '{col.name}': ref_states {col.ref_states} are not states of table "
                                f"'{col.ref}'")
        said = f"str(referred[{target.label!r}])" if target.label else name
        lines = [f"    referred = {read}",
                 f"    db.require_state(referred, {state!r}, {col.ref_states!r}, {target.singular + ' '!r} + {said})"]
    return lines if required else [f"    if {name} is not None:"] + ["    " + x for x in lines]


def _fills(spec: WorldSpec, t: TableDef, tool: ToolSpec) -> list[str]:
    """Columns a create fills from a record it refers to (`fills_from`): the email address of the contact."""
    given = {p.name for p in tool.params}
    out: list[str] = []
    for col in t.columns:
        if not col.fills_from or col.name not in given:
            continue
        ref_name, _, source = col.fills_from.partition(".")
        ref = t.column(ref_name).ref if ref_name in given else None
        if ref is None or source not in {c.name for c in spec.table(ref).columns}:
            raise TemplateError(f"table '{t.name}' column '{col.name}': fills_from '{col.fills_from}' must name a "
                                f"reference the create call takes and a column of the table it points at")
        noun = spec.table(ref).singular
        message = (f"{col.name} must be the {noun}'s own {source.replace('_', ' ')} when {ref_name} is given "
                   f"(or be left out; it is filled in)")
        # And back: an address that is one contact's own is that contact, as if the agent had named them
        # (found blind: "email contact Quinn Chowdhury" sent to her address alone failed on contact_id).
        out += [f"    if {ref_name} is not None:",
                f"        filled = db.get({ref!r}, {ref_name}, {noun!r})[{source!r}]",
                f"        given = {col.name} if {col.name} is not None else filled",
                f"        {col.name} = filled if filled is not None else given",
                f"        db.guard(given, '==', {col.name}, {message!r})",
                f"    elif {col.name} is not None:",
                f"        owners = db.search({ref!r}, [({source!r}, '=', {col.name})], limit=2, offset=0)",
                "        if owners['total'] == 1:",
                f"            {ref_name} = owners['results'][0]['id']"]
    return out


def _coerce(p: ParamSpec) -> str:
    if p.type == "money":
        return f"round({p.name}, 2)" if p.required else f"(round({p.name}, 2) if {p.name} is not None else None)"
    if p.type == "boolean":
        return f"int({p.name})" if p.required else f"(int({p.name}) if {p.name} is not None else None)"
    return p.name


def _render_transition(spec: WorldSpec, t: TableDef, tool: ToolSpec, audit: bool) -> list[str]:
    assert t.workflow is not None
    tr = next(x for x in t.workflow.transitions if x.name == tool.transition)
    idp = id_param(t)
    label = f"row[{t.label!r}]" if t.label else f"{idp}"
    body = [f"    row = db.get({t.name!r}, {idp}, {t.singular!r})"]
    for p in tr.params:
        if p.ref:  # an unknown id is refused before anything is written
            body.append(f"    db.get({p.ref!r}, {_ident(p.name, 'parameter')}, {_noun(spec, p.ref)!r})")
        if p.type == "money":
            body.append(f"    {p.name} = round({p.name}, 2)")
    body.append(f"    db.require_state(row, {t.workflow.column!r}, {tr.from_!r}, {t.singular + ' '!r} + str({label}))")
    related = related_columns(g.field for g in tr.guards if is_expression(g.field))
    body += _read_related(spec, t, related)
    for g in tr.guards:
        if is_expression(g.field):  # evaluated by the toolkit's walker over these values, never by eval
            left = f"db.calc({g.field!r}, {_reads(g.field)})"
        else:
            kind, name = g.field.split(".", 1)
            left = f"row[{name!r}]" if kind == "row" else _ident(name, "guard field")
        right = f"db.rule({g.rule!r})" if g.rule else _value_expr(g.value)
        body.append(f"    db.guard({left}, {g.op!r}, {right}, {g.message!r})")
    sets = {t.workflow.column: repr(tr.to)}
    calcs = related_columns(calc_of(v) or "" for v in tr.set.values() if calc_of(v))
    fresh = [c for c in calcs if c not in related]  # read by a computed value, not by a guard
    body += _read_related(spec, t, fresh)
    sets.update({k: _calc_expr(t, k, v, tr.name) if calc_of(v) else _value_expr(v) for k, v in tr.set.items()})
    body.append(f"    db.update({t.name!r}, {idp}, {{{', '.join(f'{k!r}: {v}' for k, v in sets.items())}}})")
    created = []
    updated: list[tuple[str, str | None]] = []  # (table, ref column): the related records effects updated
    for i, e in enumerate(tr.effects):
        if not spec.has_table(e.table):
            raise TemplateError(f"transition '{tr.name}': effect writes unknown table '{e.table}'")
        target = spec.table(e.table)
        if e.update is not None:
            body += _update_effect(spec, t, tr, e, audit, tool.name)
            if (e.update, e.ref) not in updated:
                updated.append((e.update, e.ref))
            continue
        next_code = not any(p.name == "code" for p in tr.params)  # else $code is the parameter
        exprs = {k: _code_expr(target, k) if v == "$code" and next_code
                 else _calc_expr(target, k, v, tr.name) if calc_of(v) else _value_expr(v, id_var=idp)
                 for k, v in e.values.items()}
        values = ", ".join(f"{k!r}: {x}" for k, x in exprs.items())
        reads = related_columns(calc_of(v) or "" for v in e.values.values() if calc_of(v))
        body += _read_related(spec, t, reads)  # as they are now, after earlier effects
        body.append(f"    created_{i} = db.insert({e.table!r}, {{{values}}})")
        if audit:
            body.append(f"    db.audit({tool.name!r}, {e.table!r}, created_{i})")
        created.append((e.table, f"created_{i}"))
    if audit:
        body.append(f"    db.audit({tool.name!r}, {t.name!r}, {idp})")
    out = [f"{slug(t.singular)!r}: db.get({t.name!r}, {idp}, {t.singular!r})"]
    out += [f"{'created_' + slug(spec.table(tbl).singular)!r}: db.get({tbl!r}, {var}, "
            f"{spec.table(tbl).singular!r})" for tbl, var in created]
    out += [f"{'updated_' + slug(spec.table(tbl).singular)!r}: db.get({tbl!r}, {_related_var(ref or '')}['id'], "
            f"{spec.table(tbl).singular!r})" for tbl, ref in updated]
    body.append(f"    return {{{', '.join(out)}}}")
    return body


def _related_var(column: str) -> str:
    return f"ref_{_ident(column, 'ref column')}"


def _read_related(spec: WorldSpec, t: TableDef, columns: list[str]) -> list[str]:
    """Read the records the row's `ref` columns point at (`ref.<column>.<name>` reads them), as they are now."""
    out = []
    for column in columns:
        target = t.column(column).ref if column in {c.name for c in t.columns} else None
        if target is None or not spec.has_table(target):
            raise TemplateError(f"table '{t.name}': 'ref.{column}' reads through a column that is not a ref to a "
                                f"table of the world")
        out.append(f"    {_related_var(column)} = db.get({target!r}, row[{column!r}], {_noun(spec, target)!r})")
    return out


def _reads(text: str) -> str:
    """The values an expression reads, as a dict literal for db.calc: row, parameters and related records."""
    parts = []
    for kind, name in references(text):
        if kind == "row":
            source = f"row[{name!r}]"
        elif kind == "param":
            source = _ident(name, "expression parameter")
        else:
            column, _, field = name.partition(".")
            source = f"{_related_var(column)}[{field!r}]"
        parts.append(f"{f'{kind}.{name}'!r}: {source}")
    return "{" + ", ".join(parts) + "}"


def _calc_expr(target: TableDef, column: str, value: Any, step: str) -> str:
    """A `{calc: ...}` value: computed by the toolkit's walker, stored as the column's type."""
    text = calc_of(value) or ""
    kind = target.column(column).type
    return f"db.computed({text!r}, {_reads(text)}, {kind!r}, {f'{column} of {step}'!r})"


def _update_effect(spec: WorldSpec, t: TableDef, tr: Transition, e: Effect, audit: bool, tool_name: str) -> list[str]:
    """An effect that updates the record a `ref` column points at, read as it is now (after earlier effects)."""
    assert e.update is not None and e.ref is not None
    target = spec.table(e.update)
    if t.column(e.ref).ref != e.update:
        raise TemplateError(f"transition '{tr.name}': effect ref '{e.ref}' is not a ref to '{e.update}'")
    texts = [calc_of(v) or "" for v in e.values.values() if calc_of(v)]
    if e.when is not None:
        texts += [e.when.field] + ([e.when.value] if isinstance(e.when.value, str) else [])
    body = _read_related(spec, t, list(dict.fromkeys([e.ref, *related_columns(texts)])))
    exprs = {k: _calc_expr(target, k, v, tr.name) if calc_of(v) else _value_expr(v) for k, v in e.values.items()}
    write = (f"db.update({e.update!r}, {_related_var(e.ref)}['id'], "
             f"{{{', '.join(f'{k!r}: {x}' for k, x in exprs.items())}}})")
    lines = [write] + ([f"db.audit({tool_name!r}, {e.update!r}, {_related_var(e.ref)}['id'])"] if audit else [])
    if e.when is None:
        return body + ["    " + x for x in lines]
    left = f"db.calc({e.when.field!r}, {_reads(e.when.field)})"
    right = (repr(float(e.when.value)) if not isinstance(e.when.value, str)
             else f"db.calc({e.when.value!r}, {_reads(e.when.value)})")
    return body + [f"    if db.holds({left}, {e.when.op!r}, {right}):"] + ["        " + x for x in lines]


def tools_source(spec: WorldSpec, tools: list[ToolSpec]) -> str:
    """The generated tools.py: plain functions over ToolDB, one per tool."""
    audit = spec.has_table("audit_log")
    doc = (f"Tools of world {spec.brief.world_id} ({spec.brief.company_name}).\n\n"
           f"Generated by WorldFactory {GENERATOR_VERSION} from the world's spec; do not edit by hand.\n"
           "Every function takes the episode's ToolDB first; the runtime owns transactions.\n")
    lines = [
        _literal(doc),
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal",
        "",
        "from worldfactory.runtime.toolkit import ToolDB, ToolError, tool",
        "",
        "__all__ = [" + ", ".join(repr(t.name) for t in tools) + "]",
        "",
        "# Literal and ToolError are used by some worlds' tools and not others.",
        "_ = (Literal, ToolError)",
    ]
    for t in tools:
        lines += ["", ""] + _render(spec, t, audit)
    return "\n".join(lines) + "\n"


def tools_json(tools: list[ToolSpec]) -> str:
    return json.dumps(manifest(tools), indent=1, sort_keys=True) + "\n"

"""The world IR: pydantic models for templates, briefs, specs, tools and tasks.

Templates (YAML under world_templates/) validate into these models on load, so a bad file fails
with its path and the field at fault. A Brief is one company; a WorldSpec is its resolved schema.
"""

from __future__ import annotations

import re
import string
from datetime import date
from typing import Annotated, Any, Literal

from annotated_types import MaxLen
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_serializer,
    model_validator,
)

from worldfactory.fill import code_problem

ColumnType = Literal["integer", "number", "money", "text", "date", "boolean"]
DateMeaning = Literal["event", "plan", "period"]
CompareOp = Literal["<=", "<", ">=", ">", "==", "!="]
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"


MAX_ITEMS = 1000  # items of one list or mapping in a pack (hand-written packs use at most 80)
ACTOR_ID = 1  # the acting user (the runtime's ToolDB actor, `$actor` in packs): the agent's own account
MAX_TEXT = 4000  # characters of one string in a pack (hand-written packs use at most about 400)


def _bounded(value: Any, depth: int = 0) -> Any:
    """The raw value, or a ValueError naming the bound it is past: strings, lists and mappings, and the
    lists and strings inside them. Mappings inside a list or mapping are left to their own model, so the
    message names the innermost field (tables[0].columns[5].enum, not tables)."""
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ValueError(f"a text of {len(value)} characters; at most {MAX_TEXT}")
    if isinstance(value, (list, tuple, dict)):
        if len(value) > MAX_ITEMS:
            raise ValueError(f"{len(value)} items; at most {MAX_ITEMS}")
        if depth > 8:
            raise ValueError("nested more than 8 levels deep")
        for item in (value.values() if isinstance(value, dict) else value):
            if not isinstance(item, dict):
                _bounded(item, depth + 1)
    return value


class Strict(BaseModel):
    """Base for template models: unknown keys are errors, so typos fail loudly; lists and strings are
    bounded (MAX_ITEMS, MAX_TEXT) before anything else reads them, so a pack cannot ask for unbounded work."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    @field_validator("*", mode="before")
    @classmethod
    def _within_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, (str, list, tuple, dict)):
            return value  # numbers, booleans, None: nothing to bound (most fields; this runs for every one)
        if isinstance(value, str):
            field = cls.model_fields.get(info.field_name or "")
            if field is not None and any(isinstance(m, MaxLen) for m in field.metadata):
                return value  # a field with its own max_length (a brief's description) keeps it
        return _bounded(value)


# --- column generators (see worldfactory/generate/data.py) ------------------------------------
# A generator is a name ("person_name") or a one-kind mapping whose first key is its kind
# ({int: [1, 5]}, {date_after: filed_on, days: [0, 20]}). The models below type every kind the
# engine supports; the column keeps the value exactly as written, so the engine reads what it always read.

NamedGenerator = Literal["person_name", "company_name", "company", "first_name", "last_name", "city", "word",
                         "phone", "sentence"]
NAMED_GENERATORS: tuple[str, ...] = NamedGenerator.__args__  # type: ignore[attr-defined]
Scalar = str | int | float | bool | None
# "<column>" of the same row, or "parent.<column>" of the per_parent row
RowRef = Annotated[str, Field(pattern=r"^(parent\.)?[a-z][a-z0-9_]*$")]


def _ordered(pair: tuple[float, float], what: str) -> None:
    if pair[0] > pair[1]:
        raise ValueError(f"{what}: the first bound must not be above the second, got {list(pair)}")


class ChoiceGen(Strict):
    """A weighted pick: {choice: [a, b, c], weights: [3, 1, 1]}."""

    choice: list[Scalar] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _weights(self) -> ChoiceGen:
        if self.weights is not None and len(self.weights) != len(self.choice):
            raise ValueError(f"weights has {len(self.weights)} entries for {len(self.choice)} choices")
        return self


class SeqGen(Strict):
    """Values in turn, row by row: {seq: [a, b, c]}."""

    seq: list[Scalar] = Field(min_length=1)


class BriefListGen(Strict):
    """One of the brief's lists, in turn: {brief_list: departments}."""

    brief_list: Literal["departments", "modules"]


class CodeGen(Strict):
    """A numbered code: {code: "CLM-{n:06d}"}; {n} is the row number."""

    code: str

    @model_validator(mode="after")
    def _format(self) -> CodeGen:
        problem = code_problem(self.code)  # e.g. {n.__class__.x} or {n:>50000000}
        if problem:
            raise ValueError(problem)
        return self


class BoolGen(Strict):
    """True with a probability: {bool: 0.3}."""

    bool: float = Field(ge=0, le=1)


class ConstGen(Strict):
    """The same value on every row: {const: pending}."""

    const: Scalar


class IntGen(Strict):
    """A whole number in [low, high]: {int: [1, 5]}."""

    int: tuple[int, int]

    @model_validator(mode="after")
    def _range(self) -> IntGen:
        _ordered(self.int, "int")
        return self


class MoneyGen(Strict):
    """An amount in [low, high], two decimals: {money: [300, 6000]}."""

    money: tuple[float, float]

    @model_validator(mode="after")
    def _range(self) -> MoneyGen:
        _ordered(self.money, "money")
        return self


class NumberGen(Strict):
    """A number in [low, high], two decimals: {number: [0, 1]}."""

    number: tuple[float, float]

    @model_validator(mode="after")
    def _range(self) -> NumberGen:
        _ordered(self.number, "number")
        return self


class DaysAgoGen(Strict):
    """A date between most and fewest days before the clock: {days_ago: [500, 5]}."""

    days_ago: tuple[int, int]

    @model_validator(mode="after")
    def _range(self) -> DaysAgoGen:
        if self.days_ago[1] > self.days_ago[0]:
            raise ValueError(f"days_ago is [most, fewest] days ago, got {list(self.days_ago)}")
        return self


class DaysAroundGen(Strict):
    """A date from days before to days after the clock: {days_around: [30, 60]}."""

    days_around: tuple[int, int]

    @model_validator(mode="after")
    def _range(self) -> DaysAroundGen:
        if -self.days_around[0] > self.days_around[1]:
            raise ValueError(f"days_around is [days before, days after], got {list(self.days_around)}")
        return self


class DateAfterGen(Strict):
    """A date some days after another date: {date_after: parent.filed_on, days: [1, 20], cap: true}."""

    date_after: RowRef
    days: tuple[int, int] = (0, 30)
    cap: bool = True

    @model_validator(mode="after")
    def _range(self) -> DateAfterGen:
        _ordered(self.days, "days")
        return self


class FractionOfGen(Strict):
    """A share of another amount: {fraction_of: amount_claimed, range: [0.6, 1.0]}."""

    fraction_of: RowRef
    range: tuple[float, float] = (0.5, 1.0)

    @model_validator(mode="after")
    def _range(self) -> FractionOfGen:
        _ordered(self.range, "range")
        return self


class CopyGen(Strict):
    """Another column's value: {copy: parent.approved_amount}."""

    copy_: RowRef = Field(alias="copy")  # 'copy' would shadow BaseModel.copy


class EmailFromGen(Strict):
    """An e-mail address made from a name column of the same row: {email_from: full_name}."""

    email_from: str = Field(pattern=NAME_PATTERN)


class IdOfGen(Strict):
    """The id of a random row of a table: {id_of: $anchor}."""

    id_of: str


class TemplateGen(Strict):
    """Text with named generators filled in: {template: "{word} follow-up {n}"}."""

    template: str

    @model_validator(mode="after")
    def _placeholders(self) -> TemplateGen:
        try:
            keys = {f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None}
        except ValueError as exc:
            raise ValueError(f"template is not a valid format: {exc}") from None
        known = set(NAMED_GENERATORS) | {"n"}
        for key in sorted(keys):
            if not re.fullmatch(r"\w+", key) or key not in known:
                raise ValueError(f"template placeholder '{{{key}}}' is not one of: {', '.join(sorted(known))}")
        return self


GEN_KINDS: dict[str, type[Strict]] = {
    "choice": ChoiceGen, "seq": SeqGen, "brief_list": BriefListGen, "code": CodeGen, "bool": BoolGen,
    "const": ConstGen, "int": IntGen, "money": MoneyGen, "number": NumberGen, "days_ago": DaysAgoGen,
    "days_around": DaysAroundGen, "date_after": DateAfterGen, "fraction_of": FractionOfGen, "copy": CopyGen,
    "email_from": EmailFromGen, "id_of": IdOfGen, "template": TemplateGen,
}


def _gen_kind(value: Any) -> str | None:
    """The union's tag: 'named' for a generator name, else the mapping's first key (as the engine reads it)."""
    if isinstance(value, str):
        return "named"
    if isinstance(value, dict) and value:
        return str(next(iter(value)))
    return None


def _keep_as_written(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    handler(value)
    return value


Generator = Annotated[
    Annotated[NamedGenerator, Tag("named")] | Annotated[ChoiceGen, Tag("choice")] | Annotated[SeqGen, Tag("seq")]
    | Annotated[BriefListGen, Tag("brief_list")] | Annotated[CodeGen, Tag("code")] | Annotated[BoolGen, Tag("bool")]
    | Annotated[ConstGen, Tag("const")] | Annotated[IntGen, Tag("int")] | Annotated[MoneyGen, Tag("money")]
    | Annotated[NumberGen, Tag("number")] | Annotated[DaysAgoGen, Tag("days_ago")]
    | Annotated[DaysAroundGen, Tag("days_around")] | Annotated[DateAfterGen, Tag("date_after")]
    | Annotated[FractionOfGen, Tag("fraction_of")] | Annotated[CopyGen, Tag("copy")]
    | Annotated[EmailFromGen, Tag("email_from")] | Annotated[IdOfGen, Tag("id_of")]
    | Annotated[TemplateGen, Tag("template")],
    Discriminator(_gen_kind),
    WrapValidator(_keep_as_written),
    PlainSerializer(lambda v: v),
]


class ColumnDef(Strict):
    """One column: its SQL type, constraints and how seed values are generated."""

    name: str = Field(pattern=NAME_PATTERN)
    type: ColumnType = "text"
    ref: str | None = None  # table name, or "$anchor" for the domain's core record
    enum: list[str] | None = None
    nullable: bool = False
    unique: bool = False
    free_text: bool = False  # verifiers only check that it exists
    minimum: float | None = None
    maximum: float | None = None
    poly_ref: str | None = None  # name of a column holding the table this id points into
    gen: Generator | None = None  # checked against the generator kinds; kept as written
    when: dict[str, list[str]] | None = None  # generate only when these columns hold these values
    label: str | None = None  # how a person says this column's name
    description: str = ""  # what a tool parameter for this column means, when its name does not say it
    # "contact_id.email": a create call that gives contact_id gets this column from that record (a value
    # given with it must be the same); without contact_id the value is the caller's
    fills_from: str | None = None
    ref_states: list[str] | None = None  # a create or update may point it only at records in these states
    # a date's meaning on the world's clock (worldfactory/audit.py): an event that happened, a plan that may
    # lie ahead, or a period bound; unset, the audit infers it from the column's name
    date_meaning: DateMeaning | None = None
    # false: a number whose sum across records means nothing (a standard cost, a salary band bound, a
    # deductible): questions ask for its highest value, not its total. A money column whose name says "rate",
    # "per" or "unit" is one without saying so (generate/tasks/retrieval.py)
    additive: bool = True

    @model_validator(mode="after")
    def _meaning_of_a_date(self) -> ColumnDef:
        if self.date_meaning is not None and self.type != "date":
            raise ValueError(f"date_meaning is for date columns; '{self.name}' is of type {self.type}")
        if not self.additive and self.type not in ("money", "number", "integer"):
            raise ValueError(f"additive is for numeric columns; '{self.name}' is of type {self.type}")
        return self

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the newer optional keys out while unset, so columns that do not use them keep their bytes."""
        data = handler(self)
        if isinstance(data, dict):
            for key, unset in (("description", ""), ("fills_from", None), ("ref_states", None),
                               ("date_meaning", None), ("additive", True)):
                if data.get(key, unset) == unset:
                    data.pop(key, None)
        return data

    @property
    def human(self) -> str:
        """How a person says the column's name: 'adjuster' for adjuster_id, never an id."""
        if self.label:
            return self.label
        if self.type == "date" and self.name.endswith("_on"):  # due_on: "due date"; starts_on: "start date"
            words = self.name[:-3].split("_")
            if words[-1].endswith("s") and not words[-1].endswith("ss"):
                words[-1] = words[-1][:-1]
            return " ".join(words + ["date"])
        name = self.name[:-3] if self.name.endswith("_id") else self.name
        return name.replace("_", " ")


# --- cross-record constraints (see worldfactory/constraints.py) ----------------------------------
# Declared per table as a one-kind mapping whose first key is its kind, like a generator:
# {total: gross_pay, of: paycheck_lines.amount}. The seed generator fits rows to them and the realism
# audit (worldfactory/audit.py) checks them over the seed, so a world's numbers agree with each other.

RowFilter = dict[str, list[Scalar]]  # column -> the values it must hold for the constraint to apply


class TotalC(Strict):
    """A column equals the sum of its lines' column: {total: amount, of: invoice_lines.line_total}; `by` is the
    lines' column that refers to this table (default: their only reference to it). Rows without lines keep theirs.
    The generator sets the total to the lines' sum, or with `adjust: lines` scales the lines to the drawn total
    (a paycheck's gross pay stays as drawn, so its net pay, drawn from it, still fits)."""

    total: str = Field(pattern=NAME_PATTERN)
    of: str = Field(pattern=r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
    by: str | None = None
    adjust: Literal["total", "lines"] = "total"
    when: RowFilter = Field(default_factory=dict)


class BandC(Strict):
    """A value within its parent's band: {band: salary, ref: position_id, min: min_salary, max: max_salary}."""

    band: str = Field(pattern=NAME_PATTERN)
    ref: str = Field(pattern=NAME_PATTERN)
    min: str | None = None
    max: str | None = None
    when: RowFilter = Field(default_factory=dict)

    @model_validator(mode="after")
    def _a_bound(self) -> BandC:
        if self.min is None and self.max is None:
            raise ValueError("a band needs 'min' or 'max' (the parent's columns that bound the value)")
        return self


class LimitC(Strict):
    """A value at most a rule's value on rows the rule governs: {limit: amount, rule: approval_limit,
    when: {status: [approved]}}; `unless` names a boolean column that marks a row as an allowed exception."""

    limit: str = Field(pattern=NAME_PATTERN)
    rule: str = Field(pattern=NAME_PATTERN)
    unless: str | None = None
    when: RowFilter = Field(default_factory=dict)


class CategoryC(Strict):
    """Values that depend on a kind: {category: weight_kg, by: kind, ranges: {parcel: [0.1, 30]}} or
    {category: treatment, by: kind, allowed: {dental: [cleaning, filling]}}; kinds not listed are free. `by` may
    read the kind from a referenced row: {category: incident_type, by: policy_id.line, allowed: {...}}. A date
    falls on a day of the year by kind: {category: due_on, by: tax_period, month_days: {q1: ["04-30"]}} (a
    quarter's return is due the last day of the month after it), any year."""

    category: str = Field(pattern=NAME_PATTERN)
    by: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$")
    ranges: dict[str, tuple[float, float]] | None = None
    allowed: dict[str, list[Scalar]] | None = None
    month_days: dict[str, list[str]] | None = None  # kind -> the "MM-DD" days of the year the date may fall on
    when: RowFilter = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_of(self) -> CategoryC:
        if sum(x is not None for x in (self.ranges, self.allowed, self.month_days)) != 1:
            raise ValueError("a category constraint needs exactly one of 'ranges', 'allowed' or 'month_days'")
        for kind, pair in (self.ranges or {}).items():
            _ordered(pair, f"ranges.{kind}")
        for kind, days in (self.month_days or {}).items():
            for day in days:
                try:  # a leap year, so 02-29 is a day some years have
                    if not re.fullmatch(r"\d\d-\d\d", day):
                        raise ValueError(day)
                    date.fromisoformat(f"2000-{day}")
                except ValueError:
                    raise ValueError(f"month_days.{kind}: '{day}' is not a day of the year as MM-DD") from None
            if not days:
                raise ValueError(f"month_days.{kind}: name at least one MM-DD day")
        return self

    @model_serializer(mode="wrap")
    def _without_unused_month_days(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `month_days` out while unset, so the spec.json of a world whose categories predate it keeps its
        bytes."""
        data = handler(self)
        if self.month_days is None and isinstance(data, dict):
            data.pop("month_days", None)
        return data


class RefersC(Strict):
    """A reference respects the referenced row's state: {refers: user_id, to: {active: [true]},
    when: {status: [scheduled]}} (no work scheduled for inactive staff)."""

    refers: str = Field(pattern=NAME_PATTERN)
    to: RowFilter = Field(min_length=1)
    when: RowFilter = Field(default_factory=dict)


class SameC(Strict):
    """Ownership: a column equals a column of the row a reference points at: {same: account_id,
    as: contact_id.account_id} (a contact's asset belongs to the contact's account)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    same: str = Field(pattern=NAME_PATTERN)
    as_: str = Field(alias="as", pattern=r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
    when: RowFilter = Field(default_factory=dict)


class PastC(Strict):
    """A value that follows the clock: once the date `past` names has gone by, `then` holds one of `allowed`:
    {past: due_on, then: sla_status, allowed: [at_risk, breached], when: {status: [open]}} (an open ticket
    past its due date is not within target). A date at or after today leaves the value free."""

    past: str = Field(pattern=NAME_PATTERN)
    then: str = Field(pattern=NAME_PATTERN)
    allowed: list[Scalar] = Field(min_length=1)
    when: RowFilter = Field(default_factory=dict)
    # status: the draw moves `then` (a request past its day was answered); derive: the draw leaves the row and
    # the pack's derive moves its dates to the clock (an unpaid pay run is this cycle's), checked after it
    fit: Literal["status", "derive"] = "status"

    @model_serializer(mode="wrap")
    def _without_default_fit(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `fit` out while it is the default, so the spec.json of a world that predates it keeps its bytes."""
        data = handler(self)
        if self.fit == "status" and isinstance(data, dict):
            data.pop("fit", None)
        return data


CONSTRAINT_KINDS: dict[str, type[Strict]] = {
    "total": TotalC, "band": BandC, "limit": LimitC, "category": CategoryC, "refers": RefersC, "same": SameC,
    "past": PastC,
}
Constraint = Annotated[
    Annotated[TotalC, Tag("total")] | Annotated[BandC, Tag("band")] | Annotated[LimitC, Tag("limit")]
    | Annotated[CategoryC, Tag("category")] | Annotated[RefersC, Tag("refers")] | Annotated[SameC, Tag("same")]
    | Annotated[PastC, Tag("past")],
    Discriminator(lambda v: constraint_kind(v) if isinstance(v, BaseModel) else _gen_kind(v)),
]


def constraint_kind(c: Any) -> str:
    """The kind of a constraint model ('total', 'band', ...)."""
    return next((k for k, m in CONSTRAINT_KINDS.items() if isinstance(c, m)), "")


class PerParent(Strict):
    """Generate rows of a child table for each parent row that matches `where`."""

    table: str
    column: str  # the FK column in the child that points to the parent
    where: dict[str, list[str]] = Field(default_factory=dict)
    count: tuple[int, int] = (1, 1)


class Param(Strict):
    """A transition parameter the caller supplies."""

    name: str = Field(pattern=NAME_PATTERN)
    type: ColumnType = "text"
    enum: list[str] | None = None
    minimum: float | None = None
    maximum: float | None = None
    free_text: bool = False
    description: str = ""
    task_value: str | None = None  # "row.<col>" or "choice": how tasks pick a value
    say: str | None = None  # how an instruction states the value, e.g. "for {value}"
    # A table name (or "$anchor"): the value is the id of one of its rows, which the tool reads first
    # (an unknown id is refused) and instructions name by the row's label.
    ref: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_ref(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `ref` out while it is None, so the spec.json of a world without ref parameters keeps its bytes."""
        data = handler(self)
        if self.ref is None and isinstance(data, dict):
            data.pop("ref", None)
        return data


class Guard(Strict):
    """A business rule checked before a transition: `<field> <op> <rule or value>`."""

    field: str  # "row.<col>", "param.<name>", or arithmetic over them ("(param.rent - row.rent) / row.rent")
    op: CompareOp
    rule: str | None = None
    value: float | str | None = None
    message: str
    says: str = ""  # how an instruction states the condition, e.g. "its claimed amount is within the limit"

    @model_validator(mode="after")
    def _one_side(self) -> Guard:
        if (self.rule is None) == (self.value is None):
            raise ValueError("a guard needs exactly one of 'rule' or 'value'")
        from worldfactory.expressions import ExpressionError, is_expression, parse

        if is_expression(self.field):  # arithmetic over row.<column> and param.<name> (expressions.py)
            try:
                parse(self.field)
            except ExpressionError as exc:
                raise ValueError(f"guard field '{self.field}': {exc}") from None
        return self


CALC = "calc"  # a value `{calc: "<expression>"}` in `set` and effects: arithmetic (worldfactory/expressions.py)


def calc_of(value: Any) -> str | None:
    """The expression of a `{calc: ...}` value, or None for any other value."""
    if isinstance(value, dict) and set(value) == {CALC} and isinstance(value[CALC], str):
        return value[CALC]
    return None


DATE_AFTER = "date_after"  # a value `{date_after: <date>, days: <N or rule>}` in `set` and effects


def date_after_of(value: Any) -> tuple[str, int | str] | None:
    """(the date counted from, the days: a whole number or a rule's name) of a `{date_after: ..., days: ...}`
    value, or None for any other value. The date is `$today`, `row.<date column>` or `$<date parameter>`."""
    if not (isinstance(value, dict) and set(value) == {DATE_AFTER, "days"} and isinstance(value[DATE_AFTER], str)):
        return None
    days = value["days"]
    if isinstance(days, bool) or not isinstance(days, int | str):
        return None
    return value[DATE_AFTER], days


class Condition(Strict):
    """When an effect applies: `<field> <op> <value>`, over the same reads as a guard's field."""

    field: str  # row.<column>, param.<name>, ref.<column>.<column> or arithmetic over them
    op: CompareOp
    value: float | str  # a number, or an expression (`ref.invoice_id.amount`)


class Effect(Strict):
    """What a transition also writes: a row it creates (a payment when a claim is paid), or an update of the
    record one of the row's `ref` columns points at (`update: invoices, ref: invoice_id`), optionally only
    `when` a condition holds (flip the invoice to paid once its payments cover it)."""

    create: str | None = None
    update: str | None = None
    ref: str | None = None  # the acting row's `ref` column that names the record an `update` writes
    when: Condition | None = None
    values: dict[str, Any]

    @model_validator(mode="after")
    def _one_kind(self) -> Effect:
        if (self.create is None) == (self.update is None):
            raise ValueError("an effect needs exactly one of 'create' or 'update'")
        if self.update is not None and self.ref is None:
            raise ValueError("an 'update' effect needs 'ref': the row's column that names the record to update")
        if self.create is not None and self.ref is not None:
            raise ValueError("'ref' belongs to an 'update' effect; a 'create' effect writes a new row")
        return self

    @property
    def table(self) -> str:
        """The table the effect writes."""
        return self.create or self.update or ""

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the update-only keys out while unset, so a world with create effects only keeps its bytes."""
        data = handler(self)
        if isinstance(data, dict):
            for key in ("create", "update", "ref", "when"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data


class Transition(Strict):
    """A workflow step: a tool that moves a record from some states to another."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=NAME_PATTERN)
    from_: list[str] = Field(alias="from")
    to: str
    verb: str  # imperative with {obj}, e.g. "approve {obj}"
    description: str = ""
    params: list[Param] = Field(default_factory=list)
    set: dict[str, Any] = Field(default_factory=dict)
    guards: list[Guard] = Field(default_factory=list)
    effects: list[Effect] = Field(default_factory=list)
    otherwise: str | None = None  # the transition to take when a guard fails
    destructive: bool = False
    # false: a step taken one record at a time, never in bulk, sweep or year-end tasks (a write-off, a refund)
    bulk: bool = True
    # who asks for this step by email (the inbox's requests, generate/inbox.py): "party", the record's own
    # party, a CRM contact it links to (a contact, or a contact of its account) when it has one, as a client
    # asks to cancel their order; unset, a colleague (back-office steps: no buyer asks payroll to issue a
    # paycheck)
    requested_by: Literal["party"] | None = None

    @model_serializer(mode="wrap")
    def _without_default_bulk(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `bulk` out while true and `requested_by` while unset, so the spec.json of a world that uses
        neither keeps its bytes."""
        data = handler(self)
        if isinstance(data, dict):
            if self.bulk:
                data.pop("bulk", None)
            if self.requested_by is None:
                data.pop("requested_by", None)
        return data


PARTY_TABLES = ("contacts", "accounts")  # a record's own party, for `requested_by: party`: a contact, or its account


class Workflow(Strict):
    column: str = "status"
    transitions: list[Transition]


class TableDef(Strict):
    """A table as a template declares it; `id INTEGER PRIMARY KEY` is implicit."""

    name: str = Field(pattern=NAME_PATTERN)
    singular: str
    plural: str | None = None
    label: str | None = None  # column that names a row as a person would
    rows: int | None = None
    per_parent: PerParent | None = None
    columns: list[ColumnDef]
    search: list[str] = Field(default_factory=list)
    create: list[str] | None = None
    update: list[str] = Field(default_factory=list)
    create_defaults: dict[str, Any] = Field(default_factory=dict)
    workflow: Workflow | None = None
    optional: bool = False
    fill: Literal["rules", "handbook"] | None = None  # filled by the engine (generate/handbook.py), not by generators
    description: str = ""
    notify: str | None = None  # a ref column: the party a record concerns, emailed at its `email` column
    constraints: list[Constraint] = Field(default_factory=list)  # cross-record rules (worldfactory/constraints.py)

    @model_serializer(mode="wrap")
    def _without_no_constraints(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `constraints` out while empty, so tables that declare none keep their spec.json bytes."""
        data = handler(self)
        if isinstance(data, dict) and not data.get("constraints"):
            data.pop("constraints", None)
        return data

    @model_validator(mode="after")
    def _check(self) -> TableDef:
        if (self.rows is None) == (self.per_parent is None):
            raise ValueError("a table needs exactly one of 'rows' or 'per_parent'")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate column names in {self.name}")
        if "id" in names:
            raise ValueError("'id' is implicit; do not declare it")
        known = set(names)
        for field in ("search", "update"):
            for col in getattr(self, field):
                if col not in known:
                    raise ValueError(f"{field} names unknown column '{col}'")
        for col in self.create or []:
            if col not in known:
                raise ValueError(f"create names unknown column '{col}'")
        if self.label and self.label not in known:
            raise ValueError(f"label names unknown column '{self.label}'")
        if not {c.ref for c in self.columns} & set(PARTY_TABLES):
            for tr in self.workflow.transitions if self.workflow else []:
                if tr.requested_by == "party":
                    raise ValueError(f"transition '{tr.name}': requested_by: party needs a column of {self.name} "
                                     f"that refers to {' or '.join(PARTY_TABLES)} (the party who asks)")
        return self

    @property
    def plural_name(self) -> str:
        return self.plural or self.name

    def column(self, name: str) -> ColumnDef:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}.{name}")


def has_name(table: TableDef) -> bool:
    """Whether a person can name the table's records: a unique label the search tool filters on (the task
    families name records this way; `check-pack` holds a ref parameter's table to it)."""
    return bool(table.label) and table.column(table.label).unique and table.label in table.search


class Rule(Strict):
    """A business rule (policy parameter) stored in the world's business_rules table."""

    name: str = Field(pattern=NAME_PATTERN)
    value: float
    label: str
    description: str = ""
    integer: bool = False


class Invariant(Strict):
    """SQL that counts rows violating a consistency rule; it must return 0."""

    name: str
    sql: str


class SourcedInvariant(Invariant):
    """An invariant of a resolved world with where it was written (the pack file and field), so a failing one
    is named exactly, not as "the domain or one of its modules"."""

    source: str = ""  # e.g. "modules/crm.yaml: field 'invariants[1:customer_has_email].sql'"


class Module(Strict):
    """A shared module (CRM, office, payments, ...) composed into domains."""

    name: str = Field(pattern=NAME_PATTERN)
    title: str
    tables: list[TableDef]
    rules: list[Rule] = Field(default_factory=list)
    invariants: list[Invariant] = Field(default_factory=list)


class DomainPack(Strict):
    """A vertical: its core tables plus the shared modules it composes."""

    name: str  # slug, e.g. insurance-claims
    title: str
    company_noun: str
    # The trade word in its companies' names ("Birch Hospitality Mutual"); one per pack, so no two seed
    # types draw the same name. Empty: the title's first word.
    name_word: str = Field(default="", max_length=30, pattern=r"^[A-Za-z][A-Za-z&' -]*$|^$")
    anchor: str  # the core record shared modules attach to (notes, documents)
    modules: list[str]
    optional_modules: list[str] = Field(default_factory=list)
    departments: list[str]
    tables: list[TableDef]
    rules: list[Rule] = Field(default_factory=list)
    invariants: list[Invariant] = Field(default_factory=list)
    derive: list[str] = Field(default_factory=list)  # SQL run after seeding, e.g. order totals
    # The domain's own wording for a shared module's free text, "<table>.<column>": the texts it draws from
    # ({"notes.body": ["Corrected the overtime rate on the paycheck.", ...]}), so a note reads like this trade.
    texts: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")],
                Annotated[list[Annotated[str, Field(min_length=1, max_length=300)]], Field(min_length=2)]] = Field(
        default_factory=dict)

    @property
    def trade_word(self) -> str:
        return self.name_word or self.title.split()[0].capitalize()


class CompanyType(Strict):
    """Scale, policy and naming differences between kinds of company."""

    name: str
    title: str
    scale: float = Field(gt=0.1, le=10)
    rule_factors: dict[str, float] = Field(default_factory=dict)
    extra_modules: list[str] = Field(default_factory=list)
    name_suffixes: list[str]
    naming: dict[str, str] = Field(default_factory=dict)


class Vocabulary(Strict):
    first_names: list[str]
    last_names: list[str]
    company_words: list[str]
    company_suffixes: list[str]
    cities: list[str]
    streets: list[str]
    words: list[str]
    sentences: list[str]


# --- the world IR ---------------------------------------------------------------------------


class Brief(BaseModel):
    """One company to build: what the brief stage hands the schema stage."""

    model_config = ConfigDict(extra="forbid")

    world_id: str
    seed_type: str
    domain: str
    company_type: str
    variant: int
    generation_seed: int
    generator_version: str
    company_name: str
    clock: str  # the world's fixed "today", ISO date
    scale: float
    modules: list[str]
    dropped_tables: list[str] = Field(default_factory=list)
    rules: dict[str, float]
    departments: list[str]
    omitted_tools: list[str] = Field(default_factory=list)  # this variant's tool set leaves these out
    task_mix: dict[str, float] = Field(default_factory=dict)  # per family: its quota times this
    # near-duplicate pairs seeded per kind (generate/twins.py): 0 turns distractors off, 3 is the most
    twins: int = Field(default=2, ge=0, le=3)
    # the share of drawn person and company names that take the first word of an earlier one (a look-alike:
    # Zenith Logistics beside Zenith Textiles); a targeted brief sets it, 0 draws as before
    distractors: float = Field(default=0.0, ge=0.0, le=1.0)
    # families where a rule decides between a step and its alternative (conditional, handbook) draw this many
    # candidates the rule refuses per one it allows; a brief targeted at ignored rules sets it, 1 draws evenly
    refusals: int = Field(default=1, ge=1, le=8)
    # the families keep only tasks that find a record by a name of several words (generate/tasks/driver.py); a
    # brief targeted at wrong records sets it
    named: bool = False

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `distractors` out while 0, `refusals` while 1 and `named` while false, so every untargeted world
        keeps its bytes."""
        data = handler(self)
        if isinstance(data, dict) and data.get("distractors", 0.0) == 0.0:
            data.pop("distractors", None)
        if isinstance(data, dict) and data.get("refusals", 1) == 1:
            data.pop("refusals", None)
        if isinstance(data, dict) and not data.get("named", False):
            data.pop("named", None)
        return data


class WorldSpec(BaseModel):
    """The resolved schema of one world: its tables in creation order and its rules."""

    model_config = ConfigDict(extra="forbid")

    brief: Brief
    anchor: str
    tables: list[TableDef]
    rules: list[Rule]
    invariants: list[SourcedInvariant]
    derive: list[str]

    def table(self, name: str) -> TableDef:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def has_table(self, name: str) -> bool:
        return any(t.name == name for t in self.tables)


class ToolCall(BaseModel):
    tool: str
    args: dict[str, Any]


class Difficulty(BaseModel):
    """What makes a task hard, counted from its plan, so variants and diagnosis can turn each up or down."""

    model_config = ConfigDict(extra="forbid")

    oracle_calls: int = 0  # calls in the oracle plan
    distinct_tools: int = 0  # different tools it uses
    distractors: int = 0  # near-duplicate records the agent must tell apart from its own
    rules: int = 0  # business rules and handbook sections whose interplay decides the action
    facts_to_ask: int = 0  # facts the instruction leaves out that the requester knows
    records_to_discover: int = 0  # records found by search rather than named by code


class Task(BaseModel):
    """A task as written to tasks.jsonl."""

    task_id: str
    family: str
    instruction: str
    oracle: list[ToolCall]
    answer: Any = None
    answer_type: str | None = None
    target: str = ""  # the table the task is about, for reporting
    needs_search: bool = False  # its records are found by what a person knows, not by a given code or name
    difficulty: Difficulty = Field(default_factory=Difficulty)
    # the plan that falls for the task's trap (acts on the wrong twin, or does what the tools allow where the
    # handbook forbids it): the verifier must fail it; empty when the task sets none
    trap: list[ToolCall] = Field(default_factory=list)
    # Facts the instruction leaves out, by topic, that the agent gets by asking the requester (requester.py).
    requester: dict[str, str] = Field(default_factory=dict)
    # Calls a careless plan makes and this one must not (the guessed twin, a request policy declines): mutants.
    declined_calls: list[ToolCall] = Field(default_factory=list)

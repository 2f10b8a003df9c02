"""The world IR: pydantic models for templates, briefs, specs, tools and tasks.

Templates (YAML under world_templates/) validate into these models on load, so a bad file fails
with its path and the field at fault. A Brief is one company; a WorldSpec is its resolved schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ColumnType = Literal["integer", "number", "money", "text", "date", "boolean"]
CompareOp = Literal["<=", "<", ">=", ">", "==", "!="]
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"


class Strict(BaseModel):
    """Base for template models: unknown keys are errors, so typos fail loudly."""

    model_config = ConfigDict(extra="forbid", frozen=False)


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
    gen: Any = None  # generator spec, see build/data.py
    when: dict[str, list[str]] | None = None  # generate only when these columns hold these values
    label: str | None = None  # how a person says this column's name

    @property
    def human(self) -> str:
        """How a person says the column's name: 'adjuster' for adjuster_id, never an id."""
        if self.label:
            return self.label
        name = self.name[:-3] if self.name.endswith("_id") else self.name
        return name.replace("_", " ")


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


class Guard(Strict):
    """A business rule checked before a transition: `<field> <op> <rule or value>`."""

    field: str  # "row.<col>" or "param.<name>"
    op: CompareOp
    rule: str | None = None
    value: float | str | None = None
    message: str
    says: str = ""  # how an instruction states the condition, e.g. "its claimed amount is within the limit"

    @model_validator(mode="after")
    def _one_side(self) -> Guard:
        if (self.rule is None) == (self.value is None):
            raise ValueError("a guard needs exactly one of 'rule' or 'value'")
        if not (self.field.startswith("row.") or self.field.startswith("param.")):
            raise ValueError("guard field must start with 'row.' or 'param.'")
        return self


class Effect(Strict):
    """A row a transition creates, e.g. a payment when a claim is paid."""

    create: str
    values: dict[str, Any]


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
    fill: Literal["rules"] | None = None  # filled by the engine, not by generators
    description: str = ""

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
        return self

    @property
    def plural_name(self) -> str:
        return self.plural or self.name

    def column(self, name: str) -> ColumnDef:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}.{name}")


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
    anchor: str  # the core record shared modules attach to (notes, documents)
    modules: list[str]
    optional_modules: list[str] = Field(default_factory=list)
    departments: list[str]
    tables: list[TableDef]
    rules: list[Rule] = Field(default_factory=list)
    invariants: list[Invariant] = Field(default_factory=list)
    derive: list[str] = Field(default_factory=list)  # SQL run after seeding, e.g. order totals


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


class WorldSpec(BaseModel):
    """The resolved schema of one world: its tables in creation order and its rules."""

    model_config = ConfigDict(extra="forbid")

    brief: Brief
    anchor: str
    tables: list[TableDef]
    rules: list[Rule]
    invariants: list[Invariant]
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


class Task(BaseModel):
    """A task as written to tasks.jsonl."""

    task_id: str
    family: str
    instruction: str
    oracle: list[ToolCall]
    answer: Any = None
    answer_type: str | None = None
    target: str = ""  # the table the task is about, for reporting

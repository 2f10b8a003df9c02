"""`check-pack`: where a workflow's statuses can come from, read from the pack alone.

A status is *seeded* when the status column's generator can draw it (a `choice` or `const`; any other
generator, or a `derive` statement that updates the table, may give any value of the enum) or a create
tool starts records in it (`create_defaults`); it is *reachable* when it is seeded or a transition from a
reachable status leads to it; a transition's effect that creates a record in a status seeds it too.
Two faults follow, each one line naming the file and field with what to change:
- a status of the enum no row can ever hold (unreachable);
- a transition `from` status no row can hold: the step can never be taken from there.
"""

from __future__ import annotations

import re
from pathlib import Path

from worldfactory.spec import TableDef


def effect_starts(tables: list[TableDef], kind: str = "create") -> dict[str, set[str]]:
    """Per table: the statuses the effects of any transition create its records in (`kind` "update": the
    statuses `update` effects move an existing record to)."""
    by_name = {t.name: t for t in tables}
    out: dict[str, set[str]] = {}
    for t in tables:
        for tr in t.workflow.transitions if t.workflow else []:
            for e in tr.effects:
                if (e.create if kind == "create" else e.update) is None:
                    continue
                target = by_name.get(e.table)
                value = e.values.get(target.workflow.column) if target and target.workflow else None
                if isinstance(value, str) and not value.startswith("$"):
                    out.setdefault(e.table, set()).add(value)
    return out


def seeded_states(t: TableDef, derive: list[str], created: set[str] | None = None) -> tuple[set[str], str]:
    """The statuses rows can start in, and how the pack says so (for messages)."""
    assert t.workflow is not None
    col = t.column(t.workflow.column)
    enum = list(col.enum or [])
    g = col.gen
    kind = next(iter(g)) if isinstance(g, dict) and g else None
    updated = any(re.search(rf"\bUPDATE\s+{t.name}\b", s, re.IGNORECASE) and col.name in s for s in derive)
    if kind == "choice" and not updated and not col.when:
        states, how = {str(v) for v in g["choice"]}, f"its gen draws {', '.join(map(str, g['choice']))}"  # type: ignore[index]
    elif kind == "const" and not updated and not col.when:
        states, how = {str(g["const"])}, f"its gen is always {g['const']}"  # type: ignore[index]
    else:
        states, how = set(enum), "its gen may draw any status"
    start = t.create_defaults.get(col.name)
    if t.create is not None and isinstance(start, str):
        states.add(start)
        how += f"; created records start {start}"
    if created:
        states |= created
        how += f"; effects create records {', '.join(sorted(created))}"
    return states, how


def reachable_states(t: TableDef, seeded: set[str]) -> set[str]:
    """The seeded statuses and every status a chain of transitions leads to from them."""
    assert t.workflow is not None
    found = set(seeded)
    grew = True
    while grew:
        grew = False
        for tr in t.workflow.transitions:
            if tr.to not in found and found & set(tr.from_):
                found.add(tr.to)
                grew = True
    return found


def flow_lines(path: Path, tables: list[TableDef], derive: list[str], reach: list[TableDef] | None = None
               ) -> list[str]:
    """One line per status no row can hold and per transition `from` status no row can hold, over the
    file's own tables; `reach` adds the tables whose effects may create their records (a pack's modules)."""
    lines: list[str] = []
    created = effect_starts([*tables, *(reach or [])])
    moved = effect_starts([*tables, *(reach or [])], "update")  # a record an effect updates, from any status
    for i, t in enumerate(tables):
        if t.workflow is None or t.fill is not None or t.workflow.column not in {c.name for c in t.columns}:
            continue
        col = t.column(t.workflow.column)
        if not col.enum:
            continue
        seeded, how = seeded_states(t, derive, created.get(t.name))
        reach = reachable_states(t, seeded | (moved.get(t.name, set()) if seeded else set()))
        j = next(n for n, c in enumerate(t.columns) if c.name == col.name)
        base = f"tables[{i}:{t.name}]"
        for state in col.enum:
            if state not in reach:
                lines.append(f"{path}: field '{base}.columns[{j}:{col.name}].enum': status '{state}' is unreachable: "
                             f"no seeded row holds it ({how}) and no transition from a status rows hold leads to "
                             f"it; add it to the gen, add a transition with `to: {state}`, or drop it from the enum")
        for k, tr in enumerate(t.workflow.transitions):
            for m, state in enumerate(tr.from_):
                if state in col.enum and state not in reach:
                    lines.append(f"{path}: field '{base}.workflow.transitions[{k}:{tr.name}].from[{m}]': no row can "
                                 f"hold status '{state}', so {tr.name} is never taken from it; make '{state}' "
                                 f"reachable or drop it from `from`")
    return lines

"""Tasks people would ask: every instruction of every example world is read for the defects seen in
generated worlds (wrong article, "all of them", status words glued before a noun, doubled words,
column names instead of words), notifications go to the party a record concerns, bulk tasks carry a
business condition, and at least 30% of tasks make the agent search for their records."""

from __future__ import annotations

import re

import pytest

from tests.conftest import EXAMPLES
from worldfactory.runtime.world import World
from worldfactory.spec import WorldSpec

A_BEFORE_VOWEL = re.compile(r"\b[Aa] (?!uni|use|usu|uti|eu|one|once)([aeiouAEIOU]\w*)")
AN_BEFORE_CONSONANT = re.compile(r"\b[Aa]n (?!hour|honest|honor|heir)([b-df-hj-np-tv-zB-DF-HJ-NP-TV-Z]\w*)")
SNAKE_WORD = re.compile(r"(?<![\w@.\-])[a-z]+_[a-z_]+\b")
DOUBLED = re.compile(r"\b(\w+) \1\b", re.IGNORECASE)


def _quoted_out(text: str) -> str:
    """The instruction without its quoted values (subjects, titles, notes say what they say)."""
    return re.sub(r"\"[^\"]*\"", "\"\"", text)


def defects(instruction: str, spec: WorldSpec) -> list[str]:
    """What a careful reader would mark in the instruction."""
    text = _quoted_out(instruction)
    found = []
    if m := A_BEFORE_VOWEL.search(text):
        found.append(f"'a {m.group(1)}'")
    if m := AN_BEFORE_CONSONANT.search(text):
        found.append(f"'an {m.group(1)}'")
    if "all of them" in text:
        found.append("'all of them'")
    if m := SNAKE_WORD.search(text):
        found.append(f"a stored name '{m.group(0)}'")
    if (m := DOUBLED.search(text)) and not m.group(1).isdigit():
        found.append(f"doubled '{m.group(0)}'")
    if re.search(r"\b(on|at|by) of\b", text):
        found.append("a column name as a noun ('the due on of')")
    if m := re.search(r"\bemail (?!the |contact |user )([A-Z]\w+ [A-Z]\w+) (?:about|with)\b", text):
        found.append(f"a recipient without saying who they are ('email {m.group(1)}': a user? a contact?)")
    if m := re.search(r"\b(?:total|combined) (?:\w+ )?(?:rate|unit \w+|\w+ per \w+)\b", text):
        found.append(f"a total of a rate or a price of one unit ('{m.group(0)}')")
    for col in (c for t in spec.tables for c in t.columns if not c.additive):  # a deductible, a salary band
        if m := re.search(rf"\b(?:total|combined) {re.escape(col.human)}\b", text):
            found.append(f"a total of a column that does not add up ('{m.group(0)}')")
    found += wording(text)
    for table in spec.tables:
        for col in table.columns:  # found blind: "How many archived documents have record claim CLM-1?"
            if col.ref and re.search(rf"\bhave {re.escape(col.human)} {re.escape(col.ref.rstrip('s'))}", text):
                found.append(f"a reference column as an object ('have {col.human}')")
        for state in (table.workflow and table.column(table.workflow.column).enum) or []:
            said = state.replace("_", " ")
            if " " in said and f"{said} {table.singular}" in text:
                found.append(f"a status glued before its noun ('{said} {table.singular}')")
    return found


def wording(text: str) -> list[str]:
    """Shapes found blind in instructions, handbook sections and requester facts, each from a parameter's
    description or a column's label that assumed a noun: "for the why the ticket is escalated", "void a
    paycheck because of a only when", "the requester gives you hours", "whose booked is", a stored option
    said as it is stored ("is deadline_at_risk")."""
    found = []
    if m := re.search(r"\bthe (why|how|when|where|whether|what|which|who)\b(?! (?:is|are|was|were|do|does)\b)",
                      text, re.IGNORECASE):
        found.append(f"a wh-clause as a noun ('{m.group(0)}')")
    if m := re.search(r"\b(?:a|an|the)(?= *[;,.:)]| *$| (?:only|when|if|and|or)\b)", text):
        found.append(f"an article with no noun ('{text[max(0, m.start() - 20):m.end() + 6]}')")
    if m := re.search(r"\bthe requester (?:gives you|wants) [a-z]+", text):
        found.append(f"a word after the requester's part ('{m.group(0)}')")
    if m := re.search(r"\bby the way the requester\b", text):
        found.append(f"reads as 'by the way' ('{m.group(0)}')")
    if m := re.search(r"\bthe (?:reason|way|time|place|person) (?:\w+ ){2,}the requester wants\b", text):
        found.append(f"a clause before the requester's part ('{m.group(0)}')")
    if m := re.search(r"\([^()]*\) \([^()]*\)", text):
        found.append(f"two asides in a row ('{m.group(0)[:60]}')")
    if m := re.search(r"\bwhose (\w+ed) is\b", text):
        found.append(f"a participle as a noun ('{m.group(0)}')")
    if m := re.search(r"\bis [a-z]+_[a-z_]+\.", text):
        found.append(f"a stored option as the fact ('{m.group(0)}')")
    return found


def test_the_reader_catches_each_planted_defect(worlds: dict[str, World]) -> None:
    spec = next(iter(worlds.values())).spec
    claims = "claim under review" if any(t.name == "claims" for t in spec.tables) else ""
    planted = {
        "Please open a inspection for lease L-1.": "'a inspection'",
        "Please terminate every active lease early, all of them.": "'all of them'",
        "Escalate every under review claim to a senior adjuster.": "glued before its noun",
        "What is the due on of rent charge RC-1?": "column name as a noun",
        "Set up a new meeting (contact contact Rosa Alvarez).": "doubled",
        "Move every claim to fraud_review.": "stored name",
        "Book an meeting for Jo.": "'an meeting'",
        "Mark account Zenith Foods as churned, then email Dalia Bauer about it.": "without saying who",
        "What is the total rate across the time entries of matter MAT-1?": "a total of a rate",
        "What is the total unit price across the order items of order SO-1?": "a price of one unit",
        "What is the combined estimated unit price of the requisition lines of PR-1?": "a price of one unit",
        "Escalate ticket T-1 for the why the ticket is escalated the requester wants; ask them.": "wh-clause",
        "Terminate employee E1 for the reason employment ends the requester wants; ask them for it.": "a clause before",
        "Record the final payment of trip T-1 by the way the requester wants; ask them for it.": "by the way",
        "Reject lot L-1 for the the kind of defect found the requester wants; ask them for it.": "doubled",
        "Do what it asks (which rules count) (where one forbids it, change nothing), then reply.": "two asides",
        "Void a paycheck because of a only when its net pay is within the limit.": "article with no noun",
        "Do not void it because of a; place a stop payment instead.": "article with no noun",
        "Record shift S-1 as worked for the hours actually worked the requester gives you hours.": "after the req",
        "Confirm the resource booking whose booked is resource Quartz 28.": "participle as a noun",
    }
    users = next(t for t in spec.tables if t.name == "users")  # every example world has them, and refs to them
    ref = next(c for t in spec.tables for c in t.columns if c.ref == "users" and c.human.endswith(" by")
               or c.ref == "users" and c.human == "account owner")
    planted[f"How many active accounts have {ref.human} {users.singular} Jo Lee? Answer with a number."] = \
        "reference column as an object"
    fixed = next((c for t in spec.tables for c in t.columns if not c.additive), None)
    if fixed is not None:  # a column its pack marks additive: false (insurance: a deductible)
        planted[f"What is the total {fixed.human} across the policies of Jo Lee?"] = "does not add up"
    for text, expected in planted.items():
        if "under review" in text and not claims:
            continue
        assert any(expected in d for d in defects(text, spec)), (text, defects(text, spec))
    assert defects("Add a new contact: full name \"Ana_b all of them\", email ana@x.example.", spec) == []
    assert wording("The reason the ticket is escalated: deadline_at_risk.") == []  # a snake word is flagged above
    assert wording("The why the ticket is escalated is deadline_at_risk.") != []
    assert wording("Ask which one they mean; the one a search lists first is not always it.") == []


def texts(world: World) -> dict[str, str]:
    """What the world says to an agent in words beyond its instructions: its handbook sections and the
    requester's facts, by where they are."""
    out: dict[str, str] = {}
    if "search_handbook_sections" in world.tools_by_name:
        with world.episode() as ep:
            for row in ep.conn.execute("SELECT id, body FROM handbook_sections ORDER BY id"):
                out[f"handbook {row[0]}"] = row[1]
    for task in world.tasks.values():
        for topic, fact in sorted(task.requester.items()):
            out[f"{task.task_id} {topic}"] = fact
    return out


@pytest.mark.parametrize("wid", EXAMPLES)
def test_handbooks_and_requester_facts_read_as_a_person_would_write_them(worlds: dict[str, World],
                                                                         wid: str) -> None:
    world = worlds[wid]
    said = texts(world)
    assert any(k.startswith("handbook") for k in said) and any(not k.startswith("handbook") for k in said)
    bad = {where: d for where, text in said.items() if (d := wording(_quoted_out(text)))}
    assert bad == {}


@pytest.mark.parametrize("wid", EXAMPLES)
def test_every_instruction_reads_as_a_person_would_write_it(worlds: dict[str, World], wid: str) -> None:
    world = worlds[wid]
    bad = {t.task_id: d for t in world.tasks.values() if (d := defects(t.instruction, world.spec))}
    assert bad == {}


@pytest.mark.parametrize("wid", EXAMPLES)
def test_notifications_go_to_the_party_a_record_concerns(worlds: dict[str, World], wid: str) -> None:
    world = worlds[wid]
    tables = {t.name: t for t in world.spec.tables}
    sent = 0
    for task in world.tasks.values():
        table = tables.get(task.target)
        emails = [c for c in task.oracle if c.tool == "create_email"]
        if table is None or not table.notify or not emails or task.family == "bulk":
            continue
        for call in emails:  # addressed, never to a contact drawn at random
            if call.args.get("in_reply_to") or str(call.args.get("subject")).startswith("Re: Phone message: "):
                continue  # a reply to a request (in its thread, or to a phoned-in one) goes to whoever made it
            assert call.args.get("to_address") and "contact_id" not in call.args, (task.task_id, call.args)
            sent += 1
    if any(t.notify for t in world.spec.tables):
        assert sent >= 5


@pytest.mark.parametrize("wid", EXAMPLES)
def test_bulk_tasks_carry_a_business_condition(worlds: dict[str, World], wid: str) -> None:
    for task in worlds[wid].tasks.values():
        if task.family != "bulk":
            continue
        text = task.instruction
        condition = r"\b(of|whose|on or before|Year-end|Month-end|Quarter-end|audit)\b"
        assert re.search(condition, text), (task.task_id, text)


@pytest.mark.parametrize("wid", EXAMPLES)
def test_a_third_of_tasks_make_the_agent_search(worlds: dict[str, World], wid: str) -> None:
    tasks = list(worlds[wid].tasks.values())
    share = sum(t.needs_search for t in tasks) / len(tasks)
    assert share >= 0.30, share
    described = [t for t in tasks if t.needs_search and t.family in ("lookup_act", "conditional", "decline")]
    assert described  # single records named by what a person knows, not only sets found by status
    for task in described:  # the code the agent must find is not given away, not even in an email subject
        table = next(tb for tb in worlds[wid].spec.tables if tb.name == task.target)
        searched = [c for c in task.oracle if c.tool == f"search_{table.name}"]
        assert searched and all(table.label not in c.args for c in searched)

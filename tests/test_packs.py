"""Pack validation (issue 11, item 1): every cross-reference of a domain pack is checked on load, each
error names the file and the field path; `worldfactory check-pack` and `worldfactory pack-schema`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import PYTHON, ROOT
from worldfactory.packs import check_files, pack_schema
from worldfactory.template_files import SAFE_LOADER
from worldfactory.templates import TemplateError, load_templates

PACK = "domains/insurance-claims.yaml"
CLAIMS = "tables[2:claims]"
APPROVE = f"{CLAIMS}.workflow.transitions[3:approve_claim]"
PAY = f"{CLAIMS}.workflow.transitions[5:pay_claim]"

# (case, text in the pack, its broken replacement, the field path the error names, words of the message)
BROKEN = [
    ("status not in the enum",
     "from: [approved]\n          to: paid", "from: [aproved]\n          to: paid",
     f"{PAY}.from[0]", "status 'aproved' is not in the enum of claims.status"),
    ("otherwise names a missing transition",
     "otherwise: escalate_claim", "otherwise: escalate_the_claim",
     f"{APPROVE}.otherwise", "no transition 'escalate_the_claim' in the workflow of 'claims'"),
    ("guard names an unknown rule",
     "op: \"<=\", rule: adjuster_approval_limit", "op: \"<=\", rule: adjuster_limit",
     f"{APPROVE}.guards[1].rule", "unknown rule 'adjuster_limit'"),
    ("guard names an unknown column",
     'field: param.approved_amount, op: "<=", value: row.amount_claimed',
     'field: row.amount_claimd, op: "<=", value: row.amount_claimed',
     f"{APPROVE}.guards[0].field", "table 'claims' has no column 'amount_claimd'"),
    ("unknown $param",
     "set: {denial_reason: $reason}", "set: {denial_reason: $reasons}",
     f"{CLAIMS}.workflow.transitions[4:deny_claim].set.denial_reason", "unknown reference '$reasons'"),
    ("effect on a missing table",
     "create: claim_payments", "create: claim_payment",
     f"{PAY}.effects[0].create", "effect table 'claim_payment' is not a table"),
    ("effect missing a required column",
     "values: {claim_id: $id, amount: row.approved_amount, paid_on: $today, method: $method}",
     "values: {claim_id: $id, amount: row.approved_amount, method: $method}",
     f"{PAY}.effects[0].values", "missing required column(s) of 'claim_payments': paid_on"),
    ("column named like a Python built-in",
     "      - {name: date_of_birth, type: date, date_meaning: event, gen: {days_ago: [29000, 6600]}}",
     "      - {name: date_of_birth, type: date, date_meaning: event, gen: {days_ago: [29000, 6600]}}\n"
     "      - {name: type, gen: word}",
     "tables[0:policyholders].columns[5:type].name", "'type' is a Python name the generated tools cannot take"),
    ("notify leads through a column that is not a ref",
     "notify: policy_id.policyholder_id", "notify: policy_id.line",
     f"{CLAIMS}.notify", "column 'line' of 'insurance_policies' is not a ref"),
    ("$code on a column without a code generator",
     "paid_on: $today, method: $method}", "paid_on: $code, method: $method}",
     f"{PAY}.effects[0].values.paid_on", "'paid_on' has no code generator"),
    ("guard arithmetic outside the language",
     'field: param.approved_amount, op: "<=", value: row.amount_claimed',
     'field: "param.approved_amount ** 2", op: "<=", value: row.amount_claimed',
     f"{APPROVE}.guards[0]", "is not one of + - * /"),
    ("per_parent link to a missing column",
     "per_parent: {table: claims, column: claim_id, where: {status: [paid, closed]}",
     "per_parent: {table: claims, column: claims_id, where: {status: [paid, closed]}",
     "tables[5:claim_payments].per_parent.column", "no column 'claims_id' in table 'claim_payments'"),
    ("per_parent on a missing table",
     "per_parent: {table: claims, column: claim_id, where: {status: [fraud_review]}",
     "per_parent: {table: claim, column: claim_id, where: {status: [fraud_review]}",
     "tables[3:fraud_reviews].per_parent.table", "per_parent table 'claim' is not a table"),
    ("ref to a missing table",
     "{name: vendor_id, type: integer, ref: repair_vendors}", "{name: vendor_id, type: integer, ref: vendors}",
     "tables[7:vendor_assignments].columns[1:vendor_id].ref", "ref 'vendors' is not a table"),
    ("unknown gen kind",
     "gen: {money: [400, 30000]}", "gen: {cash: [400, 30000]}",
     f"{CLAIMS}.columns[5:amount_claimed].gen", "unknown generator {'cash': [400, 30000]}"),
    ("gen with wrong arguments",
     "gen: {money: [400, 30000]}", "gen: {money: [400]}",
     f"{CLAIMS}.columns[5:amount_claimed].gen.money", "expected a pair [low, high], got [400]"),
    ("gen with a reversed range",
     "gen: {money: [400, 30000]}", "gen: {money: [30000, 400]}",
     f"{CLAIMS}.columns[5:amount_claimed].gen", "the first bound must not be above the second"),
    ("unknown generator name",
     "{name: phone, gen: phone}", "{name: phone, gen: telephone}",
     "tables[0:policyholders].columns[2:phone].gen", "Input should be 'person_name'"),
    ("gen from a parent column that does not exist",
     "gen: {date_after: parent.filed_on, days: [1, 20]}", "gen: {date_after: parent.filed, days: [1, 20]}",
     "tables[3:fraud_reviews].columns[2:opened_on].gen.date_after", "parent table 'claims' has no column 'filed'"),
    ("guard on an unknown parameter",
     'field: param.approved_amount, op: "<=", rule:', 'field: param.amount, op: "<=", rule:',
     f"{APPROVE}.guards[1].field", "transition 'approve_claim' has no parameter 'amount'"),
    ("row. reference to a missing column in an effect",
     "amount: row.approved_amount, paid_on", "amount: row.approved, paid_on",
     f"{PAY}.effects[0].values.amount", "table 'claims' has no column 'approved'"),
    ("invariant SQL that does not compile",
     'sql: "SELECT count(*) FROM claims WHERE approved_amount > amount_claimed"',
     'sql: "SELECT count(*) FROM claim WHERE approved_amount > amount_claimed"',
     "invariants[1].sql", "no such table: claim"),
    ("choice of a word for a money column",
     "gen: {choice: [25000, 50000, 100000, 250000]}", "gen: {choice: [25000, lots]}",
     "tables[1:insurance_policies].columns[4:coverage_limit].gen.choice", "'lots' is not a number (money column)"),
    ("generated table without rows",
     "label: name\n    rows: 30\n", "label: name\n    rows: 0\n",
     "tables[6:repair_vendors].rows", "a generated table needs at least one row"),
    ("a rule a guard keeps but the seed may break (issue 31)",
     "      - {limit: approved_amount, rule: adjuster_approval_limit, when: {status: [approved, paid, closed]}}\n", "",
     f"{APPROVE}.guards[1].rule", "declare {limit: approved_amount, rule: adjuster_approval_limit"),
    ("transition to a status not in the enum",
     "from: [paid, denied]\n          to: closed", "from: [paid, denied]\n          to: archived",
     f"{CLAIMS}.workflow.transitions[6:close_claim].to", "status 'archived' is not in the enum"),
]


def _templates(tmp_path: Path) -> Path:
    dest = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", dest)
    return dest


def _break(root: Path, old: str, new: str, rel: str = PACK) -> Path:
    path = root / rel
    text = path.read_text()
    assert text.count(old) == 1, f"the pack no longer holds {old!r} exactly once"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(("case", "old", "new", "loc", "words"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_pack_names_file_and_field(tmp_path: Path, case: str, old: str, new: str, loc: str,
                                          words: str) -> None:
    root = _templates(tmp_path)
    path = _break(root, old, new)
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    lines = str(err.value).splitlines()
    hit = [line for line in lines if line.startswith(f"{path}: field '{loc}': ")]
    assert hit, f"{case}: no line for {path}: field '{loc}' in\n{err.value}"
    assert words in hit[0], hit[0]
    # check-pack reports the same line, without loading or building anything else
    assert hit[0] in check_files([path])


def test_module_and_company_type_references(tmp_path: Path) -> None:
    root = _templates(tmp_path)
    module = _break(root, 'op: "<=", rule: invoice_void_limit', 'op: "<=", rule: void_limit', "modules/billing.yaml")
    ctype = root / "company_types" / "startup.yaml"
    data = yaml.safe_load(ctype.read_text())
    data["rule_factors"] = {"no_such_rule": 2.0}
    ctype.write_text(yaml.safe_dump(data))
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    text = str(err.value)
    assert f"{module}: field 'tables[0:invoices].workflow.transitions[" in text
    assert ".guards[0].rule': unknown rule 'void_limit'" in text
    assert f"{ctype}: field 'rule_factors.no_such_rule': no rule 'no_such_rule'" in text


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    root = _templates(tmp_path)
    _break(root, "otherwise: escalate_claim", "otherwise: nothing")
    _break(root, "create: claim_payments", "create: nothing")
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    assert ".otherwise'" in str(err.value) and ".effects[0].create'" in str(err.value)


def test_unreadable_files_are_template_errors(tmp_path: Path) -> None:
    root = _templates(tmp_path)
    (root / PACK).write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(TemplateError, match="insurance-claims.yaml: not UTF-8"):
        load_templates(root)
    assert check_files([root / PACK])[0].startswith(f"{root / PACK}: not UTF-8")
    assert "file not found" in check_files([root / "domains" / "missing.yaml"])[0]


def test_shipped_packs_check_clean() -> None:
    files = sorted((ROOT / "world_templates").glob("*/*.yaml"))
    assert len(files) >= 16
    assert check_files(files) == []


def _wf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_check_pack(tmp_path: Path) -> None:
    good = _wf("check-pack", str(ROOT / "world_templates" / PACK), str(ROOT / "world_templates/modules/crm.yaml"))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ok: 2 file(s) valid" in good.stdout
    root = _templates(tmp_path)
    path = _break(root, "otherwise: escalate_claim", "otherwise: escalate_the_claim")
    bad = _wf("check-pack", str(path))
    assert bad.returncode == 2
    assert f"{path}: field '{APPROVE}.otherwise': no transition 'escalate_the_claim'" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
    # a loose copy, outside any templates folder, is checked against the project's modules
    loose = tmp_path / "my-pack.yaml"
    shutil.copy(path, loose)
    bad = _wf("check-pack", str(loose))
    assert bad.returncode == 2 and f"{loose}: field '{APPROVE}.otherwise'" in bad.stdout
    junk = tmp_path / "junk.yaml"
    junk.write_text("tables: [1, 2\n")
    bad = _wf("check-pack", str(junk))
    assert bad.returncode == 2 and f"{junk}: not valid YAML" in bad.stdout and "Traceback" not in bad.stderr


def test_pack_schema_validates_the_shipped_packs() -> None:
    r = _wf("pack-schema")
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema == json.loads(json.dumps(pack_schema()))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = sorted((ROOT / "world_templates").glob("*/*.yaml"))
    # each file parsed once, with libyaml's safe loader as the engine reads templates (SAFE_LOADER)
    data = {path: yaml.load(path.read_text(), Loader=SAFE_LOADER) for path in files}
    for path in files:
        errors = [e.message for e in validator.iter_errors(data[path])]
        assert errors == [], f"{path}: {errors[:3]}"
    for kind, folder in (("domain", "domains"), ("module", "modules"), ("company-type", "company_types")):
        one = jsonschema.Draft202012Validator(pack_schema(kind))
        for path in (ROOT / "world_templates" / folder).glob("*.yaml"):
            assert list(one.iter_errors(data[path])) == [], path
    # the typed gen reaches editors too: an unknown kind and wrong arguments fail the schema
    pack = data[ROOT / "world_templates" / PACK]
    col = pack["tables"][2]["columns"][5]
    assert col["name"] == "amount_claimed"
    for bad in ({"cash": [400, 30000]}, {"money": [400]}, "telephone"):
        col["gen"] = bad
        assert not validator.is_valid(pack), bad


def test_gen_is_kept_as_written() -> None:
    """The typed gen checks a generator and keeps the value as the file wrote it: the engine reads the same
    dicts and strings as before, so worlds keep their bytes."""
    from worldfactory.spec import ColumnDef

    gen = {"date_after": "parent.filed_on", "days": [1, 20]}
    col = ColumnDef(name="opened_on", type="date", gen=gen)
    assert col.gen == gen and type(col.gen) is dict
    assert col.model_dump()["gen"] == gen
    assert ColumnDef(name="city", gen="city").gen == "city"
    assert ColumnDef.model_validate(col.model_dump()).gen == gen

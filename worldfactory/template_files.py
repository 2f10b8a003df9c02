"""Reading one template file: YAML to a validated model, a bad file raising TemplateError that names the file
and the field. Below templates.py and packs.py, so loading a templates folder (which checks the packs) and
`check-pack` on a loose file (packs.py check_files) share the reader without importing each other."""

from __future__ import annotations

import contextlib
import marshal
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from worldfactory.spec import CONSTRAINT_KINDS, GEN_KINDS, NAMED_GENERATORS

DEFAULT_TEMPLATES = Path(__file__).resolve().parent.parent / "world_templates"

M = TypeVar("M", bound=BaseModel)
GEN_TAGS = {"named", *GEN_KINDS}



class TemplateError(ValueError):
    """A template file is missing, unreadable or invalid; the message names file and field."""


# libyaml's safe loader when PyYAML has it: the same documents, a sixth of the time (45 template files:
# 2.4 s in pure Python, 0.4 s), paid by every process that loads the templates.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Parsed documents by their text, kept marshalled (a fresh copy for every reader, which may change it): a
# process that loads many copies of the same templates (the tests: a folder copied, one file broken) parses
# each text once. Building Python objects is most of a load (0.5 of 0.75 s for 44 files), unmarshalling a
# fortieth of that. Documents marshal cannot hold (a YAML date) are parsed each time.
_PARSED: dict[str, bytes] = {}
_PARSED_MAX = 256


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        if (kept := _PARSED.get(text)) is not None:
            return marshal.loads(kept)
        data = yaml.load(text, Loader=SAFE_LOADER)
        with contextlib.suppress(ValueError):  # an object marshal does not know
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[text] = marshal.dumps(data)
        return data
    except FileNotFoundError as exc:
        raise TemplateError(f"{path}: file not found") from exc
    except UnicodeDecodeError as exc:
        raise TemplateError(f"{path}: not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise TemplateError(f"{path}: not valid YAML: {exc}") from exc


def _format_errors(path: Path, exc: ValidationError, data: Any) -> str:
    lines = []
    for err in exc.errors():
        raw_loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing" and raw_loc and isinstance(raw_loc[-1], int):
            raw_loc = raw_loc[:-1]  # a pair given with one value: name the pair, not its missing item
            msg = f"expected a pair [low, high], got {err['input']!r}"
        loc = _readable_loc(raw_loc, data)
        if err["type"] in ("union_tag_invalid", "union_tag_not_found") and "constraints" in raw_loc:
            msg = (f"unknown constraint {err['input']!r}: use a mapping whose first key is its kind, one of "
                   f"{', '.join(repr(k) for k in CONSTRAINT_KINDS)}")
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            msg = (f"unknown generator {err['input']!r}: use a generator name "
                   f"({', '.join(NAMED_GENERATORS)}) or a mapping whose first key is one of "
                   f"{', '.join(GEN_KINDS)}")
        lines.append(f"{path}: field '{loc}': {msg}")
    return "\n".join(lines)


def _readable_loc(loc: tuple[Any, ...], data: Any) -> str:
    """Turn ('tables', 2, 'columns', 0, 'type') into tables[2:claims].columns[0:status].type."""
    parts: list[str] = []
    node = data
    after_gen = False
    for item in loc:
        if after_gen and item in GEN_TAGS:
            after_gen = False
            continue  # the union's tag, not a key of the file
        after_gen = item == "gen"
        if isinstance(item, int):
            name = ""
            if isinstance(node, list) and 0 <= item < len(node):
                node = node[item]
                if isinstance(node, dict) and "name" in node:
                    name = f":{node['name']}"
            else:
                node = None
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}{name}]"]
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def load_model(path: Path, model: type[M]) -> M:
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise TemplateError(f"{path}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TemplateError(_format_errors(path, exc, data)) from exc


def _load_dir(folder: Path, model: type[M]) -> dict[str, M]:
    out: dict[str, M] = {}
    for path in sorted(folder.glob("*.yaml")):
        item = load_model(path, model)
        name = item.name  # type: ignore[attr-defined]
        if name != path.stem:
            raise TemplateError(f"{path}: field 'name': '{name}' must match the file name '{path.stem}'")
        out[name] = item
    return out

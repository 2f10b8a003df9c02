"""The draft step: a free-text brief's pack, drafted by a model and proven with the pipeline, then recorded.

It runs before the build, never inside it: `worldfactory draft BRIEF` (or `worldfactory build`, which
runs it first when a text brief has no recorded draft), the `pack_draft` Dagster asset upstream of
world_brief, or `draft_brief` here. It records the outcome in the drafts folder (worldfactory.drafts:
keyed by the brief's bytes and the model), proven or not, with what the conversation cost and the
corrections per stage; world_brief reads it from there. A proven draft already recorded is reused
without asking anything; a failed one is drafted again (from the reply cache, at no cost, up to where
it stopped). Errors are DraftError (this layer's own): no model named, nothing cached offline, a
server that keeps failing.
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from worldfactory.briefs import brief_path, load_text_brief
from worldfactory.drafting.client import NotCached
from worldfactory.drafting.config import ENV_BASE_URL, ENV_MODEL, LLMConfig, config_from_env
from worldfactory.drafting.errors import DraftError
from worldfactory.drafting.loop import Spend, draft_until_proven
from worldfactory.drafts import Draft, draft_folder, drafts_dir, read_draft, text_brief_file, write_draft
from worldfactory.seeds import BRIEF_PREFIX
from worldfactory.templates import TemplateSet


@dataclass
class DraftResult:
    brief_file: Path
    draft: Draft  # what is recorded now (proven or failed)
    reused: bool  # a proven draft was already recorded: no conversation, nothing spent
    spend: Spend = field(default_factory=Spend)  # what this call paid the model (0 when every reply was cached)

    @property
    def proven(self) -> bool:
        return self.draft.proven


def brief_file_of(name: str, briefs_dir: Path) -> Path:
    """A free-text brief named by its world ID (`brief.<slug>--v001`), its slug, or its file's path."""
    path = Path(name)
    if path.suffix == ".md" and path.is_file():
        return path
    if name.startswith(f"{BRIEF_PREFIX}."):
        found = text_brief_file(name, briefs_dir)
    else:
        candidate = brief_path(briefs_dir, name)
        found = candidate if candidate.suffix == ".md" and candidate.is_file() else None
    if found is None:
        raise DraftError(f"'{name}' names no free-text brief: give a world ID brief.<slug>--v001, a slug or a path "
                         f"of a .md brief in {briefs_dir} (a YAML brief or a catalog world has no draft)")
    return found


@contextmanager
def _locked(brief_file: Path, model: str) -> Iterator[None]:
    """One draft of a brief by a model at a time (two variants built side by side ask once)."""
    folder = drafts_dir(brief_file.parent)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{draft_folder(brief_file, model).name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def draft_brief(brief_file: Path, templates: TemplateSet, force: bool = False,
                cfg: LLMConfig | None = None) -> DraftResult:
    """Draft a text brief's pack (or reuse its proven draft), prove it with the pipeline, and record it.

    The proof builds the brief's first world (`brief.<slug>--v001`) with every stage in a scratch
    folder under `<data root>/build`. Raises DraftError when no reply can be had."""
    data_root = brief_file.parent.parent
    cfg = cfg or config_from_env(data_root)
    if not cfg.model:
        raise DraftError(f"{brief_file.name} is a free-text brief: name the model that drafts its domain pack "
                         f"(--model or {ENV_MODEL}) and its server (--base-url or {ENV_BASE_URL})")
    with _locked(brief_file, cfg.model):
        recorded = read_draft(brief_file, cfg.model)
        if recorded is not None and recorded.proven and not force:
            return DraftResult(brief_file=brief_file, draft=recorded, reused=True)
        brief = load_text_brief(brief_file, templates)
        world_id = f"{BRIEF_PREFIX}.{brief_file.stem}--v001"
        spend = Spend()
        try:
            outcome = draft_until_proven(world_id, brief_file, brief, templates, cfg, data_root / "build", spend)
        except NotCached as exc:
            raise DraftError(f"{brief_file}: {exc}") from exc
        record = outcome.record
        record.brief_sha256 = hashlib.sha256(brief_file.read_bytes()).hexdigest()
        draft = write_draft(brief_file, record, outcome.pack)
        return DraftResult(brief_file=brief_file, draft=draft, reused=False, spend=spend)


def draft_needed(world_id: str, briefs_dir: Path, model: str) -> Path | None:
    """A world's text brief when it has no proven draft by this model recorded; None otherwise (a catalog world,
    a YAML brief, or a text brief already drafted)."""
    path = text_brief_file(world_id, briefs_dir)
    if path is None:
        return None
    recorded = read_draft(path, model) if model else None
    return None if recorded is not None and recorded.proven else path

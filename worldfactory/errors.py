"""The errors a user can cause (bad ID, bad template, missing world): the CLI prints them plainly."""

from __future__ import annotations

from worldfactory.catalog import CatalogError
from worldfactory.confine import ConfinementError
from worldfactory.drafting.errors import DraftError
from worldfactory.generate.data import SeedDataError
from worldfactory.generate.schema import SchemaError
from worldfactory.generate.verifiers import VerifierError
from worldfactory.rollouts import RolloutError
from worldfactory.runtime.trace import TraceError
from worldfactory.runtime.world import WorldError
from worldfactory.sandbox import SandboxError
from worldfactory.seeds import SeedError
from worldfactory.stages.core import StageError
from worldfactory.templates import TemplateError

USER_ERRORS: tuple[type[Exception], ...] = (
    TemplateError, SeedError, WorldError, SchemaError, SeedDataError, SandboxError, VerifierError,
    StageError, CatalogError, TraceError, RolloutError, ConfinementError, DraftError,
)

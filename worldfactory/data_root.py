"""Where built worlds live: the data root, and a world reference (bundle path or world ID) resolved against it.

One place for the rule, so `worldfactory show WORLD`, every other command and `World.open("WORLD_ID")` in
Python find the same bundle: the folder itself if WORLD is one, else DATA/worlds/WORLD, where DATA is
--data, else $WORLDFACTORY_DATA, else data/ under the working directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV_DATA = "WORLDFACTORY_DATA"
DEFAULT_DATA = "data"
SEED_TYPE_RE = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+(?<!--v\d{3})$")  # a seed type: DOMAIN.COMPANY_TYPE, without --vNNN


def data_root(explicit: str | Path | None = None) -> Path:
    """Absolute: a build's confined stages and worker processes do not share this process's working directory."""
    return (Path(explicit) if explicit else Path(os.environ.get(ENV_DATA) or DEFAULT_DATA)).absolute()


class WorldError(ValueError):
    """A bundle is missing, incomplete or not a world (raised here for a WORLD that names none, and by
    runtime/world.py for a bundle that does not load)."""


def resolve_world(ref: str | Path, root: str | Path | None = None) -> Path:
    """WORLD is a bundle folder or a world ID under DATA/worlds/; a clear error names what to build if neither."""
    path = Path(ref)
    if path.is_dir():
        return path
    worlds = data_root(root) / "worlds"
    if (worlds / str(ref)).is_dir():
        return worlds / str(ref)
    if SEED_TYPE_RE.match(str(ref)):  # a seed type names many worlds: point at its first one
        wid = f"{ref}--v001"
        hint = (f"'{ref}' is a seed type, not a world ID; its first world is {wid}, "
                + (f"built: name it by that ID (`worldfactory show {wid}`)" if (worlds / wid).is_dir() else
                   f"not built yet: `worldfactory build {wid}`"))
        raise WorldError(f"no world '{ref}' under {worlds}: {hint}")
    raise WorldError(f"no world '{ref}': not a folder, and not built under {worlds}; "
                     f"build it with `worldfactory build {ref}`")

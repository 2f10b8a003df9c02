"""The wheelhouse the runtime image installs from: every pinned dependency as a wheel, fetched on the host.

`pip install` inside an image build cannot use the host's pip configuration, caches or local package
mirrors, so it downloaded and resolved everything on every fresh engine (the whole first runtime build
took 181 s here that way, 83 s this way). The host's pip fetches the same pins as wheels instead, once
per set of pins (a folder under WORLDFACTORY_WHEEL_CACHE, default ~/.cache/worldfactory/wheels, named
by the pins' sha256), and the image installs them with `--no-index`: no network, no resolver round
trips, and no CA bundle in the build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from worldfactory.images.engine import ImageError

WHEEL_CACHE = Path(os.environ.get("WORLDFACTORY_WHEEL_CACHE", "") or
                   Path(os.environ.get("HOME", "/root")) / ".cache" / "worldfactory" / "wheels")


def lock_key(requirements: list[str], constraints: list[str]) -> str:
    """What names a wheelhouse: the requirements and their pins (the wheels follow from them)."""
    text = "\n".join(["# requirements", *requirements, "# constraints", *constraints])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wheelhouse(requirements: list[str], constraints: list[str], cache: Path = WHEEL_CACHE) -> Path:
    """A folder holding a wheel for every package `requirements` resolve to under `constraints`.

    Made by the host's pip (its indexes, find-links and cache), into a temporary folder renamed into
    place on success, so an interrupted fetch is never taken for a complete one.
    """
    folder = cache / lock_key(requirements, constraints)
    if folder.is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=cache))
    try:
        (work / "requirements.txt").write_text("\n".join(requirements) + "\n")
        (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                               "--wheel-dir", str(work / "wheels"), "-r", str(work / "requirements.txt"),
                               "-c", str(work / "constraints.txt")], capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise ImageError(f"fetching the runtime image's wheels with the host's pip failed:\n{tail}")
        try:
            (work / "wheels").rename(folder)
        except OSError:
            if not folder.is_dir():  # not another process's finished wheelhouse: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def wheel_files(folder: Path) -> dict[str, bytes]:
    """The wheels of a wheelhouse, by file name."""
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.whl"))}

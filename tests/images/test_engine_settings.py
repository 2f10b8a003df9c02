"""containers/engine.sh installs podman's settings as a drop-in, and leaves one it did not write alone.

Run on the prepared engine (`make images` first): every other step finds its result there and is skipped.
The drop-in's path is moved into tmp_path (WORLDFACTORY_CONTAINERS_DROP_IN), so /etc is not touched here.
"""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

from tests.conftest import ROOT

ENGINE = ROOT / "containers" / "engine.sh"


def _engine(drop_in: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    return subprocess.run([str(ENGINE)], env={**env, "WORLDFACTORY_CONTAINERS_DROP_IN": str(drop_in)},
                          capture_output=True, text=True, timeout=120)


def test_the_settings_are_installed_as_a_drop_in(tmp_path: Path) -> None:
    drop_in = tmp_path / "containers.conf.d" / "50-worldfactory.conf"
    done = _engine(drop_in)
    assert done.returncode == 0, done.stderr
    assert drop_in.read_bytes() == (ROOT / ".engine" / "containers.conf").read_bytes()
    text = drop_in.read_text()
    assert text.startswith("# Written by containers/engine.sh") and 'runtime = "runc"' in text
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert f"nofile={hard if hard != resource.RLIM_INFINITY else 1048576}:" in text  # within this host's limit
    assert "installed the settings as" in done.stdout
    assert "installed the settings as" not in _engine(drop_in).stdout  # unchanged: not rewritten


def test_a_drop_in_the_script_did_not_write_is_left_alone(tmp_path: Path) -> None:
    drop_in = tmp_path / "50-worldfactory.conf"
    mine = b'[engine]\nruntime = "crun"\n'
    drop_in.write_bytes(mine)
    done = _engine(drop_in)
    assert done.returncode == 0, done.stderr
    assert drop_in.read_bytes() == mine and f"left {drop_in} alone" in done.stdout

"""End to end: `worldfactory ui` (a real webserver and daemon on loopback) runs a backfill of three worlds
launched over GraphQL, then stops on SIGTERM and leaves nothing behind. (SIGINT, the other signal `ui`
forwards, is tests/test_cli_polish.py's: each start of the UI costs about 25 CPU seconds, so this test
covers SIGTERM rather than start a third UI for it.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import PYTHON, SMALL, small_templates_at
from tests.test_cli_polish import STABILITY, _processes_with
from worldfactory.run_size import WORLDS_PER_RUN
from worldfactory.stages import STAGES
from worldfactory_dagster.pipelines.partitions import RANGE_END, RANGE_START

WORLDS = [*SMALL, SMALL[0].replace("--v001", "--v002")]
# The stage assets' backfill policy runs ranges of up to WORLDS_PER_RUN worlds (pipelines/partitions.py):
# the three worlds, registered in this order, are one run over the range WORLDS[0]..WORLDS[-1].
assert len(WORLDS) <= WORLDS_PER_RUN
REPO = {"repositoryLocationName": "worldfactory", "repositoryName": "__repository__"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out = json.loads(resp.read())
    assert "errors" not in out, out["errors"]
    return out["data"]


def wait_until_up(port: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dagster dev exited early"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                pass
            data = graphql(port, "{ repositoriesOrError { ... on RepositoryConnection { nodes { name } } } }")
            if data["repositoriesOrError"].get("nodes"):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, AssertionError):
            pass
        time.sleep(1)
    raise AssertionError("the Dagster webserver did not come up in time")


def test_backfill_of_three_worlds_through_graphql(tmp_path: Path) -> None:
    home, data, templates = tmp_path / "home", tmp_path / "data", tmp_path / "templates"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # `ui` adds the rest it needs
    small_templates_at(templates)  # the pipeline's mechanics, on worlds that build in seconds
    (templates / "registry.yaml").write_text("seed_types: []\nvariants: 0\n")  # the sensor adds nothing here
    port = free_port()
    env = dict(os.environ, DAGSTER_HOME=str(home), WORLDFACTORY_DATA=str(data),
               WORLDFACTORY_TEMPLATES=str(templates))
    log = (tmp_path / "dagster-dev.log").open("w")
    # The wrapper leads a session of its own (so that a failed test can kill everything it started);
    # `ui` puts `dagster dev` in a process group of its own below it, which the SIGTERM must reach.
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "ui", "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_up(port, proc, time.monotonic() + 180)
        for wid in WORLDS:
            added = graphql(port, """
                mutation($repo: RepositorySelector!, $key: String!) {
                  addDynamicPartition(repositorySelector: $repo, partitionsDefName: "world", partitionKey: $key) {
                    __typename ... on PythonError { message } } }""", {"repo": REPO, "key": wid})
            assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added
        launched = graphql(port, """
            mutation($params: LaunchBackfillParams!) {
              launchPartitionBackfill(backfillParams: $params) {
                __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
            {"params": {"partitionNames": WORLDS, "assetSelection": [{"path": [s.name]} for s in STAGES]}})
        result = launched["launchPartitionBackfill"]
        assert result["__typename"] == "LaunchBackfillSuccess", result
        backfill_id = result["backfillId"]
        # Every run the backfill launched has succeeded. The backfill's own status turns COMPLETED_SUCCESS
        # one daemon tick (30 s, fixed in Dagster) after its last run: its runs are what it did.
        runs: list[str] = []
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            polled = graphql(port, """
                query($id: String!) { partitionBackfillOrError(backfillId: $id) {
                  ... on PartitionBackfill { status runs { runId status tags { key value } } } } }""",
                {"id": backfill_id})["partitionBackfillOrError"]
            assert polled["status"] in ("REQUESTED", "IN_PROGRESS", "COMPLETED_SUCCESS"), polled["status"]
            runs = [r["status"] for r in polled["runs"]]
            assert not {"FAILURE", "CANCELED", "CANCELING"} & set(runs), (
                polled, (tmp_path / "dagster-dev.log").read_text()[-4000:])
            if runs and set(runs) == {"SUCCESS"}:
                break
            time.sleep(1)
        assert runs == ["SUCCESS"], (runs, (tmp_path / "dagster-dev.log").read_text()[-4000:])
        [tags] = [{t["key"]: t["value"] for t in r["tags"]} for r in polled["runs"]]
        assert (tags[RANGE_START], tags[RANGE_END]) == (WORLDS[0], WORLDS[-1])  # one run over the range
        node = graphql(port, """
            { assetNodeOrError(assetKey: {path: ["world_bundle"]}) { ... on AssetNode {
                assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions } } } } }""")
        done = node["assetNodeOrError"]["assetPartitionStatuses"]["materializedPartitions"]
        assert sorted(done) == sorted(WORLDS)
        for wid in WORLDS:
            assert (data / "worlds" / wid / "world.json").is_file()
        proc.send_signal(signal.SIGTERM)  # to `worldfactory ui` alone, as a service manager would send it
        assert proc.wait(timeout=60) is not None
        assert not dagster_processes(home), "`worldfactory ui` left Dagster processes behind after SIGTERM"
        assert not STABILITY.search((tmp_path / "dagster-dev.log").read_text())
    finally:
        for pid in dagster_processes(home):  # a failed test leaves nothing running either
            os.kill(pid, signal.SIGKILL)
        stop_group(proc)
        log.close()
    assert proc.poll() is not None
    assert live_members(proc.pid) == []  # nothing we started is still running


def dagster_processes(home: Path) -> list[int]:
    """Live processes of this test's Dagster instance: whatever `ui` starts inherits its DAGSTER_HOME,
    whichever process group it is in."""
    return _processes_with(f"DAGSTER_HOME={home}")


def live_members(pgid: int) -> list[int]:
    """Processes of the group that still run (zombies waiting for a reaper do not count)."""
    found = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
    alive = []
    for pid in found:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive.append(int(pid))
    return alive


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the webserver's whole process group (webserver, daemon, code servers), then SIGKILL stragglers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group has already gone (the test stopped it)
        return
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not live_members(proc.pid):
            return
        time.sleep(0.5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=30)
    time.sleep(1)

#!/usr/bin/env bash
# Starts the scale-out deployment on this machine, idempotently:
#   1. a container engine: DOCKER_HOST if it answers, else podman prepared by containers/engine.sh;
#   2. the PostgreSQL database of the Dagster instance (created if missing);
#   3. the code image: the project's runtime image (`worldfactory image --runtime`), built if missing;
#   4. the instance: deploy/dagster.yaml.in rendered into $DAGSTER_HOME/dagster.yaml, the `llm_api` pool limit;
#   5. the Dagster daemon (run queue, backfills, sensors, run monitoring), and with WORLDFACTORY_UI_PORT the
#      webserver on loopback.
# Then `.venv/bin/python deploy/backfill.py WORLD...` builds worlds, each run in its own container.
# `deploy/up.sh stop` stops the daemon and webserver this script started. Settings (environment):
#   DAGSTER_HOME               default .deploy/dagster_home in the project
#   DAGSTER_PG_URL             default postgresql+psycopg2://postgres@127.0.0.1:5432/worldfactory
#   WORLDFACTORY_DATA          default data/ in the project (mounted at the same path in run containers)
#   WORLDFACTORY_TEMPLATES     default: the project's world_templates/
#   WORLDFACTORY_MAX_RUNS      runs at once (default 4)
#   WORLDFACTORY_WORLD_BUILDS  world_build runs at once (default 2)
#   WORLDFACTORY_LLM_API       steps calling a model server at once, across all runs (default 4)
#   WORLDFACTORY_CODE_IMAGE    default: the runtime image of the project as it is now (built if missing)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BIN="$ROOT/.venv/bin"
export DAGSTER_HOME="$(realpath -m "${DAGSTER_HOME:-$ROOT/.deploy/dagster_home}")"
export WORLDFACTORY_DATA="$(realpath -m "${WORLDFACTORY_DATA:-$ROOT/data}")"
export WORLDFACTORY_TEMPLATES="${WORLDFACTORY_TEMPLATES:+$(realpath -m "$WORLDFACTORY_TEMPLATES")}"
export DAGSTER_PG_URL="${DAGSTER_PG_URL:-postgresql+psycopg2://postgres@127.0.0.1:5432/worldfactory}"
export WORLDFACTORY_MAX_RUNS="${WORLDFACTORY_MAX_RUNS:-4}"
export WORLDFACTORY_WORLD_BUILDS="${WORLDFACTORY_WORLD_BUILDS:-2}"
LLM_API="${WORLDFACTORY_LLM_API:-4}"
mkdir -p "$DAGSTER_HOME" "$WORLDFACTORY_DATA"

stop_pid() {
  if [ -f "$1" ] && kill "$(cat "$1")" 2>/dev/null; then echo "deploy: stopped pid $(cat "$1")"; fi
  rm -f "$1"
}
if [ "${1:-}" = "stop" ]; then
  stop_pid "$DAGSTER_HOME/daemon.pid"
  stop_pid "$DAGSTER_HOME/webserver.pid"
  exit 0
fi

# 1. engine
if [ -n "${DOCKER_HOST:-}" ] && curl -fsS --max-time 3 --unix-socket "${DOCKER_HOST#unix://}" http://d/_ping >/dev/null 2>&1; then
  echo "deploy: using the engine at $DOCKER_HOST"
else
  eval "$(containers/engine.sh | tee /dev/stderr | tail -n1)"
fi

# 2. database
db="${DAGSTER_PG_URL##*/}"
server="${DAGSTER_PG_URL%/*}/postgres"
server="${server/+psycopg2/}"  # psql takes the plain scheme
if ! psql "$server" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
  psql "$server" -qc "CREATE DATABASE \"$db\""
  echo "deploy: created database $db"
fi

# 3. code image
export WORLDFACTORY_CODE_IMAGE="${WORLDFACTORY_CODE_IMAGE:-$("$BIN/worldfactory" image --runtime)}"
echo "deploy: code image $WORLDFACTORY_CODE_IMAGE"

# 4. instance
export TEMPLATES_VOLUME=""
[ -n "$WORLDFACTORY_TEMPLATES" ] && TEMPLATES_VOLUME="- $WORLDFACTORY_TEMPLATES:$WORLDFACTORY_TEMPLATES:ro"
"$BIN/python" -c 'import os, string, sys; sys.stdout.write(string.Template(open(sys.argv[1]).read()).substitute(os.environ))' \
  deploy/dagster.yaml.in > "$DAGSTER_HOME/dagster.yaml"
"$BIN/dagster" instance concurrency set llm_api "$LLM_API" >/dev/null
cat > "$DAGSTER_HOME/env.sh" <<EOF
export DAGSTER_HOME='$DAGSTER_HOME' DAGSTER_PG_URL='$DAGSTER_PG_URL' DOCKER_HOST='$DOCKER_HOST'
export WORLDFACTORY_DATA='$WORLDFACTORY_DATA' WORLDFACTORY_TEMPLATES='$WORLDFACTORY_TEMPLATES'
export WORLDFACTORY_CODE_IMAGE='$WORLDFACTORY_CODE_IMAGE'
EOF

# 5. daemon (and webserver)
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if alive "$DAGSTER_HOME/daemon.pid"; then
  echo "deploy: the daemon runs (pid $(cat "$DAGSTER_HOME/daemon.pid"))"
else
  setsid "$BIN/dagster-daemon" run -w workspace.yaml >"$DAGSTER_HOME/daemon.log" 2>&1 </dev/null &
  echo $! > "$DAGSTER_HOME/daemon.pid"
  echo "deploy: started the daemon (pid $!, log $DAGSTER_HOME/daemon.log)"
fi
if [ -n "${WORLDFACTORY_UI_PORT:-}" ] && ! alive "$DAGSTER_HOME/webserver.pid"; then
  setsid "$BIN/dagster-webserver" -w workspace.yaml -h 127.0.0.1 -p "$WORLDFACTORY_UI_PORT" \
    >"$DAGSTER_HOME/webserver.log" 2>&1 </dev/null &
  echo $! > "$DAGSTER_HOME/webserver.pid"
  echo "deploy: started the webserver on http://127.0.0.1:$WORLDFACTORY_UI_PORT"
fi
echo "deploy: ready; source $DAGSTER_HOME/env.sh, then .venv/bin/python deploy/backfill.py WORLD..."

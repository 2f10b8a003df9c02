#!/usr/bin/env bash
# Prepares a container engine on a Debian machine, idempotently, and starts its Docker API socket.
#
# Each step is skipped when its result is already there, so a second run takes a second or two:
#   1. packages: podman, runc, debootstrap, curl (scripts/system-packages.sh images), unless there;
#   2. configuration: ENGINE_DIR/containers.conf (runc and cgroupfs: crun refuses hybrid cgroups;
#      ulimits no higher than this host's hard limits, which root cannot raise without CAP_SYS_RESOURCE),
#      also installed as the drop-in DROP_IN, which podman reads by default, so a plain `podman run` in
#      any shell works too (a drop-in overrides only these keys; /etc/containers/containers.conf is left
#      alone, and a DROP_IN this script did not write is never replaced);
#   3. the base image localhost/worldfactory-base:bookworm, made without a registry by debootstrap from
#      the Debian mirror the host's apt sources name, then kept as a tar in CACHE_DIR (`podman save`)
#      so a fresh engine loads it instead of bootstrapping again;
#   4. the Docker API: `podman system service` on ENGINE_DIR/podman.sock (its pid in podman.pid).
#
# Afterwards: export DOCKER_HOST=unix://ENGINE_DIR/podman.sock (the last line printed says so).
# Environment: WORLDFACTORY_ENGINE_DIR (default .engine/ in the project), WORLDFACTORY_IMAGE_CACHE
# (default ~/.cache/worldfactory/images). `engine.sh stop` stops the socket service this script started.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ENGINE_DIR="${WORLDFACTORY_ENGINE_DIR:-$ROOT/.engine}"
CACHE_DIR="${WORLDFACTORY_IMAGE_CACHE:-${HOME:-/root}/.cache/worldfactory/images}"
BASE="localhost/worldfactory-base:bookworm"
DROP_IN="${WORLDFACTORY_CONTAINERS_DROP_IN:-/etc/containers/containers.conf.d/50-worldfactory.conf}"
MARK="# Written by containers/engine.sh"
SOCK="$ENGINE_DIR/podman.sock"
export CONTAINERS_CONF="$ENGINE_DIR/containers.conf"

say() { echo "engine: $*"; }
ping_socket() { curl -fsS --max-time 3 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; }

if [ "${1:-}" = "stop" ]; then
  if [ -f "$ENGINE_DIR/podman.pid" ] && kill "$(cat "$ENGINE_DIR/podman.pid")" 2>/dev/null; then
    say "stopped the socket service (pid $(cat "$ENGINE_DIR/podman.pid"))"
  fi
  rm -f "$ENGINE_DIR/podman.pid"
  exit 0
fi

# 1. packages (declared in scripts/system-packages.sh): installed when missing and apt-get is usable;
#    otherwise it stops here, before any work, naming the packages and the command that installs them
"$ROOT/scripts/system-packages.sh" images
say "the packages it needs are installed"

# 2. configuration (rewritten every time: cheap, and follows the host's limits)
mkdir -p "$ENGINE_DIR" "$CACHE_DIR"
nofile="$(ulimit -Hn)"; [ "$nofile" = unlimited ] && nofile=1048576
nproc="$(ulimit -Hu)"; { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
cat > "$CONTAINERS_CONF.tmp" <<EOF
$MARK: podman settings this host needs.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"
if [ "$(id -u)" != 0 ]; then
  :  # rootless podman keeps the user's own limits and reads the user's own configuration: nothing to install
elif [ -e "$DROP_IN" ] && ! head -n1 "$DROP_IN" | grep -qF "$MARK"; then
  say "left $DROP_IN alone (not written by this script): a plain \`podman run\` needs its settings from $CONTAINERS_CONF"
elif ! cmp -s "$CONTAINERS_CONF" "$DROP_IN"; then
  mkdir -p "$(dirname "$DROP_IN")"
  cp "$CONTAINERS_CONF" "$DROP_IN.tmp" && mv "$DROP_IN.tmp" "$DROP_IN"
  say "installed the settings as $DROP_IN (podman reads it in every shell)"
fi

# 3. base image
if podman image exists "$BASE"; then
  say "base image $BASE is present"
elif [ -s "$CACHE_DIR/base-bookworm.tar" ]; then
  say "loading $BASE from $CACHE_DIR/base-bookworm.tar"
  podman load -q -i "$CACHE_DIR/base-bookworm.tar" >/dev/null
else
  mirror="$(grep -rhoE 'https?://[^ ]+/debian/?$|https?://[^ ]+/debian ' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
            | grep -v security | head -n1 | tr -d ' ' || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$(mktemp -d /var/tmp/worldfactory-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  say "bootstrapping Debian bookworm (minbase) from $mirror"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$ENGINE_DIR/debootstrap.log" 2>&1 \
    || { tail -n 20 "$ENGINE_DIR/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | podman import -q --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  podman save -q -o "$CACHE_DIR/base-bookworm.tar.tmp" "$BASE"
  mv "$CACHE_DIR/base-bookworm.tar.tmp" "$CACHE_DIR/base-bookworm.tar"
  say "saved $BASE to $CACHE_DIR/base-bookworm.tar"
fi

# 4. the Docker API socket
if ping_socket; then
  say "the Docker API answers on $SOCK"
else
  rm -f "$SOCK"
  setsid podman system service --time=0 "unix://$SOCK" >"$ENGINE_DIR/service.log" 2>&1 < /dev/null &
  echo $! > "$ENGINE_DIR/podman.pid"
  for _ in $(seq 1 50); do ping_socket && break; sleep 0.2; done
  ping_socket || { echo "engine: the socket service did not answer; see $ENGINE_DIR/service.log" >&2; exit 1; }
  say "started the Docker API on $SOCK (pid $(cat "$ENGINE_DIR/podman.pid"))"
fi
echo "export DOCKER_HOST=unix://$SOCK"

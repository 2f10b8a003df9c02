#!/usr/bin/env bash
# The README's first command on a fresh machine, proven: a clean clone in a container made from a bare
# Debian 12 root file system (debootstrap, no registry), holding only what the README asks a user to have
# (Debian's python3 (3.11), make, git) and reaching only the package registries. No bubblewrap, Graphviz,
# Chromium, venv or pip cache: `make demo` has to install all of it itself. Then `make test-fast`.
#
#   scripts/fresh-check.sh [REF]        REF: the commit to check (default HEAD)
#
# The container runs --privileged: bubblewrap creates user, mount and network namespaces inside it, which
# a default container's seccomp profile and capability set forbid (a cluster container that forbids them
# gets the Landlock boundary instead). The host's CA bundle is lent read-only for pip (PIP_CERT), as the
# images do, so that a TLS-intercepting proxy in front of the registries works.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REF="${1:-HEAD}"
BASE="localhost/worldfactory-base:bookworm"

"$ROOT/containers/engine.sh" >/dev/null  # podman, runc, debootstrap and the base image (idempotent)
export CONTAINERS_CONF="${WORLDFACTORY_ENGINE_DIR:-$ROOT/.engine}/containers.conf"

work="$(mktemp -d /var/tmp/worldfactory-fresh.XXXXXX)"
trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$ROOT" "$work/src"
git -C "$work/src" checkout -q "$(git -C "$ROOT" rev-parse "$REF")"
echo "fresh-check: $(git -C "$work/src" log -1 --format='%h %s' | cut -c1-100)"

cert=()
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  [ -s "$ca" ] && { cert=(-v "$ca:/run/host-ca.crt:ro" -e PIP_CERT=/run/host-ca.crt); break; }
done

started=$SECONDS
podman run --rm --privileged --network host "${cert[@]}" -v "$work/src:/src" -w /src \
  -e DEBIAN_FRONTEND=noninteractive "$BASE" bash -euo pipefail -c '
    echo "fresh-check: the user'"'"'s starting point: Debian'"'"'s python3, make, git"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 make git ca-certificates >/dev/null
    for c in bwrap dot chromium; do ! command -v $c >/dev/null || { echo "fresh-check: $c is already here"; exit 3; }; done
    t0=$SECONDS
    make demo
    echo "fresh-check: make demo took $((SECONDS - t0)) s"
    t0=$SECONDS
    make test-fast
    echo "fresh-check: make test-fast took $((SECONDS - t0)) s"'
echo "fresh-check: passed in $((SECONDS - started)) s (container start to finish)"

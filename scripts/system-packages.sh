#!/usr/bin/env bash
# The Debian packages each README command needs, declared once, and installed when missing.
#
#   scripts/system-packages.sh PURPOSE...    PURPOSE: venv build test images deploy
#
# For every command a purpose needs that is not on PATH, the script installs its package with apt-get
# when it can (root, or passwordless sudo). Otherwise it stops before any work, with one message that
# names the packages and the command to run. The one exception is bubblewrap: where it cannot be
# installed but the kernel offers Landlock, builds still run confined (Landlock, seccomp and rlimits,
# all unprivileged) and the script says so instead of stopping.
# WORLDFACTORY_NO_APT=1 never installs (it only reports), for machines whose packages someone else owns.
set -euo pipefail

PY="${PY:-python3.11}"

# purpose -> command:package pairs (the command tells whether the package is there)
needs() {
  case "$1" in
    venv)   echo "ensurepip:$(basename "$PY")-venv" ;;                    # Debian splits venv's pip out of Python
    build)  echo "bwrap:bubblewrap dot:graphviz" ;;              # the OS sandbox; the world page's ER diagram
    test)   echo "bwrap:bubblewrap dot:graphviz chromium:chromium" ;;  # + the page tests' headless browser
    images) echo "podman:podman runc:runc debootstrap:debootstrap curl:curl" ;;
    deploy) echo "psql:postgresql-client" ;;                     # deploy/up.sh creates its database with psql
    *) echo "system-packages: unknown purpose '$1' (venv build test images deploy)" >&2; exit 2 ;;
  esac
}

present() {
  if [ "$1" = ensurepip ]; then
    "$PY" -c "import ensurepip, venv" >/dev/null 2>&1
  else
    command -v "$1" >/dev/null 2>&1
  fi
}

landlock() {  # the kernel's Landlock ABI version (0: none), asked through the syscall itself
  "$PY" - <<'PYEOF' 2>/dev/null || echo 0
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
print(max(0, libc.syscall(444, None, 0, 1)) if platform.machine() == "x86_64" else 0)
PYEOF
}

apt_cmd() {  # how this user can run apt-get, or nothing
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$(id -u)" = 0 ]; then echo "apt-get"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then echo "sudo -n apt-get"
  else return 1
  fi
}

missing=()
for purpose in "$@"; do
  for pair in $(needs "$purpose"); do
    cmd="${pair%%:*}" pkg="${pair#*:}"
    present "$cmd" && continue
    case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
  done
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "${WORLDFACTORY_NO_APT:-}" != 1 ] && apt="$(apt_cmd)"; then
  echo "installing Debian packages: ${missing[*]}"
  $apt update -qq
  DEBIAN_FRONTEND=noninteractive $apt install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi

# Not installable here: bubblewrap alone may be left out when Landlock can stand in for it.
rest=()
for pkg in "${missing[@]}"; do
  if [ "$pkg" = bubblewrap ] && [ "$(landlock)" -ge 1 ]; then
    echo "note: bubblewrap is not installed and cannot be installed here; generated code will run under" \
         "Landlock, seccomp and rlimits instead (install bubblewrap for the namespace sandbox)" >&2
  else
    rest+=("$pkg")
  fi
done
[ ${#rest[@]} -eq 0 ] && exit 0
echo "error: this needs the Debian packages: ${rest[*]}" >&2
echo "       install them, then run the same command again:  sudo apt-get install -y ${rest[*]}" >&2
exit 1

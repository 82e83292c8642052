#!/usr/bin/env bash
# The project's one entry point. Each job sets itself up first (venv, pinned packages, Java when
# Spark needs it), so a fresh machine needs nothing but Python 3.11 and this checkout.
#   bash run.sh demo   [args]   the main job: local Ray, NameServers, brokers, producers, a broker kill
#   bash run.sh test   [args]   the test suite (pytest args pass through)
#   bash run.sh bench  NAME     a benchmark from benchmarks/ (e.g. bench_core)
#   bash run.sh namesrv ARGS    the CLI inside the venv
set -euo pipefail
cd "$(dirname "$0")"
VENV="${NAMESRV_VENV:-.venv}"

log() { printf '[run.sh] %s\n' "$*" >&2; }

ensure_java() {
  if command -v java >/dev/null 2>&1; then return; fi
  log "java not found: installing OpenJDK 17 (Spark needs it)"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends openjdk-17-jre-headless
}

ensure_venv() {
  local py
  py="$(command -v python3.11 || command -v python3)"
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { log "Python 3.11 is required"; exit 1; }
  [ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$py" -m venv "$VENV"; }
  local stamp
  stamp="$VENV/.installed-$(cat pyproject.toml requirements.lock | sha1sum | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    log "installing pinned packages into $VENV (first run takes about a minute)"
    "$VENV/bin/pip" install -q --disable-pip-version-check -c requirements.lock -e '.[dev]'
    rm -f "$VENV"/.installed-*; touch "$stamp"
  fi
}

job="${1:-}"; shift || true
case "$job" in
  demo)    ensure_venv; exec "$VENV/bin/namesrv" demo "$@" ;;
  test)    ensure_java; ensure_venv; exec "$VENV/bin/python" -m pytest "$@" ;;
  bench)   ensure_java; ensure_venv; name="${1:?benchmark name}"; shift
           exec "$VENV/bin/python" "benchmarks/${name%.py}.py" "$@" ;;
  namesrv) ensure_java; ensure_venv; exec "$VENV/bin/namesrv" "$@" ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac

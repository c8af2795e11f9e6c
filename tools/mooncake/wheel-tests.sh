#!/usr/bin/env bash
# Runs Mooncake's own wheel tests against xfer, the way Mooncake's CI script
# (scripts/run_tests.sh) runs them, with only their `mooncake.` imports
# changed to `xfer.mooncake.`: the HTTP metadata server on 8080 (`xfer
# mooncake metadata-server`), a transfer-engine target and initiator given
# MC_METADATA_SERVER=http://127.0.0.1:8080/metadata, then the store's master
# (`xfer mooncake master --default_kv_lease_ttl=500`) and the store tests with
# DEFAULT_KV_LEASE_TTL=500.
#
# Mooncake's files are not part of this repository: point the script at a
# checkout of kvcache-ai/Mooncake (--src DIR) or at a git directory and a
# revision (--git-dir DIR [--rev REV], files read with git show).
#
#   tools/mooncake/wheel-tests.sh --git-dir /path/to/Mooncake.git [--rev HEAD] \
#       [--file-rev FILE=REV ...] [--python /venv/bin/python] [--xfer /path/to/xfer] \
#       [--only engine|store|tensor]
#
# --file-rev takes one test file from another revision (with --git-dir):
# docs/MOONCAKE.md says which files ran at which commit, and why.
#
# PROTOCOL (tcp by default; rdma in the VM) and DEVICE_NAME pass through to
# the tests, as in Mooncake's CI. The package under test is the one the
# given python imports (make python installs it into a venv).
set -euo pipefail

src= gitdir= rev=HEAD py=python3 xferbin= only=
declare -A filerev=()
while [ $# -gt 0 ]; do
  case "$1" in
    --file-rev) filerev[${2%%=*}]=${2#*=}; shift 2 ;;
    --src) src=$2; shift 2 ;;
    --git-dir) gitdir=$2; shift 2 ;;
    --rev) rev=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --xfer) xferbin=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "wheel-tests.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$src" ] && [ -z "$gitdir" ]; then
  echo "wheel-tests.sh: name Mooncake's sources: --src DIR or --git-dir DIR [--rev REV]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$xferbin" ]; then
  xferbin=$work/xfer
  (cd "$root" && go build -o "$xferbin" ./cmd/xfer)
fi

files=(transfer_engine_target.py transfer_engine_initiator_test.py test_distributed_object_store.py
  test_replicated_distributed_object_store.py test_put_get_tensor.py)
for f in "${files[@]}"; do
  if [ -n "$src" ]; then
    cp "$src/mooncake-wheel/tests/$f" "$work/$f"
  else
    git -C "$gitdir" show "${filerev[$f]:-$rev}:mooncake-wheel/tests/$f" >"$work/$f"
    echo "$f at $(git -C "$gitdir" rev-parse "${filerev[$f]:-$rev}")"
  fi
  # Only the imports change: `mooncake.` becomes `xfer.mooncake.`.
  sed -i -E 's/^(\s*)from mooncake([. ])/\1from xfer.mooncake\2/; s/^(\s*)import mooncake\./\1import xfer.mooncake./' "$work/$f"
done

wait_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "wheel-tests.sh: nothing listens on port $1" >&2
  return 1
}

export MC_METADATA_SERVER=http://127.0.0.1:8080/metadata
"$xferbin" mooncake metadata-server --port 8080 >/dev/null &
pids+=($!)
wait_port 8080
cd "$work"
status=0
run() {
  echo "== $*"
  if ! "$@"; then status=1; echo "FAILED: $*"; fi
}

if [ -z "$only" ] || [ "$only" = engine ]; then
  MC_FORCE_TCP=true "$py" transfer_engine_target.py &
  target=$!
  pids+=($target)
  sleep 2
  run env MC_FORCE_TCP=true "$py" transfer_engine_initiator_test.py
  kill "$target" 2>/dev/null || true
fi

if [ -z "$only" ] || [ "$only" = store ] || [ "$only" = tensor ]; then
  "$xferbin" mooncake master --default_kv_lease_ttl=500 >/dev/null &
  pids+=($!)
  wait_port 50051
  export DEFAULT_KV_LEASE_TTL=500
  if [ -z "$only" ] || [ "$only" = store ]; then
    run "$py" test_distributed_object_store.py
    run "$py" test_replicated_distributed_object_store.py
  fi
  if [ -z "$only" ] || [ "$only" = tensor ]; then
    run "$py" test_put_get_tensor.py
  fi
fi
exit $status

#!/usr/bin/env bash
# ab.sh: an A/B of two git revisions of xfer against the same peers, in the
# same runs.
#
# Usage: tools/bench/ab.sh REV_A REV_B [--rounds N] [--only peers|kv|verbs[,...]]
#                          [--out DIR] [--peers-args ARGS] [--kv-args ARGS] [--verbs-args ARGS]
#
# It checks both revisions out into temporary git worktrees (removed on
# exit), builds each one's xfer binary (and, for verbs, its
# tools/bench/regmr) on the host, and runs this tree's comparison scripts
# once each with --xfer A --xfer-b B: every round runs the peer and both
# binaries, A first in odd rounds and B first in even ones (peer, A, B,
# peer, B, A, ...). For verbs both builds run in the same VM. The scripts
# and their peers are this tree's for both sides, so only xfer differs.
#
# Default: every script (peers, kv, verbs), each with its own default
# rounds. --rounds N sets the rounds of all. --PEERS/KV/VERBS-args pass more
# options to one script (e.g. --peers-args "--seconds 1").
#
# Output, in DIR (default bench-out/ab): each script's results file
# (peers.json, kv.json, verbs.json) and ab.json, which has per target A's
# and B's medians and rounds, B / A and the peer's median from the same
# rounds; the table is printed at the end (tools/bench/report.py --ab
# DIR/ab.json prints it again, --doc-section writes it into
# docs/BENCHMARKS.md). Results of A/B runs never update the current tables.
set -euo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
ROOT=$PWD

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$SELF"; }
[ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && { usage; exit 0; }
[ $# -ge 2 ] || { usage >&2; exit 2; }
REV_A=$1 REV_B=$2
shift 2
ROUNDS= ONLY=peers,kv,verbs OUT=$ROOT/bench-out/ab
PEERS_ARGS= KV_ARGS= VERBS_ARGS=
args=("$REV_A" "$REV_B" "$@")
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "ab.sh: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --rounds) ROUNDS=$2 ;;
    --only) ONLY=$2 ;;
    --out) OUT=$2 ;;
    --peers-args) PEERS_ARGS=$2 ;;
    --kv-args) KV_ARGS=$2 ;;
    --verbs-args) VERBS_ARGS=$2 ;;
    *) echo "ab.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
case "$ROUNDS" in ''|[1-9]|[1-9][0-9]) ;; *) echo "ab.sh: --rounds must be a positive integer, not '$ROUNDS'" >&2; exit 2 ;; esac
for s in ${ONLY//,/ }; do
  case "$s" in peers|kv|verbs) ;; *) echo "ab.sh: --only takes peers, kv or verbs, not '$s'" >&2; exit 2 ;; esac
done
case "$OUT" in /*) ;; *) OUT=$ROOT/$OUT ;; esac

SHA_A=$(git rev-parse --verify --quiet "$REV_A^{commit}") || { echo "ab.sh: $REV_A is not a commit" >&2; exit 2; }
SHA_B=$(git rev-parse --verify --quiet "$REV_B^{commit}") || { echo "ab.sh: $REV_B is not a commit" >&2; exit 2; }

TMP=$(mktemp -d /tmp/xfer-ab.XXXXXX)
cleanup() {
  for w in a b; do
    [ -d "$TMP/$w" ] && git worktree remove --force "$TMP/$w" 2>/dev/null
  done
  git worktree prune
  rm -rf "$TMP"
}
trap cleanup EXIT

mkdir -p "$TMP/bin" "$OUT"
for w in a b; do
  sha=$SHA_A; [ $w = b ] && sha=$SHA_B
  git worktree add --quiet --detach "$TMP/$w" "$sha"
  echo "ab.sh: building $w = $(git rev-parse --short "$sha")" >&2
  (cd "$TMP/$w" && go build -o "$TMP/bin/xfer-$w" ./cmd/xfer)
  if [[ ",$ONLY," == *,verbs,* ]] && [ -d "$TMP/$w/tools/bench/regmr" ]; then
    (cd "$TMP/$w" && go build -o "$TMP/bin/regmr-$w" ./tools/bench/regmr)
  fi
done

files=()
r=()
[ -z "$ROUNDS" ] || r=(--rounds "$ROUNDS")
for s in ${ONLY//,/ }; do
  echo "ab.sh: $s" >&2
  case "$s" in
    peers)
      # shellcheck disable=SC2086 # word splitting of the extra options is meant
      tools/bench/peers.sh "${r[@]}" --xfer "$TMP/bin/xfer-a" --xfer-b "$TMP/bin/xfer-b" --out "$OUT/peers.json" $PEERS_ARGS ;;
    kv)
      # shellcheck disable=SC2086
      tools/bench/kv.sh "${r[@]}" --xfer "$TMP/bin/xfer-a" --xfer-b "$TMP/bin/xfer-b" --out "$OUT/kv.json" $KV_ARGS ;;
    verbs)
      regmr=()
      [ -x "$TMP/bin/regmr-a" ] && regmr+=(--regmr "$TMP/bin/regmr-a")
      [ -x "$TMP/bin/regmr-b" ] && regmr+=(--regmr-b "$TMP/bin/regmr-b")
      # regmr of A alone, or of B alone, would be measured as if it were both.
      [ ${#regmr[@]} -eq 4 ] || regmr=(--no-regmr)
      # shellcheck disable=SC2086
      tools/bench/verbs.sh "${r[@]}" --xfer "$TMP/bin/xfer-a" --xfer-b "$TMP/bin/xfer-b" "${regmr[@]}" \
        --out "$OUT/verbs.json" $VERBS_ARGS ;;
  esac
  files+=("$OUT/$s.json")
done

python3 tools/bench/ab.py --rev-a "$REV_A" --commit-a "$(git rev-parse --short "$SHA_A")" \
  --rev-b "$REV_B" --commit-b "$(git rev-parse --short "$SHA_B")" \
  --command "tools/bench/ab.sh$(printf ' %q' "${args[@]}")" --out "$OUT/ab.json" "${files[@]}"

# Sourced by the wrappers that run a bench script here or, with
# --transports rdma, in a tools/rdma-vm VM (connector.sh, pages.sh).
#
# vm_args NAME ARGS... reads the wrapper's options: it sets args (what
# passes through to the script: every option but --device), dev (--device,
# rxe0 by default) and rdma (1 when --transports names rdma), and builds
# ./xfer unless --xfer names a binary. vm_flag then prints rdma-vm's flag
# for dev (--rxe or --siw), or fails naming NAME.
vm_args() {
  local name=$1
  shift
  args=() rdma=0 dev=rxe0
  local have_xfer=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --device) [ $# -ge 2 ] || { echo "$name: --device needs a value" >&2; exit 2; }; dev=$2; shift 2; continue ;;
      --device=*) dev=${1#--device=}; shift; continue ;;
      --xfer|--xfer=*) have_xfer=1 ;;
      --transports) case "${2:-}" in *rdma*) rdma=1 ;; esac ;;
      --transports=*) case "$1" in *rdma*) rdma=1 ;; esac ;;
    esac
    args+=("$1")
    shift
  done
  [ $have_xfer = 1 ] || go build -o xfer ./cmd/xfer
}

vm_flag() {
  case $dev in
    rxe0) echo --rxe ;;
    siw0) echo --siw ;;
    *) echo "$1: --device $dev: want rxe0 or siw0" >&2; exit 2 ;;
  esac
}

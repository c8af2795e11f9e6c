#!/usr/bin/env bash
# Installs the Debian packages the tests run for real, when they are
# missing: etcd-server (the directory package's integration test runs
# Debian's etcd binary), prometheus (a real Prometheus scrapes xfer serve,
# and its promtool checks the exposition and the recording rules), and
# Debian's python3 with NumPy, PyTorch (CPU) and pytest for the Python
# binding, and pip, venv (ensurepip), setuptools and wheel, with which make
# python builds its wheel and installs it into the checkout's venv offline
# (/usr/bin/python3: a python3 earlier on PATH, e.g. pyenv's, does not see
# Debian's packages). gcc: cgo builds the C ABI, libxfer.so.
# libibverbs1 and its providers: the verbs binding's tests load the real
# library (with no RDMA device here, they check what it says). iproute2:
# the two-node tests make network namespaces (ip) and read their sockets
# (ss). fio: tools/bench/kvdisk.py measures the KV disk tier against it. Go modules
# come with `go test` itself.
# Run as root on a fresh machine (make test runs it); otherwise it says what
# to install, and the tests that need it skip (or fail under
# XFER_REQUIRE_ETCD=1 and XFER_REQUIRE_PROMETHEUS=1, as in CI).
set -euo pipefail

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/python3 ] || need+=(python3)
command -v gcc >/dev/null 2>&1 || need+=(gcc) # cgo builds libxfer.so (make python)
command -v fio >/dev/null 2>&1 || need+=(fio) # tools/bench/kvdisk.py: the disk tier against fio's O_DIRECT reads
{ command -v ip && command -v ss; } >/dev/null 2>&1 || need+=(iproute2) # the two-node tests: network namespaces, and ss's view of their sockets
/sbin/ldconfig -p 2>/dev/null | grep 'libibverbs\.so\.1 ' >/dev/null || need+=(libibverbs1 ibverbs-providers) # not grep -q: its early exit fails the pipe under pipefail
for m in numpy:python3-numpy torch:python3-torch pytest:python3-pytest pip:python3-pip ensurepip:python3-venv setuptools:python3-setuptools wheel:python3-wheel; do
  /usr/bin/python3 -c "import ${m%%:*}" >/dev/null 2>&1 || need+=("${m#*:}")
done

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing ${need[*]}: install them (apt-get install ${need[*]}); the tests that run them will skip" >&2
  exit 0
fi
echo "deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || {
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
}
# The package starts a system etcd where systemd runs; the tests start
# their own on free ports and do not need it.

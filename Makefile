# xfer: build, test, fuzz and benchmark targets. `make test` is what CI runs.

SHELL    := /bin/bash
GO       ?= go
FUZZTIME ?= 10s
PKGS      = ./...

.PHONY: scale-test all build test vet race nocgo fuzz integrity python python-test bench bench-peers bench-verbs bench-kv bench-kvspread bench-connector bench-pages bench-report bench-ab proto clean

all: build

build:
	$(GO) build -buildvcs=auto -o xfer ./cmd/xfer

## deps: the Debian packages tests run for real (etcd-server), when missing.
.PHONY: deps
deps:
	tools/deps.sh

## test: everything CI checks, in order of speed, then one line that says
## what ran. Each step leaves its results in TESTOUT (JSON of the race run,
## one log per fuzz target).
TESTOUT  ?= $(CURDIR)/test-out

test: deps vet nocgo race integrity fuzz python-test
	@pass=$$(cat $(TESTOUT)/race.pass $(TESTOUT)/integrity.pass $(TESTOUT)/fuzz.pass $(TESTOUT)/pytest.pass | awk '{s+=$$1} END {print s}'); \
	  skip=$$(cat $(TESTOUT)/race.skip $(TESTOUT)/pytest.skip | awk '{s+=$$1} END {print s}'); \
	  echo "make test: vet, gofmt, the bench scripts' unit tests and the no-cgo build clean; race: $$(cat $(TESTOUT)/race.pass) tests passed ($$(cat $(TESTOUT)/race.skip) skipped); integrity: $$(cat $(TESTOUT)/integrity.pass); fuzz: $$(cat $(TESTOUT)/fuzz.pass) targets for $(FUZZTIME) each; pytest: $$(cat $(TESTOUT)/pytest.pass) passed ($$(cat $(TESTOUT)/pytest.skip) skipped)"; \
	  echo "test: $$pass passed, 0 failed, $$skip skipped"

vet:
	$(GO) vet $(PKGS)
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$fmt" ]; then echo "gofmt needed: $$fmt"; exit 1; fi
	$(PYTHON) -m unittest discover -s tools/bench -p '*_test.py'

## nocgo: every build configuration must compile; without cgo the verbs
## transport reports ErrNotSupported.
nocgo:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	CGO_ENABLED=0 $(GO) vet $(PKGS)

## race: the tests with the race detector, through gotestsum (a tool
## dependency in go.mod): a line per package, failures in full, a count.
race:
	@mkdir -p $(TESTOUT)
	$(GO) tool gotestsum --format pkgname-and-test-fails --hide-summary=skipped --jsonfile $(TESTOUT)/race.json -- -race -count=1 -timeout 20m $(PKGS)
	@grep -c '"Action":"pass","Package":"[^"]*","Test"' $(TESTOUT)/race.json > $(TESTOUT)/race.pass || true
	@grep -c '"Action":"skip","Package":"[^"]*","Test"' $(TESTOUT)/race.json > $(TESTOUT)/race.skip || true

## integrity: the full 100,000-transfer check on tcp and shm (the race run
## does 5,000), and the zero-allocation checks of the hot paths, which skip
## under the race detector (it allocates on its own).
integrity:
	@mkdir -p $(TESTOUT)
	set -o pipefail; $(GO) test -count=1 -timeout 20m -run 'TestIntegrity|TestOpAllocs|TestMetricsAllocs|TestInlineAllocs|TestSumAllocs|TestConnAllocs' -v . ./kv ./internal/auth ./internal/metrics | tee $(TESTOUT)/integrity.log | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|transfers checked|operations checked'
	@grep -Ec '^ *--- PASS' $(TESTOUT)/integrity.log > $(TESTOUT)/integrity.pass || true

## fuzz: every fuzz target for FUZZTIME each, each with a log of its own.
fuzz:
	@mkdir -p $(TESTOUT)/fuzz; n=0; set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    log=$(TESTOUT)/fuzz/$$(basename $$pkg)-$$f.log; \
	    if ! $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1; then \
	      if grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input' $$log; then \
	        execs=$$(grep -o 'execs: [0-9]*' $$log | tail -1 | grep -o '[0-9]*' || true); execs=$$(( $${execs:-0} > 1000 ? $${execs:-0} : 1000 )); \
	        echo "  Go 1.26's fuzzing engine failed at its deadline with no failing input (a race in its coordinator, fixed in Go 1.27): once more, for $${execs} inputs, a count that has no deadline"; \
	        $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${execs}x $$pkg >$$log 2>&1 || { cat $$log; exit 1; }; \
	      else cat $$log; exit 1; fi; \
	    fi; \
	    n=$$((n+1)); \
	  done; \
	done; echo $$n > $(TESTOUT)/fuzz.pass

## python: the Python binding. Builds libxfer.so (the connector's C ABI,
## cmd/libxfer) into python/xfer/, then a wheel of the package carrying it
## (PYWHEEL: no package index, no compiler at install time), and installs
## that wheel into this checkout's own venv, PYVENV, made with
## --system-site-packages so that Debian's numpy, torch and pytest are
## visible. Nothing is written outside the checkout: `PYVENV/bin/python`
## imports xfer with no PYTHONPATH, and `pip install PYWHEEL` puts it in
## another venv (or a user site). PYTHON is /usr/bin/python3 on purpose: a
## python3 earlier on PATH (pyenv) does not see Debian's packages.
PYTHON  ?= /usr/bin/python3
PYBUILD := $(CURDIR)/build/python
PYVENV  ?= $(PYBUILD)/venv
PYWHEEL := $(PYBUILD)/dist/xfer-$(shell sed -n 's/^version = "\(.*\)"/\1/p' python/pyproject.toml)-py3-none-any.whl

python:
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o python/xfer/libxfer.so ./cmd/libxfer
	rm -f python/xfer/libxfer.h
	rm -rf $(PYBUILD)/src $(PYBUILD)/dist && mkdir -p $(PYBUILD)/src
	cp -r python/pyproject.toml python/xfer $(PYBUILD)/src/ && find $(PYBUILD)/src/xfer -name __pycache__ -prune -exec rm -rf {} +
	$(PYTHON) -m pip wheel --quiet --no-index --no-deps --no-build-isolation -w $(PYBUILD)/dist $(PYBUILD)/src
	test -x $(PYVENV)/bin/python || $(PYTHON) -m venv --system-site-packages $(PYVENV)
	$(PYVENV)/bin/python -m pip install --quiet --no-index --no-deps --force-reinstall $(PYWHEEL)
	@echo "python: $(PYWHEEL), installed in $(PYVENV) ($(PYVENV)/bin/python imports xfer)"

## python-test: the binding's pytest suite, less the slow tests
## (PYTEST_MARK="" runs them too), with PYVENV's python, which imports the
## wheel make python installed there (never the machine-wide site's); its
## Go counterpart of xfer transfer is built once for the cross-node tests.
## They run from python/tests, so that python -m does not put the source
## tree (python/, whose xfer/ is beside it) first on sys.path.
## No tests collected (pytest's exit 5) fails like any other failure.
PYTEST_MARK ?= not slow

python-test: python
	@mkdir -p $(TESTOUT)
	$(GO) build -o $(TESTOUT)/xfer-py ./cmd/xfer
	set -o pipefail; cd python/tests && XFER_BINARY=$(TESTOUT)/xfer-py XFER_PACKAGE_PREFIX=$(PYVENV) XFER_WHEEL=$(PYWHEEL) $(PYVENV)/bin/python -m pytest -c ../pytest.ini --rootdir .. -q -rs -m "$(PYTEST_MARK)" --junitxml=$(TESTOUT)/pytest.xml . | tee $(TESTOUT)/pytest.log
	@$(PYTHON) -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); s = r if r.tag == "testsuite" else r.find("testsuite"); n = lambda k: int(s.get(k, 0)); open(sys.argv[2], "w").write("%d\n" % (n("tests") - n("failures") - n("errors") - n("skipped"))); open(sys.argv[3], "w").write("%d\n" % n("skipped"))' $(TESTOUT)/pytest.xml $(TESTOUT)/pytest.pass $(TESTOUT)/pytest.skip

## soak: one xfer serve for SOAK_DURATION (10 minutes) against verified
## tcp and shm benches and connection churn; fails if a round fails or the
## server's rss, goroutines or open descriptors keep growing
## (tools/soak; SOAK_ARGS passes options, e.g. SOAK_ARGS=-v for a line per
## round). docs/TESTING.md has a run's figures.
SOAK_DURATION ?= 10m

## scale-test: the one-host simulation of a large KV cluster (not part of
## `make test`): SCALE_N servers (default 64), each a process, in one etcd,
## with joins, kills and same-ID restarts under a verified bench
## (docs/SCALE.md).
SCALE_N ?= 64
scale-test: deps
	XFER_SCALE_TEST=$(SCALE_N) $(GO) test -count=1 -timeout 30m -run '^TestScale$$' -v ./kv/

.PHONY: soak
soak: build
	$(GO) run ./tools/soak --xfer ./xfer --duration $(SOAK_DURATION) $(SOAK_ARGS)

## bench: Go benchmarks (allocations per operation included).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## The comparisons of docs/BENCHMARKS.md (tools/bench/README.md). Each
## installs its peers with apt when missing, builds ./xfer, runs interleaved
## rounds and writes a results file in bench-out/; BENCH_ARGS passes options
## (e.g. BENCH_ARGS="--rounds 7").
## bench-peers: tcp and shm against iperf3, qperf and a C memcpy.
bench-peers:
	tools/bench/peers.sh $(BENCH_ARGS)

## bench-kv: the KV service against redis-server/redis-benchmark.
bench-kv:
	tools/bench/kv.sh $(BENCH_ARGS)

## bench-kvspread: xfer kv bench --directory against three KV servers and
## against one (etcd-server), in the same rounds.
bench-kvspread:
	tools/bench/kvspread.sh $(BENCH_ARGS)

## bench-connector: the connector's xfer transfer (256 MiB tensors x 20)
## against xfer bench WRITE of the same size, and zerocopy against copy, on
## tcp and shm (BENCH_ARGS="--transports rdma --size-mb 16": in the VM).
bench-connector:
	tools/bench/connector.sh $(BENCH_ARGS)

## bench-pages: page fetch against xfer bench READ 4 KiB (tcp, shm), and
## against ib_read_lat in the VM (BENCH_ARGS="--transports rdma").
bench-pages:
	tools/bench/pages.sh $(BENCH_ARGS)

## bench-report: write the results files in bench-out/ into the tables of
## docs/BENCHMARKS.md (a target a run did not measure keeps its row).
bench-report:
	python3 tools/bench/report.py

## bench-ab: an A/B of two revisions in the same rounds against the same
## peers: make bench-ab A=REV B=REV [ONLY=peers,kv,verbs] [ROUNDS=N].
bench-ab:
	@test -n "$(A)" && test -n "$(B)" || { echo "usage: make bench-ab A=REV B=REV [ONLY=peers,kv,verbs] [ROUNDS=N]" >&2; exit 2; }
	tools/bench/ab.sh $(A) $(B) $(if $(ONLY),--only $(ONLY)) $(if $(ROUNDS),--rounds $(ROUNDS))

## proto: regenerate kv/kvpb and mooncake/master/masterpb from their .proto files (installs protoc and plugins).
proto:
	tools/proto.sh

## bench-verbs: xfer against perftest on SoftRoCE (BENCH_ARGS="--device siw0":
## SoftiWARP), in one VM run.
bench-verbs: vm-setup
	tools/bench/verbs.sh $(BENCH_ARGS)

clean:
	rm -rf xfer python/xfer/libxfer.so build/python

## RDMA verbs tests in a qemu VM with SoftRoCE (rxe) and SoftiWARP (siw),
## through the project's runner tools/rdma-vm (see tools/rdma-vm/README.md and
## docs/TESTING.md). Root only; the first run installs packages and downloads a
## kernel into /var/cache/rdma-vm.
.PHONY: vm-setup verbs-check verbs-test

RDMA_VM     = $(CURDIR)/tools/rdma-vm/rdma-vm
## verbs-test boots a VM again, once, when its guest wedges (no heartbeat for
## two minutes) or dies without the command's status: the reason and the
## guest console's tail are printed first. A command that hangs in a live
## guest is never retried: its own -timeout dumps its goroutines.
VM_RETRIES ?= 1
## The packages run in the VM; internal/testutil checks that the device made
## it into the guest. Directories that do not exist yet are left out, so that
## go test never fails on a missing pattern.
VERBS_DIRS  = internal/testutil internal/ibv internal/rdmacm transport/verbs
VERBS_PKGS  = $(shell for d in $(VERBS_DIRS); do [ -d $$d ] && $(GO) list -e ./$$d/... 2>/dev/null; done)
## The root package's tests that need verbs (rdma in the VM).
ENGINE_VERBS = ^(TestWaitersIdleLivePeerRDMA|TestEngineWaitNotifyRDMA)$$
## The connector's suites that run over every transport (rdma in the VM).
CONNECTOR_VERBS = ^(TestBasicConnector|TestEndToEnd|TestLifecycle|TestBeyondTheGuide|TestStressCorrectness|TestManagedBuffer|TestBufferAllocator|TestAllocatorInvariants|TestBadInput)$$

## vm-setup: one-time setup of the runner (apt packages, kernel, siw.ko).
vm-setup:
	$(RDMA_VM) --setup

## verbs-check: one VM per device: PORT_ACTIVE and a verified data path.
verbs-check: vm-setup
	tools/rdma-vm/check.sh

## verbs-test: the verbs packages' tests, once on rxe and once on siw (one VM
## per package, one at a time); a test that cannot find verbs fails here.
verbs-test: export RDMA_VM_RETRIES = $(VM_RETRIES)
verbs-test: verbs-check
	@test -n "$(VERBS_PKGS)" || { echo "verbs-test: no packages in $(VERBS_DIRS)"; exit 1; }
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 30m -p 1 -exec "$(RDMA_VM) --rxe --" $(VERBS_PKGS)
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 30m -p 1 -exec "$(RDMA_VM) --siw --" $(VERBS_PKGS)
	@# Again under the race detector (on rxe): closes that race with posts
	@# and polls only show there, since the host has no verbs device.
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -race -count=1 -timeout 30m -p 1 -exec "$(RDMA_VM) --rxe --" $(VERBS_PKGS)
	@# The KV service over verbs (its other tests run on the host).
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 20m -run TestRDMA -exec "$(RDMA_VM) --rxe --" ./kv
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 20m -run TestRDMA -exec "$(RDMA_VM) --siw --" ./kv
	@# The engine's waiters over verbs: probes of a quiet peer, and
	@# Engine.WaitNotify told of a lost peer (their other tests run on the host).
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run '$(ENGINE_VERBS)' -exec "$(RDMA_VM) --rxe --" .
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run '$(ENGINE_VERBS)' -exec "$(RDMA_VM) --siw --" .
	@# The connector's suites over verbs, with payloads small enough for
	@# SoftRoCE under emulation (their tcp and shm runs are in make test).
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run '$(CONNECTOR_VERBS)' -exec "$(RDMA_VM) --rxe --" ./connector
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run '$(CONNECTOR_VERBS)' -exec "$(RDMA_VM) --siw --" ./connector
	@# Mooncake's TransferEngine and store on xfer, moving bytes over rdma only.
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run 'TestStoreRDMA|TestMCEngineRDMA' -exec "$(RDMA_VM) --rxe --" ./cmd/libxfer
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run 'TestStoreRDMA|TestMCEngineRDMA' -exec "$(RDMA_VM) --siw --" ./cmd/libxfer
	@# xfer transfer's two processes over verbs, xfer bench --verify over a
	@# device deleted under it (failover), and xfer serve with a 512 MiB pool
	@# dialed the moment its port opens (readiness), with a binary built here
	@# (building inside the VM is slow under emulation).
	@mkdir -p $(TESTOUT)
	$(GO) build -o $(TESTOUT)/xfer-vm ./cmd/xfer
	TEST_XFER_BINARY=$(TESTOUT)/xfer-vm XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run 'TestTransfer|TestBenchDeviceRemoved|TestServeReadyRDMA' -exec "$(RDMA_VM) --rxe --" ./cmd/xfer
	TEST_XFER_BINARY=$(TESTOUT)/xfer-vm XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run 'TestTransfer|TestBenchDeviceRemoved|TestServeReadyRDMA' -exec "$(RDMA_VM) --siw --" ./cmd/xfer
	@# xfer doctor's passing path: exit 0, the ACTIVE port and the GID to use.
	TEST_XFER_BINARY=$(TESTOUT)/xfer-vm XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run TestDoctorInVM -exec "$(RDMA_VM) --rxe --" ./cmd/xfer
	TEST_XFER_BINARY=$(TESTOUT)/xfer-vm XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run TestDoctorInVM -exec "$(RDMA_VM) --siw --" ./cmd/xfer
	@# Page fetch over verbs.
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run TestPages -exec "$(RDMA_VM) --rxe --" ./pages
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run TestPages -exec "$(RDMA_VM) --siw --" ./pages
	@# Two page-fetch nodes across a veth pair, an RDMA device on each end
	@# (siw: in two network namespaces; rxe: see TestTwoNodePagesRDMA).
	TEST_XFER_BINARY=$(TESTOUT)/xfer-vm XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 10m -run TestTwoNodePagesRDMA -exec "$(RDMA_VM) --rxe --" ./cmd/xfer
	TEST_XFER_BINARY=$(TESTOUT)/xfer-vm XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 10m -run TestTwoNodePagesRDMA -exec "$(RDMA_VM) --siw --" ./cmd/xfer

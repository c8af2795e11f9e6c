# xfer: build, test, fuzz and benchmark targets. `make test` is what CI runs.

SHELL    := /bin/bash
GO       ?= go
FUZZTIME ?= 10s
PKGS      = ./...

.PHONY: all build test vet race nocgo fuzz integrity bench bench-peers bench-verbs bench-kv proto clean

all: build

build:
	$(GO) build -o xfer ./cmd/xfer

## test: everything CI checks, in order of speed.
test: vet nocgo race integrity fuzz

vet:
	$(GO) vet $(PKGS)
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$fmt" ]; then echo "gofmt needed: $$fmt"; exit 1; fi

## nocgo: every build configuration must compile; without cgo the verbs
## transport reports ErrNotSupported.
nocgo:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	CGO_ENABLED=0 $(GO) vet $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## integrity: the full 100,000-transfer check on tcp and shm (the race run
## does 5,000).
integrity:
	set -o pipefail; $(GO) test -count=1 -timeout 20m -run 'TestIntegrity' -v . ./kv | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|transfers checked|operations checked'

## fuzz: every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    if ! $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/xfer-fuzz.log 2>&1; then \
	      if grep -q 'context deadline exceeded' /tmp/xfer-fuzz.log && ! grep -q 'Failing input' /tmp/xfer-fuzz.log; then \
	        echo "  the fuzzing engine ran out of time between inputs on a loaded machine (no failing input): once more"; \
	        $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/xfer-fuzz.log 2>&1 || { cat /tmp/xfer-fuzz.log; exit 1; }; \
	      else cat /tmp/xfer-fuzz.log; exit 1; fi; \
	    fi; \
	  done; \
	done

## bench: Go benchmarks (allocations per operation included).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## bench-peers: the comparisons in docs/BENCHMARKS.md (installs the peers).
bench-peers: build
	tools/bench/peers.sh

## bench-kv: the KV service against redis-server/redis-benchmark (installs them).
bench-kv:
	tools/bench/kv.sh

## proto: regenerate kv/kvpb from kv/kvpb/kv.proto (installs protoc and plugins).
proto:
	tools/proto.sh

## bench-verbs: xfer against perftest on SoftRoCE, in one VM (docs/BENCHMARKS.md).
bench-verbs: vm-setup
	tools/bench/verbs.sh

clean:
	rm -f xfer

## RDMA verbs tests in a qemu VM with SoftRoCE (rxe) and SoftiWARP (siw),
## through the project's runner tools/rdma-vm (see tools/rdma-vm/README.md and
## docs/TESTING.md). Root only; the first run installs packages and downloads a
## kernel into /var/cache/rdma-vm.
.PHONY: vm-setup verbs-check verbs-test

RDMA_VM     = $(CURDIR)/tools/rdma-vm/rdma-vm
## The packages run in the VM; internal/testutil checks that the device made
## it into the guest. Directories that do not exist yet are left out, so that
## go test never fails on a missing pattern.
VERBS_DIRS  = internal/testutil internal/ibv transport/verbs
VERBS_PKGS  = $(shell for d in $(VERBS_DIRS); do [ -d $$d ] && $(GO) list -e ./$$d/... 2>/dev/null; done)

## vm-setup: one-time setup of the runner (apt packages, kernel, siw.ko).
vm-setup:
	$(RDMA_VM) --setup

## verbs-check: one VM per device: PORT_ACTIVE and a verified data path.
verbs-check: vm-setup
	tools/rdma-vm/check.sh

## verbs-test: the verbs packages' tests, once on rxe and once on siw (one VM
## per package, one at a time); a test that cannot find verbs fails here.
verbs-test: verbs-check
	@test -n "$(VERBS_PKGS)" || { echo "verbs-test: no packages in $(VERBS_DIRS)"; exit 1; }
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -timeout 30m -p 1 -exec "$(RDMA_VM) --rxe --" $(VERBS_PKGS)
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -timeout 30m -p 1 -exec "$(RDMA_VM) --siw --" $(VERBS_PKGS)
	@# The KV service over verbs (its other tests run on the host).
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=rxe0 $(GO) test -count=1 -run TestRDMA -exec "$(RDMA_VM) --rxe --" ./kv
	XFER_REQUIRE_VERBS=1 XFER_TEST_DEVICE=siw0 $(GO) test -count=1 -run TestRDMA -exec "$(RDMA_VM) --siw --" ./kv

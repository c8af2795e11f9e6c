# xfer: build, test, fuzz and benchmark targets. `make test` is what CI runs.

GO       ?= go
FUZZTIME ?= 10s
PKGS      = ./...

.PHONY: all build test vet race nocgo fuzz integrity bench bench-peers clean

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
	$(GO) test -count=1 -timeout 20m -run 'TestIntegrity' -v . | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|transfers checked'

## fuzz: every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/xfer-fuzz.log 2>&1 || { cat /tmp/xfer-fuzz.log; exit 1; }; \
	  done; \
	done

## bench: Go benchmarks (allocations per operation included).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## bench-peers: the comparisons in docs/BENCHMARKS.md (installs the peers).
bench-peers: build
	tools/bench/peers.sh

clean:
	rm -f xfer

#!/usr/bin/env bash
# Regenerates the gRPC code (kv/kvpb, mooncake/master/masterpb) from its .proto files, installing
# protoc (Debian's protobuf-compiler) and the Go plugins at pinned versions.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v protoc >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler
fi
bin=$(go env GOPATH)/bin
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PATH=$bin:$PATH protoc --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative kv/kvpb/kv.proto mooncake/master/masterpb/master.proto

//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// Without cgo there are no exports: the build succeeds (CGO_ENABLED=0 go
// build ./... must) and the program says what to do instead.
func main() {
	fmt.Fprintln(os.Stderr, "libxfer: the C ABI needs cgo: build it with CGO_ENABLED=1 go build -buildmode=c-shared -o libxfer.so ./cmd/libxfer (make python)")
	os.Exit(2)
}

// Package cabi holds what the cgo bindings (internal/ibv, internal/cuda)
// share to check their C ABI: the table of sizes, offsets and constants
// that each evaluates against its own header (abi_table.h), and the Go
// constants and struct layouts that must equal C's. Each binding's TestABI
// checks them (with package cabitest) against the system's headers.
//
// It is plain Go with no state: the bindings fill its types from C.
package cabi

// Item is one entry of a binding's abi_table.h, evaluated against the
// binding's own header.
type Item struct {
	Expr  string // as written for the system headers
	Value int64  // with the binding's own header
}

// Const pairs a Go constant, or a size or offset of a Go struct, with the
// C value it must equal.
type Const struct {
	Name   string
	Go, C  int64
	Mirror bool // a size or offset of a Go struct that C reads or writes
}

// Equal pairs Go constant g with C constant c.
func Equal(name string, g, c int64) Const { return Const{Name: name, Go: g, C: c} }

// Layout pairs a size or offset of a Go struct with its C mirror's.
func Layout(name string, g, c uintptr) Const {
	return Const{Name: name, Go: int64(g), C: int64(c), Mirror: true}
}

// Table returns a binding's C ABI table, items, as Items: entry reads one
// C entry's expression and value.
func Table[T any](items []T, entry func(T) (expr string, value int64)) []Item {
	out := make([]Item, len(items))
	for i, it := range items {
		out[i].Expr, out[i].Value = entry(it)
	}
	return out
}

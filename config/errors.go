package config

import (
	"errors"
	"fmt"
	"strings"
)

// The kinds of problem a document can have. Every problem of an *Error
// wraps one of them: match with errors.Is.
var (
	// ErrSyntax means the document is not well-formed YAML or JSON.
	ErrSyntax = errors.New("syntax error")
	// ErrUnknownKey means a key that is not one of the program's.
	ErrUnknownKey = errors.New("unknown key")
	// ErrBadValue means a known key with a value it cannot take.
	ErrBadValue = errors.New("bad value")
	// ErrDuplicate means one option set twice: the same key twice, or
	// two spellings of it (rdma_device and rdma.device).
	ErrDuplicate = errors.New("option set twice")
	// ErrUnsupportedField means a Config grew a field of a type the key
	// table cannot parse; the package's reflection test catches it.
	ErrUnsupportedField = errors.New("unsupported config field type")
)

// Problem is one thing wrong with a document.
type Problem struct {
	Line int    // the line it is on, from 1; 0 when not known
	Key  string // the key as written, with its sections: "rdma.devcie"
	Err  error  // what is wrong; wraps ErrUnknownKey, ErrBadValue, ...
}

// Error is what Decode returns for a document it refuses: every problem it
// found, in document order, so that one run names all the unknown keys.
// Its message has one line per problem, each "FILE:LINE: ...".
type Error struct {
	File     string // the document's name, as given to the decoder
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		b.WriteString(p.Err.Error())
	}
	return b.String()
}

// Unwrap returns the problems' errors, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p.Err
	}
	return errs
}

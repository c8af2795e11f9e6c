package rdmaleak

import (
	"errors"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/testmain"
)

// Checks are the checks, run after the tests, that no verbs object and no
// rdma_cm object is live.
func Checks() []testmain.Option {
	return []testmain.Option{
		testmain.Check("leaked verbs objects", func() error { return leaked(ibv.Live()) }),
		testmain.Check("leaked rdma_cm objects", func() error { return leaked(rdmacm.Live()) }),
	}
}

// counts is what a binding's Live returns.
type counts interface {
	IsZero() bool
	String() string
}

// leaked is nil for zero counts, and an error listing them otherwise.
func leaked(c counts) error {
	if c.IsZero() {
		return nil
	}
	return errors.New(c.String())
}

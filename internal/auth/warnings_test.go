package auth

import (
	"fmt"
	"testing"
	"time"
)

func TestWarnings(t *testing.T) {
	var w Warnings
	t0 := time.Unix(1000, 0)
	if !w.Due("a", t0) || w.Due("a", t0.Add(WarnPeriod-1)) || !w.Due("b", t0) {
		t.Error("not a source's first refusal alone in its period")
	}
	if !w.Due("a", t0.Add(WarnPeriod)) {
		t.Error("a source's refusal a period later is not due")
	}
	for i := range 2 * maxSources {
		w.Due(fmt.Sprint(i), t0)
	}
	if n := len(w.last); n > maxSources {
		t.Errorf("remembers %d sources, more than %d", n, maxSources)
	}
	if Source("10.0.0.1:5000") != "10.0.0.1" || Source("[fd00::1]:1") != "fd00::1" || Source("pipe") != "pipe" {
		t.Error("Source keeps a port, or loses an address without one")
	}
}

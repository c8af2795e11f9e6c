package cputime

import (
	"testing"
	"time"
)

func TestMeterSelf(t *testing.T) {
	before, ok := Meter{}.Read()
	if !ok {
		t.Skip("CPU time is not measurable on this platform")
	}
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	after, _ := Meter{}.Read()
	if after <= before {
		t.Errorf("CPU time did not grow while spinning: %v then %v", before, after)
	}
}

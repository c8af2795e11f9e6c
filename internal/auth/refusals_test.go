package auth

import (
	"fmt"
	"testing"
	"time"
)

func TestRefusals(t *testing.T) {
	var r Refusals
	now := time.Unix(1000, 0)
	if !r.Record(Failure{Time: now, Plane: "peer", Reason: "bad_proof", Source: "10.0.0.1"}) {
		t.Fatal("a source's first refusal is not due at Warn")
	}
	if r.Record(Failure{Time: now.Add(time.Second), Plane: "kv", Reason: "bad_proof", Source: "10.0.0.1"}) {
		t.Fatal("a second refusal within WarnPeriod is due at Warn")
	}
	if !r.Record(Failure{Time: now.Add(WarnPeriod), Plane: "peer", Reason: "bad_proof", Source: "10.0.0.1"}) {
		t.Fatal("a refusal a WarnPeriod later is not due at Warn")
	}
	for i := range MaxRecent + 5 {
		r.Record(Failure{Time: now, Plane: "peer", Reason: "timeout", Source: fmt.Sprint("10.0.1.", i)})
	}
	counts, recent := r.Snapshot()
	want := []FailureCount{{"kv", "bad_proof", 1}, {"peer", "bad_proof", 2}, {"peer", "timeout", MaxRecent + 5}}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	if len(recent) != MaxRecent || recent[len(recent)-1].Source != fmt.Sprint("10.0.1.", MaxRecent+4) {
		t.Fatalf("%d recent, the last %+v: want the latest %d", len(recent), recent[len(recent)-1], MaxRecent)
	}
}

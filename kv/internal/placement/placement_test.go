package placement

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func ids(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("kv-%d", i+1)
	}
	return s
}

func keys(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("key-%d", i)
	}
	return s
}

// TestSpread: every server owns about 1/N of the keys.
func TestSpread(t *testing.T) {
	ks := keys(200_000)
	for _, n := range []int{1, 3, 16, 64} {
		r := New(ids(n))
		count := make([]int, n)
		for _, k := range ks {
			count[r.Owner(Key(k))]++
		}
		want := float64(len(ks)) / float64(n)
		worst := 0.0
		for _, c := range count {
			worst = max(worst, math.Abs(float64(c)-want)/want)
		}
		t.Logf("N=%d: the most loaded server is %.1f %% off the mean", n, 100*worst)
		if worst > 0.25 {
			t.Errorf("N=%d: a server owns %.0f %% off the mean share: %v", n, 100*worst, count)
		}
	}
}

// TestMovement: a join moves keys only to the joiner, a leave only the
// leaver's, and no server that stays loses a replica because another left.
func TestMovement(t *testing.T) {
	ks := keys(50_000)
	const reps = 3
	before, after := New(ids(16)), New(ids(17)) // kv-17 joins
	joiner := after.Index("kv-17")
	moved := 0
	for _, k := range ks {
		h := Key(k)
		a, b := before.Owner(h), after.Owner(h)
		if before.IDs()[a] != after.IDs()[b] {
			moved++
			if b != joiner {
				t.Fatalf("key %s moved from %s to %s, not to the joiner", k, before.IDs()[a], after.IDs()[b])
			}
		}
		// The leave, seen from after to before: every server of before
		// that held a replica in after still holds it.
		for i, id := range before.IDs() {
			if after.Holds(h, after.Index(id), reps) && !before.Holds(h, i, reps) {
				t.Fatalf("key %s: %s lost a replica when kv-17 left", k, id)
			}
		}
	}
	share := float64(moved) / float64(len(ks))
	t.Logf("a join of the 17th server moved %.1f %% of the keys (1/17 = %.1f %%)", 100*share, 100.0/17)
	if share < 0.5/17 || share > 2.0/17 {
		t.Errorf("a join moved %.1f %% of the keys, want about 1/17", 100*share)
	}
	if before.Added(after) != true || after.Added(before) != false {
		t.Error("Added: wrong")
	}
}

// TestOrder: Order yields every server once, starting with the owner, and
// Holds agrees with its prefix; the ring does not depend on the order of
// the IDs given.
func TestOrder(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 20} {
		r := New(ids(n))
		rev := slices.Clone(ids(n))
		slices.Reverse(rev)
		r2 := New(append(rev, rev...))
		for _, k := range keys(500) {
			h := Key(k)
			var got []int
			for o := range r.Order(h) {
				got = append(got, o)
			}
			if len(got) != n {
				t.Fatalf("N=%d key %s: order %v, want every server once", n, k, got)
			}
			if n == 0 {
				if r.Owner(h) != -1 || r.Holds(h, 0, 1) {
					t.Fatal("empty ring: owner or holder")
				}
				continue
			}
			if got[0] != r.Owner(h) || r2.Owner(h) != r.Owner(h) {
				t.Fatalf("N=%d key %s: order starts at %d, owner %d (%d from reversed IDs)", n, k, got[0], r.Owner(h), r2.Owner(h))
			}
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			if len(slices.Compact(sorted)) != n {
				t.Fatalf("N=%d key %s: order %v repeats a server", n, k, got)
			}
			for reps := 1; reps <= n; reps++ {
				for i := range n {
					if want := slices.Contains(got[:reps], i); r.Holds(h, i, reps) != want {
						t.Fatalf("N=%d key %s: Holds(%d, %d) = %v, order %v", n, k, i, reps, !want, got)
					}
				}
			}
			if string(k) != "" && KeyBytes([]byte(k)) != h {
				t.Fatal("KeyBytes differs from Key")
			}
		}
	}
}

// BenchmarkOwner is the cost of placing one key, client or server side: it
// grows with log N, so it is flat from 3 servers to a thousand.
func BenchmarkOwner(b *testing.B) {
	ks := keys(4096)
	for _, n := range []int{3, 16, 64, 1000, 10000} {
		r := New(ids(n))
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				r.Owner(Key(ks[i&4095]))
			}
		})
	}
}

// BenchmarkHolds3 is a replica check with 3 replicas.
func BenchmarkHolds3(b *testing.B) {
	ks := keys(4096)
	for _, n := range []int{3, 16, 64, 1000, 10000} {
		r := New(ids(n))
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				r.Holds(Key(ks[i&4095]), 1, 3)
			}
		})
	}
}

// BenchmarkNew is the cost of a membership change's new ring.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 64, 1000, 10000} {
		s := ids(n)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for b.Loop() {
				New(s)
			}
		})
	}
}

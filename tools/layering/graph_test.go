package main

import "testing"

func TestOrder(t *testing.T) {
	g := newGraph()
	// a uses b and c; b and c use each other; c uses d; d uses nothing.
	for _, e := range [][2]string{{"a", "b"}, {"a", "c"}, {"b", "c"}, {"c", "b"}, {"c", "d"}, {"e", "a"}} {
		g.edge(e[0], e[1])
	}
	order := g.order()
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	if pos["e"] > pos["a"] || pos["a"] > pos["b"] || pos["a"] > pos["c"] || pos["c"] > pos["d"] {
		t.Errorf("order %v does not put users above what they use", order)
	}
	if n := g.backIn(order); n != 1 {
		t.Errorf("order %v has %d back edges, want the 1 the cycle forces", order, n)
	}
	// e, a, then b and c (one above the other), d: five levels.
	if n := g.levels(pos); n != 5 {
		t.Errorf("levels = %d, want 5", n)
	}
}

func TestFewestBackCycle(t *testing.T) {
	// A ring of four with one chord: one back edge is enough.
	g := newGraph()
	for _, e := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}, {"d", "a"}, {"a", "c"}} {
		g.edge(e[0], e[1])
	}
	if n := g.backIn(g.order()); n != 1 {
		t.Errorf("%d back edges in a ring, want 1", n)
	}
}

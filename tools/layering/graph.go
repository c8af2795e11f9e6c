package main

import (
	"math/rand/v2"
	"sort"
)

// graph is a directed graph of files: an edge u → v says u uses v.
type graph struct {
	out map[string]map[string]bool
	in  map[string]map[string]bool
}

func newGraph() *graph {
	return &graph{out: map[string]map[string]bool{}, in: map[string]map[string]bool{}}
}

func (g *graph) node(n string) {
	if g.out[n] == nil {
		g.out[n] = map[string]bool{}
	}
	if g.in[n] == nil {
		g.in[n] = map[string]bool{}
	}
}

func (g *graph) edge(u, v string) {
	g.node(u)
	g.node(v)
	g.out[u][v] = true
	g.in[v][u] = true
}

func (g *graph) edges() int {
	n := 0
	for _, vs := range g.out {
		n += len(vs)
	}
	return n
}

func (g *graph) sorted() []string {
	ns := make([]string, 0, len(g.out))
	for n := range g.out {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// order places every file above the files it uses where it can: the
// strongly connected components in topological order (users first), and
// within each component an order that few uses point back against.
func (g *graph) order() []string {
	var order []string
	for _, comp := range g.components() {
		order = append(order, g.fewestBack(comp)...)
	}
	return order
}

// components returns the strongly connected components (Tarjan), users
// before what they use.
func (g *graph) components() [][]string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var comps [][]string
	next := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range sortedKeys(g.out[v]) {
			if _, ok := index[w]; !ok {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var comp []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			sort.Strings(comp)
			comps = append(comps, comp)
		}
	}
	for _, v := range g.sorted() {
		if _, ok := index[v]; !ok {
			visit(v)
		}
	}
	// Tarjan emits a component after every component it reaches: reverse,
	// so that users come first.
	for i, j := 0, len(comps)-1; i < j; i, j = i+1, j-1 {
		comps[i], comps[j] = comps[j], comps[i]
	}
	return comps
}

// fewestBack orders one component: Eades, Lin and Smyth's greedy heuristic
// for a small feedback arc set, then single-node moves while any lowers the
// count of back edges.
func (g *graph) fewestBack(comp []string) []string {
	if len(comp) == 1 {
		return comp
	}
	in := map[string]bool{}
	for _, n := range comp {
		in[n] = true
	}
	outd, ind := map[string]int{}, map[string]int{}
	for _, u := range comp {
		for v := range g.out[u] {
			if in[v] {
				outd[u]++
				ind[v]++
			}
		}
	}
	left := map[string]bool{}
	for _, n := range comp {
		left[n] = true
	}
	remove := func(u string) {
		delete(left, u)
		for v := range g.out[u] {
			if left[v] {
				ind[v]--
			}
		}
		for v := range g.in[u] {
			if left[v] {
				outd[v]--
			}
		}
	}
	var head, tail []string
	for len(left) > 0 {
		changed := true
		for changed {
			changed = false
			for _, u := range sortedKeys(left) {
				switch {
				case outd[u] == 0: // uses nothing left: goes below
					tail = append([]string{u}, tail...)
					remove(u)
					changed = true
				case ind[u] == 0: // used by nothing left: goes above
					head = append(head, u)
					remove(u)
					changed = true
				}
			}
		}
		if len(left) == 0 {
			break
		}
		best, bestD := "", 0
		for _, u := range sortedKeys(left) {
			if d := outd[u] - ind[u]; best == "" || d > bestD {
				best, bestD = u, d
			}
		}
		head = append(head, best)
		remove(best)
	}
	order := g.improve(append(head, tail...))
	// A few seeded restarts from shuffled orders: the local search finds
	// different optima, and the fewest back edges wins.
	rng := rand.New(rand.NewPCG(1, uint64(len(comp))))
	for range 16 {
		try := append([]string{}, comp...)
		rng.Shuffle(len(try), func(i, j int) { try[i], try[j] = try[j], try[i] })
		if try = g.improve(try); g.backIn(try) < g.backIn(order) {
			order = try
		}
	}
	return order
}

// backIn counts the back edges of order among its own nodes.
func (g *graph) backIn(order []string) int {
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	c := 0
	for i, u := range order {
		for v := range g.out[u] {
			if j, ok := pos[v]; ok && j < i {
				c++
			}
		}
	}
	return c
}

// improve moves single nodes while a move lowers the back edges.
func (g *graph) improve(order []string) []string {
	for improved := true; improved; {
		improved = false
		for i := 0; i < len(order); i++ {
			if j, gain := g.bestMove(order, i); gain > 0 {
				u := order[i]
				order = append(order[:i], order[i+1:]...)
				order = append(order[:j], append([]string{u}, order[j:]...)...)
				improved = true
			}
		}
	}
	return order
}

// bestMove finds where order[i] lowers the number of back edges most if
// moved there, as the index it would have after its removal.
func (g *graph) bestMove(order []string, i int) (int, int) {
	u := order[i]
	rest := append(append([]string{}, order[:i]...), order[i+1:]...)
	// Placing u at slot k (before rest[k]): a use u → v points back when v
	// lies above u; a use w → u points back when w lies below u.
	cost := func(k int) int {
		c := 0
		for j, v := range rest {
			if j < k && g.out[u][v] {
				c++
			}
			if j >= k && g.in[u][v] {
				c++
			}
		}
		return c
	}
	cur := cost(i)
	best, bestK := cur, i
	for k := 0; k <= len(rest); k++ {
		if c := cost(k); c < best {
			best, bestK = c, k
		}
	}
	return bestK, cur - best
}

// levels is the number of files on the longest chain of uses that do not
// point back.
func (g *graph) levels(pos map[string]int) int {
	depth := map[string]int{}
	nodes := g.sorted()
	sort.Slice(nodes, func(i, j int) bool { return pos[nodes[i]] > pos[nodes[j]] })
	most := 0
	for _, u := range nodes { // from the bottom up
		d := 1
		for v := range g.out[u] {
			if pos[v] > pos[u] {
				d = max(d, depth[v]+1)
			}
		}
		depth[u] = d
		most = max(most, d)
	}
	return most
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k, ok := range m {
		if ok {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

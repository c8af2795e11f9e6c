package kv

import (
	"fmt"
	"testing"
)

// clusterOf is a Cluster that places keys over servers ids, without
// connecting to any.
func clusterOf(ids ...string) *Cluster {
	c := &Cluster{members: map[string]*member{}}
	for _, id := range ids {
		c.members[id] = &member{id: id}
	}
	c.publish()
	return c
}

// TestClusterPlacement: keys spread over every server; a server that
// leaves moves only its own keys, over all the others; one that joins
// takes keys only for itself, about its share.
func TestClusterPlacement(t *testing.T) {
	const n = 6000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	owners := func(c *Cluster) map[string]string {
		o := make(map[string]string, n)
		for _, k := range keys {
			o[k] = c.Owner(k)
		}
		return o
	}
	count := func(o map[string]string) map[string]int {
		m := map[string]int{}
		for _, id := range o {
			m[id]++
		}
		return m
	}
	three := owners(clusterOf("kv-1", "kv-2", "kv-3"))
	for id, c := range count(three) {
		if c < n/3*8/10 || c > n/3*12/10 {
			t.Errorf("%s holds %d of %d keys: want a third, ±20%%", id, c, n)
		}
	}
	two := owners(clusterOf("kv-1", "kv-3"))
	moved := map[string]int{}
	for _, k := range keys {
		if three[k] != "kv-2" && two[k] != three[k] {
			t.Fatalf("%s moved from %s to %s when kv-2 left", k, three[k], two[k])
		}
		if three[k] == "kv-2" {
			moved[two[k]]++
		}
	}
	if moved["kv-1"] == 0 || moved["kv-3"] == 0 {
		t.Errorf("kv-2's keys went to %v: want both survivors", moved)
	}
	four := owners(clusterOf("kv-1", "kv-2", "kv-3", "kv-4"))
	gained := 0
	for _, k := range keys {
		if four[k] != three[k] {
			if four[k] != "kv-4" {
				t.Fatalf("%s moved from %s to %s when kv-4 joined", k, three[k], four[k])
			}
			gained++
		}
	}
	if gained < n/4*8/10 || gained > n/4*12/10 {
		t.Errorf("kv-4 took %d of %d keys: want a quarter, ±20%%", gained, n)
	}
}

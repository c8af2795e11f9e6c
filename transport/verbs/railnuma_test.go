package verbs

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// fakeSysfs writes a sysfs tree under a temp dir: NUMA nodes with their
// CPU lists, and RDMA devices with their numa_node (absent for -2: a
// software device has no PCI function).
func fakeSysfs(t *testing.T, nodeCPUs []string, devNodes map[string]int) string {
	t.Helper()
	root := t.TempDir()
	write := func(p, s string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for n, cpus := range nodeCPUs {
		write("devices/system/node/node"+strconv.Itoa(n)+"/cpulist", cpus)
	}
	for dev, n := range devNodes {
		if n == -2 {
			if err := os.MkdirAll(filepath.Join(root, "class/infiniband", dev), 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		write("class/infiniband/"+dev+"/device/numa_node", strconv.Itoa(n))
	}
	return root
}

// The rails on the node of the process's CPUs go first, each group in the
// configured order; CPUs over several nodes, or devices that name no node,
// keep the configured order. Every rail's node is reported.
func TestRailOrderNUMA(t *testing.T) {
	root := fakeSysfs(t, []string{"0-3,8-11", "4-7,12-15"},
		map[string]int{"mlx5_0": 0, "mlx5_1": 1, "mlx5_2": 0, "mlx5_3": 1, "rxe0": -2, "one": -1})
	names := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}
	for _, c := range []struct {
		cpus      []int
		want      []string
		wantNodes []int
	}{
		{[]int{4, 5, 12}, []string{"mlx5_1", "mlx5_3", "mlx5_0", "mlx5_2"}, []int{1, 1, 0, 0}},
		{[]int{0, 9}, []string{"mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"}, []int{0, 0, 1, 1}},
		{[]int{3, 4}, names, []int{0, 1, 0, 1}}, // both nodes: no preference
		{nil, names, []int{0, 1, 0, 1}},         // affinity unknown
		{[]int{99}, names, []int{0, 1, 0, 1}},   // on no node listed
	} {
		got, nodes := railOrder(root, names, c.cpus)
		if !slices.Equal(got, c.want) || !slices.Equal(nodes, c.wantNodes) {
			t.Errorf("cpus %v: order %v nodes %v; want %v %v", c.cpus, got, nodes, c.want, c.wantNodes)
		}
	}
	soft := []string{"rxe0", "one", "mlx5_1", "absent"}
	got, nodes := railOrder(root, soft, []int{5})
	if want := []string{"mlx5_1", "rxe0", "one", "absent"}; !slices.Equal(got, want) || !slices.Equal(nodes, []int{1, -1, -1, -1}) {
		t.Errorf("devices without a node: order %v nodes %v; want %v, nodes 1 -1 -1 -1", got, nodes, want)
	}
	// A host without the node directory (one node, or not Linux).
	got, nodes = railOrder(t.TempDir(), names, []int{0})
	if !slices.Equal(got, names) || !slices.Equal(nodes, []int{-1, -1, -1, -1}) {
		t.Errorf("no sysfs: order %v nodes %v; want the configured order, no nodes", got, nodes)
	}
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		s    string
		want []int
		ok   bool
	}{
		{"", nil, true},
		{"0", []int{0}, true},
		{"0-3,8,10-11", []int{0, 1, 2, 3, 8, 10, 11}, true},
		{"3-1", nil, false},
		{"1,1", nil, false},
		{"4,2", nil, false},
		{"a", nil, false},
		{"0-", nil, false},
		{"-1", nil, false},
		{"0-70000", nil, false},
	} {
		got, err := parseCPUList(c.s)
		if (err == nil) != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v, ok %v", c.s, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"", "0-3,8,10-11", "0-65535", "1,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := parseCPUList(s)
		if err != nil {
			return
		}
		for i, c := range cpus {
			if c < 0 || c >= maxCPU || i > 0 && c <= cpus[i-1] {
				t.Fatalf("parseCPUList(%q) = %v: not increasing CPU numbers", s, cpus)
			}
		}
	})
}

package verbs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NUMA preference of the rails: a device on the NUMA node the process
// runs on moves memory that is local to that node without crossing the
// socket link, so such devices go first in the rail list (see
// orderByNode). The process's node is the one all its allowed CPUs are on
// (as under numactl --cpunodebind or a cgroup cpuset on one node); when
// they span several nodes, or the host has one (numa_node -1), the order
// is the configured one.

// sysRoot is where sysfs is mounted; tests give a tree of their own.
const sysRoot = "/sys"

// deviceNode is the NUMA node of an RDMA device's PCI function (sysfs
// class/infiniband/DEV/device/numa_node), or -1 where it is unknown: no
// such file (a software device), or the host has no NUMA.
func deviceNode(root, dev string) int {
	b, err := os.ReadFile(filepath.Join(root, "class/infiniband", dev, "device/numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// homeNode is the NUMA node all of cpus are on (sysfs
// devices/system/node/nodeN/cpulist), or -1 when they span several, or
// the nodes cannot be read.
func homeNode(root string, cpus []int) int {
	if len(cpus) == 0 {
		return -1
	}
	dirs, err := filepath.Glob(filepath.Join(root, "devices/system/node/node[0-9]*"))
	if err != nil {
		return -1
	}
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cpulist"))
		if err != nil {
			continue
		}
		on, err := parseCPUList(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		all := true
		for _, c := range cpus {
			if _, ok := slices.BinarySearch(on, c); !ok {
				all = false
				break
			}
		}
		if all {
			return n
		}
	}
	return -1
}

// maxCPU bounds a cpulist's numbers: no host has more CPUs.
const maxCPU = 1 << 16

// parseCPUList parses a kernel CPU list ("0-3,8,10-11"; empty: none) into
// its CPUs, in increasing order.
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPU {
			return nil, fmt.Errorf("cpu list %q: %q is no CPU number below %d", s, lo, maxCPU)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxCPU {
				return nil, fmt.Errorf("cpu list %q: %q is no range of CPUs", s, part)
			}
		}
		if len(cpus) > 0 && a <= cpus[len(cpus)-1] {
			return nil, fmt.Errorf("cpu list %q: %q is not after the CPUs before it", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// orderByNode returns the indexes of devices whose NUMA nodes are nodes,
// those on home first, each group in the given order. With home -1 it is
// the given order.
func orderByNode(nodes []int, home int) []int {
	idx := make([]int, len(nodes))
	for i := range idx {
		idx[i] = i
	}
	if home < 0 {
		return idx
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		la, lb := nodes[a] == home, nodes[b] == home
		switch {
		case la && !lb:
			return -1
		case lb && !la:
			return 1
		}
		return 0
	})
	return idx
}

// railOrder orders the rails' device names by NUMA preference (devices on
// the node of cpus first) and returns each one's node, under sysfs root.
func railOrder(root string, names []string, cpus []int) ([]string, []int) {
	nodes := make([]int, len(names))
	for i, n := range names {
		nodes[i] = deviceNode(root, n)
	}
	idx := orderByNode(nodes, homeNode(root, cpus))
	outN, outD := make([]string, len(idx)), make([]int, len(idx))
	for k, i := range idx {
		outN[k], outD[k] = names[i], nodes[i]
	}
	return outN, outD
}

// railsNUMA reports whether the rails' devices are on at least two
// different known NUMA nodes.
func railsNUMA(subs []*Transport) bool {
	seen := -1
	for _, t := range subs {
		if t == nil || t.numaNode < 0 {
			continue
		}
		if seen >= 0 && t.numaNode != seen {
			return true
		}
		seen = t.numaNode
	}
	return false
}

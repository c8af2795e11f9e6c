package sys

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// The node of a touched page is one of the host's nodes (sysfs lists
// them); memory of no length is an error.
func TestMemNode(t *testing.T) {
	b, err := MmapAnon(1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer Munmap(b)
	b[0] = 1
	n, err := MemNode(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/sys/devices/system/node/node" + strconv.Itoa(n)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	} else if os.IsNotExist(err) {
		if _, err := os.Stat("/sys/devices/system/node"); err == nil {
			online, _ := os.ReadFile("/sys/devices/system/node/online")
			t.Fatalf("MemNode = %d, which sysfs does not list (online: %s)", n, strings.TrimSpace(string(online)))
		}
	}
	if _, err := MemNode(nil); err == nil {
		t.Fatal("MemNode of no memory: no error")
	}
}

package cputime

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Self returns the user and system CPU time this process has used.
func Self() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Process returns the user and system CPU time process pid has used,
// from fields 14 and 15 (utime, stime) of /proc/<pid>/stat, in clock ticks.
func Process(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	return parseProcStat(b, clockTicks())
}

// parseProcStat extracts utime+stime from the contents of /proc/<pid>/stat;
// ticksPerSec must be positive.
// The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so fields are counted from the last ')'.
func parseProcStat(b []byte, ticksPerSec int64) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no command name", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("/proc stat: %d fields, want at least %d", len(f)+2, stime+3)
	}
	u, err1 := strconv.ParseInt(string(f[utime]), 10, 64)
	s, err2 := strconv.ParseInt(string(f[stime]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: bad utime %q or stime %q", f[utime], f[stime])
	}
	// Ticks are counted from boot; more than the ~292 years a Duration holds
	// is a malformed file, not a process.
	const maxTicks = math.MaxInt64 / int64(time.Second)
	if u < 0 || s < 0 || u > maxTicks || s > maxTicks-u {
		return 0, fmt.Errorf("/proc stat: utime %d or stime %d out of range", u, s)
	}
	return time.Duration((u + s) * int64(time.Second) / ticksPerSec), nil
}

// clockTicks is sysconf(_SC_CLK_TCK), the unit of /proc/<pid>/stat times.
// Without cgo it comes from the AT_CLKTCK entry of the auxiliary vector; it
// is 100 on every Linux port in practice, which is the fallback.
var clockTicks = sync.OnceValue(func() int64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	word := int(unsafe.Sizeof(uintptr(0)))
	for len(b) >= 2*word {
		var k, v uint64
		if word == 8 {
			k, v = binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		} else {
			k, v = uint64(binary.NativeEndian.Uint32(b)), uint64(binary.NativeEndian.Uint32(b[4:]))
		}
		if k == atClkTck && v > 0 {
			return int64(v)
		}
		b = b[2*word:]
	}
	return 100
})

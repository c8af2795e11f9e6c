package directory

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// thisProcess is this process as an owner, nil where /proc cannot tell.
func thisProcess() *owner {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return nil
	}
	pid := os.Getpid()
	start, _, err := procStat(pid)
	if err != nil {
		return nil
	}
	return &owner{Boot: strings.TrimSpace(string(boot)), PIDNS: ns, PID: pid, Start: start}
}

// gone reports whether process o, of this host's boot and PID namespace,
// has ended: no process has its PID (kill(2) says so, whatever /proc
// hides), or the one that has it is a zombie or another process (another
// start time). A process that exists but whose /proc entry cannot be read
// counts as live.
func gone(o *owner) bool {
	err := syscall.Kill(o.PID, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	start, state, err := procStat(o.PID)
	if err != nil {
		return false
	}
	return start != o.Start || state == 'Z' || state == 'X'
}

// procStat returns process pid's start time (clock ticks after boot) and
// state, from /proc/PID/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses;
	// the fields after its last ')' are plain, state first, starttime
	// (field 22) the 20th.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}

package probe

import "fmt"

// CheckConfig is what [Checkup] checks the host against: the size of the
// pool and the RDMA settings in use (xfer.Config's memory_mb, huge_pages
// and rdma section). The zero value checks the host alone: any device,
// port and GID, and no pool.
type CheckConfig struct {
	// MemoryMB is the pool, in MiB, that the memlock limit (and, with
	// HugeExplicit, the free huge pages) must cover.
	MemoryMB int
	// HugeExplicit: the pool asks for explicit huge pages (huge_pages:
	// explicit).
	HugeExplicit bool
	// Device, Port and GIDIndex (when GIDIndexSet) name the RDMA device,
	// port and GID table entry configured; "" and 0 pick the first that
	// works.
	Device      string
	Port        int
	GIDIndex    int
	GIDIndexSet bool
	// MTU is the configured path MTU in bytes; 0 uses the port's.
	MTU int
	// MaxSGE, MaxSendWR and MaxRecvWR are the configured queue pair
	// limits, which the device's own must cover; 0 checks none.
	MaxSGE, MaxSendWR, MaxRecvWR int
	// UseCM: connections are set up through rdma_cm, whose device file
	// must then be usable.
	UseCM bool
	// Congestion is tcp.congestion: "auto", "system" or an algorithm's
	// name, which the kernel must have and allow.
	Congestion string
}

// The statuses of a check. A check that fails comes with the fix; a
// warning may.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "fail"
	StatusSkip = "skip"
)

// Check is one finding of a checkup: one line of `xfer doctor`.
type Check struct {
	Check   string `json:"check"`  // what was checked: "modules", "port", "gid", ...
	Status  string `json:"status"` // StatusOK, StatusWarn, StatusFail or StatusSkip
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"` // the command that fixes a fail or warn
}

// Report is what a checkup found, in the order checked, with the number
// of failed and of warned checks.
type Report struct {
	Checks []Check `json:"checks"`
	Failed int     `json:"failed"`
	Warned int     `json:"warned"`
}

func (r *Report) add(check, status, fix, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Check: check, Status: status, Message: fmt.Sprintf(format, args...), Fix: fix})
	switch status {
	case StatusFail:
		r.Failed++
	case StatusWarn:
		r.Warned++
	}
}

func (r *Report) ok(check, format string, args ...any) {
	r.add(check, StatusOK, "", format, args...)
}
func (r *Report) skip(check, format string, args ...any) {
	r.add(check, StatusSkip, "", format, args...)
}
func (r *Report) warn(check, fix, format string, args ...any) {
	r.add(check, StatusWarn, fix, format, args...)
}
func (r *Report) fail(check, fix, format string, args ...any) {
	r.add(check, StatusFail, fix, format, args...)
}

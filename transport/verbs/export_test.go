package verbs

// IgnoreRevokes makes endpoints keep stale rkeys (tests only).
func IgnoreRevokes(on bool) { testIgnoreRevokes.Store(on) }

// SetMaxMsgSize makes endpoints take n as the port's largest message (0:
// the port's own).
func SetMaxMsgSize(n uint32) { testMaxMsg.Store(n) }

// Attaches counts the attach round trips of every endpoint so far.
func Attaches() uint64 { return attaches.Load() }

// SetMaxCQs sets how many CQs a device may have and returns the old limit.
func SetMaxCQs(n int) int {
	old := maxCQsPerDevice
	maxCQsPerDevice = n
	return old
}

// CQSize is the size of the CQs the transport creates on device name (0 if
// it cannot be opened).
func CQSize(name string) int {
	d, err := openDevice(mustDefaults(Config{Device: name}))
	if err != nil {
		return 0
	}
	defer d.close()
	return d.cqSize()
}

// mustDefaults is cfg with its defaults, which must be valid.
func mustDefaults(cfg Config) Config {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		panic(err)
	}
	return cfg
}

// SyncPolled counts operations completed by their posting goroutine's own
// poll of the CQ.
func SyncPolled() uint64 { return syncPolled.Load() }

func PollerSleeps() uint64 { return pollerSleeps.Load() }
func PollersAsleep() int   { return int(pollersAsleep.Load()) }

// DropListener makes the next rdma_cm acceptor close its listener before the
// dialer connects (on) or takes that back (off).
func DropListener(on bool) { testDropListener.Store(on) }

package probe

var pidfd = &feature{name: "pidfd_getfd", probe: probePidfd}

// Pidfd reports whether this process may take a file descriptor of a
// process of its own user with pidfd_open and pidfd_getfd (Linux 5.6),
// which the shm transport needs. It tries on its own memfd.
func Pidfd() error { return pidfd.result() }

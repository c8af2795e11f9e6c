// Package shm is xfer's shared-memory transport for peers on the same host.
//
// Regions that the engine allocates are memfd-backed. The first one-sided
// operation on a peer region asks the peer, over the control stream, to
// attach it: the peer checks key and rights and answers with the region's
// placement and memfd number; this side takes the memfd with pidfd_getfd and
// maps it. From then on a WRITE or READ is one memcpy, with no system call
// and no copy through a socket; bounds, key and rights are checked against
// what the peer granted before any byte is touched. A write-with-notify
// sends its notification after the copy, so the data is in place when it
// arrives. Regions without a memfd (memory the user registered
// themselves) fall back to the stream path, served by the peer.
//
// Messages: at connect, before the stream starts, each side creates a
// message ring (a memfd: a page of control words, then 256 KiB of entries
// for the default 64 KiB max_message) and an eventfd, its doorbell, and
// sends their numbers on the control connection; the peer takes both with
// pidfd_getfd and maps the ring. Every SEND, AppendSend (encoded straight
// into the peer's ring) and write-with-notify notification of the
// connection is an entry in the peer's ring, so they keep their order
// (ring.go has the layout). A ring reader goroutine per endpoint delivers
// entries from the ring itself (the message is only lent, as
// transport.Host.Deliver allows) and frees them; when it finds none it
// looks again for Params.PollSpin, yielding between looks (at most half
// the Ps spin at once, and none while the process is busy, with more
// connections delivering than it has Ps, internal/sys Handed; when the peer is
// in the same process, a reader whose spin found nothing sleeps at once
// the next 4 times, since a spinning P keeps the CPU and the Go poller
// from the goroutines that answer), then raises its sleep word and waits
// for its doorbell in the Go poller. A writer rings the doorbell (one
// write system call) only when it sees the word raised, so a message to a
// reader that is spinning or busy costs no system call. Receive credits
// still come back over the stream, in batches (OnCredit); an entry that
// finds the peer's ring full waits here, in order, and the reader moves
// it once the peer frees space (the peer rings the doorbell when asked
// to). A connection whose max_message needs a ring over 4 MiB, or whose
// peer did not offer rings in its handshake blob, sends its messages over
// the stream as before. A malformed entry (a length out of range, an
// unknown kind, a tail or head out of range) takes the connection down
// with a protocol error (FuzzDecodeEntry). The stream still tells when the
// peer is gone: before it goes down it waits (up to a second) until the
// reader has delivered what the peer published before its EOF, then wakes
// the reader, which exits; Close stops the reader and waits for it.
//
// Rights: a region that grants peers no write is handed out as a
// descriptor of its memfd opened read-only (mem.Handle.FD), and mapped
// read-only here: a store through the mapping faults. The owner sealed
// the memfd against writes before it handed the descriptor out
// (mem.Region.ReadOnlyFD), so the kernel refuses a writable mapping, or
// a write, through any descriptor of it: the read-only one, one opened
// again writable through /proc/self/fd (which a memfd's mode allows), or
// the owner's own. A write-only region is
// mapped read-write (the kernel has no write-only mapping). A mapping
// covers whole pages of a memfd from its start, so a grant of part of a
// region (which has no memfd of its own) is never mapped: its accesses
// take the stream path, where the owner checks each. And a peer process
// that may take this one's files with pidfd_getfd, which shm needs, may
// also ptrace it, or write its memory through /proc/PID/mem, the region
// through the owner's own writable mapping included: the kernel keeps a
// peer's engine, and any holder of the region's descriptors, to a
// region's rights, not a hostile process of the same user.
//
// When the peer deregisters a region it sends a revoke and this side drops
// its mapping once in-flight copies finish; the memfd keeps the pages valid
// until then, so a late copy can never touch memory the peer reused.
//
// pidfd_getfd is allowed only where ptrace would be (same user or
// CAP_SYS_PTRACE, Yama permitting). Both sides check access during the
// handshake by mapping the other's probe memfd and checking a random
// cookie, which also rules out a PID from another PID namespace. When the
// check fails the engine logs why and uses tcp.
package shm

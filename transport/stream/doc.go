// Package stream is xfer's control stream: frames (internal/wire) over one
// or more TCP connections to one peer. It carries region attach and
// revocation, receive credits, notifications and two-sided sends
// (including AppendSend, a message encoded straight into the send queue),
// and it serves the peer's one-sided WRITE and READ frames from the local
// transport.Host. Every transport composes one: tcp moves all its data over
// it; shm and rdma use it for control (attach, revoke, credits,
// notifications, liveness) and move data themselves. A transport holds a
// *Stream as a field, forwards to it what it does not do itself, and hooks
// into it through Options (OnRevoke, OnAttach, OnDown, OnCredit).
//
// One-sided operations are served by the target engine itself, with no
// intermediate buffer: a WRITE's payload is read from the socket straight
// into the registered region, a READ's data is written from the region
// straight to the socket (writev of header and region bytes). The one
// exception is each connection's 16 KiB read-ahead: a frame header is read
// together with whatever follows it on the socket, so a small frame (a 4 KiB
// page and its header) takes one read system call; a larger payload gets
// the part that came along copied, and the rest read in place. The target
// checks the region, key, rights and bounds (transport.Host.Resolve) before
// it touches a byte; a refused WRITE's payload is read and dropped (up to
// 64 MiB, beyond which the connection is closed), so the connection stays
// usable. An authorised WRITE cut off mid-payload by a broken connection may
// leave the bytes that arrived, as an RDMA WRITE would; nothing outside its
// range is ever touched.
//
// Frames (internal/wire) flow in both directions on every connection:
// either side may post operations. Large operations go on the extra
// connections of a peer (transport.Params.Conns); small ones and all SENDs
// use the first, so SENDs keep their order and small operations do not
// queue behind bulk transfers. A WRITE or READ of at least two slices of
// 1 MiB, posted while fewer operations than extra connections are
// outstanding, is cut into one slice per extra connection, all moving
// together, after one round trip that checks the access to its whole
// range (slice.go); a write-with-notify stays whole on one connection, so
// that its notification follows its data.
//
// Threading: each connection has a read loop, which never blocks on a
// write, and a respond loop that writes what the socket could not take at
// once. Outgoing frames share one ordered queue per connection (sender.go):
// a posting goroutine writes its own request when no write is under way,
// and otherwise leaves it, copied, to the writer at work, so concurrent
// posters share system calls; the read loop's replies wait until it has
// handled everything it read and then leave in one writev. Small reads
// and writes are raw system calls on the non-blocking socket (internal/sys
// Reader and Writer), which keeps the runtime's sysmon asleep between
// requests instead of waking it on each one; a goroutine still waits for
// data in the runtime's poller. A read loop that waits for the rest of a
// large payload on a TCP socket first sets the socket's receive low-water
// mark to what it still needs (up to 1 MiB of a WRITE's payload, 256 KiB
// of a READ's data), so the poller wakes it once that much has arrived
// instead of at every segment. SEND flow control uses credits: the
// receiver returns them in batches as messages are consumed.
//
// When a small operation completes and nothing more is buffered, the read
// loop yields (runtime.Gosched) so that the goroutine waiting for it runs
// before the read loop's next read, which most likely finds the socket
// empty; bulk completions do not yield. Nor does any read loop while the
// process is busy, with more connections handing over messages than it
// has Ps, and more than two (internal/sys Handed): loops that yield and then find their next
// answer waiting would keep the run queues full, and the Go poller from
// the connections whose readers wait in it.
//
// Callbacks: Host.Resolve, Lookup, Deliver and Notify, the Options
// callbacks (but OnDown) and the Completers of operations answered by the
// peer run on a connection's read loop; none may block, and none may call
// Close. Post, AppendSend, Attach, Notify, Cancel, Consumed and Revoke may
// be called from any goroutine; messages (OpSend, AppendSend) leave in the
// order they were queued.
//
// Lifetimes: New owns Params.Conn from the start, also when it fails, and
// the extra connections it dials or accepts. The stream goes down on the
// first error of any connection, on a protocol violation by the peer, or on
// Close: every operation not yet complete then completes with that error
// (a *transport.LinkError, matching net.ErrClosed), OnDown is called once,
// and later posts fail at once. Close is idempotent and waits for the read
// and respond loops of every connection; the memory of a region that a
// Resolved lent to a reply is released (Resolved.Release) before Close
// returns.
package stream

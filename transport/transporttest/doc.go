// Package transporttest is the conformance suite of the transport
// contract (package transport: Transport, Endpoint, Op, Completer, Host),
// which every transport passes on its own, without the engine, and what a
// transport needs from outside to run it.
//
// A transport's package runs the suite from its tests:
//
//	func TestTransport(t *testing.T) {
//		transporttest.Run(t, transporttest.Options{
//			New: func(testing.TB) transport.Transport { return tcp.New() },
//		})
//	}
//
// The suite checks the transport's Caps (host memory among its kinds,
// known rights), WRITE, READ and write-with-notify from 1 byte to 4 MiB
// (the notification only once its data is in place, with its value,
// region, address and length), batches of many operations in one Post,
// each completed exactly once, both sides posting from several goroutines
// at once, SEND order, max_message and receive credits, refused accesses (wrong key, out of range, wrapping addresses,
// missing rights, unknown regions: an error matching ErrRemoteAccess and
// no byte touched), revocation, Cancel, Close with operations in flight
// (net.ErrClosed), Post after Close, and leaked goroutines; and
// transport.Appender and transport.Counter where an endpoint implements
// them.
//
// What it provides:
//
//   - Host, a real transport.Host: regions mapped by package mem (memfd
//     backed when asked, as the shm transport needs), with IDs, random keys
//     and rights; Resolve and Lookup check them; Deliver copies messages
//     into a queue (Recv), Notify queues notifications (WaitNotify);
//     Region.Close revokes a region the way an engine does. Host.Op builds
//     every operation of the suite, with the registered region that holds
//     its local buffer.
//   - NewPair, which connects two endpoints over a real loopback TCP
//     connection: a small handshake exchanges each side's ID, PID, host ID
//     and LocalBlob, the acceptor checks Usable, and both sides call
//     Connect at once with Params like the engine's, extra connections
//     included.
//   - Fill and RefusesLongFill, which the end-to-end suite (xfertest) shares:
//     a seeded pattern to check data by, and the check that an append-send
//     refuses a fill longer than its bound, whether a transport's endpoint
//     or an engine's peer does it.
//
// Threading: Host is safe for concurrent use, and its Deliver and Notify
// never block. Lifetimes: everything NewPair and NewHost create is closed
// when the test ends: the endpoints, then the hosts' regions, then the
// transports.
package transporttest

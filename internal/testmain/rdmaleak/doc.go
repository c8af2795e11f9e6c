// Package rdmaleak is the leak check of every test binary that uses RDMA:
// the options of internal/testmain that fail the binary when its tests
// leave a verbs object (internal/ibv's Live: context, PD, MR, CQ, SRQ, QP,
// completion channel) or an rdma_cm object (internal/rdmacm's Live: event
// channel, CM ID, removal watch) behind.
//
// A package whose tests open either calls it from its TestMain:
//
//	func TestMain(m *testing.M) { testmain.Run(m, rdmaleak.Checks()...) }
//
// A package inside internal/ibv or internal/rdmacm calls it from its
// external test package, since this one imports both.
//
// It keeps no state: the counts are the bindings' own, which are safe for
// concurrent use.
package rdmaleak

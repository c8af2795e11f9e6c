// Package transferctl is the control channel of `xfer transfer` and of its
// Python twin, `python -m xfer.cross_node`: the few messages with which a
// producer and a consumer agree on a run and hand each other, transfer by
// transfer, the metadata of a tensor and the verdict on it. The tensors
// themselves move on the engines' data plane, through the connector; this
// channel only orchestrates the two tools, so that either side may be Go or
// Python. This documentation defines the wire format;
// python/xfer/_transferctl.py follows it.
//
// # Connection
//
// One TCP connection per run. The producer listens on its --local-host and
// --ctrl-port ([DefaultPort], 15501, unless told otherwise) and waits for
// its consumer; the consumer dials it, retrying until --timeout since the
// producer may start later. Either side closes the connection when the run
// ends or fails.
//
// # Strays
//
// Others may connect to the control port too: a port scanner, a
// slow-loris, a host without the secret. The producer runs each
// connection's handshake on its own (with a secret, the authentication
// below; without, hello and the answer ready) and serves the first
// connection to finish it. A connection that fails its handshake, closes
// before it ends, or has not ended it within the handshake timeout (the
// engine's handshake_timeout, 10 s unless set) is dropped, reported
// (xfer_auth_failures_total{plane="transfer"}) and the producer waits on.
// At most 64 connections are in their handshake at once, and 8 from one
// address: one more makes the oldest pending connection (of its address,
// when that address has 8) give way, so connections that hold the port
// open cannot lock the consumer out. A consumer that the producer drops
// before the handshake ended dials again, until --timeout.
//
// # Authentication
//
// With a shared secret (the engines' secret, the same on both sides), the
// producer opens every connection with a challenge, and serves the first
// consumer that proves the secret; a connection that has not proven it
// within the handshake timeout is dropped (Strays, above), and neither it
// nor any message before the proof counts for anything:
//
//	challenge  producer → consumer
//	  nonce        string   64 hex digits: 32 random bytes, Np
//	auth       consumer → producer
//	  nonce        string   64 hex digits: 32 random bytes, Nc
//	  proof        string   hex HMAC-SHA256(secret, "xfer-transfer-v1 consumer proof" | Np | Nc)
//	auth       producer → consumer, once the consumer's proof checked
//	  proof        string   hex HMAC-SHA256(secret, "xfer-transfer-v1 producer proof" | Np | Nc)
//
// (| is concatenation; Np and Nc are the raw bytes). A producer that
// refuses a proof answers error. After the producer's auth, every line
// either side sends starts with its MAC: 64 lower-case hex digits of
// HMAC-SHA256(key, n | message), a space, then the message as below, where
// n is the number of lines this side sent since authentication as 8 bytes
// big-endian, message is the JSON without its line feed, and key is
// HMAC-SHA256(secret, "xfer-transfer-v1 producer key" | Np | Nc) for what
// the producer sends and "... consumer key ..." for what the consumer
// sends. A line whose MAC does not check (forged, replayed, reordered)
// ends the run. Without a secret there is no challenge, and the first
// connection to answer hello with ready is the consumer: anyone who can
// reach the control port can pose as one, so use a secret wherever others
// can reach it.
//
// # Framing
//
// Each message is one JSON object (RFC 8259) encoded in UTF-8 and followed
// by one line feed (0x0A). The object holds no raw line feed: JSON escapes
// those inside strings, and writers emit compact JSON with members in the
// order listed below, zero values left out, and text other than ASCII as
// UTF-8 rather than \u escapes (Go's encoding/json without HTML escaping,
// Python's json.dumps with separators=(",", ":") and ensure_ascii=False),
// so that the two write the same bytes for the same message. A message, line feed
// included, is at most [MaxLine] (65536) bytes; a reader refuses a longer
// one (the MAC prefix of an authenticated line not counted). There is no
// other header or length.
//
// Every message has a "type" member, a string naming it. Readers ignore
// members they do not know, and take an absent member as its zero value
// (0, "", false, null): writers may omit zero values, and Go's does.
//
// # Messages
//
// Members, with their JSON types, by message type:
//
//	hello  producer → consumer, first
//	  transfers    number   how many transfers the run makes (--num-transfers)
//	  bytes        number   the size of each tensor in bytes (--tensor-size-mb × 2^20)
//	  dtype        string   the tensors' element type, safetensors' name: "F32", "U8"
//	  mode         string   how the producer puts: "copy", "zerocopy" or "gpu"
//	  benchmark    boolean  true under --benchmark: no MD5s are sent
//
//	ready  consumer → producer, the answer to hello
//	  pull         string   how the consumer's gets move the data: "write" or "read"
//
//	put    producer → consumer, once per transfer
//	  seq          number   the transfer, counted from 1
//	  meta         object   the connector's metadata of the tensor (connector.Meta):
//	                          producer  string  the producer engine's address, host:port
//	                          key       string  "from/to/key": the stage IDs and the key
//	                          size      number  bytes
//	                          kind      number  2, a tensor (1: bytes, 3: an object)
//	                          dtype     string  as in hello
//	                          shape     array   of numbers, the tensor's dimensions
//	  md5          string   32 lower-case hex digits: the MD5 of the tensor's bytes;
//	                        absent under benchmark
//	  put_seconds  number   how long the producer's put took, in seconds
//
//	got    consumer → producer, the answer to each put
//	  seq          number   the put's seq
//	  md5_ok       boolean  whether the bytes got match md5; null or absent
//	                        under benchmark
//	  seconds      number   how long the consumer's get took, in seconds
//	  transport    string   the transport the get used: "tcp", "shm" or "rdma";
//	                        absent when the consumer cannot tell
//
//	error  either side, in place of any message due
//	  error        string   why this side gives up, for people
//
// # Conversation
//
// The producer sends hello; the consumer compares transfers, bytes and
// benchmark with its own flags and answers ready, or error when they
// differ. Then, for seq = 1 to transfers, the producer puts the tensor
// and sends put, and the consumer gets it, checks its MD5 and answers got.
// After the last got both sides close. A side that fails sends error
// (best effort) and closes; a side that receives error, or a message of
// another type than the one due, gives up. Each side waits at most
// --timeout for each message due.
//
// An example run of one transfer, as Go writes it (meta shortened):
//
//	{"type":"hello","transfers":1,"bytes":4194304,"dtype":"F32","mode":"copy"}
//	{"type":"ready","pull":"write"}
//	{"type":"put","seq":1,"meta":{"producer":"10.0.0.1:15500","key":"producer/consumer/tensor-1",...},"md5":"9e107d9d372bb6826bd81d3542a419d6","put_seconds":0.0021}
//	{"type":"got","seq":1,"md5_ok":true,"seconds":0.0013,"transport":"tcp"}
//
// # Use
//
// [Serve] and [Connect] make the connection and run its handshake (the
// authentication with a secret, then hello; see Strays); [Dial] makes a
// plain one, and [NewConn] wraps it in a [Conn],
// whose Send and Recv exchange [Msg]s and whose Fail tells the other side
// why this one gives up. [Encode] and [Decode] are the framing alone. A
// Conn is for one goroutine; it owns the connection it wraps, and its
// Close, idempotent, closes both.
package transferctl

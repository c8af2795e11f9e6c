package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// Mooncake's transfer notifications (TransferNotify: a name and a
// message) and its probe, over xfer.
//
// A transfer given a notify is posted and waited for as any other; once
// every operation is done (its data in place at the target), the
// initiator sends the notify as one message on the same peer
// (Peer.Send), and the target's engine queues it for get_notifies. This
// is the order Mooncake keeps: its engine sends the notify once it sees
// the batch completed. xfer's write-with-notify carries a 32-bit value
// (WRITE_WITH_IMM over rdma), which cannot hold two strings, so the
// notify travels as a message of the engine's own stream instead, after
// the data on the same connection.
//
// The message, little-endian:
//
//	magic   u32  notifyMagic
//	nameLen u32
//	name    nameLen bytes
//	msg     the rest
const (
	notifyMagic     = 0x4e434d58 // "XMCN"
	notifyHeaderLen = 8
	// maxNotifies bounds the notifications queued for get_notifies; past
	// it, new ones are dropped and counted (a target that never asks).
	maxNotifies = 1 << 20
)

// mcNotify is one notification: Mooncake's TransferNotify.
type mcNotify struct {
	Name string `json:"name"`
	Msg  string `json:"msg"`
}

// notifyLen is the length of n's message.
func (n mcNotify) notifyLen() int { return notifyHeaderLen + len(n.Name) + len(n.Msg) }

// appendNotify appends n's message to b.
func appendNotify(b []byte, n mcNotify) []byte {
	b = binary.LittleEndian.AppendUint32(b, notifyMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(n.Name)))
	b = append(b, n.Name...)
	return append(b, n.Msg...)
}

// decodeNotify decodes a message; false when it is not a notification.
func decodeNotify(b []byte) (mcNotify, bool) {
	if len(b) < notifyHeaderLen || binary.LittleEndian.Uint32(b) != notifyMagic {
		return mcNotify{}, false
	}
	nl := binary.LittleEndian.Uint32(b[4:])
	if uint64(nl) > uint64(len(b)-notifyHeaderLen) {
		return mcNotify{}, false
	}
	name := b[notifyHeaderLen : notifyHeaderLen+int(nl)]
	return mcNotify{Name: string(name), Msg: string(b[notifyHeaderLen+int(nl):])}, true
}

// mcInbox is an engine's received notifications, until get_notifies
// takes them.
// Its lock is its own, held only to append or swap the queue: the
// receive path that pushes never waits on the engine's other locks.
type mcInbox struct {
	mu      sync.Mutex
	items   []mcNotify
	dropped uint64
}

// push queues n, or drops it when maxNotifies wait already.
func (in *mcInbox) push(n mcNotify) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.items) >= maxNotifies {
		in.dropped++
		return
	}
	in.items = append(in.items, n)
}

// take returns every queued notification, oldest first, and empties the
// queue (get_notifies), with the count dropped since the last take.
func (in *mcInbox) take() ([]mcNotify, uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out, d := in.items, in.dropped
	in.items, in.dropped = nil, 0
	return out, d
}

// serve takes the notifications of every peer that connects to m: its
// accepted peers' messages go to m's inbox. It returns when m closes.
func (m *mcEngine) serve() {
	defer m.bg.Done()
	for {
		p, err := m.e.Accept(m.ctx)
		if err != nil {
			return
		}
		p.Handle(func(msg []byte) {
			if n, ok := decodeNotify(msg); ok {
				m.inbox.push(n)
			}
		})
	}
}

// checkNotify refuses a notification too large for one message, before
// anything is posted.
func (m *mcEngine) checkNotify(n *mcNotify) error {
	if n == nil {
		return nil
	}
	if max := m.e.Config().MaxMessage; n.notifyLen() > max {
		return fmt.Errorf("mooncake: a notify of %d bytes (name and message): at most %d: %w",
			len(n.Name)+len(n.Msg), max-notifyHeaderLen, errInvalid)
	}
	return nil
}

// sendNotify sends n to the peer mp after the data of a transfer.
func (m *mcEngine) sendNotify(ctx context.Context, mp *mcPeer, n mcNotify) error {
	size := n.notifyLen()
	ok, err := mp.p.TrySendAppend(size, func(b []byte) []byte { return appendNotify(b, n) })
	if err == nil && ok {
		return nil
	}
	buf, aerr := m.e.AllocWait(ctx, size)
	if aerr != nil {
		return fmt.Errorf("mooncake: a buffer for a notify: %w", aerr)
	}
	defer m.e.Free(buf)
	b := buf.Bytes()[:size]
	appendNotify(b[:0], n)
	if err := mp.p.Send(ctx, b); err != nil {
		return fmt.Errorf("mooncake: notify %s after the transfer: %w", mp.p, err)
	}
	return nil
}

// probe checks that segment seg answers now, as Mooncake's send_probe: it
// dials the segment (or takes its peer) and reads the header of its
// segment table, a round trip to its engine, within the op timeout.
func (m *mcEngine) probe(seg string) error {
	ctx, cancel := m.opCtx(0)
	defer cancel()
	mp, err := m.peer(ctx, seg)
	if err != nil {
		return err
	}
	buf, err := m.e.AllocWait(ctx, segHeaderLen)
	if err != nil {
		return fmt.Errorf("mooncake: a buffer for a probe: %w", err)
	}
	defer m.e.Free(buf)
	b := buf.Bytes()[:segHeaderLen]
	if err := mp.p.Read(ctx, b, mp.table.At(0)); err != nil {
		m.forget(seg, mp)
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("mooncake: probe %s: no answer within %v (MC_TRANSFER_TIMEOUT): %w", seg, mcTimeout(0), err)
		}
		return fmt.Errorf("mooncake: probe %s: %w", seg, err)
	}
	if _, err := segmentCount(b); err != nil {
		m.forget(seg, mp)
		return fmt.Errorf("mooncake: probe %s: %w: %w", seg, err, errMetadata)
	}
	return nil
}

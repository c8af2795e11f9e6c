package wire

import (
	"encoding/binary"
	"fmt"
)

// FrameHeaderLen is the size of every stream frame header.
const FrameHeaderLen = 48

// FrameType is the type of a stream frame.
type FrameType uint8

const (
	// FrameWrite asks the target to store the Len payload bytes that follow
	// at Addr in Region. FlagImm adds a notification carrying Imm.
	FrameWrite FrameType = 1
	// FrameRead asks the target to return Len bytes from Addr in Region.
	FrameRead FrameType = 2
	// FrameSend carries a Len-byte message for the receive queue.
	FrameSend FrameType = 3
	// FrameCredit returns Len receive credits to the sender.
	FrameCredit FrameType = 4
	// FrameResp answers the request with the same ID. On StatusOK a read's
	// data, or an attach's AttachInfo, follows; otherwise Len bytes of error
	// text follow.
	FrameResp FrameType = 5
	// FrameAttach asks for the placement of a whole region (shm).
	FrameAttach FrameType = 6
	// FrameNotify delivers a notification for data placed out of band
	// (shm): Imm, Region, Addr and Len describe it.
	FrameNotify FrameType = 7
	// FrameRevoke tells attached peers that Region is gone; it needs no answer.
	FrameRevoke FrameType = 8
	// FramePathDown tells the peer that this side's own data path of the
	// connection (rdma's queue pairs) failed while the stream lives: from
	// now on both sides carry the connection's operations on the stream.
	// It has no payload and needs no answer.
	FramePathDown FrameType = 9
	// FrameExport tells the peer of a region this side exported after the
	// handshake: its Len-byte payload is one Export (AppendExport, at most
	// MaxExportLen bytes). It needs no answer, and goes only to a peer whose
	// handshake said CapExports.
	FrameExport FrameType = 10
	frameMax    FrameType = 11
)

// Flags.
const (
	FlagImm uint8 = 1 << 0 // FrameWrite: notify the target with Imm
	// FlagNoAck asks the target not to answer a successful FrameWrite or
	// FrameSend; failures are always answered.
	FlagNoAck uint8 = 1 << 1
	flagsAll        = FlagImm | FlagNoAck
)

// MaxFramePayload bounds the payload of any one frame.
const MaxFramePayload = 1 << 30

// MaxErrorText bounds the error text of a failed response.
const MaxErrorText = 1024

// Header is a stream frame header.
//
//	off size field
//	0   1    type
//	1   1    flags
//	2   1    status (responses)
//	3   1    access (attach)
//	4   4    imm
//	8   8    id
//	16  4    region
//	20  4    reserved, zero
//	24  8    key
//	32  8    addr
//	40  8    len
type Header struct {
	Type   FrameType
	Flags  uint8
	Status Status
	Access uint8
	Imm    uint32
	ID     uint64
	Region uint32
	Key    uint64
	Addr   uint64
	Len    uint64
}

// Put encodes h into b, which must hold FrameHeaderLen bytes.
func (h *Header) Put(b []byte) {
	_ = b[FrameHeaderLen-1]
	b[0] = byte(h.Type)
	b[1] = h.Flags
	b[2] = byte(h.Status)
	b[3] = h.Access
	binary.LittleEndian.PutUint32(b[4:], h.Imm)
	binary.LittleEndian.PutUint64(b[8:], h.ID)
	binary.LittleEndian.PutUint32(b[16:], h.Region)
	binary.LittleEndian.PutUint32(b[20:], 0)
	binary.LittleEndian.PutUint64(b[24:], h.Key)
	binary.LittleEndian.PutUint64(b[32:], h.Addr)
	binary.LittleEndian.PutUint64(b[40:], h.Len)
}

// DecodeHeader decodes and checks a frame header. It checks the fields that
// can be checked without context: the type, the flags, the reserved bytes,
// the payload length limits of each type. It never allocates.
func DecodeHeader(b []byte, h *Header) error {
	if len(b) < FrameHeaderLen {
		return fmt.Errorf("%w: frame header: %d bytes", ErrMalformed, len(b))
	}
	h.Type = FrameType(b[0])
	h.Flags = b[1]
	h.Status = Status(b[2])
	h.Access = b[3]
	h.Imm = binary.LittleEndian.Uint32(b[4:])
	h.ID = binary.LittleEndian.Uint64(b[8:])
	h.Region = binary.LittleEndian.Uint32(b[16:])
	reserved := binary.LittleEndian.Uint32(b[20:])
	h.Key = binary.LittleEndian.Uint64(b[24:])
	h.Addr = binary.LittleEndian.Uint64(b[32:])
	h.Len = binary.LittleEndian.Uint64(b[40:])
	switch {
	case h.Type == 0 || h.Type >= frameMax:
		return fmt.Errorf("%w: frame header: unknown frame type %d", ErrMalformed, h.Type)
	case h.Flags&^flagsAll != 0:
		return fmt.Errorf("%w: frame header: unknown flags %#x", ErrMalformed, h.Flags)
	case reserved != 0:
		return fmt.Errorf("%w: frame header: reserved bytes set", ErrMalformed)
	case h.Status >= statusMax:
		return fmt.Errorf("%w: frame header: unknown status %d", ErrMalformed, h.Status)
	case h.Len > MaxFramePayload:
		return fmt.Errorf("%w: frame header: length %d exceeds %d", ErrMalformed, h.Len, MaxFramePayload)
	case h.Type == FrameResp && h.Status != StatusOK && h.Len > MaxErrorText:
		return fmt.Errorf("%w: frame header: error text of %d bytes", ErrMalformed, h.Len)
	case h.Type == FrameAttach && (h.Len != 0 || h.Access == 0 || h.Access&^3 != 0):
		return fmt.Errorf("%w: frame header: bad attach request", ErrMalformed)
	case h.Type == FrameExport && (h.Len == 0 || h.Len > MaxExportLen):
		return fmt.Errorf("%w: frame header: export of %d bytes (limit %d)", ErrMalformed, h.Len, MaxExportLen)
	case h.Type == FramePathDown && (h.Len != 0 || h.Addr != 0 || h.Region != 0 || h.Key != 0 || h.ID != 0):
		return fmt.Errorf("%w: frame header: path-down frame with fields set", ErrMalformed)
	case (h.Type == FrameCredit || h.Type == FrameRevoke) && h.Addr != 0:
		return fmt.Errorf("%w: frame header: %v with an address", ErrMalformed, h.Type)
	case h.Flags&FlagImm != 0 && h.Type != FrameWrite:
		return fmt.Errorf("%w: frame header: imm flag on frame type %d", ErrMalformed, h.Type)
	}
	return nil
}

// HasPayload reports whether Len bytes of payload follow the header.
func (h *Header) HasPayload() bool {
	switch h.Type {
	case FrameWrite, FrameSend:
		return true
	case FrameResp:
		return h.Len > 0
	}
	return false
}

// AttachInfoLen is the size of the AttachInfo payload.
const AttachInfoLen = 112

// AttachInfo is the answer to FrameAttach: where the region lives in the
// owner's process and how to map it. A region in GPU memory (Kind 1) comes
// with a CUDA IPC handle of the allocation that holds it, and the offset
// of the region's first byte in that allocation.
type AttachInfo struct {
	PID  uint32
	FD   int32 // memfd number in the owner's process, or -1
	Base uint64
	Len  uint64
	Key  uint64
	RKey uint32 // the region's rkey on the rdma transport, else 0
	// Kind is the region's memory: 0 host, 1 a GPU's (CUDA), on GPU
	// Device.
	Kind, Device uint8
	// IPC is the CUDA IPC handle of the allocation that holds a GPU
	// region (all zero for host memory or when the owner could not make
	// one), and IPCOffset the region's offset in that allocation.
	IPC       [64]byte
	IPCOffset uint64
}

// Put encodes a into b (AttachInfoLen bytes).
func (a *AttachInfo) Put(b []byte) {
	_ = b[AttachInfoLen-1]
	binary.LittleEndian.PutUint32(b[0:], a.PID)
	binary.LittleEndian.PutUint32(b[4:], uint32(a.FD))
	binary.LittleEndian.PutUint64(b[8:], a.Base)
	binary.LittleEndian.PutUint64(b[16:], a.Len)
	binary.LittleEndian.PutUint64(b[24:], a.Key)
	binary.LittleEndian.PutUint32(b[32:], a.RKey)
	b[36], b[37], b[38], b[39] = a.Kind, a.Device, 0, 0
	copy(b[40:104], a.IPC[:])
	binary.LittleEndian.PutUint64(b[104:], a.IPCOffset)
}

// DecodeAttachInfo decodes an AttachInfo.
func DecodeAttachInfo(b []byte) (AttachInfo, error) {
	if len(b) != AttachInfoLen {
		return AttachInfo{}, fmt.Errorf("%w: attach info: %d bytes, want %d", ErrMalformed, len(b), AttachInfoLen)
	}
	a := AttachInfo{
		PID:       binary.LittleEndian.Uint32(b[0:]),
		FD:        int32(binary.LittleEndian.Uint32(b[4:])),
		Base:      binary.LittleEndian.Uint64(b[8:]),
		Len:       binary.LittleEndian.Uint64(b[16:]),
		Key:       binary.LittleEndian.Uint64(b[24:]),
		RKey:      binary.LittleEndian.Uint32(b[32:]),
		Kind:      b[36],
		Device:    b[37],
		IPCOffset: binary.LittleEndian.Uint64(b[104:]),
	}
	copy(a.IPC[:], b[40:104])
	if a.Base+a.Len < a.Base || a.Len == 0 || a.FD < -1 || b[38] != 0 || b[39] != 0 {
		return AttachInfo{}, fmt.Errorf("%w: attach info: bad range or fd", ErrMalformed)
	}
	switch {
	case a.Kind > 1:
		return AttachInfo{}, fmt.Errorf("%w: attach info: memory kind %d", ErrMalformed, a.Kind)
	case a.Kind == 0 && (a.Device != 0 || a.IPC != [64]byte{} || a.IPCOffset != 0):
		return AttachInfo{}, fmt.Errorf("%w: attach info: a CUDA IPC handle for host memory", ErrMalformed)
	case a.Kind == 1 && a.FD != -1:
		return AttachInfo{}, fmt.Errorf("%w: attach info: a memfd for GPU memory", ErrMalformed)
	}
	return a, nil
}

func (t FrameType) String() string {
	switch t {
	case FrameWrite:
		return "write"
	case FrameRead:
		return "read"
	case FrameSend:
		return "send"
	case FrameCredit:
		return "credit"
	case FrameResp:
		return "resp"
	case FrameAttach:
		return "attach"
	case FrameNotify:
		return "notify"
	case FrameRevoke:
		return "revoke"
	case FramePathDown:
		return "path-down"
	case FrameExport:
		return "export"
	}
	return fmt.Sprintf("frame(%d)", uint8(t))
}

package kv

import "google.golang.org/protobuf/encoding/protowire"

// The hot messages of the data-plane request path, a GET request the server
// answers inline, a PUT request with its value inline, and the responses to
// both, are encoded and decoded here without allocating: the key and value
// alias the message, which is read in place (Peer.Handle). Anything else,
// or anything unusual (a repeated field, an unknown one, a wrong wire type),
// reports !ok and takes proto.Unmarshal. FuzzFastDecode checks that
// whatever these accept, proto.Unmarshal decodes to the same fields, and
// TestFastEncoding that the encoders write what proto.Marshal writes.

// Field numbers of kv.proto.
const (
	fRequestID, fRequestGet, fRequestPut                         = 1, 2, 3
	fGetKey, fGetBuffer, fGetInlineMax, fGetServerID, fGetNotify = 1, 3, 4, 5, 6
	fPutKey, fPutValue, fPutServerID                             = 1, 4, 5
	fResponseID, fResponseCode, fResponseGet, fResponsePut       = 1, 2, 5, 6
	fGetRespLength, fGetRespVersion, fGetRespInline, fGetRespVal = 1, 2, 3, 4
	fPutRespVersion, fPutRespEvicted                             = 1, 2
)

// fields walks the fields of message b, handing each to f with the bytes
// after its tag; f returns how many of them the value takes, or -1 to
// refuse the message. A repeated field, a field number above 31 or a
// malformed tag refuses it too.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) int) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > 31 || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		if n = f(num, typ, b); n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// fastGet is a GetRequest inside a Request.
type fastGet struct {
	id        uint64
	key       []byte
	inlineMax uint64
	serverID  []byte
	notify    bool
}

// envelope decodes a Request (or, with response, a successful Response)
// whose operation is the message in field op: its id, and the operation's
// bytes. A Response with an error code is refused: the full path words it.
func envelope(b []byte, op protowire.Number, response bool) (id uint64, inner []byte, ok bool) {
	ok = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fRequestID && typ == protowire.VarintType: // = fResponseID
			id, n = protowire.ConsumeVarint(v)
		case num == op && typ == protowire.BytesType:
			inner, n = protowire.ConsumeBytes(v)
		case response && num == fResponseCode && typ == protowire.VarintType:
			var code uint64
			if code, n = protowire.ConsumeVarint(v); code != 0 {
				n = -1
			}
		default:
			n = -1
		}
		return n
	})
	return id, inner, ok && inner != nil
}

// parseGetRequest decodes a Request holding a GetRequest.
func parseGetRequest(b []byte) (r fastGet, ok bool) {
	var get []byte
	if r.id, get, ok = envelope(b, fRequestGet, false); !ok {
		return r, false
	}
	ok = fields(get, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fGetKey && typ == protowire.BytesType:
			r.key, n = protowire.ConsumeBytes(v)
		case num == fGetBuffer && typ == protowire.BytesType:
			_, n = protowire.ConsumeBytes(v)
		case num == fGetInlineMax && typ == protowire.VarintType:
			r.inlineMax, n = protowire.ConsumeVarint(v)
		case num == fGetServerID && typ == protowire.BytesType:
			r.serverID, n = protowire.ConsumeBytes(v)
		case num == fGetNotify && typ == protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(v)
			r.notify = x != 0
		default:
			n = -1
		}
		return n
	})
	return r, ok
}

// fastGetResponse is a successful Response holding a GetResponse.
type fastGetResponse struct {
	id              uint64
	length, version uint64
	inline          bool
	value           []byte
}

// parseGetResponse decodes a successful Response holding a GetResponse.
func parseGetResponse(b []byte) (r fastGetResponse, ok bool) {
	var get []byte
	if r.id, get, ok = envelope(b, fResponseGet, true); !ok {
		return r, false
	}
	ok = fields(get, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		var x uint64
		switch {
		case num == fGetRespLength && typ == protowire.VarintType:
			r.length, n = protowire.ConsumeVarint(v)
		case num == fGetRespVersion && typ == protowire.VarintType:
			r.version, n = protowire.ConsumeVarint(v)
		case num == fGetRespInline && typ == protowire.VarintType:
			x, n = protowire.ConsumeVarint(v)
			r.inline = x != 0
		case num == fGetRespVal && typ == protowire.BytesType:
			r.value, n = protowire.ConsumeBytes(v)
		default:
			n = -1
		}
		return n
	})
	return r, ok
}

// The encoders below write the fields in proto.Marshal's order and omit
// zero values as proto3 does; these helpers write one field each.

// sizeBytesField is the encoded size of a bytes field, 0 when empty.
func sizeBytesField(num protowire.Number, v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

// sizeVarintField is the encoded size of a varint field, 0 when zero.
func sizeVarintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// appendBytesField appends a bytes field unless it is empty.
func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendVarintField appends a varint field unless it is zero.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendEnvelope appends a Request's (or Response's) id and the header of
// its operation, the message in field op, n bytes long.
func appendEnvelope(b []byte, id uint64, op protowire.Number, n int) []byte {
	b = appendVarintField(b, fRequestID, id) // = fResponseID
	b = protowire.AppendTag(b, op, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// appendGetRequest encodes Request{id, Get{key, buffer, inlineMax,
// serverID, notify}} as proto.Marshal does.
func appendGetRequest(b []byte, id uint64, key, buffer []byte, inlineMax uint64, serverID []byte, notify bool) []byte {
	var nt uint64
	if notify {
		nt = 1
	}
	n := sizeBytesField(fGetKey, key) + sizeBytesField(fGetBuffer, buffer) +
		sizeVarintField(fGetInlineMax, inlineMax) + sizeBytesField(fGetServerID, serverID) +
		sizeVarintField(fGetNotify, nt)
	b = appendEnvelope(b, id, fRequestGet, n)
	b = appendBytesField(b, fGetKey, key)
	b = appendBytesField(b, fGetBuffer, buffer)
	b = appendVarintField(b, fGetInlineMax, inlineMax)
	b = appendBytesField(b, fGetServerID, serverID)
	return appendVarintField(b, fGetNotify, nt)
}

// appendGetResponse encodes Response{id, Get{length, version, inline,
// value}} as proto.Marshal does.
func appendGetResponse(b []byte, id, length, version uint64, inline bool, value []byte) []byte {
	var in uint64
	if inline {
		in = 1
	}
	n := sizeVarintField(fGetRespLength, length) + sizeVarintField(fGetRespVersion, version) +
		sizeVarintField(fGetRespInline, in) + sizeBytesField(fGetRespVal, value)
	b = appendEnvelope(b, id, fResponseGet, n)
	b = appendVarintField(b, fGetRespLength, length)
	b = appendVarintField(b, fGetRespVersion, version)
	b = appendVarintField(b, fGetRespInline, in)
	return appendBytesField(b, fGetRespVal, value)
}

// fastPut is a PutRequest with its value inline, inside a Request.
type fastPut struct {
	id       uint64
	key      []byte
	value    []byte // not nil, possibly empty
	serverID []byte
}

// parsePutRequest decodes a Request holding a PutRequest whose value is
// inline. A PUT from a buffer reports !ok.
func parsePutRequest(b []byte) (r fastPut, ok bool) {
	var put []byte
	if r.id, put, ok = envelope(b, fRequestPut, false); !ok {
		return r, false
	}
	ok = fields(put, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fPutKey && typ == protowire.BytesType:
			r.key, n = protowire.ConsumeBytes(v)
		case num == fPutValue && typ == protowire.BytesType:
			r.value, n = protowire.ConsumeBytes(v)
		case num == fPutServerID && typ == protowire.BytesType:
			r.serverID, n = protowire.ConsumeBytes(v)
		default:
			n = -1
		}
		return n
	})
	return r, ok && r.value != nil
}

// fastPutResponse is a successful Response holding a PutResponse.
type fastPutResponse struct {
	id, version uint64
	evicted     uint32
}

// parsePutResponse decodes a successful Response holding a PutResponse.
func parsePutResponse(b []byte) (r fastPutResponse, ok bool) {
	var put []byte
	if r.id, put, ok = envelope(b, fResponsePut, true); !ok {
		return r, false
	}
	ok = fields(put, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fPutRespVersion && typ == protowire.VarintType:
			r.version, n = protowire.ConsumeVarint(v)
		case num == fPutRespEvicted && typ == protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(v)
			r.evicted = uint32(x) // as proto.Unmarshal does: the low 32 bits
		default:
			n = -1
		}
		return n
	})
	return r, ok
}

// appendPutRequest encodes Request{id, Put{key, serverID, value
// (inline)}} as proto.Marshal does.
func appendPutRequest(b []byte, id uint64, key, value, serverID []byte) []byte {
	// A set oneof field is written even when empty, after the others.
	n := sizeBytesField(fPutKey, key) + sizeBytesField(fPutServerID, serverID) +
		protowire.SizeTag(fPutValue) + protowire.SizeBytes(len(value))
	b = appendEnvelope(b, id, fRequestPut, n)
	b = appendBytesField(b, fPutKey, key)
	b = appendBytesField(b, fPutServerID, serverID)
	b = protowire.AppendTag(b, fPutValue, protowire.BytesType)
	return protowire.AppendBytes(b, value)
}

// appendPutResponse encodes Response{id, Put{version, evicted}} as
// proto.Marshal does.
func appendPutResponse(b []byte, id, version uint64, evicted uint32) []byte {
	n := sizeVarintField(fPutRespVersion, version) + sizeVarintField(fPutRespEvicted, uint64(evicted))
	b = appendEnvelope(b, id, fResponsePut, n)
	b = appendVarintField(b, fPutRespVersion, version)
	return appendVarintField(b, fPutRespEvicted, uint64(evicted))
}

package kv

import "google.golang.org/protobuf/encoding/protowire"

// The hot messages of the data-plane request path, a GET request the server
// answers inline, a PUT request with its value inline, and the responses to
// both, are encoded and decoded here without allocating: the key and value
// alias the message, which is read in place (Peer.Handle). Anything else, or anything unusual (a repeated field, an
// unknown one, a wrong wire type), reports !ok and takes proto.Unmarshal.
// FuzzFastDecode checks that whatever these accept, proto.Unmarshal decodes
// to the same fields.

// Field numbers of kv.proto.
const (
	fRequestID, fRequestGet, fRequestPut                         = 1, 2, 3
	fGetKey, fGetBuffer, fGetInlineMax, fGetServerID             = 1, 3, 4, 5
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
}

// parseGetRequest decodes a Request holding a GetRequest.
func parseGetRequest(b []byte) (r fastGet, ok bool) {
	var get []byte
	ok = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fRequestID && typ == protowire.VarintType:
			r.id, n = protowire.ConsumeVarint(v)
		case num == fRequestGet && typ == protowire.BytesType:
			get, n = protowire.ConsumeBytes(v)
		default:
			n = -1
		}
		return n
	})
	if !ok || get == nil {
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
	ok = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fResponseID && typ == protowire.VarintType:
			r.id, n = protowire.ConsumeVarint(v)
		case num == fResponseCode && typ == protowire.VarintType:
			var code uint64
			if code, n = protowire.ConsumeVarint(v); code != 0 {
				n = -1 // an error: the full path words it
			}
		case num == fResponseGet && typ == protowire.BytesType:
			get, n = protowire.ConsumeBytes(v)
		default:
			n = -1
		}
		return n
	})
	if !ok || get == nil {
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

// appendGetRequest encodes Request{id, Get{key, buffer, inlineMax,
// serverID}} as proto.Marshal does.
func appendGetRequest(b []byte, id uint64, key, buffer []byte, inlineMax uint64, serverID []byte) []byte {
	n := 0
	if len(key) > 0 {
		n += protowire.SizeTag(fGetKey) + protowire.SizeBytes(len(key))
	}
	if len(buffer) > 0 {
		n += protowire.SizeTag(fGetBuffer) + protowire.SizeBytes(len(buffer))
	}
	if inlineMax != 0 {
		n += protowire.SizeTag(fGetInlineMax) + protowire.SizeVarint(inlineMax)
	}
	if len(serverID) > 0 {
		n += protowire.SizeTag(fGetServerID) + protowire.SizeBytes(len(serverID))
	}
	if id != 0 {
		b = protowire.AppendTag(b, fRequestID, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	b = protowire.AppendTag(b, fRequestGet, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if len(key) > 0 {
		b = protowire.AppendTag(b, fGetKey, protowire.BytesType)
		b = protowire.AppendBytes(b, key)
	}
	if len(buffer) > 0 {
		b = protowire.AppendTag(b, fGetBuffer, protowire.BytesType)
		b = protowire.AppendBytes(b, buffer)
	}
	if inlineMax != 0 {
		b = protowire.AppendTag(b, fGetInlineMax, protowire.VarintType)
		b = protowire.AppendVarint(b, inlineMax)
	}
	if len(serverID) > 0 {
		b = protowire.AppendTag(b, fGetServerID, protowire.BytesType)
		b = protowire.AppendBytes(b, serverID)
	}
	return b
}

// appendGetResponse encodes Response{id, Get{length, version, inline,
// value}} as proto.Marshal does.
func appendGetResponse(b []byte, id, length, version uint64, inline bool, value []byte) []byte {
	n := 0
	if length != 0 {
		n += protowire.SizeTag(fGetRespLength) + protowire.SizeVarint(length)
	}
	if version != 0 {
		n += protowire.SizeTag(fGetRespVersion) + protowire.SizeVarint(version)
	}
	if inline {
		n += protowire.SizeTag(fGetRespInline) + 1
	}
	if len(value) > 0 {
		n += protowire.SizeTag(fGetRespVal) + protowire.SizeBytes(len(value))
	}
	if id != 0 {
		b = protowire.AppendTag(b, fResponseID, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	b = protowire.AppendTag(b, fResponseGet, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if length != 0 {
		b = protowire.AppendTag(b, fGetRespLength, protowire.VarintType)
		b = protowire.AppendVarint(b, length)
	}
	if version != 0 {
		b = protowire.AppendTag(b, fGetRespVersion, protowire.VarintType)
		b = protowire.AppendVarint(b, version)
	}
	if inline {
		b = protowire.AppendTag(b, fGetRespInline, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if len(value) > 0 {
		b = protowire.AppendTag(b, fGetRespVal, protowire.BytesType)
		b = protowire.AppendBytes(b, value)
	}
	return b
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
	ok = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fRequestID && typ == protowire.VarintType:
			r.id, n = protowire.ConsumeVarint(v)
		case num == fRequestPut && typ == protowire.BytesType:
			put, n = protowire.ConsumeBytes(v)
		default:
			n = -1
		}
		return n
	})
	if !ok || put == nil {
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
	ok = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) (n int) {
		switch {
		case num == fResponseID && typ == protowire.VarintType:
			r.id, n = protowire.ConsumeVarint(v)
		case num == fResponseCode && typ == protowire.VarintType:
			var code uint64
			if code, n = protowire.ConsumeVarint(v); code != 0 {
				n = -1 // an error: the full path words it
			}
		case num == fResponsePut && typ == protowire.BytesType:
			put, n = protowire.ConsumeBytes(v)
		default:
			n = -1
		}
		return n
	})
	if !ok || put == nil {
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
	n := protowire.SizeTag(fPutValue) + protowire.SizeBytes(len(value)) // a set oneof field is always written
	if len(key) > 0 {
		n += protowire.SizeTag(fPutKey) + protowire.SizeBytes(len(key))
	}
	if len(serverID) > 0 {
		n += protowire.SizeTag(fPutServerID) + protowire.SizeBytes(len(serverID))
	}
	if id != 0 {
		b = protowire.AppendTag(b, fRequestID, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	b = protowire.AppendTag(b, fRequestPut, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if len(key) > 0 {
		b = protowire.AppendTag(b, fPutKey, protowire.BytesType)
		b = protowire.AppendBytes(b, key)
	}
	if len(serverID) > 0 {
		b = protowire.AppendTag(b, fPutServerID, protowire.BytesType)
		b = protowire.AppendBytes(b, serverID)
	}
	// proto.Marshal writes a oneof's field after the others.
	b = protowire.AppendTag(b, fPutValue, protowire.BytesType)
	b = protowire.AppendBytes(b, value)
	return b
}

// appendPutResponse encodes Response{id, Put{version, evicted}} as
// proto.Marshal does.
func appendPutResponse(b []byte, id, version uint64, evicted uint32) []byte {
	n := 0
	if version != 0 {
		n += protowire.SizeTag(fPutRespVersion) + protowire.SizeVarint(version)
	}
	if evicted != 0 {
		n += protowire.SizeTag(fPutRespEvicted) + protowire.SizeVarint(uint64(evicted))
	}
	if id != 0 {
		b = protowire.AppendTag(b, fResponseID, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	b = protowire.AppendTag(b, fResponsePut, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if version != 0 {
		b = protowire.AppendTag(b, fPutRespVersion, protowire.VarintType)
		b = protowire.AppendVarint(b, version)
	}
	if evicted != 0 {
		b = protowire.AppendTag(b, fPutRespEvicted, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(evicted))
	}
	return b
}

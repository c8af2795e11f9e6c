package directory

import (
	"bytes"
	"encoding/json"
	"net/netip"
)

// The coordinator format of the RDMA guide: a node posts its bare queue
// pair endpoint, {"qpn": .., "lid": .., "gid": .., "psn": ..}, to
// /nodes/{id}/rdma/endpoint (its IDs are integers, which are valid node
// IDs), and a GET answers the endpoint's fields at the top level. The gid
// is an IPv6-form string or an array of 16 bytes (a serialised [u8; 16]).
// The coordinator keeps such an endpoint beside xfer's entries: it is not
// listed (it has no address for an engine to dial), and an xfer entry
// that has an RDMA endpoint is answered with the endpoint's fields at the
// top level as well, so that both kinds of client read what they expect.

// isBareEndpoint reports whether a posted body is a bare endpoint rather
// than an entry: a JSON object with a "qpn" and no "node_id".
func isBareEndpoint(b []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, qpn := m["qpn"]
	_, id := m["node_id"]
	return qpn && !id
}

// bareEndpoint is the RDMA guide's body, as posted.
type bareEndpoint struct {
	QPN *uint32         `json:"qpn"`
	LID uint16          `json:"lid"`
	GID json.RawMessage `json:"gid,omitempty"`
	PSN uint32          `json:"psn"`
}

// decodeBareEndpoint decodes and checks node id's bare endpoint; it
// returns the endpoint and the answer a GET gives: the body's four fields,
// the gid in the form it was posted in.
func decodeBareEndpoint(id string, b []byte) (RDMAEndpoint, []byte, error) {
	if len(b) > MaxEntrySize {
		return RDMAEndpoint{}, nil, invalid("node %s: endpoint of %d bytes: at most %d", id, len(b), MaxEntrySize)
	}
	var be bareEndpoint
	if err := json.Unmarshal(b, &be); err != nil {
		return RDMAEndpoint{}, nil, invalid("node %s: rdma endpoint: decode: %v", id, err)
	}
	if be.QPN == nil {
		return RDMAEndpoint{}, nil, invalid("node %s: rdma endpoint: no qpn", id)
	}
	ep := RDMAEndpoint{QPN: *be.QPN, LID: be.LID, PSN: be.PSN}
	if g := bytes.TrimSpace(be.GID); len(g) > 0 && !bytes.Equal(g, []byte("null")) {
		var s string
		var raw []uint8
		switch {
		case json.Unmarshal(g, &s) == nil:
			ep.GID = s
		case json.Unmarshal(g, &raw) == nil && len(raw) == 16:
			if a := netip.AddrFrom16([16]byte(raw)); !a.IsUnspecified() {
				ep.GID = a.String()
			}
		default:
			return RDMAEndpoint{}, nil, invalid("node %s: rdma endpoint: gid %s: want an IPv6-form string or 16 bytes", id, truncate(string(g)))
		}
		var c bytes.Buffer
		json.Compact(&c, g)
		be.GID = c.Bytes()
	}
	if err := ep.check(id); err != nil {
		return RDMAEndpoint{}, nil, err
	}
	answer, err := json.Marshal(be)
	if err != nil {
		return RDMAEndpoint{}, nil, invalid("node %s: rdma endpoint: %v", id, err)
	}
	return ep, answer, nil
}

// entryAnswer is a GET's answer for an xfer entry, raw: the entry, and its
// RDMA endpoint's fields at the top level too when it has one.
func entryAnswer(e Entry, raw []byte) []byte {
	if e.RDMA == nil {
		return raw
	}
	var m map[string]json.RawMessage // raw values: an export's uint64 length stays exact
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	for k, v := range map[string]any{"qpn": e.RDMA.QPN, "lid": e.RDMA.LID, "gid": e.RDMA.GID, "psn": e.RDMA.PSN} {
		m[k], _ = json.Marshal(v)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

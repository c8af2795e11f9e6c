package directory

import (
	"encoding/json"
	"sync"
)

// owner is the process that holds a node's entry in etcd, stored with the
// entry (the "owner" field, which readers of the entry ignore): the boot
// of its host (the kernel's boot_id), its PID namespace, its PID and the
// time it started (in clock ticks after the boot). A process that claims
// a node ID held under another lease takes the ID over at once, instead
// of waiting for that lease to expire, only when the holder is provably
// gone: it ran on the same boot of the same host, in the same PID
// namespace, and no process has its PID now, or the one that has it is a
// zombie or started at another time (the PID was reused). Anything less
// (another host, another namespace, an entry without an owner, a /proc
// this process cannot read) proves nothing, and the claim is refused as
// before (a *TakenError) until the holder's lease expires.
type owner struct {
	Boot  string `json:"boot"`
	PIDNS string `json:"pidns"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// self is this process as an owner, nil where it cannot be told (no
// /proc).
var self = sync.OnceValue(func() *owner { return thisProcess() })

// ownedEntry is what the etcd client stores under a node's key: the entry
// and its owner.
type ownedEntry struct {
	Entry
	Owner *owner `json:"owner,omitempty"`
}

// withOwner returns the stored form of e, encoded as raw: with this
// process as its owner, unless it cannot be told or the entry would then
// be too large.
func withOwner(e Entry, raw []byte) []byte {
	o := self()
	if o == nil {
		return raw
	}
	b, err := json.Marshal(ownedEntry{Entry: e, Owner: o})
	if err != nil || len(b) > MaxEntrySize {
		return raw
	}
	return b
}

// holderGone reports whether the process that stored value, a node's
// entry, is provably gone (see owner), and names it.
func holderGone(value []byte) (*owner, bool) {
	var v struct {
		Owner *owner `json:"owner"`
	}
	me := self()
	if me == nil || json.Unmarshal(value, &v) != nil || v.Owner == nil {
		return nil, false
	}
	o := v.Owner
	if o.Boot == "" || o.Boot != me.Boot || o.PIDNS == "" || o.PIDNS != me.PIDNS || o.PID <= 0 {
		return o, false
	}
	return o, gone(o)
}

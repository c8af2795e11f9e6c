// Package revokes is the engine's log of revoked regions. An endpoint
// serves its peer (answers attaches) from the moment its transport
// connects, a little before the engine publishes and lists it; a revoke in
// that window would miss it, and the peer would keep writing into a
// region that no longer exists. So each revoke is numbered and logged,
// and a connection that started at number n is sent those made since.
//
// A Log is not safe for concurrent use: its owner guards it (the engine,
// with its lock).
package revokes

// Max bounds the log: past it, the older half is dropped, and a
// connection that began before the oldest revoke kept cannot be brought
// up to date (Since reports it).
const Max = 4096

// Log is the numbered revokes, the latest Max or fewer. The zero value is
// an empty log.
type Log struct {
	seq  uint64 // revokes so far
	recs []rec  // the latest revokes, oldest first
}

// rec is one logged revoke.
type rec struct {
	seq uint64
	id  uint32
}

// Add logs the revoke of region id.
func (l *Log) Add(id uint32) {
	l.seq++
	l.recs = append(l.recs, rec{l.seq, id})
	if len(l.recs) > Max {
		l.recs = append(l.recs[:0], l.recs[len(l.recs)-Max/2:]...)
	}
}

// Seq is the number of revokes so far: a connection that begins now is
// sent those after it.
func (l *Log) Seq() uint64 { return l.seq }

// Since returns the regions revoked after revoke number seq, and whether
// the log still holds all of them.
func (l *Log) Since(seq uint64) ([]uint32, bool) {
	if seq >= l.seq {
		return nil, true
	}
	if len(l.recs) == 0 || l.recs[0].seq > seq+1 {
		return nil, false
	}
	var ids []uint32
	for _, r := range l.recs {
		if r.seq > seq {
			ids = append(ids, r.id)
		}
	}
	return ids, true
}

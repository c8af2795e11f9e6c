package directory

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Directory publishes this node's entry and finds other nodes'. Its
// methods are safe for concurrent use.
type Directory interface {
	// Register publishes e and keeps it alive (a lease, heartbeats) until
	// Deregister or Close; when the entry is lost (a lease that expired
	// while the backend or this process was unreachable, a coordinator
	// that restarted) it registers it again, with backoff. Registration is
	// create-if-absent: an ID that another live node holds is an error
	// matching ErrTaken (a *TakenError naming the holder's addresses).
	// Registering the same node again through the same client replaces its
	// entry.
	Register(ctx context.Context, e Entry) error
	// Deregister removes node id's entry at once: the entry this client
	// registered, never one that another node (or a later incarnation of
	// this one) wrote. For an ID this client did not register, it removes
	// whatever entry is there (an operator's removal).
	Deregister(ctx context.Context, id string) error
	// Registrations reports the state of the nodes this client registered,
	// sorted by node ID.
	Registrations() []Registration
	// Lookup returns node id's entry, or an error matching ErrNotFound.
	Lookup(ctx context.Context, id string) (Entry, error)
	// List returns the live entries, sorted by node ID.
	List(ctx context.Context) ([]Entry, error)
	// Watch reports the nodes there are now (as joins), then each join,
	// update and leave, until ctx ends or the directory is closed; then it
	// closes the channel.
	Watch(ctx context.Context) (<-chan Event, error)
	// Close stops keeping this node's entries alive and releases the
	// backend. An entry it registered goes at once where the backend can
	// (etcd revokes its lease), else when it expires. Idempotent.
	Close() error
}

// EventKind says what happened to a node.
type EventKind uint8

// The kinds of event.
const (
	Join  EventKind = iota + 1 // a node registered, or updated its entry
	Leave                      // a node deregistered, or its entry expired
	// Synced (Follow only): every change committed before Event.At has
	// been reported.
	Synced
	// Reset (Follow only): the watch could not resume where it broke, so
	// changes may have come and gone unseen; the joins and leaves after it
	// bring the receiver to a new list, and a Synced follows them.
	Reset
)

func (k EventKind) String() string {
	switch k {
	case Join:
		return "join"
	case Leave:
		return "leave"
	case Synced:
		return "synced"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is a change Watch reports. A Leave carries only Entry.NodeID.
type Event struct {
	Kind  EventKind
	Entry Entry
	// At is a Synced event's time: every change committed before it has
	// been reported.
	At time.Time
}

// Follower is a Directory whose watch can prove how fresh it is: what a
// server that fences its answers by its view of the cluster needs, without
// listing the directory again and again. etcd implements it; the http
// coordinator does not.
type Follower interface {
	Directory
	// Follow lists the directory once, then follows its changes from that
	// list's revision, as Watch does, and also reports:
	//   - Synced, with At: every change committed before At has been
	//     reported. One follows the first list (At: when the list began),
	//     and one answers each call of sync that the backend answers (At:
	//     when sync was called). A sync costs the backend one small
	//     message on the watch's stream, not a list, whatever the size of
	//     the directory; sync does not wait for the answer.
	//   - Reset: the watch could not resume where it broke (the backend
	//     compacted the history it needed). The joins and leaves after it
	//     bring the receiver to a new list, and a Synced follows.
	// A watch that breaks and can resume (a lost connection, a new leader,
	// a sync that went unanswered) resumes where it was, without a Reset
	// and without listing. The channel closes when ctx ends or the
	// directory is closed.
	Follow(ctx context.Context) (events <-chan Event, sync func() error, err error)
}

// Errors.
var (
	// ErrNotFound means no live entry has the node ID.
	ErrNotFound = errors.New("node not found")
	// ErrNoDirectory means the directory is p2p: node IDs cannot be
	// resolved.
	ErrNoDirectory = errors.New("no directory: set a directory URL (http://HOST:PORT or etcd://HOST:2379/PREFIX) to use node IDs")
	// ErrClosed means the directory was closed.
	ErrClosed = errors.New("directory closed")
)

// DefaultTTL is how long an entry lives without a heartbeat or lease
// renewal.
const DefaultTTL = 10 * time.Second

// Options configure a directory client.
type Options struct {
	// TTL is how long this node's entry outlives its last heartbeat (http)
	// or lease renewal (etcd); etcd rounds it up to whole seconds. Default:
	// DefaultTTL.
	TTL time.Duration
	// DialTimeout bounds connecting to the backend. Default: 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request (register, deregister, look up,
	// list) whose context has no deadline: a backend that is stopped or
	// unreachable fails it with an error that names the backend, instead
	// of blocking the caller. The http backend's default client is bounded
	// by DialTimeout as a whole. Default: 10s.
	RequestTimeout time.Duration
	// HTTPClient is the http backend's client. Default: one with
	// DialTimeout as its timeout.
	HTTPClient *http.Client
	// Logger receives the directory's logs. Default: none.
	Logger *slog.Logger
	// Token is the coordinator's token (its --token-file), sent as a
	// bearer token with every request: a coordinator with a token refuses
	// writes without it, and reads too when it protects them. It is
	// ignored by etcd. Default: none.
	Token string
	// Username and Password authenticate to etcd (etcd's own users and
	// roles); a URL's user information (etcd://USER:PASSWORD@HOST:2379/PREFIX)
	// sets them too. Default: none.
	Username, Password string
	// TLS, when set, makes the etcd client speak TLS with it (a client
	// certificate for etcd's --client-cert-auth, RootCAs for its CA), and
	// the http client too when HTTPClient is not set. Default: none.
	TLS *tls.Config
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.DialTimeout}
		if o.TLS != nil {
			o.HTTPClient.Transport = &http.Transport{TLSClientConfig: o.TLS}
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// p2p is no directory.
type p2p struct{}

func (p2p) Register(context.Context, Entry) error    { return nil }
func (p2p) Deregister(context.Context, string) error { return nil }
func (p2p) Lookup(_ context.Context, id string) (Entry, error) {
	return Entry{}, fmt.Errorf("directory: look up node %s: %w", id, ErrNoDirectory)
}
func (p2p) List(context.Context) ([]Entry, error) { return nil, ErrNoDirectory }
func (p2p) Watch(context.Context) (<-chan Event, error) {
	return nil, ErrNoDirectory
}
func (p2p) Registrations() []Registration { return nil }
func (p2p) Close() error                  { return nil }

package mooncake

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/xferio/xfer/internal/auth"
)

// MetadataPath is the one route of Mooncake's HTTP metadata server.
const MetadataPath = "/metadata"

// Defaults of ServerOptions, as Mooncake's server has them.
const (
	DefaultMaxKeys       = 65536   // MC_METADATA_MAX_KEYS
	DefaultMaxTotalBytes = 1 << 30 // MC_METADATA_MAX_TOTAL_BYTES
	DefaultMaxValueBytes = 1 << 20 // one PUT's body (aiohttp's client_max_size)
)

// ServerOptions configures a Server. The zero value is Mooncake's server
// with no token.
type ServerOptions struct {
	// Token, when set, is the bearer token every request must carry
	// ("Authorization: Bearer TOKEN"); others get 401. Mooncake's server
	// and engines read it from MC_METADATA_HTTP_TOKEN. Default: none,
	// every request is served.
	Token string
	// MaxKeys bounds the number of keys: a PUT of a new key past it gets
	// 507. Default: DefaultMaxKeys.
	MaxKeys int
	// MaxTotalBytes bounds the values' total size: a PUT past it gets 507.
	// Default: DefaultMaxTotalBytes.
	MaxTotalBytes int64
	// MaxValueBytes bounds one PUT's body: a larger one gets 413.
	// Default: DefaultMaxValueBytes.
	MaxValueBytes int64
	// Logger receives refusals at debug level. Default: slog.Default().
	Logger *slog.Logger
}

// Server is Mooncake's HTTP metadata server: an http.Handler that keeps
// keys and their values in memory. Its answers, as Mooncake's:
//
//	any method, without the token (when one is set)  401 "unauthorized"
//	no key, or a key of white space only             400 "metadata key is required"
//	GET    a key that is set                         200, the value as it was PUT
//	GET    a key that is not                         404 "metadata not found"
//	PUT    a key                                     200 "metadata updated"
//	PUT    an rpc_meta key already set to that value 200 "metadata unchanged"
//	PUT    an rpc_meta key set to another value      400 "Duplicate rpc_meta key not allowed"
//	PUT    past MaxKeys or MaxTotalBytes             507 "metadata key budget exhausted" / "metadata size budget exhausted"
//	DELETE a key that is set                         200 "metadata deleted"
//	DELETE a key that is not                         404 "metadata not found"
//	another method                                   405 "Method not allowed"
//
// A key is the query parameter key, trimmed of surrounding white space;
// a key that contains "rpc_meta" names where an engine's segment listens
// and may not be overwritten with another value until it is deleted.
// Every answer has Content-Type application/json, as Mooncake's (whose
// bodies other than values are plain text nonetheless).
type Server struct {
	o  ServerOptions
	mu sync.Mutex
	kv map[string][]byte
	n  int64 // total bytes of the values
}

// NewServer returns an empty server.
func NewServer(o ServerOptions) *Server {
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Server{o: o, kv: map[string][]byte{}}
}

// Len is the number of keys set.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kv)
}

func reply(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
}

// tokenOK reports whether r carries the server's bearer token.
func (s *Server) tokenOK(r *http.Request) bool {
	scheme, presented, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") || presented == "" {
		return false
	}
	return auth.Equal([]byte(presented), []byte(s.o.Token))
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != MetadataPath {
		reply(w, http.StatusNotFound, []byte("404: Not Found"))
		return
	}
	if s.o.Token != "" && !s.tokenOK(r) {
		s.o.Logger.Debug("mooncake metadata: refused: no or bad token", "remote", r.RemoteAddr, "method", r.Method)
		reply(w, http.StatusUnauthorized, []byte("unauthorized"))
		return
	}
	key := strings.TrimSpace(r.URL.Query().Get("key"))
	if key == "" {
		reply(w, http.StatusBadRequest, []byte("metadata key is required"))
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.get(w, key)
	case http.MethodPut:
		s.put(w, r, key)
	case http.MethodDelete:
		s.delete(w, key)
	default:
		reply(w, http.StatusMethodNotAllowed, []byte("Method not allowed"))
	}
}

func (s *Server) get(w http.ResponseWriter, key string) {
	s.mu.Lock()
	v, ok := s.kv[key]
	s.mu.Unlock()
	if !ok {
		reply(w, http.StatusNotFound, []byte("metadata not found"))
		return
	}
	reply(w, http.StatusOK, v)
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, key string) {
	v, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.MaxValueBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			reply(w, http.StatusRequestEntityTooLarge, []byte("metadata value too large"))
			return
		}
		reply(w, http.StatusBadRequest, []byte("metadata value unreadable"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.kv[key]
	if had && strings.Contains(key, "rpc_meta") {
		if string(old) == string(v) {
			reply(w, http.StatusOK, []byte("metadata unchanged"))
			return
		}
		s.o.Logger.Debug("mooncake metadata: refused a second rpc_meta value", "key", key, "remote", r.RemoteAddr)
		reply(w, http.StatusBadRequest, []byte("Duplicate rpc_meta key not allowed"))
		return
	}
	if !had && len(s.kv) >= s.o.MaxKeys {
		reply(w, http.StatusInsufficientStorage, []byte("metadata key budget exhausted"))
		return
	}
	total := s.n - int64(len(old)) + int64(len(v))
	if total > s.o.MaxTotalBytes {
		reply(w, http.StatusInsufficientStorage, []byte("metadata size budget exhausted"))
		return
	}
	if v == nil {
		v = []byte{}
	}
	s.kv[key], s.n = v, total
	reply(w, http.StatusOK, []byte("metadata updated"))
}

func (s *Server) delete(w http.ResponseWriter, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.kv[key]
	if !ok {
		reply(w, http.StatusNotFound, []byte("metadata not found"))
		return
	}
	delete(s.kv, key)
	s.n -= int64(len(old))
	reply(w, http.StatusOK, []byte("metadata deleted"))
}

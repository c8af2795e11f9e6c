package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/mem"
)

// maxConfigJSON bounds the configuration a caller passes.
const maxConfigJSON = 64 << 10

// abiConfig is the configuration xfer_open takes, as JSON: the connector's
// Config in the terms the Python binding translates its keys into. Zero
// means the connector's default, field by field.
type abiConfig struct {
	Role          string  `json:"role"`            // producer, consumer or both
	Listen        string  `json:"listen"`          // host:port the engine listens on ("" for a consumer that only dials)
	Advertise     string  `json:"advertise"`       // the address consumers dial, when not Listen
	Transport     string  `json:"transport"`       // auto, tcp, shm or rdma
	Device        string  `json:"device"`          // the RDMA device
	MemoryMB      int     `json:"memory_mb"`       // the registered pool
	MemoryDevice  string  `json:"memory_device"`   // where the pool lives: host (default) or cuda:N
	Producer      string  `json:"producer"`        // the producer a get without an address dials
	Secret        string  `json:"secret"`          // the data plane's shared secret
	TTLSeconds    float64 `json:"ttl_seconds"`     // how long an untaken value stays; negative: forever
	Pull          string  `json:"pull"`            // auto, read or write
	WaitForMemory bool    `json:"wait_for_memory"` // puts and gets wait for pool memory
	ChunkSize     int     `json:"chunk_size"`      // the piece a large value is split into
}

// parseConfig decodes and checks the JSON configuration. Unknown fields,
// trailing data and out-of-range values are errors matching errInvalid.
func parseConfig(b []byte) (connector.Config, error) {
	bad := func(format string, a ...any) (connector.Config, error) {
		return connector.Config{}, fmt.Errorf("libxfer: config: "+format+": %w", append(a, errInvalid)...)
	}
	if len(b) > maxConfigJSON {
		return bad("%d bytes of JSON: at most %d", len(b), maxConfigJSON)
	}
	var ac abiConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ac); err != nil {
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the JSON object")
	}
	var cfg connector.Config
	var err error
	if cfg.Role, err = connector.ParseRole(ac.Role); err != nil {
		return bad("%v", err)
	}
	if cfg.Pull, err = connector.ParsePull(ac.Pull); err != nil {
		return bad("%v", err)
	}
	if ac.Transport != "" {
		if cfg.Engine.Transport, err = xfer.ParsePolicy(ac.Transport); err != nil {
			return bad("%v", err)
		}
	}
	switch {
	case ac.MemoryMB < 0:
		return bad("memory_mb %d: must not be negative", ac.MemoryMB)
	case ac.ChunkSize < 0:
		return bad("chunk_size %d: must not be negative", ac.ChunkSize)
	case ac.TTLSeconds > 1e9 || ac.TTLSeconds < -1e9:
		return bad("ttl_seconds %v: out of range", ac.TTLSeconds)
	}
	cfg.Engine.Listen = ac.Listen
	cfg.Engine.Advertise = ac.Advertise
	cfg.Engine.MemoryMB = ac.MemoryMB
	if cfg.Engine.MemoryDevice, err = mem.ParseLocation(ac.MemoryDevice); err != nil {
		return bad("%v", err)
	}
	cfg.Engine.Secret = ac.Secret
	cfg.Engine.RDMA.Device = ac.Device
	cfg.Producer = ac.Producer
	cfg.ChunkSize = ac.ChunkSize
	cfg.WaitForMemory = ac.WaitForMemory
	switch {
	case ac.TTLSeconds < 0:
		cfg.TTL = -1
	case ac.TTLSeconds > 0:
		cfg.TTL = time.Duration(ac.TTLSeconds * float64(time.Second))
		if cfg.TTL <= 0 {
			cfg.TTL = time.Nanosecond
		}
	}
	return cfg, nil
}

package main

import (
	"fmt"
	"os"

	"github.com/xferio/xfer/config"
	"github.com/xferio/xfer/connector"
)

// maxConfigJSON bounds the configuration a caller passes.
const maxConfigJSON = 64 << 10

// parseConfig decodes and checks the JSON configuration xfer_open takes:
// the document of package config's Library program, which is the xfer
// command's config file as a JSON object (every engine key, flat or
// nested: memory_mb, conns, rdma: {gid_index: 1, use_cm: true}, ...; the
// log keys) plus the connector's keys (role, producer, ttl_seconds, pull,
// chunk_size, wait_for_memory, wait_spin, call_timeout, and device for
// rdma.device).
// Zero means the connector's default, key by key, but for wait_spin, whose
// zero here is connector.ThreadWaitSpin (negative: no spin). Unknown keys (all of them, in one
// error, each with its line), trailing data and out-of-range values are
// errors matching errInvalid. The connector logs to standard error.
func parseConfig(b []byte) (connector.Config, error) {
	if len(b) > maxConfigJSON {
		return connector.Config{}, fmt.Errorf("libxfer: config: %d bytes of JSON: at most %d: %w", len(b), maxConfigJSON, errInvalid)
	}
	doc, err := config.DecodeJSON("config", b, config.Library)
	if err == nil {
		err = doc.Check()
	}
	if err != nil {
		return connector.Config{}, fmt.Errorf("libxfer: %w: %w", err, errInvalid)
	}
	cfg, err := doc.Connector(os.Stderr)
	if err != nil {
		return connector.Config{}, fmt.Errorf("libxfer: %w: %w", err, errInvalid)
	}
	if cfg.WaitSpin == 0 {
		// A call through the ABI runs on its caller's thread, which the
		// Go runtime puts to sleep at once when a Get waits: it spins
		// first (connector.Config.WaitSpin).
		cfg.WaitSpin = connector.ThreadWaitSpin
	}
	return cfg, nil
}

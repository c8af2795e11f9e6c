// Package configtest holds the config file that the tests of package config
// and of the xfer command share: one that sets every key of the command's
// file, and the engine Config it decodes to.
package configtest

import (
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
)

// Full is an xfer.yaml that sets every key of the xfer command's file.
const Full = `# every key
listen: 127.0.0.1:7471
advertise: host.example:7471
transport: shm
memory_mb: 256
huge_pages: "off"
secret: s3cret-s3cret-s3cret
conns: 4
max_message: 1048576
recv_depth: 64
handshake_timeout: 5s
log_level: INFO
log_format: json
metrics_listen: 127.0.0.1:9464
`

// FullEngine returns the engine's keys of Full as they decode. The
// command's own keys decode to log level "info", log format "json" and
// metrics listen "127.0.0.1:9464".
func FullEngine() xfer.Config {
	cfg := xfer.Config{
		Listen:           "127.0.0.1:7471",
		Advertise:        "host.example:7471",
		Transport:        xfer.PolicySHM,
		MemoryMB:         256,
		HugePages:        mem.HugeOff,
		Secret:           "s3cret-s3cret-s3cret",
		MaxMessage:       1 << 20,
		RecvDepth:        64,
		HandshakeTimeout: 5 * time.Second,
	}
	cfg.TCP.Conns = 4
	return cfg
}

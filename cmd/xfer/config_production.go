package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/xferio/xfer"
)

// The production layout: operators who ran an RDMA transport before xfer
// keep its options in a section of this shape,
//
//	transport:
//	  amst:
//	    enable_rdma: true
//	    rdma_device: "mlx5_0"
//	    rdma_port: 1
//	    ...
//	log_level: info
//
// and decodeConfig accepts it as it is: transport is then a mapping, not
// the policy string of xfer's own layout. Each option of that layout's
// table is either honoured (amstKeys: the xfer key it sets) or refused with
// the reason (amstRefused); none is ignored without a word.

// amstSection is the one key a transport mapping holds.
const amstSection = "amst"

// amstKeys maps an option of the amst section to the canonical key of the
// xfer option it sets (a key of configFields). enable_rdma and the buffer
// sizes have no one-to-one xfer key and are handled in decodeAMST.
var amstKeys = map[string]string{
	"rdma_device":            "rdma.device",
	"rdma_port":              "rdma.port",
	"rdma_gid_index":         "rdma.gid_index",
	"rdma_mtu":               "rdma.mtu",
	"rdma_max_inline_data":   "rdma.max_inline_data",
	"rdma_max_send_wr":       "rdma.max_send_wr",
	"rdma_max_recv_wr":       "rdma.max_recv_wr",
	"rdma_max_sge":           "rdma.max_sge",
	"rdma_qp_type":           "rdma.qp_type",
	"rdma_use_srq":           "rdma.use_srq",
	"rdma_use_event_channel": "rdma.use_event_channel",
}

// The amst options that have no single xfer key.
const (
	amstEnableRDMA = "enable_rdma"         // false: the tcp policy; true: auto
	amstSendMB     = "rdma_send_buffer_mb" // with amstRecvMB: the least memory_mb
	amstRecvMB     = "rdma_recv_buffer_mb"
)

// amstRefused are the options of the production layout that xfer does not
// take, with the reason the error gives.
var amstRefused = map[string]string{
	"rdma_adaptive_routing": "adaptive routing is a property of the InfiniBand fabric, set in the subnet manager " +
		"(OpenSM's routing_engine and the switches), not by an application's queue pairs: configure it there and remove this key",
}

// qpTypeRefusals says why each queue pair type other than RC is refused.
var qpTypeRefusals = map[string]string{
	"UD": "xfer uses RC queue pairs; UD is not supported because UD queue pairs have no RDMA WRITE or READ " +
		"(xfer's transfers are one-sided WRITEs and READs into registered regions), carry at most one path MTU " +
		"per message and neither deliver reliably nor in order",
	"DCT": "xfer uses RC queue pairs; DCT is not supported because it is an mlx5-only extension (mlx5dv) " +
		"that libibverbs does not offer on other devices (rxe, siw, other vendors' NICs); xfer connects RC queue pairs per peer",
	"UC": "xfer uses RC queue pairs; UC is not supported because UC has no RDMA READ and no reliable delivery",
}

// amstKnown lists the amst keys for error messages.
func amstKnown() string {
	keys := []string{amstEnableRDMA, amstSendMB, amstRecvMB}
	for k := range amstKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys[3:])
	return strings.Join(keys, ", ")
}

// amstState is what decodeAMST leaves for after the whole file is read.
type amstState struct {
	bufferMB int // rdma_send_buffer_mb + rdma_recv_buffer_mb
}

// decodeAMST decodes a transport mapping of the production layout (val) into
// cfg. set stores a value under an xfer key, checking for the same option
// given twice; fields maps canonical keys to fields.
func decodeAMST(name string, val *yaml.Node, cfg *xfer.Config, st *amstState, fields map[string]configField,
	set func(f configField, k, v *yaml.Node, written string) error) error {
	for i := 0; i+1 < len(val.Content); i += 2 {
		k, v := val.Content[i], val.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value != amstSection {
			return fmt.Errorf("%s:%d: transport: a mapping holds the %s section of the production layout (transport: {%s: {enable_rdma: ..., rdma_device: ...}}); "+
				"or write transport: auto, tcp, shm or rdma", name, k.Line, amstSection, amstSection)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return fmt.Errorf("%s:%d: transport.%s: expected a mapping of keys (%s) to values", name, v.Line, amstSection, amstKnown())
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			sk, sv := v.Content[j], v.Content[j+1]
			written := "transport." + amstSection + "." + sk.Value
			if sk.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s:%d: transport.%s: a key must be a plain name (known keys: %s)", name, sk.Line, amstSection, amstKnown())
			}
			if sv.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s:%d: %s: expected a single value", name, sv.Line, written)
			}
			if why, ok := amstRefused[sk.Value]; ok {
				return fmt.Errorf("%s:%d: %s: not supported: %s", name, sk.Line, written, why)
			}
			switch sk.Value {
			case amstEnableRDMA:
				if sv.Tag == "!!null" {
					continue
				}
				on, err := strconv.ParseBool(strings.TrimSpace(sv.Value))
				if err != nil {
					return fmt.Errorf("%s:%d: %s: %q: not true or false", name, sv.Line, written, sv.Value)
				}
				// true: the auto policy, which uses rdma where both sides
				// have a usable device and falls back to shm or tcp;
				// false: tcp, never rdma.
				policy := xfer.PolicyAuto
				if !on {
					policy = xfer.PolicyTCP
				}
				if err := set(fields["transport"], sk, &yaml.Node{Kind: yaml.ScalarNode, Value: string(policy), Line: sv.Line}, written); err != nil {
					return err
				}
				continue
			case amstSendMB, amstRecvMB:
				if sv.Tag == "!!null" {
					continue
				}
				n, err := strconv.Atoi(strings.TrimSpace(sv.Value))
				if err != nil || n < 0 || n > 1<<20 {
					return fmt.Errorf("%s:%d: %s: %q: must be an integer from 0 to %d (MiB)", name, sv.Line, written, sv.Value, 1<<20)
				}
				st.bufferMB += n
				continue
			case "rdma_qp_type":
				if why, ok := qpTypeRefusals[strings.ToUpper(strings.TrimSpace(sv.Value))]; ok {
					return fmt.Errorf("%s:%d: %s: %q: %s", name, sv.Line, written, sv.Value, why)
				}
			}
			key, ok := amstKeys[sk.Value]
			if !ok {
				return fmt.Errorf("%s:%d: unknown key %q in transport.%s (known keys: %s)", name, sk.Line, sk.Value, amstSection, amstKnown())
			}
			if err := set(fields[key], sk, sv, written); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish applies what needs the whole file: the buffer sizes raise
// memory_mb (the registered pool that sends leave from and receives land
// in) to their sum when it is smaller.
func (st *amstState) finish(cfg *xfer.Config) {
	mb := cfg.MemoryMB
	if mb == 0 {
		mb = xfer.DefaultMemoryMB
	}
	if st.bufferMB > mb {
		cfg.MemoryMB = st.bufferMB
	}
}

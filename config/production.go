package config

import (
	"sort"
	"strings"
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
// and the decoders accept it as it is: transport is then a mapping, not
// the policy string of xfer's own layout. Each option of that layout's
// table is either honoured (amstKeys: the xfer key it sets) or refused with
// the reason (amstRefused); none is ignored without a word. The one walk of
// a document (decode.go) decodes the section by this table.

const (
	amstParent  = "transport" // the key whose mapping holds the section
	amstSection = "amst"      // the one key a transport mapping holds
	amstPath    = amstParent + "." + amstSection
)

// amstKeys maps an option of the amst section to the canonical key of the
// xfer option it sets. enable_rdma and the buffer sizes have no one-to-one
// xfer key and are handled in amst.
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

// maxBufferMB bounds each of the amst buffer sizes.
const maxBufferMB = 1 << 20

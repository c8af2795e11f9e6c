package config

import (
	"sort"
	"strconv"
	"strings"

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
// and the decoders accept it as it is: transport is then a mapping, not
// the policy string of xfer's own layout. Each option of that layout's
// table is either honoured (amstKeys: the xfer key it sets) or refused with
// the reason (amstRefused); none is ignored without a word.

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

// amst decodes a transport mapping of the production layout (k: val).
func (d *decoder) amst(k, val *node) {
	if s, dup := d.seen[amstParent]; dup {
		d.problem(k.line, amstParent, ErrDuplicate, nil, "key %q repeats the one on line %d", amstParent, s.line)
		return
	}
	defer func() {
		if _, ok := d.seen[amstParent]; !ok {
			d.seen[amstParent] = seenKey{amstParent, k.line}
		}
	}()
	for _, pr := range val.pairs {
		k, v := pr.key, pr.val
		if k.kind != scalarNode || k.value != amstSection {
			d.problem(k.line, amstParent+"."+k.value, ErrUnknownKey, nil,
				"transport: a mapping holds the %s section of the production layout (transport: {%s: {enable_rdma: ..., rdma_device: ...}}); "+
					"or write transport: auto or one of "+strings.Join(xfer.TransportNames(), ", "), amstSection, amstSection)
			continue
		}
		switch v.kind {
		case nullNode:
			continue
		case mappingNode:
		default:
			d.problem(v.line, amstPath, ErrBadValue, nil, "%s: expected a mapping of keys (%s) to values", amstPath, amstKnown())
			continue
		}
		for _, pr := range v.pairs {
			d.amstKey(pr.key, pr.val)
		}
	}
}

// amstKey decodes one option of the amst section.
func (d *decoder) amstKey(sk, sv *node) {
	written := amstPath + "." + sk.value
	if sk.kind != scalarNode {
		d.problem(sk.line, amstPath, ErrUnknownKey, nil, "%s: a key must be a plain name (known keys: %s)", amstPath, amstKnown())
		return
	}
	if why, ok := amstRefused[sk.value]; ok {
		d.problem(sk.line, written, ErrBadValue, nil, "%s: not supported: %s", written, why)
		return
	}
	if sv.kind != scalarNode && sv.kind != nullNode {
		d.problem(sv.line, written, ErrBadValue, nil, "%s: expected a single value", written)
		return
	}
	switch sk.value {
	case amstEnableRDMA:
		if sv.kind == nullNode {
			return
		}
		on, err := parseBool(sv.value)
		if err != nil {
			d.problem(sv.line, written, ErrBadValue, err, "%s: %q: %v", written, sv.value, err)
			return
		}
		// true: the auto policy, which uses rdma where both sides have a
		// usable device and falls back to shm or tcp; false: tcp, never
		// rdma.
		policy := xfer.PolicyAuto
		if !on {
			policy = xfer.PolicyTCP
		}
		d.set(d.flat["transport"], sk, &node{kind: scalarNode, value: string(policy), line: sv.line}, written)
		return
	case amstSendMB, amstRecvMB:
		if sv.kind == nullNode {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(sv.value))
		if err != nil || n < 0 || n > maxBufferMB {
			d.problem(sv.line, written, ErrBadValue, nil, "%s: %q: must be an integer from 0 to %d (MiB)", written, sv.value, maxBufferMB)
			return
		}
		d.amstMB += n
		return
	case "rdma_qp_type":
		if why, ok := qpTypeRefusals[strings.ToUpper(strings.TrimSpace(sv.value))]; ok {
			d.problem(sv.line, written, ErrBadValue, nil, "%s: %q: %s", written, sv.value, why)
			return
		}
	}
	key, ok := amstKeys[sk.value]
	if !ok {
		d.unknown(sk, sv, amstPath)
		return
	}
	d.set(d.nested[key], sk, sv, written)
}

// finishAMST applies what needs the whole document: the buffer sizes raise
// memory_mb (the registered pool that sends leave from and receives land
// in) to their sum when it is smaller.
func (d *decoder) finishAMST() {
	mb := d.doc.Engine.MemoryMB
	if d.amstMB == 0 || mb < 0 {
		return // no buffers; or a memory_mb that Check refuses
	}
	if mb == 0 {
		mb = xfer.DefaultMemoryMB
	}
	if d.amstMB > mb {
		d.doc.Engine.MemoryMB = d.amstMB
	}
}

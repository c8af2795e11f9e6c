//go:build cgo

package ibv

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Context is an opened RDMA device (struct ibv_context).
type Context struct {
	c         *C.struct_ibv_context
	name      string
	sysfs     string // /sys/class/infiniband/<name>
	nodeType  string
	transport string

	children atomic.Int64 // open PDs, CQs and channels

	attrOnce sync.Once
	attr     C.struct_ibv_device_attr
	attrErr  error
}

// deviceList returns the devices libibverbs knows. Free the list with
// C.xibv_free_device_list unless it is nil.
func deviceList() (**C.struct_ibv_device, []*C.struct_ibv_device, error) {
	if err := Load(); err != nil {
		return nil, nil, err
	}
	var n C.int
	l, err := C.xibv_get_device_list(&n)
	if l == nil {
		e := errnoErr(err, syscall.EIO)
		if e == syscall.ENOSYS {
			return nil, nil, fmt.Errorf("ibv_get_device_list: the kernel has no RDMA support "+
				"(load ib_uverbs and a device driver, or add a soft device: "+
				"`rdma link add rxe0 type rxe netdev eth0`): %w", ErrNoDevice)
		}
		return nil, nil, fmt.Errorf("ibv_get_device_list: %w", e)
	}
	return l, unsafe.Slice(l, int(n)), nil
}

// Devices lists the RDMA devices of the host with their attributes, ports
// and GIDs. It returns an empty list, not an error, when the host has none.
// A device that cannot be opened or queried is left out and its error
// returned alongside the others.
func Devices() ([]DeviceInfo, error) {
	l, devs, err := deviceList()
	if err != nil {
		if errors.Is(err, ErrNoDevice) {
			return []DeviceInfo{}, nil
		}
		return nil, err
	}
	defer C.xibv_free_device_list(l)
	out := make([]DeviceInfo, 0, len(devs))
	var errs []error
	for _, d := range devs {
		ctx, err := openDevice(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		info, err := ctx.QueryDevice()
		if cerr := ctx.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, info)
	}
	return out, errors.Join(errs...)
}

// DeviceNames lists the names of the RDMA devices libibverbs finds, without
// opening them. A device the kernel has started to unregister is no longer
// listed.
func DeviceNames() ([]string, error) {
	l, devs, err := deviceList()
	if err != nil {
		if errors.Is(err, ErrNoDevice) {
			return []string{}, nil
		}
		return nil, err
	}
	defer C.xibv_free_device_list(l)
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = C.GoString(&d.name[0])
	}
	return names, nil
}

// Open opens the RDMA device called name, or the first device when name is
// "". Without devices, or without one of that name, the error wraps
// [ErrNoDevice].
func Open(name string) (*Context, error) {
	l, devs, err := deviceList()
	if err != nil {
		return nil, fmt.Errorf("open RDMA device %q: %w", name, err)
	}
	defer C.xibv_free_device_list(l)
	if len(devs) == 0 {
		return nil, fmt.Errorf("open RDMA device %q: /sys/class/infiniband lists none "+
			"(load the NIC's RDMA driver, or add a soft device: "+
			"`rdma link add rxe0 type rxe netdev eth0`): %w", name, ErrNoDevice)
	}
	var names []string
	for _, d := range devs {
		n := C.GoString(&d.name[0])
		if name == "" || n == name {
			return openDevice(d)
		}
		names = append(names, n)
	}
	return nil, fmt.Errorf("open RDMA device %q: the host has only %s: %w",
		name, strings.Join(names, ", "), ErrNoDevice)
}

func openDevice(d *C.struct_ibv_device) (*Context, error) {
	name := C.GoString(&d.name[0])
	c, err := C.xibv_open_device(d)
	if c == nil {
		e := errnoErr(err, syscall.EIO)
		hint := ""
		if e == syscall.EACCES || e == syscall.EPERM {
			hint = " (no permission on /dev/infiniband/uverbs*: add the user to the rdma group or fix the udev rules)"
		}
		return nil, fmt.Errorf("ibv_open_device %s%s: %w", name, hint, e)
	}
	live.contexts.Add(1)
	return &Context{
		c:         c,
		name:      name,
		sysfs:     C.GoString(&d.ibdev_path[0]),
		nodeType:  nodeTypeString(int(d.node_type)),
		transport: transportString(int(d.transport_type)),
	}, nil
}

// Name returns the device name, for example "mlx5_0" or "rxe0".
func (c *Context) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// Transport returns "InfiniBand" (which covers RoCE), "iWARP", ...
func (c *Context) Transport() string {
	if c == nil {
		return ""
	}
	return c.transport
}

// PortIsInfiniBand reports whether port has the InfiniBand link layer (not
// Ethernet: RoCE). Port 0 means port 1.
func (c *Context) PortIsInfiniBand(port int) bool {
	if c == nil || c.c == nil {
		return false
	}
	var a C.struct_ibv_port_attr
	if C.xibv_query_port(c.c, C.int(max(port, 1)), &a) != 0 {
		return false
	}
	return linkLayerString(int(a.link_layer), c.transport) == "InfiniBand"
}

// KernelIndex is the kernel's index of the device (what rdma_cm reports),
// or -1 if unknown or closed.
func (c *Context) KernelIndex() int {
	if c == nil || c.c == nil {
		return -1
	}
	name := C.CString(c.name)
	defer C.free(unsafe.Pointer(name))
	return int(C.xibv_device_index(name))
}

func (c *Context) deviceAttr() (*C.struct_ibv_device_attr, error) {
	c.attrOnce.Do(func() {
		rc, err := C.xibv_query_device(c.c, &c.attr)
		if e := rcErr(rc, err); e != nil {
			c.attrErr = fmt.Errorf("ibv_query_device %s: %w", c.name, e)
		}
	})
	return &c.attr, c.attrErr
}

// QueryDevice returns the attributes, ports and GIDs of the device.
func (c *Context) QueryDevice() (DeviceInfo, error) {
	if c == nil || c.c == nil {
		return DeviceInfo{}, ErrClosed
	}
	a, err := c.deviceAttr()
	if err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{
		Name:            c.name,
		NodeGUID:        formatGUID(*(*[8]byte)(unsafe.Pointer(&a.node_guid))),
		SysImageGUID:    formatGUID(*(*[8]byte)(unsafe.Pointer(&a.sys_image_guid))),
		NodeType:        c.nodeType,
		Transport:       c.transport,
		FWVer:           C.GoString(&a.fw_ver[0]),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVer:           uint32(a.hw_ver),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxSRQ:          int(a.max_srq),
		MaxSRQWR:        int(a.max_srq_wr),
		MaxPD:           int(a.max_pd),
		MemWindows:      a.device_cap_flags&(C.IBV_DEVICE_MEM_WINDOW_TYPE_2A|C.IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0,
	}
	if info.FWVer == "" {
		info.FWVer = readSysfs(c.sysfs, "fw_ver")
	}
	for p := 1; p <= int(a.phys_port_cnt); p++ {
		pi, err := c.QueryPort(p)
		if err != nil {
			return info, err
		}
		info.Ports = append(info.Ports, pi)
	}
	return info, nil
}

// QueryPort returns the state, MTUs and non-zero GIDs of port (from 1).
func (c *Context) QueryPort(port int) (PortInfo, error) {
	if c == nil || c.c == nil {
		return PortInfo{}, ErrClosed
	}
	if port < 1 || port > 255 {
		return PortInfo{}, fmt.Errorf("ibv_query_port %s port %d: %w", c.name, port, syscall.EINVAL)
	}
	var a C.struct_ibv_port_attr
	rc, err := C.xibv_query_port(c.c, C.int(port), &a)
	if e := rcErr(rc, err); e != nil {
		return PortInfo{}, fmt.Errorf("ibv_query_port %s port %d: %w", c.name, port, e)
	}
	pi := PortInfo{
		Num:         port,
		State:       portStateString(int(a.state)),
		PhysState:   physStateString(int(a.phys_state)),
		LinkLayer:   linkLayerString(int(a.link_layer), c.transport),
		MaxMTU:      mtuBytes(int(a.max_mtu)),
		ActiveMTU:   mtuBytes(int(a.active_mtu)),
		LID:         uint16(a.lid),
		SMLID:       uint16(a.sm_lid),
		GIDTableLen: int(a.gid_tbl_len),
		MaxMsgSize:  uint32(a.max_msg_sz),
	}
	portDir := filepath.Join(c.sysfs, "ports", strconv.Itoa(port))
	if pi.Rate = readSysfs(portDir, "rate"); pi.Rate == "" {
		pi.Rate = rateString(int(a.active_width), int(a.active_speed))
	}
	for i := 0; i < pi.GIDTableLen; i++ {
		gid, err := c.QueryGID(port, i)
		if err != nil {
			// Some providers fail on unpopulated entries.
			continue
		}
		if gid == ([16]byte{}) {
			continue
		}
		idx := strconv.Itoa(i)
		g := newGIDInfo(i, gid, gidType(readSysfs(portDir, "gid_attrs", "types", idx), pi.LinkLayer, c.transport))
		g.Netdev = readSysfs(portDir, "gid_attrs", "ndevs", idx)
		pi.GIDs = append(pi.GIDs, g)
	}
	return pi, nil
}

// QueryGID returns entry index of port's GID table.
func (c *Context) QueryGID(port, index int) ([16]byte, error) {
	var gid [16]byte
	if c == nil || c.c == nil {
		return gid, ErrClosed
	}
	var g C.union_ibv_gid
	rc, err := C.xibv_query_gid(c.c, C.int(port), C.int(index), &g)
	if e := rcErr(rc, err); e != nil {
		return gid, fmt.Errorf("ibv_query_gid %s port %d index %d: %w", c.name, port, index, e)
	}
	copy(gid[:], (*[16]byte)(unsafe.Pointer(&g))[:])
	return gid, nil
}

// Close closes the device. It fails, and the context stays open, while PDs,
// CQs or completion channels opened from it are open.
func (c *Context) Close() error {
	if c == nil || c.c == nil {
		return nil
	}
	if n := c.children.Load(); n > 0 {
		return fmt.Errorf("ibv_close_device %s: %d PDs, CQs or channels are still open: %w", c.name, n, syscall.EBUSY)
	}
	rc, err := C.xibv_close_device(c.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_close_device %s: %w", c.name, e)
	}
	c.c = nil
	live.contexts.Add(-1)
	return nil
}

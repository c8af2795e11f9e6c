package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer/probe"
)

func newDevicesCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List RDMA devices, ports and GIDs (ibv_devices and ibv_devinfo, plus GID types)",
		Long: "devices lists what ibv_devices and ibv_devinfo show for every RDMA device: node GUIDs,\n" +
			"firmware, ports with their state, MTUs, LIDs and link layer, and the GID table with each\n" +
			"entry's type (IB, RoCE v1, RoCE v2), netdev, and whether it is IPv4-mapped or link-local.\n" +
			"It exits 1 when libibverbs cannot be loaded; with no devices it says so and exits 0.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := probe.Verbs(); err != nil {
				return fmt.Errorf("cannot list RDMA devices: %w", err)
			}
			devs, err := probe.Devices()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if devs == nil {
					devs = []probe.Device{}
				}
				return enc.Encode(jsonDevices(devs))
			}
			printDevices(g.stdout, devs)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

type jsonGID struct {
	Index      int    `json:"index"`
	GID        string `json:"gid"`
	Type       string `json:"type"`
	Netdev     string `json:"netdev,omitempty"`
	IPv4Mapped bool   `json:"ipv4_mapped"`
	LinkLocal  bool   `json:"link_local"`
}

type jsonPort struct {
	Port      int       `json:"port"`
	State     string    `json:"state"`
	PhysState string    `json:"phys_state"`
	LinkLayer string    `json:"link_layer"`
	MaxMTU    int       `json:"max_mtu"`
	ActiveMTU int       `json:"active_mtu"`
	LID       uint16    `json:"lid"`
	SMLID     uint16    `json:"sm_lid"`
	Rate      string    `json:"rate,omitempty"`
	GIDs      []jsonGID `json:"gids"`
}

type jsonDevice struct {
	Name         string     `json:"name"`
	NodeGUID     string     `json:"node_guid"`
	SysImageGUID string     `json:"sys_image_guid"`
	NodeType     string     `json:"node_type"`
	Transport    string     `json:"transport"`
	FWVer        string     `json:"fw_ver"`
	VendorID     uint32     `json:"vendor_id"`
	VendorPartID uint32     `json:"vendor_part_id"`
	HWVer        uint32     `json:"hw_ver"`
	MaxQP        int        `json:"max_qp"`
	MaxQPWR      int        `json:"max_qp_wr"`
	MaxSGE       int        `json:"max_sge"`
	MaxCQE       int        `json:"max_cqe"`
	MaxMR        int        `json:"max_mr"`
	MaxMRSize    uint64     `json:"max_mr_size"`
	Ports        []jsonPort `json:"ports"`
}

func jsonDevices(devs []probe.Device) []jsonDevice {
	out := make([]jsonDevice, 0, len(devs))
	for _, d := range devs {
		jd := jsonDevice{Name: d.Name, NodeGUID: d.NodeGUID, SysImageGUID: d.SysImageGUID, NodeType: d.NodeType,
			Transport: d.Transport, FWVer: d.FWVer, VendorID: d.VendorID, VendorPartID: d.VendorPartID, HWVer: d.HWVer,
			MaxQP: d.MaxQP, MaxQPWR: d.MaxQPWR, MaxSGE: d.MaxSGE, MaxCQE: d.MaxCQE, MaxMR: d.MaxMR, MaxMRSize: d.MaxMRSize,
			Ports: []jsonPort{}}
		for _, p := range d.Ports {
			jp := jsonPort{Port: p.Num, State: p.State, PhysState: p.PhysState, LinkLayer: p.LinkLayer, MaxMTU: p.MaxMTU,
				ActiveMTU: p.ActiveMTU, LID: p.LID, SMLID: p.SMLID, Rate: p.Rate, GIDs: []jsonGID{}}
			for _, gd := range p.GIDs {
				jp.GIDs = append(jp.GIDs, jsonGID{Index: gd.Index, GID: gd.String(), Type: gd.Type, Netdev: gd.Netdev,
					IPv4Mapped: gd.IPv4Mapped, LinkLocal: gd.LinkLocal})
			}
			jd.Ports = append(jd.Ports, jp)
		}
		out = append(out, jd)
	}
	return out
}

func printDevices(w io.Writer, devs []probe.Device) {
	if len(devs) == 0 {
		fmt.Fprintln(w, "No RDMA devices found. (xfer doctor says how to create a SoftRoCE device.)")
		return
	}
	fmt.Fprintf(w, "    %-16s %s\n    %-16s %s\n", "device", "node GUID", "------", "----------------")
	for _, d := range devs {
		fmt.Fprintf(w, "    %-16s %s\n", d.Name, d.NodeGUID)
	}
	for _, d := range devs {
		fmt.Fprintf(w, "\nhca_id:\t%s\n", d.Name)
		fmt.Fprintf(w, "\ttransport:\t\t%s\n", d.Transport)
		fmt.Fprintf(w, "\tfw_ver:\t\t\t%s\n", d.FWVer)
		fmt.Fprintf(w, "\tnode_guid:\t\t%s\n", d.NodeGUID)
		fmt.Fprintf(w, "\tsys_image_guid:\t\t%s\n", d.SysImageGUID)
		fmt.Fprintf(w, "\tvendor_id:\t\t0x%04x\n", d.VendorID)
		fmt.Fprintf(w, "\tvendor_part_id:\t\t%d\n", d.VendorPartID)
		fmt.Fprintf(w, "\thw_ver:\t\t\t0x%x\n", d.HWVer)
		fmt.Fprintf(w, "\tphys_port_cnt:\t\t%d\n", len(d.Ports))
		fmt.Fprintf(w, "\tmax_qp: %d  max_qp_wr: %d  max_sge: %d  max_cqe: %d  max_mr: %d  max_mr_size: %d\n",
			d.MaxQP, d.MaxQPWR, d.MaxSGE, d.MaxCQE, d.MaxMR, d.MaxMRSize)
		for _, p := range d.Ports {
			fmt.Fprintf(w, "\t\tport:\t%d\n", p.Num)
			fmt.Fprintf(w, "\t\t\tstate:\t\t\tPORT_%s\n", p.State)
			fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s\n", p.PhysState)
			fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%d\n", p.MaxMTU)
			fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%d\n", p.ActiveMTU)
			fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
			fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
			fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
			if p.Rate != "" {
				fmt.Fprintf(w, "\t\t\trate:\t\t\t%s\n", p.Rate)
			}
			for _, gd := range p.GIDs {
				var notes []string
				if gd.IPv4Mapped {
					notes = append(notes, "IPv4-mapped")
				}
				if gd.LinkLocal {
					notes = append(notes, "link-local")
				}
				note := ""
				if len(notes) > 0 {
					note = " (" + strings.Join(notes, ", ") + ")"
				}
				fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s  %-8s %s%s\n", gd.Index, gd.String(), gd.Type, gd.Netdev, note)
			}
		}
	}
}

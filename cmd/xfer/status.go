package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/probe"
)

// statusPath is the status API's path on the operations endpoint (ops.go),
// where `xfer status` fetches the statusDoc.
const statusPath = "/api/v1/transport/status"

// statusDoc is what GET /api/v1/transport/status returns and `xfer
// status` prints: the build, the command, its engines, and this host's
// RDMA devices.
type statusDoc struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	// VerbsBuilt is whether this build has the verbs transport.
	VerbsBuilt bool   `json:"verbs_built"`
	Command    string `json:"command"` // "serve", "kv serve", ...
	// Engines are the command's engines (none for the coordinator).
	Engines []xfer.Status `json:"engines"`
	// Devices are this host's RDMA devices' ports; DevicesError says why
	// they could not be listed (no libibverbs).
	Devices      []statusPort `json:"devices"`
	DevicesError string       `json:"devices_error,omitempty"`
	// AuthFailures is, for the coordinator (which has no engine), the
	// requests it refused for want of its token; engines report theirs in
	// Engines.
	AuthFailures *uint64 `json:"auth_failures,omitempty"`
}

// statusPort is one port of an RDMA device as the status API shows it.
type statusPort struct {
	Device    string `json:"device"`
	Port      int    `json:"port"`
	State     string `json:"state"`
	LinkLayer string `json:"link_layer"`
	ActiveMTU int    `json:"active_mtu"`
	Speed     string `json:"speed,omitempty"`
	// GIDIndex and GIDType are the GID an engine uses on this port, or
	// else the first RoCE v2 (else the first) entry of its table.
	GIDIndex int    `json:"gid_index"`
	GIDType  string `json:"gid_type,omitempty"`
	InUse    bool   `json:"in_use"`
}

// baseStatus is the status of a command without engines.
func baseStatus() statusDoc {
	v := readVersion()
	return statusDoc{Version: v.Version, Commit: v.Commit, Go: v.Go, VerbsBuilt: v.Verbs, Engines: []xfer.Status{}, Devices: []statusPort{}}
}

// engineStatus returns the status of a command running engines es.
func engineStatus(command string, es ...*xfer.Engine) statusDoc {
	d := baseStatus()
	d.Command = command
	for _, e := range es {
		d.Engines = append(d.Engines, e.Status())
	}
	devs, err := probe.Devices()
	if err != nil {
		d.DevicesError = err.Error()
	}
	for _, dev := range devs {
		for _, p := range dev.Ports {
			sp := statusPort{Device: dev.Name, Port: p.Num, State: p.State, LinkLayer: p.LinkLayer, ActiveMTU: p.ActiveMTU, Speed: p.Rate, GIDIndex: -1}
			for _, s := range d.Engines {
				for _, t := range s.Transports {
					if t.Device != nil && t.Device.Device == dev.Name && t.Device.Port == p.Num {
						sp.InUse, sp.GIDIndex, sp.GIDType = true, t.Device.GIDIndex, t.Device.GIDType
					}
				}
			}
			if !sp.InUse {
				for _, g := range p.GIDs {
					if sp.GIDIndex < 0 || (g.Type == "RoCE v2" && sp.GIDType != "RoCE v2") {
						sp.GIDIndex, sp.GIDType = g.Index, g.Type
					}
				}
			}
			d.Devices = append(d.Devices, sp)
		}
	}
	return d
}

func newStatusCmd(g *globals) *cobra.Command {
	var addr string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a running xfer's engines, transports, devices, peers, fallbacks and pool",
		Long: "status asks a running xfer command (serve, kv serve, pages serve, coordinator, bench)\n" +
			"for its status, at the address it was given with --metrics-listen, and prints it as\n" +
			"tables, or as the JSON of GET " + statusPath + " with --json.\n" +
			"It exits 1 when nothing answers there.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return fmt.Errorf("status needs the address of a running xfer's --metrics-listen: --addr HOST:PORT")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			raw, doc, err := fetchStatus(ctx, addr)
			if err != nil {
				return err
			}
			if asJSON {
				_, err := g.stdout.Write(raw)
				return err
			}
			printStatus(g.stdout, doc)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "`address` of the running command's --metrics-listen, HOST:PORT or http://HOST:PORT")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON document instead of tables")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up after this `duration`")
	return cmd
}

// fetchStatus gets the status document from addr.
func fetchStatus(ctx context.Context, addr string) ([]byte, statusDoc, error) {
	var doc statusDoc
	url := addr
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + statusPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, doc, fmt.Errorf("status: --addr %q: %w", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, doc, fmt.Errorf("status: %w (is an xfer command running there with --metrics-listen?)", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, doc, fmt.Errorf("status: read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, doc, fmt.Errorf("status: %s answered %s", url, resp.Status)
	}
	if doc, err = decodeStatus(raw); err != nil {
		return nil, doc, fmt.Errorf("status: %s did not answer an xfer status document: %w", url, err)
	}
	return raw, doc, nil
}

// decodeStatus decodes a status document: a JSON object with at least the
// version and the command.
func decodeStatus(raw []byte) (statusDoc, error) {
	var doc statusDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return statusDoc{}, err
	}
	if doc.Version == "" || doc.Go == "" {
		return statusDoc{}, errors.New("no version: not an xfer status document")
	}
	return doc, nil
}

// printStatus prints doc as tables.
func printStatus(w io.Writer, d statusDoc) {
	fmt.Fprintf(w, "xfer %s", d.Version)
	if d.Commit != "" {
		fmt.Fprintf(w, " (%s)", short(d.Commit))
	}
	fmt.Fprintf(w, ", %s, verbs built: %v; command: %s\n", d.Go, d.VerbsBuilt, d.Command)
	for _, e := range d.Engines {
		fmt.Fprintf(w, "\nengine %s  policy %s  addr %s  regions %d\n", e.ID, e.Policy, orDash(e.Addr), e.Regions)
		if dir := e.Directory; dir != nil {
			fmt.Fprintf(w, "directory %s", dir.URL)
			if r := dir.Registration; r != nil {
				fmt.Fprintf(w, "  node %s %s since %s  re-registered %d", r.NodeID, r.State, r.Since.Format(time.RFC3339), r.Reregistrations)
				if r.LastError != "" {
					fmt.Fprintf(w, "  (%s)", r.LastError)
				}
			}
			fmt.Fprintln(w)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TRANSPORT\tAVAILABLE\tMEMORY\tRIGHTS BY\tDEVICE\tNOTE")
		for _, t := range e.Transports {
			dev := "-"
			if t.Device != nil {
				dev = fmt.Sprintf("%s/%d gid %d (%s) mtu %d", t.Device.Device, t.Device.Port, t.Device.GIDIndex, t.Device.GIDType, t.Device.MTU)
			}
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\n", t.Name, t.Available, orDash(t.Caps.Memory.String()), t.Caps.Rights, dev, orDash(t.Reason))
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PEER\tTRANSPORT\tUP\tSINCE\tOPS\tBYTES\tLAST ERROR")
		for _, p := range e.Peers {
			since := "-"
			if !p.UpSince.IsZero() {
				since = p.UpSince.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\t%s\t%s\n", p.Addr, orDash(p.Transport), p.Connected, since, p.Ops, bytesize.Format(int64(p.Bytes)), orDash(p.LastError))
		}
		if len(e.Peers) == 0 {
			fmt.Fprintln(tw, "(none)")
		}
		tw.Flush()
		for _, p := range e.Peers {
			for _, pt := range p.Paused {
				fmt.Fprintf(w, "  %s: %s paused since %s (%s), next probe %s, %d failed\n", p.Addr, pt.Transport,
					pt.Since.Format(time.RFC3339), pt.Reason, pt.NextProbe.Format(time.RFC3339), pt.Probes)
			}
		}
		fmt.Fprintf(w, "\nfallbacks %d, setup retries %d\n", e.Fallbacks, e.SetupRetries)
		for _, f := range e.RecentFallbacks {
			fmt.Fprintf(w, "  %s  %s  gave up %s: %s (%s)\n", f.Time.Format(time.RFC3339), f.Peer, f.Transport, f.Reason, f.Detail)
		}
		fmt.Fprintf(w, "failovers %d\n", e.Failovers)
		for _, f := range e.RecentFailovers {
			if f.Op == "" { // recovered: a move back to a paused transport
				fmt.Fprintf(w, "  %s  %s  back from %s to %s after %d probes\n", f.Time.Format(time.RFC3339), f.Peer, f.From, f.To, f.Attempts)
				continue
			}
			fmt.Fprintf(w, "  %s  %s  %s lost on %s, done on %s after %d attempts\n", f.Time.Format(time.RFC3339), f.Peer, f.Op, f.From, f.To, f.Attempts)
		}
		var refused uint64
		for _, f := range e.AuthFailures {
			refused += f.Count
		}
		fmt.Fprintf(w, "refused callers %d\n", refused)
		for _, f := range e.AuthFailures {
			fmt.Fprintf(w, "  %s %s: %d\n", f.Plane, f.Reason, f.Count)
		}
		for _, f := range e.RecentAuthFailures {
			fmt.Fprintf(w, "  %s  %s  %s %s: %s\n", f.Time.Format(time.RFC3339), f.Source, f.Plane, f.Reason, f.Detail)
		}
		p := e.Pool
		fmt.Fprintf(w, "pool: %s used, %s free of %s, largest free %s, fragmentation %.2f, %d buffers, %d failed allocations\n",
			bytesize.Format(int64(p.Used)), bytesize.Format(int64(p.Free)), bytesize.Format(int64(p.Capacity)), bytesize.Format(int64(p.LargestFree)), p.Fragmentation, p.Allocated, p.Failures)
	}
	fmt.Fprintln(w)
	if d.DevicesError != "" {
		fmt.Fprintf(w, "RDMA devices: %s\n", d.DevicesError)
		return
	}
	if len(d.Devices) == 0 {
		fmt.Fprintln(w, "RDMA devices: none")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tPORT\tSTATE\tLINK\tGID\tGID TYPE\tMTU\tSPEED\tIN USE")
	for _, p := range d.Devices {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\t%s\t%v\n", p.Device, p.Port, p.State, p.LinkLayer, p.GIDIndex, orDash(p.GIDType), p.ActiveMTU, orDash(p.Speed), p.InUse)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

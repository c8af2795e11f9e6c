package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer/probe"
)

// versionInfo is what `xfer version` reports: the build (module version,
// commit, Go), whether the build has verbs, and whether this host can use
// them.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Time     string `json:"commit_time,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Verbs is whether this build has the verbs transport (cgo on Linux);
	// VerbsWhy says why not.
	Verbs    bool   `json:"verbs_built"`
	VerbsWhy string `json:"verbs_built_reason,omitempty"`
	// Libibverbs is whether libibverbs loads here, and LibibverbsWhy why
	// not; ActivePorts lists the devices' ACTIVE ports ("rxe0/1").
	Libibverbs    bool     `json:"libibverbs"`
	LibibverbsWhy string   `json:"libibverbs_reason,omitempty"`
	ActivePorts   []string `json:"active_ports"`
}

// readVersion gathers versionInfo. The host part loads libibverbs.
func readVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, ActivePorts: []string{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			case "vcs.time":
				v.Time = s.Value
			}
		}
	}
	v.Verbs, v.VerbsWhy = probe.VerbsBuilt()
	if err := probe.Verbs(); err != nil {
		v.LibibverbsWhy = err.Error()
		return v
	}
	v.Libibverbs = true
	devs, err := probe.Devices()
	if err != nil {
		v.LibibverbsWhy = err.Error()
		return v
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.Active() {
				v.ActivePorts = append(v.ActivePorts, fmt.Sprintf("%s/%d", d.Name, p.Num))
			}
		}
	}
	return v
}

func (v versionInfo) write(w io.Writer) {
	commit := v.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "unknown (built without VCS information)"
	} else if v.Modified {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(w, "xfer %s\n", v.Version)
	fmt.Fprintf(w, "commit:  %s", commit)
	if v.Time != "" {
		fmt.Fprintf(w, ", %s", v.Time)
	}
	fmt.Fprintf(w, "\ngo:      %s %s\n", v.Go, v.Platform)
	if v.Verbs {
		fmt.Fprintln(w, "verbs:   built in (cgo; libibverbs is loaded at run time)")
	} else {
		fmt.Fprintf(w, "verbs:   not built in: %s\n", v.VerbsWhy)
	}
	switch {
	case !v.Libibverbs:
		fmt.Fprintf(w, "host:    no RDMA: %s\n", v.LibibverbsWhy)
	case len(v.ActivePorts) == 0:
		fmt.Fprintln(w, "host:    libibverbs loads, but no device has an ACTIVE port (see xfer doctor)")
	default:
		fmt.Fprintf(w, "host:    libibverbs loads; ACTIVE: %s\n", strings.Join(v.ActivePorts, ", "))
	}
}

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit, and whether RDMA is built in and usable here",
		Long: "version prints xfer's module version and commit (from the build information),\n" +
			"the Go version, whether this build has the verbs transport (it needs cgo), and\n" +
			"whether this host loads libibverbs and has a device with an ACTIVE port.\n" +
			"xfer --version prints the same.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readVersion()
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				return enc.Encode(v)
			}
			v.write(g.stdout)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// versionTemplate makes `xfer --version` print what `xfer version` does.
func versionTemplate() string {
	var b strings.Builder
	readVersion().write(&b)
	return b.String()
}

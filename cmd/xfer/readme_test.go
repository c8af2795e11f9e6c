package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns the fenced blocks of the repository's README.md
// whose info string is lang ("" for plain fences).
func readmeBlocks(t *testing.T, lang string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks [][]string
	var cur []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in = true
			cur = nil
			if strings.TrimPrefix(line, "```") != lang {
				cur = []string{"\x00skip"}
			}
		case in && line == "```":
			in = false
			if len(cur) == 0 || cur[0] != "\x00skip" {
				blocks = append(blocks, cur)
			}
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

var readmeFlag = regexp.MustCompile(`--[a-z][a-z0-9-]*`)

// TestREADMECommands: every command the README's CLI blocks show exists,
// with every flag it shows.
func TestREADMECommands(t *testing.T) {
	env := cleanEnv()
	checked := 0
	for _, b := range readmeBlocks(t, "") {
		var path []string
		for _, line := range b {
			text, _, _ := strings.Cut(line, "#")
			fields := strings.Fields(text)
			if len(fields) == 0 {
				continue
			}
			if fields[0] == "xfer" {
				path = nil
				for _, w := range fields[1:] {
					if !regexp.MustCompile(`^[a-z]+$`).MatchString(w) {
						break
					}
					path = append(path, w)
				}
			} else if !strings.HasPrefix(fields[0], "[") || path == nil {
				continue // not a command line, nor its continuation
			}
			help, e, code := xferRun(t, env, append(append([]string{}, path...), "--help")...)
			if code != 0 {
				t.Errorf("xfer %s --help: exit %d: %s", strings.Join(path, " "), code, e)
				continue
			}
			for _, fl := range readmeFlag.FindAllString(text, -1) {
				if !strings.Contains(help, fl+" ") {
					t.Errorf("README shows xfer %s %s, which its help does not list", strings.Join(path, " "), fl)
				}
			}
			checked++
		}
	}
	if checked < 8 {
		t.Fatalf("checked only %d README command lines", checked)
	}
}

// TestREADMETwoCommands: the README's set-up block names the main job and
// the test command; the main job runs as written (through the built
// binary, which is what go run builds) and make knows the test target.
func TestREADMETwoCommands(t *testing.T) {
	var lines []string
	for _, b := range readmeBlocks(t, "sh") {
		for _, l := range b {
			if c, _, _ := strings.Cut(l, "#"); strings.TrimSpace(c) != "" {
				lines = append(lines, strings.TrimSpace(c))
			}
		}
		break // the first sh block is the two commands
	}
	if len(lines) != 2 {
		t.Fatalf("the README's first sh block has %d commands, want 2: %q", len(lines), lines)
	}
	args, ok := strings.CutPrefix(lines[0], "go run ./cmd/xfer ")
	if !ok {
		t.Fatalf("the main job is %q, want go run ./cmd/xfer ...", lines[0])
	}
	out, e, code := xferRun(t, cleanEnv(), strings.Fields(args)...)
	if code != 0 || !strings.Contains(out, "GB/s") || !strings.Contains(out, "p50 µs") {
		t.Fatalf("xfer %s: exit %d:\n%s\n%s", args, code, out, e)
	}
	if lines[1] != "make test" {
		t.Fatalf("the test command is %q, want make test", lines[1])
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	cmd := exec.Command("make", "-n", "test")
	cmd.Dir = filepath.Join("..", "..")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make -n test: %v\n%s", err, o)
	}
}

// TestREADMEKV runs the README's KV commands against a server, with the
// http:// address form the README shows.
func TestREADMEKV(t *testing.T) {
	addr := "http://" + startKVServe(t)
	env := cleanEnv()
	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"put", "--server-addr", addr, "KEY", "VALUE"}, ""},
		{[]string{"get", "--server-addr", addr, "KEY"}, "VALUE"},
		{[]string{"stats", "--server-addr", addr, "--json"}, `"keys":1`},
		{[]string{"delete", "--server-addr", addr, "KEY", "--force"}, ""},
		{[]string{"bench", "--server-addr", addr, "--op", "get", "--ops", "200", "--value-size", "4KiB", "--concurrency", "2", "--json"}, `"size_bytes":4096`},
	} {
		o, e, code := xferRun(t, env, append([]string{"kv"}, c.args...)...)
		if code != 0 || !strings.Contains(o, c.out) {
			t.Errorf("xfer kv %s: exit %d: %q %s", strings.Join(c.args, " "), code, o, e)
		}
	}
	if _, e, code := xferRun(t, env, "kv", "get", "--server-addr", addr, "KEY"); code != 1 || !strings.Contains(e, "not found") {
		t.Errorf("get of a deleted key: exit %d: %s", code, e)
	}
}

// TestREADMEConfig runs a benchmark with the README's YAML sample as the
// config file, as a reader would paste it.
func TestREADMEConfig(t *testing.T) {
	blocks := readmeBlocks(t, "yaml")
	if len(blocks) == 0 {
		t.Fatal("the README has no yaml block")
	}
	file := filepath.Join(t.TempDir(), "xfer.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(blocks[0], "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, e, code := xferRun(t, cleanEnv(), "--config", file, "bench", "--transport", "tcp", "--size", "4KiB", "--iters", "50")
	if code != 0 || !strings.Contains(out, "tcp        write") {
		t.Fatalf("bench --config README.yaml: exit %d:\n%s\n%s", code, out, e)
	}
}

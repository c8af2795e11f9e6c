package bench

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// jsonFields is the exact set of fields of a "bench --json" line.
var jsonFields = []string{
	"bytes_per_sec", "cpu_sec_per_gb", "lat_p50_ns", "lat_p999_ns", "lat_p99_ns", "op",
	"ops", "seconds", "size_bytes", "transport", "verified",
}

// checkJSONFields fails unless line is a JSON object with exactly
// jsonFields, and returns it decoded.
func checkJSONFields(t *testing.T, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, jsonFields) {
		t.Fatalf("fields %v, want exactly %v", keys, jsonFields)
	}
	return m
}

var sampleResult = Result{
	Transport: "tcp", Op: "write", Size: 65536, Ops: 1000, Elapsed: time.Second,
	P50: 12300 * time.Nanosecond, P99: 45600 * time.Nanosecond, P999: 78900 * time.Nanosecond, Max: 99100 * time.Nanosecond,
	CPU: 13107200 * time.Nanosecond, CPUKnown: true, Verified: true,
}

func TestJSONRecord(t *testing.T) {
	var buf bytes.Buffer
	w := &Writer{W: &buf, JSON: true}
	if err := w.Write(sampleResult); err != nil {
		t.Fatal(err)
	}
	if err := w.Note("never in JSON"); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1:\n%s", len(lines), buf.Bytes())
	}
	m := checkJSONFields(t, lines[0])
	want := map[string]any{
		"transport": "tcp", "op": "write", "size_bytes": 65536.0, "ops": 1000.0, "seconds": 1.0,
		"bytes_per_sec": 65536000.0, "lat_p50_ns": 12300.0, "lat_p99_ns": 45600.0, "lat_p999_ns": 78900.0,
		"cpu_sec_per_gb": 0.0131072 / 0.065536, "verified": true,
	}
	for k, v := range want {
		if f, ok := v.(float64); ok {
			if g, _ := m[k].(float64); g < f*(1-1e-9) || g > f*(1+1e-9) {
				t.Errorf("%s = %v, want %v", k, m[k], v)
			}
		} else if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

func TestJSONRecordUnknownCPU(t *testing.T) {
	r := sampleResult
	r.CPUKnown = false
	b, err := json.Marshal(r.Record())
	if err != nil {
		t.Fatal(err)
	}
	if m := checkJSONFields(t, b); m["cpu_sec_per_gb"] != nil {
		t.Errorf("cpu_sec_per_gb = %v, want null", m["cpu_sec_per_gb"])
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	w := &Writer{W: &buf}
	r2 := sampleResult
	r2.Size, r2.CPUKnown = 16<<20, false
	for _, r := range []Result{sampleResult, r2} {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Note("footer %d", 1); err != nil {
		t.Fatal(err)
	}
	want := "" +
		" transport  op         bytes       ops      GB/s   p50 µs   p99 µs   max µs  cpu s/GB\n" +
		" tcp        write      65536      1000     0.066     12.3     45.6     99.1     0.200\n" +
		" tcp        write   16777216      1000    16.777     12.3     45.6     99.1         -\n" +
		" # footer 1\n"
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	// Every row is as wide as the header, in characters (µ is two bytes).
	lines := strings.Split(buf.String(), "\n")
	for _, l := range lines[1:3] {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[0]) {
			t.Errorf("row %q is %d wide, header %d", l, utf8.RuneCountInString(l), utf8.RuneCountInString(lines[0]))
		}
	}
}

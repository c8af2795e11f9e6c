package transport

import (
	"encoding/json"
	"testing"

	"github.com/xferio/xfer/mem"
)

// Caps survive a status document: what MarshalJSON writes, Unmarshal
// reads back the same, and a wrong value is an error.
func TestCapsJSON(t *testing.T) {
	for _, c := range []Caps{
		{SameHost: true, MapsMemory: true, Memory: mem.KindSet(mem.KindHost, mem.KindCUDA), Rights: RightsByKernel},
		{Streams: true, Memory: mem.KindSet(mem.KindHost), Rights: RightsByOwner},
		{Rights: RightsByNIC},
		{},
	} {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back Caps
		if err := json.Unmarshal(b, &back); err != nil || back != c {
			t.Fatalf("%s: read back %+v, %v", b, back, err)
		}
	}
	var c Caps
	for _, bad := range []string{`{"rights":"everyone"}`, `{"memory":"host,tape"}`} {
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

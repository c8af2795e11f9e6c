package testutil

import (
	"io"
	"net/http"
	"testing"
)

// HTTPDo sends req with http.DefaultClient and returns the answer's status
// code, header and whole body. A request that gets no answer, or a body
// that cannot be read, fails the test.
func HTTPDo(tb testing.TB, req *http.Request) (int, http.Header, []byte) {
	tb.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

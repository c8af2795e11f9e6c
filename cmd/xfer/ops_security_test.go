package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// TestOpsEndpointBasicAuth: with a web configuration file that sets basic
// authentication (the Prometheus exporters' format), the operations
// endpoint answers 401 without the password and serves with it; a bad
// file is an error before anything listens.
func TestOpsEndpointBasicAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("scrape-password"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "web.yml")
	os.WriteFile(cfg, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600)
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("tls_server_config: {cert_file: /nonexistent}\n"), 0o600)
	if code := run(context.Background(), []string{"coordinator", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--web-config-file", bad}, io.Discard, io.Discard); code == 0 {
		t.Fatal("a bad web configuration file was accepted")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"coordinator", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--web-config-file", cfg}, io.Discard, pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	ops, ok := strings.CutPrefix(strings.TrimSpace(line), opsBannerWeb)
	if !ok {
		t.Fatalf("stderr: %q", line)
	}
	go io.Copy(io.Discard, pr)
	get := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "http://"+ops+metricsPath, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for deadline := time.Now().Add(10 * time.Second); get("prometheus", "scrape-password") != 200; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the endpoint does not serve with the password")
		}
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("without the password: %d, want 401", code)
	}
	if code := get("prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("with a wrong password: %d, want 401", code)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	<-exit
}

// TestPprofCmdlineRedacted: pprof's command line never shows a secret.
func TestPprofCmdlineRedacted(t *testing.T) {
	in := []string{"xfer", "serve", "--secret", "s3cret-s3cret-s3cret", "--secret=other-secret-value", "--secret-file", "/etc/xfer/secret",
		"--token-file", "/etc/t", "--password", "pw", "--listen", ":1"}
	got := redactArgs(in)
	want := []string{"xfer", "serve", "--secret", "REDACTED", "--secret=REDACTED", "--secret-file", "/etc/xfer/secret",
		"--token-file", "/etc/t", "--password", "REDACTED", "--listen", ":1"}
	if !slices.Equal(got, want) {
		t.Fatalf("redacted\n%q\nwant\n%q", got, want)
	}
}

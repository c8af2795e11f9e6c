package xfer_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/xferio/xfer"

// TestPackageBoundaries is the linter rule that keeps the layers apart (see
// checkLayout). It reads the imports of every package's non-test files.
func TestPackageBoundaries(t *testing.T) {
	imports := map[string][]string{} // package dir → imports (non-test files)
	for _, path := range goSources(t, true) {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if strings.HasSuffix(path, "_test.go") {
			// Tests may import what their package may not, but no
			// command's test decodes YAML either.
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if under(dir, "cmd") && isYAML(p) {
					t.Errorf("%s imports %s: %s", path, p, noYAML)
				}
			}
			continue
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			imports[dir] = append(imports[dir], p)
		}
		if _, ok := imports[dir]; !ok {
			imports[dir] = nil
		}
	}
	if len(imports) < 10 {
		t.Fatalf("found only %d packages: the walk is broken", len(imports))
	}
	for _, v := range checkLayout(imports, nil) {
		t.Error(v)
	}
}

// goSources lists the module's Go files, less what is under testdata or a
// hidden directory, and less the tests unless tests is set, by their paths
// from the module root.
func goSources(t *testing.T, tests bool) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != ".":
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".go") && (tests || !strings.HasSuffix(path, "_test.go")):
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// services are the packages built only on the public API: the root package
// xfer, mem, probe, directory, latency, callbound, their own subpackages
// and third-party modules; and internal/auth, the authentication
// primitives every plane shares, with internal/admit, the bound on the
// connections that have not authenticated yet.
var services = []string{"kv", "connector", "pages"}

// transports are the transport packages, siblings that never import each
// other. The control stream they compose, transport/stream, imports none of
// them either.
var transports = []string{"transport/tcp", "transport/shm", "transport/verbs"}

// cgoPackages are the only packages that import "C": the cgo binding of
// libibverbs and of libcuda, and the C ABI of the connector (a c-shared library for the
// Python binding, which must export C functions and so needs cgo itself).
var cgoPackages = []string{"internal/ibv", "internal/cuda", "cmd/libxfer"}

// ibvImporters are the only packages that may use the cgo binding
// (internal/testmain/rdmaleak only for its count of live objects).
var ibvImporters = []string{"transport/verbs", "probe", "internal/rdmacm", "internal/testmain/rdmaleak"}

// rootForbidden are the internal packages the root package may not import
// although its layer sits above them: the operating system's calls belong
// to the package whose mechanism needs them (transport/tcp's congestion
// control, mem's mappings).
var rootForbidden = []string{"internal/sys"}

// cudaImporters are the only packages that may use the CUDA binding:
// mem, whose table of memory kinds is the one way to GPU memory (the root
// package and the transports reach devices through it, never the driver),
// probe for doctor, and the tests' stand-in driver.
var cudaImporters = []string{"mem", "probe", "internal/testutil"}

// yamlLibraries are the YAML modules a command might reach for; package
// config decodes the configuration file for every command.
var yamlLibraries = []string{"gopkg.in/yaml.", "github.com/goccy/go-yaml", "sigs.k8s.io/yaml", "github.com/ghodss/yaml", "go.yaml.in/yaml"}

const noYAML = "commands decode no YAML: package config owns the configuration file (the command adds environment variables and flags)"

func isYAML(im string) bool {
	return slices.ContainsFunc(yamlLibraries, func(p string) bool { return strings.HasPrefix(im, p) })
}

// layers says, for each layer (a directory and everything under it; the
// longest match wins), which packages of this module it may import (by
// path prefix; "" is the root package). Dependencies point one way:
// cmd → services → xfer → transport/* → mem → internal/*.
var layers = map[string][]string{
	"internal/sys":  {},
	"internal/wire": {},
	"internal/auth": {},
	// The gate of pending, unauthenticated connections: the standard
	// library only.
	"internal/admit": {},
	// The bindings name buffer sizes in their errors as the CLI does
	// (bytesize, a leaf), and share the types of their ABI check (cabi).
	"internal/ibv":  {"internal/sys", "internal/cabi", "bytesize"},
	"internal/cuda": {"internal/sys", "internal/cabi", "bytesize"},
	// The ABI table's types, which both cgo bindings fill from C, and the
	// checks their tests run on it (cabitest): the standard library only.
	"internal/cabi":     {"internal/cabi"},
	"internal/rdmacm":   {"internal/ibv", "internal/sys"},
	"internal/testmain": {},
	// The op_timeout watchdog: it knows peers and their connections only
	// through its own interfaces, so the standard library is all it needs.
	"internal/watchdog": {},
	// The engine's Prometheus metrics (their error kinds match the
	// sentinels of the handshake and the watchdog): its counters of connections count
	// the endpoints' operations (transport's kinds, Counter, Caps, rails)
	// and show the pool's state (mem), and read the rest of the engine
	// through their own Source, never the root package.
	"internal/metrics": {"transport", "mem", "internal/handshake", "internal/watchdog"},
	// The table of registered memory: it checks a peer's access against
	// mem's handles and answers in transport's terms.
	"internal/regions": {"transport", "mem"},
	// The parts of the engine's status report and its log of recent
	// events: transport's caps and rails, the directory's registration,
	// mem's pool and devices.
	"internal/status": {"transport", "directory", "mem"},
	// A peer's paused transport and its probes' backoff: it knows the
	// peer through its own interface, and reports in internal/status' terms.
	"internal/failback": {"internal/status"},
	// The handshake's messages and proofs: the wire format, the
	// authentication primitives, the gate's tickets, and the contract's
	// protocol error.
	"internal/handshake": {"internal/wire", "internal/auth", "internal/admit", "transport"},
	// The completion of batches and synchronous calls: operations in the
	// contract's terms, pinned through mem, counted in the metrics' blocks.
	"internal/batch": {"transport", "mem", "internal/metrics"},
	// A peer's queue of received messages, which endpoints lend.
	"internal/inbox": {"transport"},
	// The engine's log of revoked regions: the standard library only.
	"internal/revokes": {},
	// The directory keys of the engine's Config: the directory's checks
	// of a node ID and its TLS files, and the secret files' reader.
	"internal/dirconfig": {"directory", "internal/auth"},
	// The transport's choice in the handshake: the contract's transports,
	// the hello's offers, the handshake's ErrNoTransport.
	"internal/negotiate": {"transport", "internal/wire", "internal/handshake"},
	// The queue of notifications, generic over what it queues.
	"internal/notes":    {},
	"internal/testutil": {"internal/cuda", "internal/testmain"},
	"mem":               {"internal/sys", "internal/cuda"},
	"probe":             {"internal/ibv", "internal/cuda", "internal/sys", "bytesize"},
	"transport":         {"transport", "mem", "internal/"},
	// The staging of device memory through host memory, which the engine
	// holds: it posts on endpoints and reaches devices through mem's
	// table of memory kinds only.
	"transport/stage": {"transport", "mem"},
	"xfertest":        {"", "transport", "mem", "internal/sys"},
	".":               {"transport", "mem", "directory", "internal/"},
	// The directory sits below the engine, which registers itself in it
	// and resolves node IDs with it: it imports no package of this module
	// (the standard library, the etcd client) but the authentication
	// primitives, for its token.
	"directory": {"internal/auth"},
	// Mooncake's metadata service (its HTTP server and the clients of it
	// and of etcd), for the command and the Mooncake engine of
	// cmd/libxfer: like the directory, nothing of this module but the
	// authentication primitives, for its token.
	"mooncake": {"internal/auth"},
	// The master of Mooncake's store: its gRPC messages (masterpb, which
	// imports nothing of this module), the metadata service beside it, and
	// the authentication primitives for its calls' proofs.
	"mooncake/master":          {"mooncake", "internal/auth"},
	"mooncake/master/masterpb": {},
	// The master's calls on the xfer data plane: a service on the public
	// API, speaking masterpb's messages.
	"mooncake/masterdata": {"", "mooncake/master/masterpb"},
	// The master as one server (gRPC, metrics, the metadata server, HA, the
	// data plane's engine), which the command runs: a service on the
	// public API and the Mooncake packages.
	"mooncake/mastersrv": {"", "mooncake"},
	// The configuration document (its keys, YAML and JSON decoding,
	// defaults and validation) sits beside the commands, above the
	// services: its keys are the engine's and the connector's.
	"config": {"", "mem", "connector", "bytesize"},
	// Leaves that hold no xfer concept, for the command and the layers
	// that print or read sizes: the standard library only.
	"bytesize": {},
	"cputime":  {"internal/sys"},
	// The latency histogram of the benchmarks and of the pages client.
	"latency": {},
	// The call bound of the KV client's and the connector's calls.
	"callbound": {},
	// The benchmark drivers of the commands, above the services they
	// measure: the public API, the services and the leaves.
	"bench": {"", "mem", "kv", "connector", "pages", "directory", "bytesize", "cputime", "latency"},
	"cmd":   {"", "mem", "transport", "probe", "kv", "connector", "pages", "directory", "mooncake", "config", "bytesize", "cputime", "latency", "bench"},
	// The project's own helpers: tools/bench/regmr measures ibv_reg_mr
	// through the binding itself, so tools may use internal packages.
	"tools": {"", "mem", "transport", "probe", "internal/"},
	// The leak checks of the test binaries that use RDMA count the
	// bindings' live objects.
	"internal/testmain/rdmaleak": {"internal/testmain", "internal/ibv", "internal/rdmacm"},
}

// checkLayout returns every violation of the layout rules in imports
// (package directory relative to the module root → import paths), less the
// transport-to-transport imports that pending allows (transport → the
// sibling it may still import while a refactor is under way; none today).
func checkLayout(imports map[string][]string, pending map[string]string) []string {
	var v []string
	dirs := make([]string, 0, len(imports))
	for dir := range imports {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		for _, im := range imports[dir] {
			if msg := checkImport(dir, im, pending); msg != "" {
				v = append(v, fmt.Sprintf("%s imports %s: %s", dir, im, msg))
			}
		}
	}
	return v
}

// under reports whether dir is p or below it.
func under(dir, p string) bool { return dir == p || strings.HasPrefix(dir, p+"/") }

func underAny(dir string, ps []string) (string, bool) {
	for _, p := range ps {
		if under(dir, p) {
			return p, true
		}
	}
	return "", false
}

// checkImport says why dir may not import im, or "".
func checkImport(dir, im string, pending map[string]string) string {
	switch {
	case im == "golang.org/x/sys/unix" || strings.HasPrefix(im, "golang.org/x/sys/unix/"):
		if dir != "internal/sys" {
			return "only internal/sys may import x/sys/unix"
		}
		return ""
	case im == "C":
		if !slices.Contains(cgoPackages, dir) {
			return `only internal/ibv (and the C ABI, cmd/libxfer) may import "C"`
		}
		return ""
	case im == "crypto/hmac" || im == "crypto/subtle":
		if dir != "internal/auth" {
			return "only internal/auth may import crypto/hmac and crypto/subtle: the authentication primitives are written once, there"
		}
		return ""
	}
	if under(dir, "cmd") && isYAML(im) {
		return noYAML
	}
	first, _, _ := strings.Cut(im, "/")
	if (dir == "internal/wire" || dir == "internal/auth") && strings.Contains(first, ".") {
		return dir + " must use the standard library only"
	}
	rel, ok := strings.CutPrefix(im, module)
	if !ok || (rel != "" && rel[0] != '/') {
		return "" // the standard library or a third-party module
	}
	rel = strings.TrimPrefix(rel, "/")

	if under(rel, "internal/ibv") {
		if _, ok := underAny(dir, ibvImporters); !ok && !under(dir, "tools") {
			return "internal/ibv may be imported only by " + strings.Join(ibvImporters, ", ")
		}
	}
	// The root package is the engine's face: the operating system is
	// reached through the packages below it (transport/tcp's socket
	// policy, mem's mappings), never from the root itself; GPUs likewise,
	// through mem's table of memory kinds (cudaImporters, below).
	if dir == "." {
		if p, ok := underAny(rel, rootForbidden); ok {
			return "the root package imports no " + p + ": reach it through the package that owns the mechanism"
		}
	}
	if under(rel, "internal/cuda") {
		if _, ok := underAny(dir, cudaImporters); !ok && !under(dir, "tools") {
			return "internal/cuda may be imported only by " + strings.Join(cudaImporters, ", ") + ": the others reach devices through mem's table of kinds"
		}
	}
	if under(dir, "cmd") && under(rel, "internal") {
		return "commands import public packages only"
	}
	if svc, ok := underAny(dir, services); ok {
		if dir == "kv/disktier" && rel == "internal/sys" {
			return "" // the disk tier's file I/O (O_DIRECT, pwritev, fallocate)
		}
		if rel == "" || under(rel, "mem") || under(rel, "probe") || under(rel, "directory") || under(rel, "latency") || under(rel, "callbound") || under(rel, "internal/auth") || under(rel, "internal/admit") || under(rel, svc) {
			return ""
		}
		return "services use the public xfer API, mem, probe, directory, latency, callbound, internal/auth and internal/admit only"
	}
	if under(dir, "transport/stream") {
		if _, ok := underAny(rel, transports); ok {
			return "the control stream imports no transport: the transports compose it"
		}
	}
	if under(dir, "transport/stage") {
		if _, ok := underAny(rel, transports); ok {
			return "the staging imports no transport: it posts on any endpoint"
		}
	}
	if tr, ok := underAny(dir, transports); ok {
		if other, ok := underAny(rel, transports); ok && other != tr {
			if pending[tr] == other {
				return ""
			}
			return "transports do not import each other (they share transport and transport/stream)"
		}
	}

	layer, best := "", -1
	for k := range layers {
		if (k == "." && dir == ".") || (k != "." && under(dir, k)) {
			if len(k) > best {
				layer, best = k, len(k)
			}
		}
	}
	if best < 0 {
		return "the package is in no layer: add it to layers in layout_test.go"
	}
	for _, p := range layers[layer] {
		switch {
		case p == "" && rel == "":
			return ""
		case p != "" && strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p):
			return ""
		case p != "" && under(rel, p):
			return ""
		}
	}
	return "against the layering (" + layer + " may import " + fmt.Sprint(layers[layer]) + ")"
}

// TestCheckLayout checks the rule checker itself on synthetic import maps,
// so that TestPackageBoundaries cannot pass by checking nothing.
func TestCheckLayout(t *testing.T) {
	m := func(p string) string {
		if p == "" {
			return module
		}
		return module + "/" + p
	}
	allowed := map[string][]string{
		"internal/sys":     {"golang.org/x/sys/unix", "errors"},
		"internal/ibv":     {"C", m("internal/sys")},
		"internal/wire":    {"encoding/binary"},
		"internal/rdmacm":  {m("internal/ibv"), m("internal/sys")},
		"mem":              {m("internal/sys"), m("internal/cuda"), "github.com/google/btree"},
		"transport/tcp":    {m("transport"), m("transport/stream"), m("internal/wire"), m("mem")},
		"transport/shm":    {m("transport/stream"), m("transport/tcp")}, // pending below
		"transport/verbs":  {m("internal/ibv"), m("internal/rdmacm"), m("transport/stream")},
		"transport/stage":  {m("transport"), m("mem")},
		"internal/metrics": {m("transport"), m("mem"), "github.com/prometheus/client_golang/prometheus"},
		"probe":            {m("internal/ibv"), m("internal/sys"), m("bytesize")},
		".":                {m("transport/verbs"), m("internal/wire"), m("internal/auth"), m("mem"), m("directory")},
		"directory":        {"go.etcd.io/etcd/client/v3", "net/http", m("internal/auth")},
		"mooncake":         {"go.etcd.io/etcd/client/v3", "net/http", m("internal/auth")},
		"mooncake/master":  {m("mooncake/master/masterpb"), m("internal/auth"), "google.golang.org/grpc", "github.com/google/btree"},
		"internal/auth":    {"crypto/hmac"},
		"kv":               {m(""), m("mem"), m("probe"), m("kv/kvpb"), m("directory"), m("callbound"), "google.golang.org/grpc"},
		"kv/kvpb":          {"google.golang.org/protobuf/proto"},
		"connector":        {m(""), m("mem"), m("callbound")},
		"pages":            {m(""), m("latency")},
		"cmd/xfer": {m(""), m("kv"), m("probe"), m("transport"), m("config"), m("bytesize"), m("cputime"), m("latency"),
			m("connector/transferctl"), "github.com/spf13/cobra"},
		"connector/transferctl": {m("connector"), m("internal/auth")},
		"cputime":               {m("internal/sys")},
		"bench":                 {m(""), m("kv"), m("pages"), m("connector/transferctl"), m("cputime"), m("latency"), m("bytesize")},
		"cmd/libxfer":           {"C", m("connector"), m("config")},
		"config":                {m(""), m("connector"), m("mem"), "gopkg.in/yaml.v3", "encoding/json"},
	}
	if v := checkLayout(allowed, map[string]string{"transport/shm": "transport/tcp"}); len(v) > 0 {
		t.Errorf("allowed imports reported:\n%s", strings.Join(v, "\n"))
	}
	forbidden := []struct{ dir, im, want string }{
		{"mem", "golang.org/x/sys/unix", "only internal/sys"},
		{"transport/tcp", "C", `only internal/ibv (and the C ABI, cmd/libxfer) may import "C"`},
		{"cmd/xfer", "C", `only internal/ibv (and the C ABI, cmd/libxfer) may import "C"`},
		{"internal/wire", "google.golang.org/protobuf/proto", "standard library only"},
		{"internal/auth", "golang.org/x/crypto/hkdf", "standard library only"},
		{"kv", m("internal/wire"), "services use the public xfer API"},
		{"cmd/xfer", m("internal/sys"), "public packages only"},
		{"kv", m("internal/ibv"), "internal/ibv may be imported only by"},
		{"kv", m("transport"), "services use the public xfer API"},
		{"pages", m("transport/tcp"), "services use the public xfer API"},
		{"pages", m("cputime"), "services use the public xfer API"},
		{"latency", m("mem"), "against the layering"},
		{"bytesize", m("internal/sys"), "against the layering"},
		{"probe", m("latency"), "against the layering"},
		{"transport/shm", m("transport/tcp"), "transports do not import each other"},
		{"transport/tcp", m("transport/verbs"), "transports do not import each other"},
		{"transport/verbs/removal", m("transport/tcp"), "transports do not import each other"},
		{"transport/tcp", m("internal/ibv"), "internal/ibv may be imported only by"},
		{"transport/stream", m("transport/tcp"), "the control stream imports no transport"},
		{".", m("internal/ibv"), "internal/ibv may be imported only by"},
		{".", "crypto/hmac", "only internal/auth may import crypto/hmac"},
		{"kv", "crypto/hmac", "only internal/auth may import crypto/hmac"},
		{"directory", "crypto/subtle", "only internal/auth may import crypto/hmac"},
		{".", m("internal/cuda"), "internal/cuda may be imported only by"},
		{"connector", m("internal/cuda"), "internal/cuda may be imported only by"},
		{"transport/tcp", m("internal/cuda"), "internal/cuda may be imported only by"},
		{"transport/stage", m("internal/sys"), "against the layering"},
		{"transport/stage", m("transport/tcp"), "the staging imports no transport"},
		{"transport/verbs", m("internal/cuda"), "internal/cuda may be imported only by"},
		{"transport/shm", m("internal/cuda"), "internal/cuda may be imported only by"},
		{"mem", m("transport"), "against the layering"},
		{"directory", m(""), "against the layering"},
		{"mooncake", m(""), "against the layering"},
		{"mooncake", m("directory"), "against the layering"},
		{"mooncake/master", m(""), "against the layering"},
		{"mooncake/master/masterpb", m("mooncake"), "against the layering"},
		{"mooncake/master", "crypto/hmac", "only internal/auth may import crypto/hmac"},
		{"directory", m("mem"), "against the layering"},
		{"transport/tcp", m("directory"), "against the layering"},
		{"internal/sys", m("mem"), "against the layering"},
		{"internal/watchdog", m("transport"), "against the layering"},
		{"internal/metrics", m(""), "against the layering"},
		{"internal/metrics", m("directory"), "against the layering"},
		{"transport", m(""), "against the layering"},
		{"somewhere/new", m("mem"), "in no layer"},
		{"cmd/xfer", "gopkg.in/yaml.v3", "commands decode no YAML"},
		{"cmd/libxfer", "sigs.k8s.io/yaml", "commands decode no YAML"},
		{"config", m("kv"), "against the layering"},
		{"bench", m("config"), "against the layering"},
		{"bench", m("transport/tcp"), "against the layering"},
		{"kv", m("bench"), "services use the public xfer API"},
		{"config", m("transport/verbs"), "against the layering"},
		{"connector", m("config"), "services use the public xfer API"},
		{".", m("config"), "against the layering"},
		{".", m("internal/sys"), "the root package imports no internal/sys"},
	}
	for _, f := range forbidden {
		v := checkLayout(map[string][]string{f.dir: {f.im}}, nil)
		if len(v) != 1 || !strings.Contains(v[0], f.want) {
			t.Errorf("%s importing %s: %q, want one violation saying %q", f.dir, f.im, v, f.want)
		}
	}
}

// tableFile is the one file of the root package that may import the
// concrete transports: the transport table. Every other file iterates it.
const tableFile = "transports.go"

// TestTransportTable enforces the table: no non-test file of the root
// package but tableFile imports a transport package (transports lists
// them), so that adding a transport means its package and one row.
func TestTransportTable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var table bool
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if _, ok := underAny(strings.TrimPrefix(p, module+"/"), transports); !ok || !strings.HasPrefix(p, module+"/") {
				continue
			}
			if path == tableFile {
				table = true
				continue
			}
			t.Errorf("%s imports %s: only %s, the transport table, may import a transport package", path, p, tableFile)
		}
	}
	if !table {
		t.Errorf("%s imports no transport package: is the table still there?", tableFile)
	}
}

// TestArchitectureDoc keeps docs/ARCHITECTURE.md true and short: it names
// every package of the module by its path, every package that imports "C"
// as one, and stays within 350 lines, so that a newcomer can find any room
// from it alone.
func TestArchitectureDoc(t *testing.T) {
	raw, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	if n := strings.Count(doc, "\n"); n > 350 {
		t.Errorf("docs/ARCHITECTURE.md has %d lines: keep it within 350", n)
	}
	dirs := map[string]bool{}
	for _, path := range goSources(t, false) {
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." {
			dirs[dir] = true
		}
	}
	if len(dirs) < 10 {
		t.Fatalf("found only %d packages: the walk is broken", len(dirs))
	}
	for dir := range dirs {
		if !strings.Contains(doc, dir) {
			t.Errorf("docs/ARCHITECTURE.md does not name the package %s: give it its room in the picture", dir)
		}
	}
	for _, p := range cgoPackages {
		if !regexp.MustCompile(regexp.QuoteMeta(p) + `[^\n]*import "C"`).MatchString(doc) {
			t.Errorf("docs/ARCHITECTURE.md does not say that %s imports \"C\" on its line", p)
		}
	}
}

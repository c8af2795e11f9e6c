package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/mastersrv"
)

// masterBanner starts the lines `xfer mooncake master` prints to stdout
// once it listens: its gRPC address first, then "metrics on URL" and,
// with --enable_http_metadata_server, "metadata server on URL".
const masterBanner = "xfer mooncake master: "

// refusedMasterFlags are mooncake_master's flags that xfer's master does
// not implement, with why: giving one, at any value, is an error naming
// it. Booleans take --flag, --flag=true and --flag=false.
var refusedMasterFlags = []struct {
	name, def string
	boolean   bool
	why       string
}{
	{"config_path", "", false, "a JSON config file: give its settings as flags"},
	{"enable_oplog", "false", true, "no oplog: with --enable_ha the leader writes its state to etcd in batches"},
	{"oplog_poll_interval_ms", "1000", false, "no oplog: with --enable_ha the leader writes its state to etcd in batches"},
	{"oplog_batch_max_entries", "1024", false, "no oplog: with --enable_ha the leader writes its state to etcd in batches"},
	{"batch_oplog_retry_timeout_sec", "180", false, "no oplog: with --enable_ha the leader writes its state to etcd in batches"},
	{"root_fs_dir", "", false, "no storage backend: objects live in client memory only"},
	{"global_file_segment_size", "", false, "no file segments"},
	{"enable_disk_eviction", "true", true, "no storage backend"},
	{"quota_bytes", "0", false, "no storage backend"},
	{"nof_eviction_ratio", "0.05", false, "no NVMe-oF segments"},
	{"nof_eviction_high_watermark_ratio", "0.9", false, "no NVMe-oF segments"},
	{"nof_heartbeat_interval_sec", "10", false, "no NVMe-oF segments"},
	{"nof_heartbeat_probe_timeout_ms", "1000", false, "no NVMe-oF segments"},
	{"nof_heartbeat_failures_threshold", "3", false, "no NVMe-oF segments"},
	{"enable_offload", "false", true, "no offload to disk"},
	{"offload_on_evict", "false", true, "no offload to disk"},
	{"offload_force_evict", "false", true, "no offload to disk"},
	{"offloading_queue_limit", "50000", false, "no offload to disk"},
	{"offload_cap_ratio", "0.5", false, "no offload to disk"},
	{"promotion_on_hit", "false", true, "no disk tier to promote from"},
	{"promotion_admission_threshold", "2", false, "no disk tier to promote from"},
	{"promotion_queue_limit", "50000", false, "no disk tier to promote from"},
	{"promotion_max_per_heartbeat", "1", false, "no disk tier to promote from"},
	{"dynamic_replication_mode", "off", false, "no dynamic replication"},
	{"dynamic_replication_heat_window_seconds", "10", false, "no dynamic replication"},
	{"dynamic_replication_admission_qps_threshold", "0.8", false, "no dynamic replication"},
	{"dynamic_replication_max_memory_replicas", "2", false, "no dynamic replication"},
	{"enable_kv_events", "false", true, "no KV event publisher"},
	{"kv_events_bind_endpoint", "", false, "no KV event publisher"},
	{"kv_events_model_name", "", false, "no KV event publisher"},
	{"kv_events_backend_id", "", false, "no KV event publisher"},
	{"kv_events_tenant_id", "default", false, "no KV event publisher"},
	{"kv_events_additional_salt", "", false, "no KV event publisher"},
	{"kv_events_lora_name", "", false, "no KV event publisher"},
	{"kv_events_block_size", "0", false, "no KV event publisher"},
	{"kv_events_dp_rank", "0", false, "no KV event publisher"},
	{"kv_events_emit_legacy_compat", "true", true, "no KV event publisher"},
	{"kv_events_emit_object_key", "true", true, "no KV event publisher"},
	{"kv_events_queue_capacity", "65536", false, "no KV event publisher"},
	{"enable_metadata_cleanup_on_timeout", "false", true, "a dead client's metadata-server keys are not removed"},
	{"pod_name", "", false, "no Kubernetes label routing"},
	{"pod_namespace", "", false, "no Kubernetes label routing"},
	{"enable_multi_tenants", "false", true, "no tenants or quotas"},
	{"tenant_quota_connector_type", "file", false, "no tenants or quotas"},
	{"tenant_quota_connector_uri", "", false, "no tenants or quotas"},
	{"enable_snapshot", "false", true, "no snapshots: alone, a restart forgets every object; with --enable_ha the leader's state lives in etcd"},
	{"enable_snapshot_restore", "false", true, "no snapshots: alone, a restart forgets every object; with --enable_ha the leader's state lives in etcd"},
	{"snapshot_backup_dir", "", false, "no snapshots"},
	{"snapshot_interval_seconds", "", false, "no snapshots"},
	{"snapshot_child_timeout_seconds", "", false, "no snapshots"},
	{"snapshot_retention_count", "", false, "no snapshots"},
	{"snapshot_object_store_type", "", false, "no snapshots"},
	{"snapshot_payload_store_type", "", false, "no snapshots"},
	{"snapshot_payload_backend_type", "", false, "no snapshots"},
	{"snapshot_catalog_store_type", "", false, "no snapshots"},
	{"snapshot_catalog_backend_type", "", false, "no snapshots"},
	{"snapshot_catalog_store_connstring", "", false, "no snapshots"},
	{"snapshot_catalog_backend_connstring", "", false, "no snapshots"},
	{"max_total_finished_tasks", "10000", false, "no task manager (copy, move, replication tasks)"},
	{"max_total_pending_tasks", "10000", false, "no task manager"},
	{"max_total_processing_tasks", "10000", false, "no task manager"},
	{"pending_task_timeout_sec", "300", false, "no task manager"},
	{"processing_task_timeout_sec", "300", false, "no task manager"},
	{"max_retry_attempts", "10", false, "no task manager"},
	{"enable_cxl", "false", true, "no CXL memory"},
	{"cxl_path", "/dev/dax0.0", false, "no CXL memory"},
	{"cxl_size", "", false, "no CXL memory"},
	{"use_mmap_arena_allocator", "false", true, "the master allocates no memory of its own"},
	{"mmap_arena_pool_size", "", false, "the master allocates no memory of its own"},
}

// masterFlags are the flags xfer's master implements, as mooncake_master
// spells them.
type masterFlags struct {
	port, rpcPort, rpcThreadNum, maxThreads, rpcConnTimeout int
	rpcAddress, rpcInterface                                string
	tcpNoDelay                                              bool
	metricsPort                                             int
	metricsHost                                             string
	metricReporting                                         bool
	leaseTTL, softPinTTL, maxSoftPinTTL                     string
	evictSoftPinned                                         bool
	evictionRatio, watermark                                float64
	clientTTL                                               int64
	discardSec, releaseSec                                  uint64
	memoryAllocator, allocationStrategy                     string
	httpMetadata                                            bool
	httpMetadataPort                                        int
	httpMetadataHost                                        string
	directory, haBackend, haConnstring, etcdEndpoints       string
	enableHA                                                bool
	clusterID, haLeaseTTL, haFlushInterval                  string
	dataPort                                                int
}

func newMooncakeMasterCmd(g *globals) *cobra.Command {
	var f masterFlags
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run the master of Mooncake's store (mooncake_master) until SIGINT or SIGTERM",
		Long: "master is the master of Mooncake's distributed store (MooncakeDistributedStore), as\n" +
			"Mooncake's mooncake_master, serving xfer's gRPC Master service\n" +
			"(mooncake/master/masterpb/master.proto). Clients mount segments of their memory; the\n" +
			"master places each object's replicas in them (on distinct segments, preferred ones\n" +
			"first, best fit, 64-byte aligned) and tells readers where they are. Bytes move between\n" +
			"the clients on the xfer data plane, never through the master.\n\n" +
			"A get grants a read lease (--default_kv_lease_ttl): while it lasts the object is not\n" +
			"removed (unless forced) nor evicted, and an upsert keeps its old places. A put that\n" +
			"finds no room, or passes --eviction_high_watermark_ratio of the pool, evicts about\n" +
			"--eviction_ratio of the used bytes, least recently used first, never leased or\n" +
			"hard-pinned objects, soft-pinned ones last. A client not heard from for --client_ttl\n" +
			"seconds is dead: its segments are unmounted and objects left without a replica are gone.\n\n" +
			"Alone, the master keeps everything in memory. A restart loses all object metadata:\n" +
			"objects are forgotten, and clients mount their segments again on their next ping.\n\n" +
			"With --directory etcd://HOST:PORT[,HOST:PORT] (or Mooncake's --enable_ha=true\n" +
			"--etcd_endpoints='HOST:PORT;HOST:PORT') masters elect a leader through etcd: the leader\n" +
			"serves, the others are standbys that refuse calls (gRPC UNAVAILABLE, naming the leader)\n" +
			"until elected. The leader writes the mounted segments and the committed objects to etcd\n" +
			"every --ha_flush_interval, behind the calls, fenced by its election key; a standby\n" +
			"elected when the leader dies (within --ha_lease_ttl) loads them and serves on. A failover\n" +
			"loses the changes of the last interval, puts in progress and read leases (fresh ones are\n" +
			"granted). Clients give master_server_addr as etcd://HOST:PORT[;HOST:PORT] to follow the\n" +
			"leader. Keys live under mooncake-store/CLUSTER/xfer-master/ (--cluster_id).\n\n" +
			"Flags are mooncake_master's, as it spells them (--flag=value or --flag value; durations\n" +
			"in milliseconds or with ms, s, m, h). Its flags for oplog, offload, snapshots, tenants, NoF,\n" +
			"CXL and KV events are refused by name (docs/MOONCAKE.md lists them). With XFER_SECRET or\n" +
			"XFER_SECRET_FILE set, every call must prove the shared secret.\n\n" +
			"Once it listens it prints to stdout:\n\n" +
			"  " + masterBanner + "listening on HOST:PORT\n" +
			"  " + masterBanner + "metrics on http://HOST:PORT/metrics\n" +
			"  " + masterBanner + "data plane on HOST:PORT   (unless --xfer_data_port=-1)\n" +
			"  " + masterBanner + "metadata server on http://HOST:PORT/metadata   (--enable_http_metadata_server)\n" +
			"  " + masterBanner + "candidate in etcd HOST:PORT,... cluster CLUSTER as HOST:PORT   (HA)",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, r := range refusedMasterFlags {
				if cmd.Flags().Changed(r.name) {
					return fmt.Errorf("--%s: not supported by xfer's master (%s)", r.name, r.why)
				}
			}
			return runMaster(cmd.Context(), g, cmd.Flags(), f)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.port, "port", 50051, "`port` of the gRPC service (0: any free port)")
	fs.IntVar(&f.rpcPort, "rpc_port", 0, "`port` of the gRPC service; 0: --port")
	fs.StringVar(&f.rpcAddress, "rpc_address", "0.0.0.0", "`address` to bind the gRPC service to")
	fs.StringVar(&f.rpcInterface, "rpc_interface", "", "network `interface` whose IPv4 address overrides --rpc_address")
	fs.IntVar(&f.rpcThreadNum, "rpc_thread_num", 0, "accepted, no effect: gRPC-Go serves each call on its own goroutine")
	fs.IntVar(&f.maxThreads, "max_threads", 16, "accepted, no effect: gRPC-Go serves each call on its own goroutine")
	fs.IntVar(&f.rpcConnTimeout, "rpc_conn_timeout_seconds", 0, "close a connection idle this many `seconds` (0: never)")
	fs.BoolVar(&f.tcpNoDelay, "rpc_enable_tcp_no_delay", true, "TCP_NODELAY on connections (xfer's master always sets it: false is refused)")
	fs.IntVar(&f.metricsPort, "metrics_port", 9003, "`port` of the HTTP server of /metrics (0: any free port)")
	fs.StringVar(&f.metricsHost, "metrics_host", "0.0.0.0", "`address` to bind the metrics server to")
	fs.BoolVar(&f.metricReporting, "enable_metric_reporting", true, "log a summary of the master's state every 10 s")
	fs.StringVar(&f.leaseTTL, "default_kv_lease_ttl", "10000", "read lease `duration` (milliseconds, or with ms, s, m, h)")
	fs.StringVar(&f.softPinTTL, "default_kv_soft_pin_ttl", "1800000", "soft pin `duration` when a put gives none")
	fs.StringVar(&f.maxSoftPinTTL, "max_kv_soft_pin_ttl", "86400000", "longest soft pin `duration` a put may ask for")
	fs.BoolVar(&f.evictSoftPinned, "allow_evict_soft_pinned_objects", true, "evict soft-pinned objects (after every other)")
	fs.Float64Var(&f.evictionRatio, "eviction_ratio", master.DefaultEvictionRatio, "share of the used bytes an eviction frees, 0 to 1")
	fs.Float64Var(&f.watermark, "eviction_high_watermark_ratio", master.DefaultEvictionHighWatermark, "share of the pool past which a put evicts, 0 to 1")
	fs.Int64Var(&f.clientTTL, "client_ttl", 10, "`seconds` a client stays alive after its last ping")
	fs.Uint64Var(&f.discardSec, "put_start_discard_timeout_sec", 30, "`seconds` after which another PutStart discards a put that did not end")
	fs.Uint64Var(&f.releaseSec, "put_start_release_timeout_sec", 600, "`seconds` after its start that a discarded put's places stay reserved")
	fs.StringVar(&f.memoryAllocator, "memory_allocator", "offset", "segment allocator: offset (the only one)")
	fs.StringVar(&f.allocationStrategy, "allocation_strategy", "random", "replica placement: random (the only one)")
	fs.BoolVar(&f.httpMetadata, "enable_http_metadata_server", false, "also serve Mooncake's HTTP metadata server (as `xfer mooncake metadata-server`)")
	fs.IntVar(&f.httpMetadataPort, "http_metadata_server_port", 8080, "`port` of the HTTP metadata server (0: any free port)")
	fs.StringVar(&f.httpMetadataHost, "http_metadata_server_host", "0.0.0.0", "`address` to bind the HTTP metadata server to")
	fs.StringVar(&f.directory, "directory", "", "etcd://HOST:PORT[,HOST:PORT][/CLUSTER_ID] `URL`: a candidate for leadership among the masters sharing it (as --enable_ha)")
	fs.BoolVar(&f.enableHA, "enable_ha", false, "a candidate for leadership among the masters sharing --etcd_endpoints")
	fs.StringVar(&f.etcdEndpoints, "etcd_endpoints", "", "etcd `endpoints` of --enable_ha, separated by semicolons (or commas)")
	fs.StringVar(&f.haBackend, "ha_backend_type", "etcd", "HA backend: etcd (the only one)")
	fs.StringVar(&f.haConnstring, "ha_backend_connstring", "", "etcd `endpoints` of --enable_ha; unset: --etcd_endpoints")
	fs.StringVar(&f.clusterID, "cluster_id", master.DefaultCluster, "cluster `ID`: HA keys live under mooncake-store/ID/xfer-master/ (clients: MC_STORE_CLUSTER_ID)")
	fs.StringVar(&f.haLeaseTTL, "ha_lease_ttl", "5s", "election lease `duration` (whole seconds): a dead leader is replaced within about this long")
	fs.StringVar(&f.haFlushInterval, "ha_flush_interval", "100ms", "how often the leader writes its changes to etcd: the `duration` of changes a failover may lose")
	fs.IntVar(&f.dataPort, "xfer_data_port", 0, "`port` of the master's xfer engine, on the --rpc_address host: the same calls as messages "+
		"on the data plane, a fraction of a gRPC call's cost (xfer's flag, not mooncake_master's; 0: any free port; -1: none)")
	for _, r := range refusedMasterFlags {
		fs.String(r.name, r.def, "refused: "+r.why)
		if r.boolean {
			fs.Lookup(r.name).NoOptDefVal = "true"
		}
		fs.MarkHidden(r.name)
	}
	return cmd
}

// masterOptions checks the flags and turns them into the Service's
// options, the gRPC address and the gRPC server's options.
func masterOptions(g *globals, fs *pflag.FlagSet, f masterFlags) (master.Options, string, []grpc.ServerOption, error) {
	var o master.Options
	port := f.port
	if f.rpcPort > 0 {
		port = f.rpcPort
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"port", port}, {"rpc_port", f.rpcPort}, {"metrics_port", f.metricsPort}, {"http_metadata_server_port", f.httpMetadataPort}} {
		if p.v < 0 || p.v > 65535 {
			return o, "", nil, fmt.Errorf("--%s %d: want 0 to 65535 (0: any free port)", p.name, p.v)
		}
	}
	host := f.rpcAddress
	if f.rpcInterface != "" {
		ip, err := mastersrv.InterfaceIPv4(f.rpcInterface)
		if err != nil {
			return o, "", nil, fmt.Errorf("--rpc_interface %s: %w", f.rpcInterface, err)
		}
		host = ip
	}
	var err error
	durs := []struct {
		name, v string
		d       *time.Duration
	}{{"default_kv_lease_ttl", f.leaseTTL, &o.LeaseTTL}, {"default_kv_soft_pin_ttl", f.softPinTTL, &o.SoftPinTTL}, {"max_kv_soft_pin_ttl", f.maxSoftPinTTL, &o.MaxSoftPinTTL}}
	for _, d := range durs {
		if *d.d, err = master.ParseDuration(d.v); err != nil {
			return o, "", nil, fmt.Errorf("--%s=%s: %w", d.name, d.v, err)
		}
	}
	if o.LeaseTTL == 0 {
		// Options reads 0 as its default: a lease of 0 is 1 ns.
		o.LeaseTTL = time.Nanosecond
	}
	if o.SoftPinTTL > o.MaxSoftPinTTL {
		return o, "", nil, fmt.Errorf("--default_kv_soft_pin_ttl %v is above --max_kv_soft_pin_ttl %v", o.SoftPinTTL, o.MaxSoftPinTTL)
	}
	switch {
	case f.evictionRatio < 0 || f.evictionRatio > 1:
		return o, "", nil, fmt.Errorf("--eviction_ratio %v: want 0 to 1", f.evictionRatio)
	case f.watermark <= 0 || f.watermark > 1:
		return o, "", nil, fmt.Errorf("--eviction_high_watermark_ratio %v: want above 0, at most 1", f.watermark)
	case f.clientTTL <= 0 || f.clientTTL > 1<<31:
		return o, "", nil, fmt.Errorf("--client_ttl %d: want a positive number of seconds", f.clientTTL)
	case f.discardSec == 0 || f.discardSec > 1<<31:
		return o, "", nil, fmt.Errorf("--put_start_discard_timeout_sec %d: want a positive number of seconds", f.discardSec)
	case f.releaseSec == 0 || f.releaseSec > 1<<31:
		return o, "", nil, fmt.Errorf("--put_start_release_timeout_sec %d: want a positive number of seconds", f.releaseSec)
	case f.memoryAllocator != "offset":
		return o, "", nil, fmt.Errorf("--memory_allocator=%s: not supported by xfer's master (its allocator is offset's: best fit over free extents)", f.memoryAllocator)
	case f.allocationStrategy != "random":
		return o, "", nil, fmt.Errorf("--allocation_strategy=%s: not supported by xfer's master (random only, preferred segments first)", f.allocationStrategy)
	case !f.tcpNoDelay:
		return o, "", nil, errors.New("--rpc_enable_tcp_no_delay=false: not supported by xfer's master (gRPC-Go always sets TCP_NODELAY)")
	case f.rpcConnTimeout < 0:
		return o, "", nil, fmt.Errorf("--rpc_conn_timeout_seconds %d: want 0 (no timeout) or more", f.rpcConnTimeout)
	case os.Getenv("MC_RPC_PROTOCOL") == "rdma":
		return o, "", nil, errors.New("MC_RPC_PROTOCOL=rdma: not supported by xfer's master (its calls travel on TCP; the objects' bytes on xfer's data plane)")
	}
	o.EvictionRatio = f.evictionRatio
	if o.EvictionRatio == 0 {
		o.EvictionRatio = -1 // Options reads 0 as its default: -1 is none
	}
	o.EvictionHighWatermark = f.watermark
	o.NoEvictSoftPinned = !f.evictSoftPinned
	o.ClientTTL = time.Duration(f.clientTTL) * time.Second
	o.PutStartDiscard = time.Duration(f.discardSec) * time.Second
	o.PutStartRelease = time.Duration(f.releaseSec) * time.Second
	o.Logger = g.log
	for _, name := range []string{"rpc_thread_num", "max_threads"} {
		if fs.Changed(name) {
			g.log.Info("mooncake master: --" + name + " has no effect in xfer's master: gRPC-Go serves each call on its own goroutine")
		}
	}
	var gopts []grpc.ServerOption
	if f.rpcConnTimeout > 0 {
		gopts = append(gopts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: time.Duration(f.rpcConnTimeout) * time.Second}))
	}
	return o, net.JoinHostPort(host, strconv.Itoa(port)), gopts, nil
}

// masterHA reads the HA flags: nil when the master runs alone. The
// options lack Addr, the address the listener gets.
func masterHA(g *globals, fs *pflag.FlagSet, f masterFlags) (*master.HAOptions, error) {
	var eps []string
	cluster := f.clusterID
	switch {
	case f.directory != "" && (f.enableHA || fs.Changed("etcd_endpoints") || fs.Changed("ha_backend_connstring")):
		return nil, errors.New("--directory and --enable_ha (--etcd_endpoints): give one of them")
	case f.directory != "":
		rest, ok := strings.CutPrefix(f.directory, "etcd://")
		if !ok {
			return nil, fmt.Errorf("--directory %s: want etcd://HOST:PORT[,HOST:PORT][/CLUSTER_ID] (the master's HA needs etcd)", f.directory)
		}
		hosts, path, _ := strings.Cut(rest, "/")
		if path = strings.Trim(path, "/"); path != "" {
			if fs.Changed("cluster_id") && path != f.clusterID {
				return nil, fmt.Errorf("--directory names cluster %q, --cluster_id %q: give one", path, f.clusterID)
			}
			cluster = path
		}
		var err error
		if eps, err = master.ParseEtcdEndpoints(hosts); err != nil {
			return nil, fmt.Errorf("--directory: %w", err)
		}
	case f.enableHA:
		if f.haBackend != "etcd" {
			return nil, fmt.Errorf("--ha_backend_type=%s: not supported by xfer's master (etcd only)", f.haBackend)
		}
		conn := f.haConnstring
		if conn == "" {
			conn = f.etcdEndpoints
		}
		if conn == "" {
			return nil, errors.New("--enable_ha: no etcd: give --etcd_endpoints='HOST:PORT;HOST:PORT'")
		}
		var err error
		if eps, err = master.ParseEtcdEndpoints(conn); err != nil {
			return nil, fmt.Errorf("--etcd_endpoints: %w", err)
		}
	default:
		for _, name := range []string{"etcd_endpoints", "ha_backend_connstring", "ha_backend_type", "ha_lease_ttl", "ha_flush_interval"} {
			if fs.Changed(name) {
				g.log.Info("mooncake master: --" + name + " has no effect without --enable_ha=true or --directory")
			}
		}
		return nil, nil
	}
	if cluster == "" {
		return nil, errors.New("--cluster_id: empty")
	}
	ttl, err := master.ParseDuration(f.haLeaseTTL)
	if err == nil && (ttl < time.Second || ttl > time.Hour) {
		err = errors.New("want 1s to 1h")
	}
	if err != nil {
		return nil, fmt.Errorf("--ha_lease_ttl=%s: %w", f.haLeaseTTL, err)
	}
	flush, err := master.ParseDuration(f.haFlushInterval)
	if err == nil && (flush < time.Millisecond || flush > time.Minute) {
		err = errors.New("want 1ms to 1m")
	}
	if err != nil {
		return nil, fmt.Errorf("--ha_flush_interval=%s: %w", f.haFlushInterval, err)
	}
	return &master.HAOptions{Endpoints: eps, Cluster: cluster, LeaseTTL: ttl, FlushInterval: flush}, nil
}

func runMaster(ctx context.Context, g *globals, fs *pflag.FlagSet, f masterFlags) error {
	o, addr, gopts, err := masterOptions(g, fs, f)
	if err != nil {
		return err
	}
	ha, err := masterHA(g, fs, f)
	if err != nil {
		return err
	}
	secret, err := master.SecretFrom(os.Getenv)
	if err != nil {
		return fmt.Errorf("mooncake master: %w", err)
	}
	so := mastersrv.Options{Master: o, Addr: addr, GRPC: gopts, HA: ha, Secret: secret, DataPort: f.dataPort, Report: f.metricReporting, Log: g.log,
		MetricsAddr: net.JoinHostPort(f.metricsHost, strconv.Itoa(f.metricsPort))}
	if f.httpMetadata {
		meta, err := metadataServerOptions(g)
		if err != nil {
			return err
		}
		so.Metadata, so.MetadataAddr = &meta, net.JoinHostPort(f.httpMetadataHost, strconv.Itoa(f.httpMetadataPort))
	}
	so.Listening = func(at mastersrv.Listening) {
		fmt.Fprintf(g.stdout, "%slistening on %s\n", masterBanner, at.GRPC)
		fmt.Fprintf(g.stdout, "%smetrics on http://%s/metrics\n", masterBanner, at.Metrics)
		if at.Data != "" {
			fmt.Fprintf(g.stdout, "%sdata plane on %s\n", masterBanner, at.Data)
		}
		if at.Metadata != "" {
			fmt.Fprintf(g.stdout, "%smetadata server on %s\n", masterBanner, at.Metadata)
		}
		if ha != nil {
			fmt.Fprintf(g.stdout, "%scandidate in etcd %s cluster %s as %s\n", masterBanner, strings.Join(ha.Endpoints, ","), ha.Cluster, at.Candidate)
		}
	}
	return mastersrv.Run(ctx, so)
}

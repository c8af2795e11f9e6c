// Command xfer is the command-line front end of the xfer transfer engine:
// "xfer serve" runs a target, "xfer bench" measures transfers against one,
// "xfer devices" and "xfer doctor" show what RDMA this host has and how to
// fix what is missing (through the public probe package), "xfer kv"
// serves, uses and benchmarks the KV service, "xfer transfer" runs one
// side (producer or consumer) of a cross-host test of the connector, and
// "xfer mooncake" runs Mooncake's metadata server and the master of its
// store (mooncake_master's flags). Each subcommand lives in a file of its
// own (transfer in transfer*.go, mooncake master in mooncake_master.go).
//
// Every command reads the same configuration: a YAML file (--config or
// $XFER_CONFIG) whose keys are those of xfer.Config and of the tcp and rdma
// configs it nests (as mappings, or at the top level as conns and
// rdma_device), overridden by XFER_<KEY> environment variables, overridden
// by flags given on the command line.
//
// The command imports public packages only (xfer, mem, transport/..., kv,
// connector, probe, bench), as any program built on xfer would. The
// benchmark drivers (bench, kv bench, pages bench, and transfer's producer
// and consumer) live in package bench: the command gives them its flags and
// prints their results. Long-running
// commands (serve, kv serve, transfer, mooncake) stop on SIGINT or SIGTERM: they
// close their engines, which closes every peer, region and transport,
// before they exit.
package main

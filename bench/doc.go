// Package bench holds the benchmark drivers of xfer's commands, built on the
// public API (the root package, kv, pages and connector), so that the CLI,
// tests and other programs share them. The command keeps its flags and
// prints what a driver returns.
//
//   - Runner (runner.go): write, read or send transfers of each size to a
//     peer's region, with several in flight and every byte optionally
//     verified; the driver of xfer bench. Result summarises one size.
//   - KV (kv.go): GETs or PUTs from concurrent workers against a KV server
//     or cluster; the driver of xfer kv bench.
//   - Pages (pages.go): page fetches, one READ each, from a page server;
//     the driver of xfer pages bench.
//   - Tensors (tensors.go): one side, producer or consumer, of tensors put
//     and got through the connector across hosts; the driver of xfer
//     transfer.
//   - Writer (output.go): the Runner's results as xfer bench prints them,
//     a perftest-like table or one Record of JSON per line.
//
// A driver's errors name the command's flags where a flag is the fix
// (--memory-mb, --pages): the command prints them as they are.
//
// Threading: a Runner runs one Run or Measure at a time; its Completed may
// be called from another goroutine while it runs. KV and Pages start their
// own workers and return when they are done; Tensors calls Each on the
// caller's goroutine, one transfer at a time. Lifetimes: a Runner's buffers
// come from the caller's engine and live as it does; KV frees the buffers
// it takes from its clients' engines, and Pages and Tensors close the
// client or connector they open.
package bench

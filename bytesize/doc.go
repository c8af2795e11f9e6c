// Package bytesize parses and formats byte counts as xfer's command line,
// its config files and its output write them: decimal numbers with binary
// units ("64", "4KiB", "1.5MiB", "1GiB"), where K, M, G and T are powers
// of 1024 and "KB", "MB" and the like are refused rather than guessed.
//
// [Parse] and [ParseList] read sizes; [Format] writes one that Parse reads
// back exactly; [Human] writes one for people ("166.73 GiB").
//
// The functions are pure: they hold no state and are safe for concurrent
// use.
package bytesize

package main

import (
	"errors"

	"github.com/spf13/pflag"
)

// directoryFlags adds the flags of a command that registers a node:
// --directory, --node-id and --directory-ttl, the config keys directory,
// node_id and directory_ttl.
func directoryFlags(fs *pflag.FlagSet) {
	fs.String("directory", "", "directory `URL` to register in: http://HOST:PORT (xfer coordinator) or etcd://HOST:2379[,HOST:2379...]/PREFIX")
	fs.String("node-id", "", "this node's `ID` in the directory (letters, digits, '.', '_', '-')")
	fs.Duration("directory-ttl", 0, "how long the node's entry outlives it when it dies without leaving (default 10s)")
}

// checkPeerFlags reports whether --peer and --peer-node (with --directory)
// name the peer consistently: one of them, and --peer-node only with a
// directory to look it up in.
func checkPeerFlags(peer, peerNode, dirURL string) error {
	switch {
	case peer != "" && peerNode != "":
		return errors.New("--peer and --peer-node both name the peer: give one")
	case peerNode != "" && (dirURL == "" || dirURL == "p2p"):
		return errors.New("--peer-node needs --directory URL to look the node up in")
	}
	return nil
}

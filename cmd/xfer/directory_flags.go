package main

import (
	"errors"

	"github.com/spf13/pflag"
)

// directoryFlags adds the flags of a command that registers a node:
// --directory, --node-id, --directory-ttl and the --directory-tls-* flags,
// the config keys directory, node_id, directory_ttl and directory_tls_*.
func directoryFlags(fs *pflag.FlagSet) {
	fs.String("directory", "", "directory `URL` to register in: http://HOST:PORT (xfer coordinator) or etcd://HOST:2379[,HOST:2379...]/PREFIX")
	fs.String("node-id", "", "this node's `ID` in the directory (letters, digits, '.', '_', '-')")
	fs.Duration("directory-ttl", 0, "how long the node's entry outlives it when it dies without leaving (default 10s)")
	directoryTLSFlags(fs)
}

// directoryTLSFlags adds --directory-tls-cert, --directory-tls-key and
// --directory-tls-ca, the config keys directory_tls_*: the client
// certificate an etcd with client-certificate authentication requires.
func directoryTLSFlags(fs *pflag.FlagSet) {
	fs.String("directory-tls-cert", "", "PEM `file` of the client certificate for the directory (an etcd with --client-cert-auth); with --directory-tls-key")
	fs.String("directory-tls-key", "", "PEM `file` of the key of --directory-tls-cert")
	fs.String("directory-tls-ca", "", "PEM `file` of the CA that signed the directory's certificate (default: the system's roots); any --directory-tls-* flag makes the client speak TLS")
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

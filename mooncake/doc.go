// Package mooncake holds what xfer shares with Mooncake's transfer engine
// beyond its Python class: Mooncake's metadata service, through which
// Mooncake engines publish and find each other's segments.
//
// Server is Mooncake's HTTP metadata server (`xfer mooncake
// metadata-server`): a key/value store in memory, one route,
// /metadata?key=KEY, with GET, PUT and DELETE, answering with the status
// codes and bodies of Mooncake's own server (server.go says which).
//
// Store is the client side: OpenStore takes a Mooncake metadata_server
// string (http://HOST:PORT/metadata, etcd://HOST:PORT[,HOST:PORT...], or a
// bare HOST:PORT, which Mooncake reads as etcd's) and gets, puts and
// deletes keys on that server. An engine publishes where its segment
// listens under RPCMetaKey(segment) (PublishRPCMeta) and resolves a peer's
// segment name the same way (ResolveRPCMeta).
//
// Everything a server or an etcd returns is checked (ParseRPCMeta); a
// malformed value is an error, never a crash. A Server and a Store are
// safe for concurrent use; a Store's Close is idempotent.
package mooncake

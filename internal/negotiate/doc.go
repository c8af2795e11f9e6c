// Package negotiate chooses the transport of a connection in the
// handshake: the dialer's offers (what its policy allows and its host
// supports, best first) and the acceptor's choice among them (the first
// its own policy allows, available here, with a peer whose GIDs are
// allowed, and that the transport finds usable with that peer).
//
// It knows transports through package transport only; the engine builds
// one Table at Open, from its transport table and its configuration, and
// hears of refusals and fallbacks through the Table's hooks. A Table is
// read-only once built: any number of handshakes use it at once.
package negotiate

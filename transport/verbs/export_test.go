package verbs

// IgnoreRevokes makes endpoints keep stale rkeys (tests only).
func IgnoreRevokes(on bool) { testIgnoreRevokes.Store(on) }

// Attaches counts the attach round trips of every endpoint so far.
func Attaches() uint64 { return attaches.Load() }

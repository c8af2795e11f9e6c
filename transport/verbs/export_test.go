package verbs

// IgnoreRevokes makes endpoints keep stale rkeys (tests only).
func IgnoreRevokes(on bool) { testIgnoreRevokes.Store(on) }

package shm

// copyMem copies src to dst.
func copyMem(dst, src []byte) { copy(dst, src) }

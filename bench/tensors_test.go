package bench

import "testing"

// TestSummarize checks the sums over a side's transfers: the rates, the
// median of an even count, and the MD5 verdict (none under --benchmark).
func TestSummarize(t *testing.T) {
	yes, no := true, false
	rs := []TensorResult{
		{Bytes: 1 << 20, Seconds: 0.5, PutSeconds: 0.5, GBps: 4, MD5OK: &yes},
		{Bytes: 1 << 20, Seconds: 0.25, PutSeconds: 0.25, GBps: 1, MD5OK: &no},
		{Bytes: 1 << 20, Seconds: 0.25, PutSeconds: 0.25, GBps: 2, MD5OK: &yes},
		{Bytes: 1 << 20, Seconds: 0, PutSeconds: 0, GBps: 8, MD5OK: &yes},
	}
	s := summarize(TensorSummary{Role: "consumer"}, rs)
	if !s.Summary || s.Role != "consumer" || s.Transfers != 4 || s.Bytes != 4<<20 || s.Seconds != 1 || s.PutSeconds != 1 {
		t.Errorf("sums: %+v", s)
	}
	if s.BytesPerSec != 4<<20 || s.PutBytesPerSec != 4<<20 || s.E2EBytesPerSec != 2<<20 {
		t.Errorf("rates: %v %v %v", s.BytesPerSec, s.PutBytesPerSec, s.E2EBytesPerSec)
	}
	if s.GBpsMin != 1 || s.GBpsMax != 8 || s.GBpsMedian != 3 {
		t.Errorf("GB/s: min %v max %v median %v, want 1 8 3", s.GBpsMin, s.GBpsMax, s.GBpsMedian)
	}
	if s.MD5OK == nil || *s.MD5OK || s.MD5Mismatches != 1 {
		t.Errorf("MD5: %v, %d mismatches", s.MD5OK, s.MD5Mismatches)
	}
	s = summarize(TensorSummary{}, rs[:3:3])
	if s.GBpsMedian != 2 {
		t.Errorf("median of 3: %v, want 2", s.GBpsMedian)
	}
	for i := range rs {
		rs[i].MD5OK = nil
	}
	if s := summarize(TensorSummary{}, rs); s.MD5OK != nil || s.MD5Mismatches != 0 {
		t.Errorf("--benchmark: MD5 %v, %d mismatches", s.MD5OK, s.MD5Mismatches)
	}
	if s := summarize(TensorSummary{}, nil); !s.Summary || s.Transfers != 0 || s.BytesPerSec != 0 || s.MD5OK != nil {
		t.Errorf("nothing: %+v", s)
	}
}

package sys

// HugeTLB describes the kernel's pool of explicit huge pages of the default
// size, the pages that MAP_HUGETLB and MFD_HUGETLB draw from.
type HugeTLB struct {
	// Total is the number of huge pages in the pool (vm.nr_hugepages).
	Total int
	// Free is the number of pages not yet handed out to a mapping.
	Free int
	// Reserved is the number of free pages that existing mappings have
	// reserved but not yet touched. Free-Reserved pages remain for new
	// mappings.
	Reserved int
	// PageSize is the default huge page size in bytes.
	PageSize int
}

/* memcpy.c: the same-host peer of docs/BENCHMARKS.md. Single-thread C memcpy
 * throughput for one size, as the median of several timed rounds.
 * Usage: memcpy SIZE_BYTES [SECONDS]   prints: bytes_per_sec */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc < 2) { fprintf(stderr, "usage: memcpy SIZE [SECONDS]\n"); return 2; }
	size_t n = strtoull(argv[1], 0, 0);
	double secs = argc > 2 ? atof(argv[2]) : 2.0;
	char *src = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *dst = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (src == MAP_FAILED || dst == MAP_FAILED) { perror("mmap"); return 1; }
	memset(src, 1, n);
	memset(dst, 2, n);
	unsigned long long bytes = 0;
	double t0 = now(), t;
	do {
		memcpy(dst, src, n);
		__asm__ volatile("" ::: "memory");
		bytes += n;
		t = now();
	} while (t - t0 < secs);
	printf("%.0f\n", bytes / (t - t0));
	return dst[n / 2] == 1 ? 0 : 1;
}

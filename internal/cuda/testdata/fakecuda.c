/*
 * fakecuda.c: a stand-in for the CUDA driver (libcuda.so.1), for the tests of
 * the engine's GPU paths on machines without a GPU (CI). It is never the only
 * test of a path: tools/gpu/check.sh runs the same tests against the real
 * driver on a GPU machine.
 *
 * One device, cuda:0. Its "device memory" is a memfd mapped twice: once with
 * PROT_NONE at the address the driver hands out, so that a CPU access to
 * device memory faults as it does on a GPU, and once readable and writable
 * at an alias that only this library uses. Copies translate device
 * addresses to their aliases; host memory is used as it is. IPC handles name
 * the owner's PID and the memfd's descriptor, and another process opens one
 * with pidfd_getfd, as the shm transport maps memfds. Streams and events
 * exist as objects, and every copy is complete when it returns.
 *
 * Built by internal/testutil.FakeCUDA with gcc -shared; the types and
 * constants are the package's own (cuda_abi.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../cuda_abi.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define MAX_ALLOCS 4096
#define MAX_HOST 1024
#define IPC_MAGIC 0x786665ca

struct alloc {
	uintptr_t dev, alias;
	size_t size;
	int fd;
	int opened; /* mapped from another process's handle (cuIpcOpenMemHandle) */
};

struct ipc {
	uint32_t magic;
	int32_t pid, fd;
	uint64_t size;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static struct {
	uintptr_t p;
	size_t n;
} hosts[MAX_HOST];
static int ctx_obj, inited;
/* One past the highest slot of allocs and hosts ever used: the lookups on
 * every pointer query scan no further. A scan of all 5120 slots made each
 * query of host memory (Engine.Copy of a Go slice asks one) cost some
 * 1.5 µs, which distorted latency benchmarks run against this driver.
 * Under mu. */
static int nallocs, nhosts;

static struct alloc *find(uintptr_t p)
{
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].size && p >= allocs[i].dev && p < allocs[i].dev + allocs[i].size)
			return &allocs[i];
	return NULL;
}

/* host is where the library reads or writes n bytes at p, device or host. */
static void *host(uintptr_t p, size_t n, CUresult *rc)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find(p);
	uintptr_t r = p;
	if (a) {
		if (p + n > a->dev + a->size)
			*rc = CUDA_ERROR_INVALID_VALUE;
		r = a->alias + (p - a->dev);
	}
	pthread_mutex_unlock(&mu);
	return (void *)r;
}

static CUresult map(int fd, size_t size, int opened, CUdeviceptr *out)
{
	void *dev = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
	if (dev == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *alias = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (alias == MAP_FAILED) {
		munmap(dev, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (!allocs[i].size) {
			allocs[i] = (struct alloc){ (uintptr_t)dev, (uintptr_t)alias, size, fd, opened };
			if (i >= nallocs)
				nallocs = i + 1;
			pthread_mutex_unlock(&mu);
			*out = (CUdeviceptr)(uintptr_t)dev;
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mu);
	munmap(dev, size);
	munmap(alias, size);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult unmap(CUdeviceptr p, int opened)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find((uintptr_t)p);
	if (!a || a->dev != (uintptr_t)p || a->opened != opened) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct alloc c = *a;
	memset(a, 0, sizeof(*a));
	pthread_mutex_unlock(&mu);
	munmap((void *)c.dev, c.size);
	munmap((void *)c.alias, c.size);
	close(c.fd);
	return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags)
{
	(void)flags;
	inited = 1;
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult rc, const char **s)
{
	switch (rc) {
	case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
	case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
	case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
	case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
	default: *s = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult rc, const char **s)
{
	(void)rc;
	*s = "an error of the test driver (fakecuda.c)";
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	(void)d;
	strncpy(name, "xfer test driver (fakecuda.c)", (size_t)len - 1);
	name[len - 1] = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *n, CUdevice d)
{
	(void)d;
	*n = (size_t)16 << 30;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	(void)d;
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
	default: *v = 0;
	}
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
	(void)d;
	strncpy(id, "0000:00:00.0", (size_t)len - 1);
	id[len - 1] = 0;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	if (d != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*c = (CUcontext)&ctx_obj;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	(void)c;
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	*c = (CUcontext)&ctx_obj;
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t size = (n + page - 1) / page * page;
	int fd = memfd_create("xfer-fakecuda", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUresult rc = map(fd, size, 0, p);
	if (rc != CUDA_SUCCESS)
		close(fd);
	return rc;
}

CUresult cuMemFree_v2(CUdeviceptr p) { return unmap(p, 0); }

CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
	CUresult rc = CUDA_SUCCESS;
	void *h = host((uintptr_t)p, n, &rc);
	if (rc == CUDA_SUCCESS)
		memset(h, v, n);
	return rc;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult rc = CUDA_SUCCESS;
	void *d = host((uintptr_t)dst, n, &rc);
	void *s = host((uintptr_t)src, n, &rc);
	if (rc == CUDA_SUCCESS)
		memmove(d, s, n);
	return rc;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st)
{
	(void)st;
	return cuMemcpy(dst, src, n);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find((uintptr_t)p);
	if (a) {
		if (base)
			*base = a->dev;
		if (size)
			*size = a->size;
	}
	pthread_mutex_unlock(&mu);
	return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	(void)flags;
	*s = malloc(1);
	return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuStreamSynchronize(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
	free(s);
	return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	(void)flags;
	*e = malloc(1);
	return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuEventRecord(CUevent e, CUstream s)
{
	(void)e;
	(void)s;
	return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e)
{
	free(e);
	return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find((uintptr_t)p);
	struct alloc c = a ? *a : (struct alloc){ 0 };
	int registered = 0;
	for (int i = 0; i < nhosts && !a; i++)
		if (hosts[i].n && (uintptr_t)p >= hosts[i].p && (uintptr_t)p < hosts[i].p + hosts[i].n) {
			registered = 1;
			c.dev = hosts[i].p;
			c.size = hosts[i].n;
		}
	pthread_mutex_unlock(&mu);
	if (!a && !registered)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = a ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST; break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = 0; break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = c.dev; break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = c.size; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find((uintptr_t)p);
	struct ipc i = { IPC_MAGIC, (int32_t)getpid(), a ? a->fd : -1, a ? a->size : 0 };
	int ok = a && a->dev == (uintptr_t)p;
	pthread_mutex_unlock(&mu);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memset(h, 0, sizeof(*h));
	memcpy(h->reserved, &i, sizeof(i));
	return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
	(void)flags;
	struct ipc i;
	memcpy(&i, h.reserved, sizeof(i));
	if (i.magic != IPC_MAGIC || i.pid == getpid()) /* CUDA refuses its own process's handles too */
		return CUDA_ERROR_INVALID_VALUE;
	int pidfd = (int)syscall(SYS_pidfd_open, i.pid, 0);
	if (pidfd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = (int)syscall(SYS_pidfd_getfd, pidfd, i.fd, 0);
	close(pidfd);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = map(fd, i.size, 1, p);
	if (rc != CUDA_SUCCESS)
		close(fd);
	return rc;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return unmap(p, 1); }

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags)
{
	(void)flags;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_HOST; i++) {
		if (!hosts[i].n) {
			hosts[i].p = (uintptr_t)p;
			hosts[i].n = n;
			if (i >= nhosts)
				nhosts = i + 1;
			pthread_mutex_unlock(&mu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mu);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemHostUnregister(void *p)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_HOST; i++) {
		if (hosts[i].n && hosts[i].p == (uintptr_t)p) {
			hosts[i].n = 0;
			pthread_mutex_unlock(&mu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mu);
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t n, int type, unsigned long long flags)
{
	(void)handle;
	(void)p;
	(void)n;
	(void)type;
	(void)flags;
	return CUDA_ERROR_NOT_SUPPORTED;
}

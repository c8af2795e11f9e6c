//go:build cgo && linux

/*
 * shim_linux.c: run-time binding of libcuda.so.1, and the wrappers that
 * package cuda calls. See shim.h.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

struct xcu_fns xcu;

struct sym {
	const char *name;
	size_t offset; /* of the function pointer in the table */
};

/* The _v2 names where the driver API has them: the plain names are the
 * CUDA 3.x (32-bit size) or pre-11.0 entry points. */
#define S(field, name) { name, offsetof(struct xcu_fns, field) }
static const struct sym syms[] = {
	S(init, "cuInit"),
	S(driver_get_version, "cuDriverGetVersion"),
	S(get_error_name, "cuGetErrorName"),
	S(get_error_string, "cuGetErrorString"),
	S(device_get_count, "cuDeviceGetCount"),
	S(device_get, "cuDeviceGet"),
	S(device_get_name, "cuDeviceGetName"),
	S(device_total_mem, "cuDeviceTotalMem_v2"),
	S(device_get_attribute, "cuDeviceGetAttribute"),
	S(device_get_pci_bus_id, "cuDeviceGetPCIBusId"),
	S(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
	S(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
	S(ctx_push, "cuCtxPushCurrent_v2"),
	S(ctx_pop, "cuCtxPopCurrent_v2"),
	S(mem_alloc, "cuMemAlloc_v2"),
	S(mem_free, "cuMemFree_v2"),
	S(memset_d8, "cuMemsetD8_v2"),
	S(memcpy, "cuMemcpy"),
	S(memcpy_async, "cuMemcpyAsync"),
	S(mem_get_address_range, "cuMemGetAddressRange_v2"),
	S(stream_create, "cuStreamCreate"),
	S(stream_synchronize, "cuStreamSynchronize"),
	S(stream_destroy, "cuStreamDestroy_v2"),
	S(event_create, "cuEventCreate"),
	S(event_record, "cuEventRecord"),
	S(event_query, "cuEventQuery"),
	S(event_synchronize, "cuEventSynchronize"),
	S(event_destroy, "cuEventDestroy_v2"),
	S(pointer_get_attribute, "cuPointerGetAttribute"),
	S(ipc_get_mem_handle, "cuIpcGetMemHandle"),
	S(ipc_open_mem_handle, "cuIpcOpenMemHandle_v2"),
	S(ipc_close_mem_handle, "cuIpcCloseMemHandle"),
	S(mem_host_register, "cuMemHostRegister_v2"),
	S(mem_host_unregister, "cuMemHostUnregister"),
};
static const struct sym optional_syms[] = {
	S(mem_get_handle_for_address_range, "cuMemGetHandleForAddressRange"),
};
#undef S

int xcu_load(const char *lib, struct xcu_fns *t, int min_version, int *version, char *err,
	     size_t errlen)
{
	*version = 0;
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "unknown error");
		return XCU_LOAD_DLOPEN;
	}
	/* cuDriverGetVersion may be called before cuInit. Check the version
	 * first, so that an old driver is reported as such rather than by
	 * the first _v2 symbol it lacks. */
	CUresult (*get_version)(int *);
	void *gv = dlsym(h, "cuDriverGetVersion");
	memcpy(&get_version, &gv, sizeof(gv));
	if (get_version && get_version(version) != CUDA_SUCCESS)
		*version = 0;
	if (*version > 0 && *version < min_version) {
		dlclose(h);
		return XCU_LOAD_OLD;
	}
	struct xcu_fns tmp;
	memset(&tmp, 0, sizeof(tmp));
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(h, syms[i].name);
		if (!p) {
			snprintf(err, errlen, "%s", syms[i].name);
			dlclose(h);
			return XCU_LOAD_SYMBOL;
		}
		memcpy((char *)&tmp + syms[i].offset, &p, sizeof(p));
	}
	for (size_t i = 0; i < sizeof(optional_syms) / sizeof(optional_syms[0]); i++) {
		void *p = dlsym(h, optional_syms[i].name);
		memcpy((char *)&tmp + optional_syms[i].offset, &p, sizeof(p));
	}
	*t = tmp;
	return XCU_LOAD_OK; /* h stays open for the life of the process */
}

/* ---- wrappers ---- */

/* Run call with ctx current on this thread, then restore the thread's
 * previous current context. The call's error wins over the pop's. */
#define IN_CTX(ctx, call)                                     \
	do {                                                  \
		CUresult rc_ = xcu.ctx_push(ctx);             \
		if (rc_ != CUDA_SUCCESS)                      \
			return rc_;                           \
		rc_ = (call);                                 \
		CUcontext popped_;                            \
		CUresult pop_ = xcu.ctx_pop(&popped_);        \
		return rc_ != CUDA_SUCCESS ? rc_ : pop_;      \
	} while (0)

CUresult xcu_init(void) { return xcu.init(0); }
CUresult xcu_error_name(CUresult rc, const char **name) { return xcu.get_error_name(rc, name); }
CUresult xcu_error_string(CUresult rc, const char **msg) { return xcu.get_error_string(rc, msg); }
CUresult xcu_device_count(int *n) { return xcu.device_get_count(n); }

/* An attribute that older drivers may not know: CUDA_ERROR_INVALID_VALUE reads as 0. */
static CUresult optional_attr(int *v, int attr, CUdevice dev)
{
	CUresult rc = xcu.device_get_attribute(v, attr, dev);
	if (rc == CUDA_ERROR_INVALID_VALUE) {
		*v = 0;
		return CUDA_SUCCESS;
	}
	return rc;
}

CUresult xcu_device_info(int ordinal, struct xcu_device_info *d)
{
	CUdevice dev;
	CUresult rc;
#define TRY(opname, call)            \
	do {                         \
		d->op = opname;      \
		rc = (call);         \
		if (rc != CUDA_SUCCESS) \
			return rc;   \
	} while (0)
	TRY("cuDeviceGet", xcu.device_get(&dev, ordinal));
	TRY("cuDeviceGetName", xcu.device_get_name(d->name, sizeof(d->name), dev));
	TRY("cuDeviceTotalMem", xcu.device_total_mem(&d->total_mem, dev));
	TRY("cuDeviceGetPCIBusId", xcu.device_get_pci_bus_id(d->pci_bus_id, sizeof(d->pci_bus_id), dev));
	TRY("cuDeviceGetAttribute COMPUTE_CAPABILITY_MAJOR",
	    xcu.device_get_attribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	TRY("cuDeviceGetAttribute COMPUTE_CAPABILITY_MINOR",
	    xcu.device_get_attribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	TRY("cuDeviceGetAttribute UNIFIED_ADDRESSING",
	    xcu.device_get_attribute(&d->unified_addressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev));
	TRY("cuDeviceGetAttribute DMA_BUF_SUPPORTED",
	    optional_attr(&d->dma_buf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev));
	TRY("cuDeviceGetAttribute GPU_DIRECT_RDMA_SUPPORTED",
	    optional_attr(&d->gpudirect_rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev));
#undef TRY
	d->op = NULL;
	return CUDA_SUCCESS;
}

CUresult xcu_retain(int ordinal, CUdevice *dev, CUcontext *ctx)
{
	CUresult rc = xcu.device_get(dev, ordinal);
	if (rc != CUDA_SUCCESS)
		return rc;
	return xcu.primary_ctx_retain(ctx, *dev);
}

CUresult xcu_release(CUdevice dev) { return xcu.primary_ctx_release(dev); }

CUresult xcu_mem_alloc(CUcontext ctx, size_t n, CUdeviceptr *p) { IN_CTX(ctx, xcu.mem_alloc(p, n)); }
CUresult xcu_mem_free(CUcontext ctx, CUdeviceptr p) { IN_CTX(ctx, xcu.mem_free(p)); }

/* cuMemsetD8 and cuMemcpy may return before the device is done (device
 * memory targets, device-to-device copies); they run on the legacy default
 * stream, so waiting for that stream makes them complete. */
static CUresult memset_sync(CUdeviceptr p, unsigned char v, size_t n)
{
	CUresult rc = xcu.memset_d8(p, v, n);
	return rc != CUDA_SUCCESS ? rc : xcu.stream_synchronize(NULL);
}

static CUresult memcpy_sync(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult rc = xcu.memcpy(dst, src, n);
	return rc != CUDA_SUCCESS ? rc : xcu.stream_synchronize(NULL);
}

CUresult xcu_memset(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n)
{
	IN_CTX(ctx, memset_sync(p, v, n));
}

CUresult xcu_memcpy(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	IN_CTX(ctx, memcpy_sync(dst, src, n));
}

CUresult xcu_address_range(CUcontext ctx, CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
	IN_CTX(ctx, xcu.mem_get_address_range(base, size, p));
}

CUresult xcu_stream_create(CUcontext ctx, CUstream *s)
{
	IN_CTX(ctx, xcu.stream_create(s, CU_STREAM_NON_BLOCKING));
}

CUresult xcu_stream_destroy(CUcontext ctx, CUstream s) { IN_CTX(ctx, xcu.stream_destroy(s)); }
CUresult xcu_stream_sync(CUcontext ctx, CUstream s) { IN_CTX(ctx, xcu.stream_synchronize(s)); }

CUresult xcu_memcpy_async(CUcontext ctx, CUstream s, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	IN_CTX(ctx, xcu.memcpy_async(dst, src, n, s));
}

CUresult xcu_event_create(CUcontext ctx, CUevent *e)
{
	IN_CTX(ctx, xcu.event_create(e, CU_EVENT_DISABLE_TIMING));
}

CUresult xcu_event_destroy(CUcontext ctx, CUevent e) { IN_CTX(ctx, xcu.event_destroy(e)); }
CUresult xcu_event_record(CUcontext ctx, CUevent e, CUstream s) { IN_CTX(ctx, xcu.event_record(e, s)); }
CUresult xcu_event_query(CUcontext ctx, CUevent e) { IN_CTX(ctx, xcu.event_query(e)); }
CUresult xcu_event_sync(CUcontext ctx, CUevent e) { IN_CTX(ctx, xcu.event_synchronize(e)); }

CUresult xcu_ipc_get(CUcontext ctx, CUdeviceptr p, void *handle)
{
	IN_CTX(ctx, xcu.ipc_get_mem_handle((CUipcMemHandle *)handle, p));
}

static CUresult ipc_open(const void *handle, CUdeviceptr *p)
{
	CUipcMemHandle h;
	memcpy(&h, handle, sizeof(h));
	return xcu.ipc_open_mem_handle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

CUresult xcu_ipc_open(CUcontext ctx, const void *handle, CUdeviceptr *p) { IN_CTX(ctx, ipc_open(handle, p)); }
CUresult xcu_ipc_close(CUcontext ctx, CUdeviceptr p) { IN_CTX(ctx, xcu.ipc_close_mem_handle(p)); }

CUresult xcu_host_register(CUcontext ctx, uintptr_t p, size_t n)
{
	IN_CTX(ctx, xcu.mem_host_register((void *)p, n, CU_MEMHOSTREGISTER_PORTABLE));
}

CUresult xcu_host_unregister(CUcontext ctx, uintptr_t p) { IN_CTX(ctx, xcu.mem_host_unregister((void *)p)); }

int xcu_has_dmabuf(void) { return xcu.mem_get_handle_for_address_range != NULL; }

CUresult xcu_dmabuf_fd(CUcontext ctx, CUdeviceptr p, size_t n, int *fd)
{
	IN_CTX(ctx, xcu.mem_get_handle_for_address_range(fd, p, n, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0));
}

CUresult xcu_pointer_info(CUdeviceptr p, struct xcu_pointer_info *pi)
{
	memset(pi, 0, sizeof(*pi));
	pi->device = -1;
	/* Each attribute writes a value of its own type; see cuda_abi.h. */
	CUresult rc = xcu.pointer_get_attribute(&pi->type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((rc = xcu.pointer_get_attribute(&pi->managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p)) != CUDA_SUCCESS)
		return rc;
	if ((rc = xcu.pointer_get_attribute(&pi->device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p)) != CUDA_SUCCESS)
		return rc;
	if ((rc = xcu.pointer_get_attribute(&pi->base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p)) != CUDA_SUCCESS)
		return rc;
	return xcu.pointer_get_attribute(&pi->size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p);
}

/* ---- the ABI table ---- */

#define ABI(e) { #e, (long long)(e) },
static const struct xcu_abi_item abi_items[] = {
#include "abi_table.h"
};
#undef ABI

const struct xcu_abi_item *xcu_abi_table(int *n)
{
	*n = (int)(sizeof(abi_items) / sizeof(abi_items[0]));
	return abi_items;
}

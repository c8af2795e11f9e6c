/*
 * shim.h: the C side of package cuda (implemented in shim_linux.c).
 *
 * libcuda.so.1, the CUDA driver API, is opened with dlopen at run time and
 * its functions bound with dlsym into the table below; nothing is linked at
 * build time. The Go code calls the small wrappers declared here, never the
 * table directly, because cgo cannot call C function pointers. Every
 * wrapper returns the driver's CUresult.
 *
 * The wrappers that take a CUcontext make it current on the calling thread
 * (cuCtxPushCurrent), make their driver call(s), and pop it again before
 * they return, all within the one C call, so that Go callers need not lock
 * their goroutine to an OS thread.
 */
#ifndef XFER_CUDA_SHIM_H
#define XFER_CUDA_SHIM_H

#include <stdint.h>

#include "cuda_abi.h"

/* ---- the run-time bound library ---- */

struct xcu_fns {
	CUresult (*init)(unsigned int flags);
	CUresult (*driver_get_version)(int *version);
	CUresult (*get_error_name)(CUresult rc, const char **str);
	CUresult (*get_error_string)(CUresult rc, const char **str);
	CUresult (*device_get_count)(int *count);
	CUresult (*device_get)(CUdevice *dev, int ordinal);
	CUresult (*device_get_name)(char *name, int len, CUdevice dev);
	CUresult (*device_total_mem)(size_t *bytes, CUdevice dev);
	CUresult (*device_get_attribute)(int *value, int attr, CUdevice dev);
	CUresult (*device_get_pci_bus_id)(char *id, int len, CUdevice dev);
	CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice dev);
	CUresult (*primary_ctx_release)(CUdevice dev);
	CUresult (*ctx_push)(CUcontext ctx);
	CUresult (*ctx_pop)(CUcontext *ctx);
	CUresult (*mem_alloc)(CUdeviceptr *p, size_t bytes);
	CUresult (*mem_free)(CUdeviceptr p);
	CUresult (*memset_d8)(CUdeviceptr p, unsigned char v, size_t n);
	CUresult (*memcpy)(CUdeviceptr dst, CUdeviceptr src, size_t n);
	CUresult (*memcpy_async)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
	CUresult (*mem_get_address_range)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
	CUresult (*stream_create)(CUstream *s, unsigned int flags);
	CUresult (*stream_synchronize)(CUstream s);
	CUresult (*stream_destroy)(CUstream s);
	CUresult (*event_create)(CUevent *e, unsigned int flags);
	CUresult (*event_record)(CUevent e, CUstream s);
	CUresult (*event_query)(CUevent e);
	CUresult (*event_synchronize)(CUevent e);
	CUresult (*event_destroy)(CUevent e);
	CUresult (*pointer_get_attribute)(void *data, int attr, CUdeviceptr p);
	CUresult (*ipc_get_mem_handle)(CUipcMemHandle *h, CUdeviceptr p);
	CUresult (*ipc_open_mem_handle)(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags);
	CUresult (*ipc_close_mem_handle)(CUdeviceptr p);
	CUresult (*mem_host_register)(void *p, size_t bytes, unsigned int flags);
	CUresult (*mem_host_unregister)(void *p);
	/* Optional, NULL when the driver lacks it (before CUDA 11.7). */
	CUresult (*mem_get_handle_for_address_range)(void *handle, CUdeviceptr p, size_t size,
						     int type, unsigned long long flags);
};

extern struct xcu_fns xcu;

/* What xcu_load returns. */
enum {
	XCU_LOAD_OK = 0,
	XCU_LOAD_DLOPEN = 1, /* dlopen failed; err says why */
	XCU_LOAD_OLD = 2,    /* the driver's version is below min_version */
	XCU_LOAD_SYMBOL = 3, /* a required symbol is missing; err names it */
};

/*
 * Open lib (for example "libcuda.so.1") and bind every symbol of the table
 * t. The driver's version (cuDriverGetVersion, 1000*major + 10*minor) is
 * written to *version when the library has that function. On failure
 * leave t untouched, close the library and write why to err.
 */
int xcu_load(const char *lib, struct xcu_fns *t, int min_version, int *version, char *err,
	     size_t errlen);

/* ---- wrappers over the bound functions (the table xcu) ---- */

CUresult xcu_init(void);
CUresult xcu_error_name(CUresult rc, const char **name);
CUresult xcu_error_string(CUresult rc, const char **msg);
CUresult xcu_device_count(int *n);

struct xcu_device_info {
	char name[256];
	char pci_bus_id[32];
	size_t total_mem;
	int cc_major, cc_minor;
	int unified_addressing, dma_buf, gpudirect_rdma;
	const char *op; /* the driver call that failed */
};

/* Attributes that the driver does not know (older drivers) read as 0. */
CUresult xcu_device_info(int ordinal, struct xcu_device_info *d);

CUresult xcu_retain(int ordinal, CUdevice *dev, CUcontext *ctx);
CUresult xcu_release(CUdevice dev);

/* These make ctx current for the duration of the call. */
CUresult xcu_mem_alloc(CUcontext ctx, size_t n, CUdeviceptr *p);
CUresult xcu_mem_free(CUcontext ctx, CUdeviceptr p);
/* Memset and copy wait for the legacy default stream before they return. */
CUresult xcu_memset(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n);
CUresult xcu_memcpy(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult xcu_address_range(CUcontext ctx, CUdeviceptr p, CUdeviceptr *base, size_t *size);
CUresult xcu_stream_create(CUcontext ctx, CUstream *s);
CUresult xcu_stream_destroy(CUcontext ctx, CUstream s);
CUresult xcu_stream_sync(CUcontext ctx, CUstream s);
CUresult xcu_memcpy_async(CUcontext ctx, CUstream s, CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult xcu_event_create(CUcontext ctx, CUevent *e);
CUresult xcu_event_destroy(CUcontext ctx, CUevent e);
CUresult xcu_event_record(CUcontext ctx, CUevent e, CUstream s);
CUresult xcu_event_query(CUcontext ctx, CUevent e);
CUresult xcu_event_sync(CUcontext ctx, CUevent e);
/* handle points to CU_IPC_HANDLE_SIZE bytes. */
CUresult xcu_ipc_get(CUcontext ctx, CUdeviceptr p, void *handle);
CUresult xcu_ipc_open(CUcontext ctx, const void *handle, CUdeviceptr *p);
CUresult xcu_ipc_close(CUcontext ctx, CUdeviceptr p);
CUresult xcu_host_register(CUcontext ctx, uintptr_t p, size_t n);
CUresult xcu_host_unregister(CUcontext ctx, uintptr_t p);
/* Whether the driver has cuMemGetHandleForAddressRange. */
int xcu_has_dmabuf(void);
CUresult xcu_dmabuf_fd(CUcontext ctx, CUdeviceptr p, size_t n, int *fd);

struct xcu_pointer_info {
	unsigned int type;    /* CUmemorytype */
	unsigned int managed; /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
	int device;
	CUdeviceptr base;
	size_t size;
};

/* Needs no context. */
CUresult xcu_pointer_info(CUdeviceptr p, struct xcu_pointer_info *pi);

/* ---- the ABI table (abi_table.h expanded against cuda_abi.h) ---- */

struct xcu_abi_item {
	const char *expr; /* as written for the system headers */
	long long value;  /* its value with cuda_abi.h */
};

const struct xcu_abi_item *xcu_abi_table(int *n);

#endif /* XFER_CUDA_SHIM_H */

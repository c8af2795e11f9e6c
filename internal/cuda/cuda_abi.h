/*
 * cuda_abi.h: the few types and constants of the CUDA driver API (<cuda.h>)
 * that package cuda uses, declared here so that building needs no CUDA
 * toolkit. The values are cuda.h's, checked against the headers of CUDA
 * 11.6 and 12.x; TestABI compares every entry of abi_table.h with the
 * system's cuda.h when one is installed.
 *
 * The driver's enum types (CUresult, CUdevice_attribute, CUpointer_attribute,
 * CUmemRangeHandleType, ...) are int-sized C enums, so they are declared and
 * passed as int here, which has the same size and calling convention.
 */
#ifndef XFER_CUDA_ABI_H
#define XFER_CUDA_ABI_H

#include <stddef.h>

typedef int CUresult;                   /* enum cudaError_enum */
typedef int CUdevice;                   /* a device ordinal, as cuDeviceGet returns it */
typedef unsigned long long CUdeviceptr; /* on LP64 targets, the only ones xfer builds for */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CU_IPC_HANDLE_SIZE 64

/* Passed by value to cuIpcOpenMemHandle. */
typedef struct CUipcMemHandle_st {
	char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

/* CUresult (enum cudaError_enum): the codes the package tells apart. */
enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_STUB_LIBRARY = 34,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
	CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
};

/* CUdevice_attribute */
enum {
	CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116, /* CUDA 11.3 */
	CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,         /* CUDA 11.7 */
};

/* CUpointer_attribute, with the type each one writes */
enum {
	CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,       /* unsigned int (CUmemorytype) */
	CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,        /* a boolean */
	CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,    /* int */
	CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11, /* CUdeviceptr */
	CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,       /* size_t */
};

/* CUmemorytype */
enum {
	CU_MEMORYTYPE_HOST = 1,
	CU_MEMORYTYPE_DEVICE = 2,
	CU_MEMORYTYPE_ARRAY = 3,
	CU_MEMORYTYPE_UNIFIED = 4,
};

/* Flags */
enum {
	CU_STREAM_NON_BLOCKING = 0x1,             /* CUstream_flags */
	CU_EVENT_DISABLE_TIMING = 0x2,            /* CUevent_flags */
	CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1, /* CUipcMem_flags */
	CU_MEMHOSTREGISTER_PORTABLE = 0x1,        /* a #define in cuda.h */
	CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1, /* CUmemRangeHandleType, CUDA 11.7 */
};

#endif /* XFER_CUDA_ABI_H */

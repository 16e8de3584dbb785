/* SPDX-License-Identifier: MIT */
/*
 * cudrv.h - the CUDA driver calls batchd and libbatchclient share.
 *
 * GPU sessions hand device memory over as CUDA VMM allocations exported to
 * POSIX file descriptors, and synchronize through CUDA IPC events. Those
 * are driver-API calls (cuMem*, cuIpc*). Neither side links libcuda: the
 * table below is filled at run time from libcuda.so.1 through
 * cuGetProcAddress, so the daemon and the client library load and run on
 * machines without a driver, and a trainer keeps whatever CUDA runtime it
 * brought (runtime streams and events are driver handles, so a
 * cudaStream_t can be passed where a CUstream is expected).
 *
 * Only the types of <cuda.h> are used; nothing here needs a GPU to
 * compile.
 *
 * Thread rules: bp_cudrv_load() is idempotent and thread-safe (the first
 * caller loads); the table is read-only afterwards.
 */
#ifndef BATCHD_PROTO_CUDRV_H
#define BATCHD_PROTO_CUDRV_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

typedef struct bp_cudrv {
	CUresult (*Init)(unsigned int flags);
	CUresult (*DriverGetVersion)(int *version);
	CUresult (*GetErrorString)(CUresult e, const char **s);
	CUresult (*GetErrorName)(CUresult e, const char **s);
	CUresult (*DeviceGetCount)(int *n);
	CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*DeviceGetUuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*DeviceGetAttribute)(int *v, CUdevice_attribute a, CUdevice dev);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
	CUresult (*CtxPushCurrent)(CUcontext ctx);
	CUresult (*CtxPopCurrent)(CUcontext *ctx);
	CUresult (*MemGetAllocationGranularity)(size_t *g, const CUmemAllocationProp *p,
						CUmemAllocationGranularity_flags o);
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *h, size_t size,
			      const CUmemAllocationProp *p, unsigned long long flags);
	CUresult (*MemRelease)(CUmemGenericAllocationHandle h);
	CUresult (*MemExportToShareableHandle)(void *out, CUmemGenericAllocationHandle h,
					       CUmemAllocationHandleType type,
					       unsigned long long flags);
	CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *h, void *os,
						 CUmemAllocationHandleType type);
	CUresult (*MemAddressReserve)(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
				      unsigned long long flags);
	CUresult (*MemAddressFree)(CUdeviceptr p, size_t size);
	CUresult (*MemMap)(CUdeviceptr p, size_t size, size_t offset,
			   CUmemGenericAllocationHandle h, unsigned long long flags);
	CUresult (*MemUnmap)(CUdeviceptr p, size_t size);
	CUresult (*MemSetAccess)(CUdeviceptr p, size_t size, const CUmemAccessDesc *d,
				 size_t count);
	CUresult (*IpcOpenEventHandle)(CUevent *ev, CUipcEventHandle h);
	CUresult (*EventRecord)(CUevent ev, CUstream stream);
	CUresult (*EventQuery)(CUevent ev);
	CUresult (*EventSynchronize)(CUevent ev);
	CUresult (*EventDestroy)(CUevent ev);
	CUresult (*StreamWaitEvent)(CUstream stream, CUevent ev, unsigned int flags);
	CUresult (*StreamSynchronize)(CUstream stream);
	CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t n);
} bp_cudrv;

/*
 * Load libcuda.so.1 and resolve the table (once per process). @return the
 * table, or NULL with a reason (e.g. "libcuda.so.1: cannot open shared
 * object file") copied into why.
 */
const bp_cudrv *bp_cudrv_load(char *why, size_t whylen);

/*
 * The inode of this process's PID namespace (/proc/self/ns/pid), 0 when
 * /proc cannot say. CUDA IPC event handles open only in the namespace that
 * made them: the daemon writes its own into the device table and the
 * client compares. Any thread.
 */
uint64_t bp_pid_ns(void);

/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for e, into buf. @return buf. */
const char *bp_cudrv_strerror(const bp_cudrv *d, CUresult e, char *buf, size_t len);

/* A negative errno for a driver error (-ENOMEM, -ENODEV, -EINVAL, else -EIO). */
int bp_cudrv_errno(CUresult e);

#endif

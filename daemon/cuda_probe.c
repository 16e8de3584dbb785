/* SPDX-License-Identifier: MIT */
/*
 * cuda_probe.c - probe the CUDA runtime (see cuda_probe.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "batchd-build.h"
#include "cuda_probe.h"
#include "protocol.h"

#if BATCHD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cudrv.h"

int bd_cuda_probe(bd_cuda_state *st)
{
	const bp_cudrv *drv;
	char why[256];
	cudaError_t e;
	int n = 0;

	memset(st, 0, sizeof(*st));
	cudaRuntimeGetVersion(&st->runtime_version);
	cudaDriverGetVersion(&st->driver_version);
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(st->reason, sizeof(st->reason), "%s (CUDA error %d)",
			 cudaGetErrorString(e), (int)e);
		return -ENODEV;
	}
	if (n == 0) {
		snprintf(st->reason, sizeof(st->reason), "the driver reports no device");
		return -ENODEV;
	}
	/* Device memory crosses to trainers through driver calls (cudrv.h). */
	drv = bp_cudrv_load(why, sizeof(why));
	if (!drv) {
		snprintf(st->reason, sizeof(st->reason), "the CUDA driver API is unusable: %.200s", why);
		return -ENODEV;
	}
	if (n > BD_CUDA_MAX_DEVICES)
		n = BD_CUDA_MAX_DEVICES;
	for (int i = 0; i < n; i++) {
		bd_cuda_device *d = &st->dev[i];
		struct cudaDeviceProp p;
		int vmm = 0, fd = 0, ipc = 0;
		CUuuid uuid;
		CUdevice cu;

		if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
			cudaGetLastError();
			snprintf(d->name, sizeof(d->name), "device %d (properties unavailable)", i);
			continue;
		}
		snprintf(d->name, sizeof(d->name), "%.95s", p.name);
		memcpy(d->uuid, p.uuid.bytes, sizeof(d->uuid));
		d->memory = p.totalGlobalMem;
		d->pci_bus = p.pciBusID;
		if (drv->DeviceGet(&cu, i) != CUDA_SUCCESS)
			continue;
		/* The UUID clients match on is the driver's (MIG instances have their own). */
		if (drv->DeviceGetUuid(&uuid, cu) == CUDA_SUCCESS)
			memcpy(d->uuid, uuid.bytes, sizeof(d->uuid));
		if (drv->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
					    cu) == CUDA_SUCCESS &&
		    drv->DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
					    cu) == CUDA_SUCCESS &&
		    drv->DeviceGetAttribute(&ipc, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, cu) ==
		    CUDA_SUCCESS)
			d->shareable = vmm && fd && ipc;
	}
	st->devices = n;
	return 0;
}
#else
int bd_cuda_probe(bd_cuda_state *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->reason, sizeof(st->reason), "batchd was built without CUDA");
	return -ENODEV;
}
#endif

int bd_cuda_pick(const bd_cuda_state *st, const uint8_t uuid[16], int placement, char *err,
		 size_t errlen)
{
	static const uint8_t zero[16];
	int dev = -1;

	if (st->devices == 0) {
		snprintf(err, errlen, "no CUDA device: %s", st->reason);
		return -ENODEV;
	}
	if (memcmp(uuid, zero, sizeof(zero)) != 0) {
		for (int i = 0; i < st->devices && dev < 0; i++)
			if (memcmp(st->dev[i].uuid, uuid, 16) == 0)
				dev = i;
		if (dev < 0) {
			char u[48];

			snprintf(err, errlen, "no CUDA device: the client's device %d (%s) is not "
				 "visible to batchd, which sees %d device%s", placement,
				 bp_cuda_uuid_str(uuid, u, sizeof(u)), st->devices,
				 st->devices == 1 ? "" : "s");
			return -ENODEV;
		}
	} else {
		if (placement < 0 || placement >= st->devices) {
			snprintf(err, errlen, "no CUDA device: device %d does not exist (batchd sees "
				 "%d)", placement, st->devices);
			return -ENODEV;
		}
		dev = placement;
	}
	if (!st->dev[dev].shareable) {
		snprintf(err, errlen, "CUDA device %d (%s) cannot export memory to other processes "
			 "(it lacks CUDA VMM POSIX file-descriptor handles or IPC events)", dev, st->dev[dev].name);
		return -EOPNOTSUPP;
	}
	return dev;
}

/* SPDX-License-Identifier: MIT */
/*
 * cuda_probe.c - probe the CUDA runtime (see cuda_probe.h).
 *
 * The runtime's own words for a machine it cannot use ("CUDA driver
 * version is insufficient for CUDA runtime version") cover a machine with
 * no driver, an old driver and a driver without its kernel module alike,
 * and say nothing of what to do. The probe tells those apart, and devices
 * hidden by an environment variable or locked by their compute mode, and
 * says what to change, keeping CUDA's error number for searching.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchd-build.h"
#include "cuda_probe.h"
#include "protocol.h"

#if BATCHD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cudrv.h"

/* The NVIDIA kernel module's own file: present exactly when the module is loaded. */
#ifndef BD_NVIDIA_PROC_VERSION
#define BD_NVIDIA_PROC_VERSION "/proc/driver/nvidia/version"
#endif

/* A CUDA version number (major * 1000 + minor * 10) as "X.Y". */
static const char *version_str(int v, char *buf, size_t len)
{
	snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
	return buf;
}

static bool kernel_module_loaded(void)
{
	return access(BD_NVIDIA_PROC_VERSION, F_OK) == 0;
}

/*
 * Why the runtime's "insufficient driver" (35): no driver at all (the
 * runtime reports driver version 0 when libcuda.so.1 cannot be loaded), a
 * driver older than the runtime, or a driver library without its module.
 */
static void explain_driver(bd_cuda_state *st, cudaError_t e)
{
	char d[16], rt[16];

	if (st->driver_version == 0)
		snprintf(st->reason, sizeof(st->reason), "no NVIDIA driver on this machine "
			 "(libcuda.so.1 cannot be loaded%s): install it for GPU sessions (CUDA error %d)",
			 kernel_module_loaded() ? "" : ", no " BD_NVIDIA_PROC_VERSION, (int)e);
	else if (st->driver_version < st->runtime_version)
		snprintf(st->reason, sizeof(st->reason), "NVIDIA driver %s is older than the CUDA %s "
			 "runtime batchd was built with: update the driver (CUDA error %d)",
			 version_str(st->driver_version, d, sizeof(d)),
			 version_str(st->runtime_version, rt, sizeof(rt)), (int)e);
	else if (!kernel_module_loaded())
		snprintf(st->reason, sizeof(st->reason), "the NVIDIA kernel module is not loaded "
			 "(no " BD_NVIDIA_PROC_VERSION "): load it (modprobe nvidia) or reinstall the "
			 "driver (CUDA error %d)", (int)e);
	else
		snprintf(st->reason, sizeof(st->reason), "%s (CUDA error %d)", cudaGetErrorString(e),
			 (int)e);
}

/*
 * Names the variable hiding the devices, if one is set: CUDA's own
 * CUDA_VISIBLE_DEVICES, or NVIDIA_VISIBLE_DEVICES, which the container
 * runtime reads to decide which devices a container gets at all.
 * @return true when reason was written.
 */
static bool explain_hidden(bd_cuda_state *st, cudaError_t e)
{
	static const char *const vars[] = { "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (!v)
			continue;
		snprintf(st->reason, sizeof(st->reason), "%s=\"%.64s\" hides every CUDA device from "
			 "batchd: unset it or name a device that exists (CUDA error %d)", vars[i], v,
			 (int)e);
		return true;
	}
	return false;
}

/* Fill st->reason for a failed cudaGetDeviceCount. */
static void explain(bd_cuda_state *st, cudaError_t e)
{
	switch (e) {
	case cudaErrorInsufficientDriver:
		explain_driver(st, e);
		return;
	case cudaErrorNoDevice:
		if (explain_hidden(st, e))
			return;
		if (!kernel_module_loaded())
			snprintf(st->reason, sizeof(st->reason), "no CUDA device: the NVIDIA kernel "
				 "module is not loaded (no " BD_NVIDIA_PROC_VERSION "): load it (modprobe "
				 "nvidia) or reinstall the driver (CUDA error %d)", (int)e);
		else
			snprintf(st->reason, sizeof(st->reason), "the NVIDIA driver sees no CUDA "
				 "device: check that nvidia-smi lists one (CUDA error %d)", (int)e);
		return;
	case cudaErrorDevicesUnavailable:
		snprintf(st->reason, sizeof(st->reason), "every CUDA device is busy or unavailable: "
			 "another process holds it in compute mode Exclusive_Process, or the mode is "
			 "Prohibited (nvidia-smi -q -d COMPUTE; nvidia-smi -c DEFAULT) (CUDA error %d)",
			 (int)e);
		return;
	case cudaErrorSystemDriverMismatch:
		snprintf(st->reason, sizeof(st->reason), "libcuda.so.1 and the NVIDIA kernel module "
			 "come from different driver versions: reboot, or reinstall the driver (CUDA "
			 "error %d)", (int)e);
		return;
	default:
		snprintf(st->reason, sizeof(st->reason), "%s (CUDA error %d)", cudaGetErrorString(e),
			 (int)e);
	}
}

int bd_cuda_probe(bd_cuda_state *st)
{
	const bp_cudrv *drv;
	char why[256];
	cudaError_t e;
	int n = 0, prohibited = 0;

	memset(st, 0, sizeof(*st));
	cudaRuntimeGetVersion(&st->runtime_version);
	cudaDriverGetVersion(&st->driver_version);
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		explain(st, e);
		return -ENODEV;
	}
	if (n == 0) {
		if (!explain_hidden(st, cudaErrorNoDevice))
			snprintf(st->reason, sizeof(st->reason), "the NVIDIA driver sees no CUDA "
				 "device: check that nvidia-smi lists one");
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
		int vmm = 0, fd = 0, ipc = 0, mode = 0;
		CUuuid uuid;
		CUdevice cu;

		if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
			cudaGetLastError();
			snprintf(d->name, sizeof(d->name), "device %d (properties unavailable)", i);
			continue;
		}
		snprintf(d->name, sizeof(d->name), "%.95s", p.name);
		if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, i) == cudaSuccess)
			d->prohibited = mode == cudaComputeModeProhibited;
		else
			cudaGetLastError();
		prohibited += d->prohibited;
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
	if (prohibited == n) {
		snprintf(st->reason, sizeof(st->reason), "every CUDA device is in compute mode "
			 "Prohibited, which lets no process use it: nvidia-smi -c DEFAULT");
		return -ENODEV;
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
	if (st->dev[dev].prohibited) {
		snprintf(err, errlen, "CUDA device %d (%s) is in compute mode Prohibited, which lets "
			 "no process use it: nvidia-smi -i %d -c DEFAULT, or ask for another device",
			 dev, st->dev[dev].name, dev);
		return -EBUSY;
	}
	if (!st->dev[dev].shareable) {
		snprintf(err, errlen, "CUDA device %d (%s) cannot export memory to other processes "
			 "(it lacks CUDA VMM POSIX file-descriptor handles or IPC events)", dev, st->dev[dev].name);
		return -EOPNOTSUPP;
	}
	return dev;
}

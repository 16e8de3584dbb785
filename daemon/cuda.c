/* SPDX-License-Identifier: MIT */
/*
 * cuda.c - probe the CUDA runtime (see cuda.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "batchd-build.h"
#include "cuda.h"

#if BATCHD_HAVE_CUDA
#include <cuda_runtime_api.h>

int bd_cuda_probe(bd_cuda_state *st)
{
	cudaError_t e;

	memset(st, 0, sizeof(*st));
	cudaRuntimeGetVersion(&st->runtime_version);
	cudaDriverGetVersion(&st->driver_version);
	e = cudaGetDeviceCount(&st->devices);
	if (e != cudaSuccess) {
		st->devices = 0;
		snprintf(st->reason, sizeof(st->reason), "%s (CUDA error %d)",
			 cudaGetErrorString(e), (int)e);
		return -ENODEV;
	}
	if (st->devices == 0) {
		snprintf(st->reason, sizeof(st->reason), "the driver reports no device");
		return -ENODEV;
	}
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

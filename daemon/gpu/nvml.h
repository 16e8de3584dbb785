/* SPDX-License-Identifier: MIT */
/*
 * nvml.h - GPU telemetry from NVML: utilization, memory, temperature,
 * power, clock throttle reasons and ECC totals of each NVIDIA device, for
 * the status document and the metrics (status.c).
 *
 * Operators want to see next to batchd's own figures whether the GPUs it
 * feeds are busy, hot or throttled; NVML is where the driver says so.
 * batchd does not link it: it loads libnvidia-ml.so.1 at run time (or the
 * file $BATCHD_NVML_LIBRARY names, for a driver kept off the loader's
 * path), so a machine without the NVIDIA driver runs batchd unchanged
 * and the status says why there is no telemetry.
 *
 * NVML's state is per process (nvmlInit counts references for the whole
 * process), so this module is one sampler per process rather than an
 * object: bd_nvml_start once, bd_nvml_stop once.
 *
 * Thread rules: bd_nvml_start, bd_nvml_set_interval and bd_nvml_stop on
 * the loop thread; bd_nvml_read and bd_nvml_throttle_name from any thread.
 */
#ifndef BATCHD_DAEMON_NVML_H
#define BATCHD_DAEMON_NVML_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_probe.h"

#define BD_NVML_MAX_DEVICES 64
/* The throttle reasons NVML defines, bit i of the mask (bd_nvml_throttle_name). */
#define BD_NVML_THROTTLE_BITS 9

/* One device's figures; a has_* false means NVML could not say (not supported, or failed). */
typedef struct bd_nvml_gpu {
	int index;                /* NVML's (and nvidia-smi's) index */
	int ordinal;              /* the CUDA ordinal with the same UUID, -1: CUDA does not see it */
	char uuid[96];            /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	char name[96];
	bool has_util, has_memory, has_temperature, has_power, has_throttle, has_ecc;
	unsigned util_gpu;        /* percent of the last sample period a kernel ran */
	unsigned util_memory;     /* percent of it device memory was read or written */
	uint64_t memory_used, memory_total; /* bytes */
	unsigned temperature;     /* degrees C, the GPU die */
	unsigned power_mw;        /* milliwatts, the whole board */
	uint64_t throttle;        /* clock throttle (event) reasons, NVML's bitmask */
	uint64_t ecc_corrected, ecc_uncorrected; /* lifetime (aggregate) totals */
} bd_nvml_gpu;

/* What the sampler knows now. */
typedef struct bd_nvml_snapshot {
	bool available;           /* NVML loaded and initialised */
	char reason[256];         /* why not, when !available */
	unsigned interval_s;      /* seconds between samples */
	uint64_t samples;         /* taken since start */
	uint64_t sample_ns;       /* how long the last one took, every device */
	int ngpus;
	bd_nvml_gpu gpu[BD_NVML_MAX_DEVICES];
} bd_nvml_snapshot;

/*
 * Load NVML, find its devices, match them to cuda's by UUID, take the
 * first sample, and start the thread that samples every interval_s
 * seconds (0: no telemetry, NVML is not loaded). A machine without NVML
 * is not an error: the snapshot says why (logged at info).
 * @return 0 (available or not), or -errno when the thread cannot start
 * (logged; the snapshot says so too).
 */
int bd_nvml_start(const bd_cuda_state *cuda, unsigned interval_s);
/* Sample every interval_s seconds from now on (1.. : a reload changed it; 0 keeps the old). */
void bd_nvml_set_interval(unsigned interval_s);
/* A copy of the latest figures. Never blocks on NVML: the sampler copies in under a lock. */
void bd_nvml_read(bd_nvml_snapshot *ret);
/* Stop the thread, shut NVML down and unload it. Safe when never started, and twice. */
void bd_nvml_stop(void);
/* "sw_power_cap" for bit 2 and so on; NULL for a bit NVML does not define (yet). */
const char *bd_nvml_throttle_name(int bit);

#endif

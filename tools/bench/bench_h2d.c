/* SPDX-License-Identifier: MIT */
/*
 * bench_h2d.c - `batchd-bench h2d`: host-to-device copy bandwidth from
 * pinned, registered and pageable host memory.
 *
 * Why: batchd stages batches in memory it registers with CUDA so that the
 * copy to the GPU runs at the link's speed; this mode shows what that buys
 * on this machine (PCIe generation, NUMA placement) against a trainer that
 * copies from ordinary pageable memory. Three sources of the same size:
 * cudaMallocHost (pinned), a MAP_SHARED memfd mapping + cudaHostRegister
 * (what batchd does with a session's staging arena, which lives in the
 * memfd it shares with the trainer: a shared file mapping is registered
 * differently by the driver than anonymous memory, so only that case
 * measures batchd's own staging) and plain malloc (pageable). Each copy is
 * one cudaMemcpyAsync on a stream, timed with CUDA events around it.
 *
 * Without CUDA (not built with it, no driver, no device) it says why and
 * exits 77, the "cannot run here" status tests and scripts skip on.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "batchd-build.h"
#include "bench.h"
#include "cli.h"
#include "cuda_probe.h"
#include "units.h"

#define H2D_SKIP 77

typedef struct h2d_opts {
	uint64_t size;
	unsigned reps;
	int device;
	bool json;
} h2d_opts;

#if BATCHD_HAVE_CUDA
#include <cuda_runtime_api.h>

typedef struct h2d_result {
	const char *name, *how;
	bool ok;
	char why[160];           /* when !ok */
	double mean_ms, best_ms;
} h2d_result;

#define CK(call)                                                                        \
	do {                                                                            \
		cudaError_t e_ = (call);                                                \
		if (e_ != cudaSuccess) {                                                \
			fprintf(stderr, "batchd-bench: h2d: %s: %s\n", #call,           \
				cudaGetErrorString(e_));                                \
			return -EIO;                                                    \
		}                                                                       \
	} while (0)

/* Times o->reps copies of host -> dev after one warm-up copy. */
static int time_copies(const h2d_opts *o, void *dev, const void *host, cudaStream_t st,
		       h2d_result *res)
{
	cudaEvent_t a, b;
	double total = 0;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaMemcpyAsync(dev, host, o->size, cudaMemcpyHostToDevice, st));
	CK(cudaStreamSynchronize(st));
	res->best_ms = 1e300;
	for (unsigned i = 0; i < o->reps; i++) {
		float ms;

		CK(cudaEventRecord(a, st));
		CK(cudaMemcpyAsync(dev, host, o->size, cudaMemcpyHostToDevice, st));
		CK(cudaEventRecord(b, st));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		total += ms;
		if (ms < res->best_ms)
			res->best_ms = ms;
	}
	res->mean_ms = total / o->reps;
	res->ok = true;
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return 0;
}

static double gbps(const h2d_opts *o, double ms)
{
	return ms > 0 ? (double)o->size / (ms / 1e3) / 1e9 : 0;
}

static void print_results(const h2d_opts *o, const char *dev_name, const bd_cuda_state *cs,
			  const h2d_result *r, size_t n)
{
	char sz[32];
	double ratio = r[2].ok && r[0].ok && r[0].mean_ms > 0 ? r[2].mean_ms / r[0].mean_ms : 0;

	if (o->json) {
		printf("{\"mode\": \"h2d\", \"device\": %d, \"name\": ", o->device);
		bench_json_string(stdout, dev_name);
		printf(", \"driver_version\": %d, \"runtime_version\": %d, \"size\": %" PRIu64
		       ", \"reps\": %u", cs->driver_version, cs->runtime_version, o->size, o->reps);
		for (size_t i = 0; i < n; i++) {
			printf(", \"%s\": ", r[i].name);
			if (!r[i].ok) {
				fputs("{\"error\": ", stdout);
				bench_json_string(stdout, r[i].why);
				fputs("}", stdout);
				continue;
			}
			printf("{\"bw_bytes\": %.0f, \"best_bw_bytes\": %.0f, \"mean_ms\": %.4f, "
			       "\"best_ms\": %.4f}", gbps(o, r[i].mean_ms) * 1e9,
			       gbps(o, r[i].best_ms) * 1e9, r[i].mean_ms, r[i].best_ms);
		}
		printf(", \"pinned_over_pageable\": %.3f}\n", ratio);
		return;
	}
	printf("h2d: device %d, %s, %s per copy, %u copies\n", o->device, dev_name,
	       bp_format_size(o->size, sz, sizeof(sz)), o->reps);
	for (size_t i = 0; i < n; i++) {
		if (r[i].ok)
			printf("  %-11s %-28s %7.2f GB/s (best %.2f)\n", r[i].name, r[i].how,
			       gbps(o, r[i].mean_ms), gbps(o, r[i].best_ms));
		else
			printf("  %-11s %-28s n/a: %s\n", r[i].name, r[i].how, r[i].why);
	}
	if (ratio > 0)
		printf("  pinned is %.2fx pageable\n", ratio);
}

/*
 * A MAP_SHARED mapping of a new memfd of `size` bytes, as batchd maps a
 * session's data memfd. @return it, or NULL with errno set.
 */
static void *shared_memfd(uint64_t size)
{
	int fd = memfd_create("batchd-bench-h2d", MFD_CLOEXEC);
	void *p = MAP_FAILED;

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* The registered case: o->size of shared memfd memory, registered, timed. */
static int time_registered(const h2d_opts *o, void *dev, void *reg, cudaStream_t st,
			   h2d_result *r)
{
	cudaError_t e = cudaHostRegister(reg, o->size, cudaHostRegisterDefault);
	int rc;

	if (e != cudaSuccess) {
		snprintf(r->why, sizeof(r->why), "cudaHostRegister: %s (CUDA error %d)",
			 cudaGetErrorString(e), (int)e);
		(void)cudaGetLastError();   /* not sticky: clear it */
		return 0;
	}
	rc = time_copies(o, dev, reg, st, r);
	cudaHostUnregister(reg);
	return rc;
}

static int run_h2d(const h2d_opts *o, const bd_cuda_state *cs)
{
	h2d_result r[3] = {
		{ .name = "pinned", .how = "(cudaMallocHost)" },
		{ .name = "registered", .how = "(shared memfd + cudaHostRegister)" },
		{ .name = "pageable", .how = "(malloc)" },
	};
	struct cudaDeviceProp prop;
	void *dev = NULL, *pinned = NULL, *reg = NULL, *pageable = NULL;
	cudaStream_t st;
	int rc = -EIO;

	CK(cudaSetDevice(o->device));
	CK(cudaGetDeviceProperties(&prop, o->device));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	if (cudaMalloc(&dev, o->size) != cudaSuccess ||
	    cudaMallocHost(&pinned, o->size) != cudaSuccess ||
	    !(reg = shared_memfd(o->size)) ||
	    posix_memalign(&pageable, 4096, o->size) != 0) {
		fprintf(stderr, "batchd-bench: h2d: cannot allocate %" PRIu64 " bytes\n", o->size);
		goto out;
	}
	/* Touch every page so that no copy pays for first faults. */
	memset(pinned, 1, o->size);
	memset(reg, 2, o->size);
	memset(pageable, 3, o->size);

	if (time_copies(o, dev, pinned, st, &r[0]) < 0 ||
	    time_registered(o, dev, reg, st, &r[1]) < 0 ||
	    time_copies(o, dev, pageable, st, &r[2]) < 0)
		goto out;
	print_results(o, prop.name, cs, r, 3);
	rc = 0;
out:
	cudaFree(dev);
	cudaFreeHost(pinned);
	if (reg)
		munmap(reg, o->size);
	free(pageable);
	cudaStreamDestroy(st);
	return rc;
}
#endif

int bench_cmd_h2d(int argc, char **argv)
{
	enum { O_SIZE = 256, O_REPS, O_DEVICE, O_JSON };
	static const struct option opts[] = {
		{ "size", required_argument, NULL, O_SIZE },
		{ "reps", required_argument, NULL, O_REPS },
		{ "device", required_argument, NULL, O_DEVICE },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	h2d_opts o = { .size = UINT64_C(256) << 20, .reps = 20 };
	bd_cuda_state cs;
	uint64_t v;
	int ch;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:", opts, NULL)) != -1) {
		switch (ch) {
		case 1:
			return cli_usage("h2d: unexpected argument '%s'", optarg);
		case O_SIZE:
			if (bp_parse_size(optarg, &v) < 0 || v == 0 || v > (UINT64_C(64) << 30))
				return cli_usage("--size: '%s' is not a size from 1 byte to 64 GiB (" BP_SIZE_FORMS ")", optarg);
			o.size = v;
			break;
		case O_REPS:
			if (cli_parse_u64(optarg, &v) < 0 || v == 0 || v > 100000)
				return cli_usage("--reps: '%s' is not a number from 1 to 100000", optarg);
			o.reps = (unsigned)v;
			break;
		case O_DEVICE:
			if (cli_parse_u64(optarg, &v) < 0 || v > 1024)
				return cli_usage("--device: '%s' is not a device number", optarg);
			o.device = (int)v;
			break;
		case O_JSON:
			o.json = true;
			break;
		case ':':
			return cli_usage("h2d: '%s' needs a value", argv[optind - 1]);
		default:
			return cli_usage("h2d: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (bd_cuda_probe(&cs) < 0) {
		fprintf(stderr, "batchd-bench: h2d: CUDA unavailable: %s\n", cs.reason);
		return H2D_SKIP;
	}
#if BATCHD_HAVE_CUDA
	if (o.device >= cs.devices) {
		fprintf(stderr, "batchd-bench: h2d: --device %d: this machine has %d device%s\n",
			o.device, cs.devices, cs.devices == 1 ? "" : "s");
		return 1;
	}
	return run_h2d(&o, &cs) < 0 ? 1 : 0;
#else
	(void)o;           /* parsed, so usage errors are caught the same way */
	return H2D_SKIP;   /* not reached: the probe of a build without CUDA fails */
#endif
}

/* SPDX-License-Identifier: MIT */
/*
 * nvml.c - the NVML sampler (see nvml.h).
 *
 * NVML is loaded with dlopen and its dozen entry points resolved by name;
 * the few types and constants they take are declared below from the NVML
 * API reference, so building batchd needs no NVIDIA header or library.
 *
 * Why a thread of its own, not a uv timer on the loop: an NVML query is a
 * driver round trip, tens of microseconds on a healthy device, but
 * milliseconds when the driver is not kept loaded (no persistence mode)
 * and seconds on a device falling off the bus, and a sample is about eight
 * queries per device. None of that may stall the loop thread, which
 * serves every client's requests. libuv's thread pool would keep it off
 * the loop, but that pool also runs session opens, and a hung NVML call
 * there would hold one of its few workers. So one small thread sleeps on
 * a condition variable, samples every [metrics] gpu_interval seconds into
 * its own copy, and swaps the figures in under a mutex; the loop thread
 * only copies them out for a status or a scrape. Loading, nvmlInit and
 * the first sample happen at start, before batchd serves, as the CUDA
 * probe does, so the first status already has figures.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "log.h"
#include "nvml.h"
#include "protocol.h"
#include "util.h"

/* ---- the NVML API, as its reference declares it ---- */

typedef int nvml_return;                     /* nvmlReturn_t */
typedef struct nvml_device_st *nvml_device;  /* nvmlDevice_t, opaque */

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_TEMPERATURE_GPU 0                /* nvmlTemperatureSensors_t */
#define NVML_MEMORY_ERROR_TYPE_CORRECTED 0    /* nvmlMemoryErrorType_t */
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_AGGREGATE_ECC 1                  /* nvmlEccCounterType_t: the device's lifetime */
#define NVML_BUFFER 96                        /* NVML_DEVICE_{UUID,NAME}_V2_BUFFER_SIZE */

struct nvml_utilization {                     /* nvmlUtilization_t */
	unsigned int gpu;
	unsigned int memory;
};

struct nvml_memory {                          /* nvmlMemory_t */
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};

struct api {
	nvml_return (*init)(void);
	nvml_return (*shutdown)(void);
	const char *(*error_string)(nvml_return r);
	nvml_return (*count)(unsigned int *n);
	nvml_return (*handle)(unsigned int index, nvml_device *d);
	nvml_return (*uuid)(nvml_device d, char *buf, unsigned int len);
	nvml_return (*name)(nvml_device d, char *buf, unsigned int len);
	nvml_return (*utilization)(nvml_device d, struct nvml_utilization *u);
	nvml_return (*memory)(nvml_device d, struct nvml_memory *m);
	nvml_return (*temperature)(nvml_device d, int sensor, unsigned int *c);
	nvml_return (*power)(nvml_device d, unsigned int *mw);
	nvml_return (*throttle)(nvml_device d, unsigned long long *mask);
	/* NULL where the driver lacks it: no ECC figures. */
	nvml_return (*ecc)(nvml_device d, int type, int counter, unsigned long long *n);
};

/* Entry points batchd cannot do without, and where in struct api each goes. */
static const struct sym {
	const char *name;
	size_t off;
} required[] = {
	{ "nvmlInit_v2", offsetof(struct api, init) },
	{ "nvmlShutdown", offsetof(struct api, shutdown) },
	{ "nvmlErrorString", offsetof(struct api, error_string) },
	{ "nvmlDeviceGetCount_v2", offsetof(struct api, count) },
	{ "nvmlDeviceGetHandleByIndex_v2", offsetof(struct api, handle) },
	{ "nvmlDeviceGetUUID", offsetof(struct api, uuid) },
	{ "nvmlDeviceGetName", offsetof(struct api, name) },
	{ "nvmlDeviceGetUtilizationRates", offsetof(struct api, utilization) },
	{ "nvmlDeviceGetMemoryInfo", offsetof(struct api, memory) },
	{ "nvmlDeviceGetTemperature", offsetof(struct api, temperature) },
	{ "nvmlDeviceGetPowerUsage", offsetof(struct api, power) },
};

static const char *const throttle_names[BD_NVML_THROTTLE_BITS] = {
	"gpu_idle",                    /* 0x001 */
	"applications_clocks_setting", /* 0x002 */
	"sw_power_cap",                /* 0x004 */
	"hw_slowdown",                 /* 0x008 */
	"sync_boost",                  /* 0x010 */
	"sw_thermal_slowdown",         /* 0x020 */
	"hw_thermal_slowdown",         /* 0x040 */
	"hw_power_brake_slowdown",     /* 0x080 */
	"display_clock_setting",       /* 0x100 */
};

/* ---- the sampler ---- */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool running;            /* the thread was started (loop thread) */
	bool inited;             /* nvmlInit succeeded: nvmlShutdown owed */
	bool stop;               /* under lock */
	unsigned interval_s;     /* under lock */
	void *dl;
	struct api api;
	int ndev;
	nvml_device dev[BD_NVML_MAX_DEVICES];
	bd_nvml_snapshot work;   /* the sampler's (the loop thread's until it starts) */
	bd_nvml_snapshot snap;   /* under lock */
} S = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

const char *bd_nvml_throttle_name(int bit)
{
	return bit >= 0 && bit < BD_NVML_THROTTLE_BITS ? throttle_names[bit] : NULL;
}

static const char *nvml_error(nvml_return r)
{
	const char *s = S.api.error_string ? S.api.error_string(r) : NULL;

	return s ? s : "unknown error";
}

/* dlopen and dlsym. @return 0, or -ENOENT with why in S.work.reason. */
static int load(void)
{
	const char *path = secure_getenv("BATCHD_NVML_LIBRARY");
	char *why = S.work.reason;
	size_t wl = sizeof(S.work.reason);

	if (!path || !*path)
		path = "libnvidia-ml.so.1";
	S.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!S.dl) {
		const char *e = dlerror();

		/* Absent is the common case; anything else (a broken install) says what broke. */
		if (!e || strstr(e, "No such file"))
			snprintf(why, wl, "%s not found: no NVIDIA driver", path);
		else
			snprintf(why, wl, "cannot load %.100s: %.140s", path, e);
		return -ENOENT;
	}
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		void *f = dlsym(S.dl, required[i].name);

		if (!f) {
			snprintf(why, wl, "%s lacks %s: the NVIDIA driver is too old", path,
				 required[i].name);
			return -ENOENT;
		}
		memcpy((char *)&S.api + required[i].off, &f, sizeof(f));
	}
	/* Renamed in R535 ("event" reasons); the bits are the same. */
	*(void **)&S.api.throttle = dlsym(S.dl, "nvmlDeviceGetCurrentClocksEventReasons");
	if (!S.api.throttle)
		*(void **)&S.api.throttle = dlsym(S.dl, "nvmlDeviceGetCurrentClocksThrottleReasons");
	*(void **)&S.api.ecc = dlsym(S.dl, "nvmlDeviceGetTotalEccErrors");
	return 0;
}

/* The CUDA ordinal of the device whose UUID is text (NVML's), or -1. */
static int cuda_ordinal(const bd_cuda_state *cuda, const char *text)
{
	for (int i = 0; i < cuda->devices; i++) {
		char u[48];

		if (!strcasecmp(bp_cuda_uuid_str(cuda->dev[i].uuid, u, sizeof(u)), text))
			return i;
	}
	return -1;
}

/* nvmlInit and the devices' handles, UUIDs and names. @return 0, or -ENODEV with why. */
static int enumerate(const bd_cuda_state *cuda)
{
	bd_nvml_snapshot *w = &S.work;
	unsigned int n = 0;
	nvml_return r;

	r = S.api.init();
	if (r != NVML_SUCCESS) {
		snprintf(w->reason, sizeof(w->reason), "nvmlInit failed: %s (NVML error %d)",
			 nvml_error(r), r);
		return -ENODEV;
	}
	S.inited = true;
	r = S.api.count(&n);
	if (r != NVML_SUCCESS) {
		snprintf(w->reason, sizeof(w->reason), "nvmlDeviceGetCount failed: %s (NVML error %d)",
			 nvml_error(r), r);
		return -ENODEV;
	}
	for (unsigned int i = 0; i < n && S.ndev < BD_NVML_MAX_DEVICES; i++) {
		bd_nvml_gpu *g = &w->gpu[S.ndev];

		/* A device NVML cannot open (lost, or no permission) is left out, and said so. */
		r = S.api.handle(i, &S.dev[S.ndev]);
		if (r == NVML_SUCCESS)
			r = S.api.uuid(S.dev[S.ndev], g->uuid, sizeof(g->uuid));
		if (r != NVML_SUCCESS) {
			bd_log(LOG_WARNING, "NVML: device %u left out: %s (NVML error %d)", i,
			       nvml_error(r), r);
			continue;
		}
		g->uuid[sizeof(g->uuid) - 1] = '\0';
		if (S.api.name(S.dev[S.ndev], g->name, sizeof(g->name)) != NVML_SUCCESS)
			snprintf(g->name, sizeof(g->name), "NVIDIA device %u", i);
		g->name[sizeof(g->name) - 1] = '\0';
		g->index = (int)i;
		g->ordinal = cuda_ordinal(cuda, g->uuid);
		S.ndev++;
	}
	w->ngpus = S.ndev;
	w->available = true;
	return 0;
}

/* Both ECC totals, or none: a device without ECC (or with it off) says NOT_SUPPORTED. */
static bool sample_ecc(nvml_device d, bd_nvml_gpu *g)
{
	unsigned long long c = 0, u = 0;

	if (!S.api.ecc ||
	    S.api.ecc(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, &c) != NVML_SUCCESS ||
	    S.api.ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &u) != NVML_SUCCESS)
		return false;
	g->ecc_corrected = c;
	g->ecc_uncorrected = u;
	return true;
}

/*
 * One device's figures. A query that fails leaves its figure out (has_*
 * false) rather than report a zero the device never said; NOT_SUPPORTED
 * is the common case (no power sensor on some boards, no ECC on most
 * consumer ones).
 */
static void sample_device(nvml_device d, bd_nvml_gpu *g)
{
	struct nvml_utilization u;
	struct nvml_memory m;
	unsigned long long mask = 0;
	unsigned int v = 0;

	g->has_util = S.api.utilization(d, &u) == NVML_SUCCESS;
	if (g->has_util) {
		g->util_gpu = u.gpu;
		g->util_memory = u.memory;
	}
	g->has_memory = S.api.memory(d, &m) == NVML_SUCCESS;
	if (g->has_memory) {
		g->memory_used = m.used;
		g->memory_total = m.total;
	}
	g->has_temperature = S.api.temperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS;
	g->temperature = g->has_temperature ? v : 0;
	g->has_power = S.api.power(d, &v) == NVML_SUCCESS;
	g->power_mw = g->has_power ? v : 0;
	g->has_throttle = S.api.throttle && S.api.throttle(d, &mask) == NVML_SUCCESS;
	g->throttle = g->has_throttle ? mask : 0;
	g->has_ecc = sample_ecc(d, g);
}

/* Sample every device into S.work, then publish it. */
static void sample_all(void)
{
	uint64_t t0 = bd_now_ns();

	for (int i = 0; i < S.ndev; i++)
		sample_device(S.dev[i], &S.work.gpu[i]);
	S.work.sample_ns = bd_now_ns() - t0;
	S.work.samples++;
	pthread_mutex_lock(&S.lock);
	S.work.interval_s = S.interval_s;
	S.snap = S.work;
	pthread_mutex_unlock(&S.lock);
}

/* The deadline interval_s seconds after now, on the condition variable's clock. */
static struct timespec deadline_after(unsigned interval_s)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += interval_s;
	return ts;
}

static void *sampler(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&S.lock);
	while (!S.stop) {
		struct timespec until = deadline_after(S.interval_s);
		unsigned was = S.interval_s;
		int r = 0;

		while (!S.stop && r != ETIMEDOUT && S.interval_s == was)
			r = pthread_cond_timedwait(&S.wake, &S.lock, &until);
		if (S.stop)
			break;
		if (r != ETIMEDOUT)
			continue;   /* the interval changed: wait the new one from now */
		pthread_mutex_unlock(&S.lock);
		sample_all();
		pthread_mutex_lock(&S.lock);
	}
	pthread_mutex_unlock(&S.lock);
	return NULL;
}

/* Publish S.work as it is (NVML unavailable, or the first sample). */
static void publish(void)
{
	pthread_mutex_lock(&S.lock);
	S.snap = S.work;
	pthread_mutex_unlock(&S.lock);
}

static int start_thread(void)
{
	pthread_condattr_t ca;
	int r;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	r = pthread_cond_init(&S.wake, &ca);
	pthread_condattr_destroy(&ca);
	if (r)
		return -r;
	r = pthread_create(&S.thread, NULL, sampler, NULL);
	if (r) {
		pthread_cond_destroy(&S.wake);
		return -r;
	}
	S.running = true;
	return 0;
}

int bd_nvml_start(const bd_cuda_state *cuda, unsigned interval_s)
{
	int r;

	memset(&S.work, 0, sizeof(S.work));
	S.work.interval_s = S.interval_s = interval_s;
	S.stop = false;
	if (!interval_s) {
		snprintf(S.work.reason, sizeof(S.work.reason), "[metrics] gpu_interval = 0: off");
		publish();
		return 0;
	}
	if (load() < 0 || enumerate(cuda) < 0) {
		bd_log(LOG_INFO, "no GPU telemetry: %s", S.work.reason);
		S.work.available = false;
		S.work.ngpus = 0;
		publish();
		return 0;
	}
	sample_all();
	bd_log(LOG_INFO, "NVML: %d device%s, sampled every %u s (a sample takes %.3f ms)",
	       S.ndev, S.ndev == 1 ? "" : "s", interval_s, (double)S.work.sample_ns / 1e6);
	r = start_thread();
	if (r < 0) {
		snprintf(S.work.reason, sizeof(S.work.reason), "cannot start the NVML sampler: %s",
			 strerror(-r));
		S.work.available = false;
		S.work.ngpus = 0;
		publish();
		return bd_log_ret(LOG_ERR, r, "no GPU telemetry: %s", S.work.reason);
	}
	return 0;
}

void bd_nvml_set_interval(unsigned interval_s)
{
	/* The thread and NVML come and go with the daemon, not with a reload. */
	if ((interval_s == 0) != (S.interval_s == 0)) {
		bd_log(LOG_WARNING, "reload: [metrics] gpu_interval %s; that takes effect at restart",
		       interval_s ? "turned GPU telemetry on" : "turned GPU telemetry off");
		return;
	}
	if (!S.running)
		return;
	pthread_mutex_lock(&S.lock);
	if (S.interval_s != interval_s) {
		S.interval_s = interval_s;
		S.snap.interval_s = interval_s;
		pthread_cond_signal(&S.wake);
	}
	pthread_mutex_unlock(&S.lock);
}

void bd_nvml_read(bd_nvml_snapshot *ret)
{
	pthread_mutex_lock(&S.lock);
	*ret = S.snap;
	pthread_mutex_unlock(&S.lock);
}

void bd_nvml_stop(void)
{
	if (S.running) {
		pthread_mutex_lock(&S.lock);
		S.stop = true;
		pthread_cond_signal(&S.wake);
		pthread_mutex_unlock(&S.lock);
		pthread_join(S.thread, NULL);
		pthread_cond_destroy(&S.wake);
		S.running = false;
	}
	/* NVML's handles die with nvmlShutdown; the unloaded library must not be called again. */
	if (S.inited)
		S.api.shutdown();
	S.inited = false;
	if (S.dl)
		dlclose(S.dl);
	S.dl = NULL;
	memset(&S.api, 0, sizeof(S.api));
	S.ndev = 0;
	pthread_mutex_lock(&S.lock);
	S.snap.available = false;
	S.snap.ngpus = 0;
	snprintf(S.snap.reason, sizeof(S.snap.reason), "batchd is stopping");
	pthread_mutex_unlock(&S.lock);
}

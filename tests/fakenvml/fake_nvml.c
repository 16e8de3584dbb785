/* SPDX-License-Identifier: MIT */
/*
 * fake_nvml.c - a stand-in NVML (soname libnvidia-ml.so.1), so that
 * batchd's GPU telemetry (daemon/gpu/nvml.c) runs, and is checked figure for
 * figure, on machines without an NVIDIA driver.
 *
 * The devices and their figures come from the file $FAKE_NVML_FILE,
 * read again at every query so a test can change them while the daemon
 * samples: one device a line, in NVML index order, blank lines and
 * lines starting with '#' ignored, FAKE_NVML_MAX_DEVICES at most:
 *
 *   UUID NAME UTIL MEM_UTIL MEM_USED MEM_TOTAL TEMP POWER_MW THROTTLE ECC_C ECC_U
 *
 * NAME has '_' for each space; THROTTLE is a number in any base strtoull
 * reads (0x24); a '-' for POWER_MW, THROTTLE or both ECC fields makes that
 * query answer NVML_ERROR_NOT_SUPPORTED, as a board without the sensor
 * or without ECC does. $FAKE_NVML_INIT_FAIL=N makes nvmlInit_v2 return
 * error N (9: "Driver Not Loaded"), as on a machine whose driver is
 * installed but not running. A file that cannot be read fails nvmlInit
 * with NVML_ERROR_UNKNOWN and says why on stderr.
 *
 * Calls before nvmlInit, after the last nvmlShutdown, or with a handle
 * that is not one of ours answer NVML_ERROR_UNINITIALIZED or
 * NVML_ERROR_INVALID_ARGUMENT, as the real library does, so a daemon that
 * misuses NVML sees the errors it would see there.
 *
 * Thread rules: any thread; the init count is atomic, the file is read
 * into a stack copy per call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

#define FAKE_NVML_MAX_DEVICES 8

/* nvmlReturn_t values (NVML API reference). */
enum {
	SUCCESS = 0,
	ERROR_UNINITIALIZED = 1,
	ERROR_INVALID_ARGUMENT = 2,
	ERROR_NOT_SUPPORTED = 3,
	ERROR_DRIVER_NOT_LOADED = 9,
	ERROR_INSUFFICIENT_SIZE = 7,
	ERROR_UNKNOWN = 999,
};

struct fake_dev {
	char uuid[96];
	char name[96];
	unsigned util, mem_util, temp;
	unsigned long long used, total;
	long long power_mw;            /* -1: not supported */
	long long throttle;            /* -1: not supported */
	long long ecc_c, ecc_u;        /* -1: not supported */
};

/* A handle is the address of one of these: index + 1, never NULL. */
static char handles[FAKE_NVML_MAX_DEVICES];
static int inits;

struct nvml_utilization {
	unsigned int gpu;
	unsigned int memory;
};

struct nvml_memory {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};

/* What the fake exports, as the NVML reference declares it (handles as void *). */
API int nvmlInit_v2(void);
API int nvmlShutdown(void);
API const char *nvmlErrorString(int r);
API int nvmlDeviceGetCount_v2(unsigned int *count);
API int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **ret);
API int nvmlDeviceGetUUID(void *h, char *buf, unsigned int len);
API int nvmlDeviceGetName(void *h, char *buf, unsigned int len);
API int nvmlDeviceGetUtilizationRates(void *h, struct nvml_utilization *u);
API int nvmlDeviceGetMemoryInfo(void *h, struct nvml_memory *m);
API int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *c);
API int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw);
API int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *mask);
API int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *n);

static long long opt(const char *s)
{
	return strcmp(s, "-") ? (long long)strtoull(s, NULL, 0) : -1;
}

/* Parse one device line. @return 1 for a device, 0 for a comment or blank, -1 when malformed. */
static int parse_line(char *line, struct fake_dev *d)
{
	char power[32], thr[32], ec[32], eu[32];
	int n;

	line[strcspn(line, "\n")] = '\0';
	if (!line[strspn(line, " \t")] || line[strspn(line, " \t")] == '#')
		return 0;
	memset(d, 0, sizeof(*d));
	n = sscanf(line, "%95s %95s %u %u %llu %llu %u %31s %31s %31s %31s", d->uuid, d->name,
		   &d->util, &d->mem_util, &d->used, &d->total, &d->temp, power, thr, ec, eu);
	if (n != 11)
		return -1;
	for (char *p = d->name; *p; p++)
		if (*p == '_')
			*p = ' ';
	d->power_mw = opt(power);
	d->throttle = opt(thr);
	d->ecc_c = opt(ec);
	d->ecc_u = opt(eu);
	return 1;
}

/* The devices in $FAKE_NVML_FILE. @return how many, or -1 (said on stderr). */
static int load(struct fake_dev dev[FAKE_NVML_MAX_DEVICES])
{
	const char *path = getenv("FAKE_NVML_FILE");
	char line[512];
	int n = 0, lineno = 0;
	FILE *f;

	if (!path || !(f = fopen(path, "r"))) {
		fprintf(stderr, "fake NVML: cannot read $FAKE_NVML_FILE (%s)\n", path ? path : "unset");
		return -1;
	}
	while (fgets(line, sizeof(line), f) && n < FAKE_NVML_MAX_DEVICES) {
		int r = parse_line(line, &dev[n]);

		lineno++;
		if (r < 0) {
			fprintf(stderr, "fake NVML: %s:%d: want 11 fields\n", path, lineno);
			fclose(f);
			return -1;
		}
		n += r;
	}
	fclose(f);
	return n;
}

/* The device behind handle h, read afresh. @return an nvmlReturn_t. */
static int device(const void *h, struct fake_dev *ret)
{
	struct fake_dev dev[FAKE_NVML_MAX_DEVICES];
	const char *c = h;
	int n;

	if (__atomic_load_n(&inits, __ATOMIC_ACQUIRE) <= 0)
		return ERROR_UNINITIALIZED;
	if (c < handles || c >= handles + FAKE_NVML_MAX_DEVICES)
		return ERROR_INVALID_ARGUMENT;
	n = load(dev);
	if (n < 0)
		return ERROR_UNKNOWN;
	if (c - handles >= n)
		return ERROR_INVALID_ARGUMENT;
	*ret = dev[c - handles];
	return SUCCESS;
}

API int nvmlInit_v2(void)
{
	struct fake_dev dev[FAKE_NVML_MAX_DEVICES];
	const char *fail = getenv("FAKE_NVML_INIT_FAIL");

	if (fail && *fail)
		return atoi(fail);
	if (load(dev) < 0)
		return ERROR_UNKNOWN;
	__atomic_add_fetch(&inits, 1, __ATOMIC_ACQ_REL);
	return SUCCESS;
}

API int nvmlShutdown(void)
{
	if (__atomic_load_n(&inits, __ATOMIC_ACQUIRE) <= 0)
		return ERROR_UNINITIALIZED;
	__atomic_sub_fetch(&inits, 1, __ATOMIC_ACQ_REL);
	return SUCCESS;
}

API const char *nvmlErrorString(int r)
{
	switch (r) {
	case SUCCESS: return "Success";
	case ERROR_UNINITIALIZED: return "Uninitialized";
	case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case ERROR_NOT_SUPPORTED: return "Not Supported";
	case ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

API int nvmlDeviceGetCount_v2(unsigned int *count)
{
	struct fake_dev dev[FAKE_NVML_MAX_DEVICES];
	int n;

	if (__atomic_load_n(&inits, __ATOMIC_ACQUIRE) <= 0)
		return ERROR_UNINITIALIZED;
	if (!count)
		return ERROR_INVALID_ARGUMENT;
	n = load(dev);
	if (n < 0)
		return ERROR_UNKNOWN;
	*count = (unsigned)n;
	return SUCCESS;
}

API int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **ret)
{
	unsigned int n;
	int r = nvmlDeviceGetCount_v2(&n);

	if (r != SUCCESS)
		return r;
	if (index >= n || !ret)
		return ERROR_INVALID_ARGUMENT;
	*ret = &handles[index];
	return SUCCESS;
}

static int copy_str(const char *s, char *buf, unsigned int len)
{
	if (!buf)
		return ERROR_INVALID_ARGUMENT;
	if (strlen(s) >= len)
		return ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return SUCCESS;
}

API int nvmlDeviceGetUUID(void *h, char *buf, unsigned int len)
{
	struct fake_dev d;
	int r = device(h, &d);

	return r != SUCCESS ? r : copy_str(d.uuid, buf, len);
}

API int nvmlDeviceGetName(void *h, char *buf, unsigned int len)
{
	struct fake_dev d;
	int r = device(h, &d);

	return r != SUCCESS ? r : copy_str(d.name, buf, len);
}

API int nvmlDeviceGetUtilizationRates(void *h, struct nvml_utilization *u)
{
	struct fake_dev d;
	int r = device(h, &d);

	if (r != SUCCESS)
		return r;
	u->gpu = d.util;
	u->memory = d.mem_util;
	return SUCCESS;
}

API int nvmlDeviceGetMemoryInfo(void *h, struct nvml_memory *m)
{
	struct fake_dev d;
	int r = device(h, &d);

	if (r != SUCCESS)
		return r;
	m->total = d.total;
	m->used = d.used;
	m->free = d.total - d.used;
	return SUCCESS;
}

API int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *c)
{
	struct fake_dev d;
	int r = device(h, &d);

	if (r != SUCCESS)
		return r;
	if (sensor != 0)   /* NVML_TEMPERATURE_GPU is the only sensor */
		return ERROR_INVALID_ARGUMENT;
	*c = d.temp;
	return SUCCESS;
}

API int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw)
{
	struct fake_dev d;
	int r = device(h, &d);

	if (r != SUCCESS)
		return r;
	if (d.power_mw < 0)
		return ERROR_NOT_SUPPORTED;
	*mw = (unsigned)d.power_mw;
	return SUCCESS;
}

/* Only the newer name (R535 on): the daemon must find it, or fall back to the older one. */
API int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *mask)
{
	struct fake_dev d;
	int r = device(h, &d);

	if (r != SUCCESS)
		return r;
	if (d.throttle < 0)
		return ERROR_NOT_SUPPORTED;
	*mask = (unsigned long long)d.throttle;
	return SUCCESS;
}

API int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *n)
{
	struct fake_dev d;
	int r = device(h, &d);

	if (r != SUCCESS)
		return r;
	if ((type != 0 && type != 1) || (counter != 0 && counter != 1) || !n)
		return ERROR_INVALID_ARGUMENT;
	if (d.ecc_c < 0 || d.ecc_u < 0)
		return ERROR_NOT_SUPPORTED;
	/* Volatile counts are the aggregate's less one, so a test sees which was asked for. */
	*n = (unsigned long long)(type == 0 ? d.ecc_c : d.ecc_u);
	if (counter == 0 && *n)
		(*n)--;
	return SUCCESS;
}

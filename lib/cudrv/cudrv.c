/* SPDX-License-Identifier: MIT */
/*
 * cudrv.c - resolve the CUDA driver calls at run time (see cudrv.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cudrv.h"

/* The driver ABI the table's prototypes follow: every call here is unchanged since 12.0. */
#define CUDRV_ABI 12000

typedef CUresult (*get_proc_fn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
				CUdriverProcAddressQueryResult *status);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bp_cudrv g_drv;
static const bp_cudrv *g_loaded;
static char g_why[256];

static void load(void)
{
	static const struct {
		const char *name;
		size_t at;
	} syms[] = {
#define SYM(f) { "cu" #f, offsetof(bp_cudrv, f) }
		SYM(Init), SYM(DriverGetVersion), SYM(GetErrorString), SYM(GetErrorName),
		SYM(DeviceGetCount), SYM(DeviceGet), SYM(DeviceGetUuid), SYM(DeviceGetAttribute),
		SYM(DevicePrimaryCtxRetain), SYM(DevicePrimaryCtxRelease), SYM(CtxPushCurrent),
		SYM(CtxPopCurrent), SYM(MemGetAllocationGranularity), SYM(MemCreate),
		SYM(MemRelease), SYM(MemExportToShareableHandle),
		SYM(MemImportFromShareableHandle), SYM(MemAddressReserve), SYM(MemAddressFree),
		SYM(MemMap), SYM(MemUnmap), SYM(MemSetAccess), SYM(IpcOpenEventHandle),
		SYM(EventRecord), SYM(EventQuery), SYM(EventSynchronize), SYM(EventDestroy), SYM(StreamWaitEvent),
		SYM(StreamSynchronize), SYM(MemcpyDtoH),
#undef SYM
	};
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	get_proc_fn get;
	CUresult e;

	if (!lib) {
		const char *msg = dlerror();

		snprintf(g_why, sizeof(g_why), "%s", msg ? msg : "libcuda.so.1 not found");
		return;
	}
	/* cuGetProcAddress_v2 (driver 12.0 and later) returns the ABI version we ask for. */
	/* POSIX's idiom for a function pointer out of dlsym (ISO C has no such cast). */
	*(void **)&get = dlsym(lib, "cuGetProcAddress_v2");
	if (!get) {
		snprintf(g_why, sizeof(g_why), "the CUDA driver is older than 12.0 "
			 "(no cuGetProcAddress_v2 in libcuda.so.1)");
		return; /* lib stays loaded: unloading a driver is never worth it */
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		void *fn = NULL;

		e = get(syms[i].name, &fn, CUDRV_ABI, CU_GET_PROC_ADDRESS_DEFAULT, &st);
		if (e != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
			snprintf(g_why, sizeof(g_why), "the CUDA driver lacks %s (error %d)",
				 syms[i].name, (int)e);
			return;
		}
		memcpy((char *)&g_drv + syms[i].at, &fn, sizeof(fn));
	}
	e = g_drv.Init(0);
	if (e != CUDA_SUCCESS) {
		const char *s = NULL;

		g_drv.GetErrorString(e, &s);
		snprintf(g_why, sizeof(g_why), "cuInit: %s (CUDA error %d)", s ? s : "unknown", (int)e);
		return;
	}
	g_loaded = &g_drv;
}

const bp_cudrv *bp_cudrv_load(char *why, size_t whylen)
{
	pthread_once(&g_once, load);
	if (!g_loaded && why && whylen)
		snprintf(why, whylen, "%s", g_why);
	return g_loaded;
}

const char *bp_cudrv_strerror(const bp_cudrv *d, CUresult e, char *buf, size_t len)
{
	const char *name = NULL, *text = NULL;

	if (d) {
		d->GetErrorName(e, &name);
		d->GetErrorString(e, &text);
	}
	snprintf(buf, len, "%s: %s", name ? name : "CUDA error", text ? text : "unknown");
	return buf;
}

int bp_cudrv_errno(CUresult e)
{
	switch (e) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
		return -ENODEV;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

uint64_t bp_pid_ns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

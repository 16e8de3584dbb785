/* SPDX-License-Identifier: MIT */
/*
 * cuda_probe.h - what the CUDA runtime says about this machine.
 *
 * batchd always builds its CUDA path when the toolkit is present, and
 * decides at run time: with no driver or no device it serves host sessions
 * only and says why (status, logs, and the error a GPU session request
 * gets).
 *
 * Thread rules: bd_cuda_probe on the loop thread at startup; the state is
 * read-only afterwards.
 */
#ifndef BATCHD_DAEMON_CUDA_PROBE_H
#define BATCHD_DAEMON_CUDA_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BD_CUDA_MAX_DEVICES 64

typedef struct bd_cuda_device {
	char name[96];
	uint8_t uuid[16];
	uint64_t memory;         /* total bytes */
	int pci_bus;
	/* GPU sessions export device memory as CUDA VMM allocations to POSIX fds. */
	bool shareable;
	/* Compute mode Prohibited: no process may make a context on it. */
	bool prohibited;
} bd_cuda_device;

typedef struct bd_cuda_state {
	int devices;             /* > 0 when CUDA is usable */
	int driver_version;      /* e.g. 13000, 0 when unknown */
	int runtime_version;
	char reason[256];        /* why devices == 0 */
	bd_cuda_device dev[BD_CUDA_MAX_DEVICES];
} bd_cuda_state;

/*
 * Fill st. @return 0 when at least one device answers and may be used,
 * else -ENODEV with st->reason saying, in words, what is missing and what
 * to do (no driver, an old one, no kernel module, devices hidden by
 * CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES, busy or prohibited by
 * their compute mode), ending with CUDA's error number when it gave one.
 */
int bd_cuda_probe(bd_cuda_state *st);

/*
 * The daemon's ordinal for a GPU session request: the device with `uuid`
 * (the client's view), or, when uuid is all zero, `placement` itself.
 * @return the ordinal, or a negative errno with err saying why:
 * -ENODEV (no such device), -EBUSY (its compute mode is Prohibited),
 * -EOPNOTSUPP (it cannot share memory).
 */
int bd_cuda_pick(const bd_cuda_state *st, const uint8_t uuid[16], int placement, char *err,
		 size_t errlen);

#endif

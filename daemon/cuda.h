/* SPDX-License-Identifier: MIT */
/*
 * cuda.h - what the CUDA runtime says about this machine.
 *
 * batchd always builds its CUDA path when the toolkit is present, and
 * decides at run time: with no driver or no device it serves host sessions
 * only and says why (status, logs, and the error a GPU session request
 * gets).
 *
 * Thread rules: bd_cuda_probe on the loop thread at startup.
 */
#ifndef BATCHD_DAEMON_CUDA_H
#define BATCHD_DAEMON_CUDA_H

typedef struct bd_cuda_state {
	int devices;             /* > 0 when CUDA is usable */
	int driver_version;      /* e.g. 13000, 0 when unknown */
	int runtime_version;
	char reason[256];        /* why devices == 0 */
} bd_cuda_state;

/* Fill st. @return 0 when at least one device answers, else -ENODEV. */
int bd_cuda_probe(bd_cuda_state *st);

#endif

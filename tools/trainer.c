/* SPDX-License-Identifier: MIT */
/*
 * trainer.c - the trainer-side rules batchctl consume and batchd-bench
 * pipeline share (see trainer.h).
 */
#include <errno.h>

#include "cli.h"
#include "protocol.h"
#include "trainer.h"

int trainer_opt_shuffle(const char *arg, bc_stream_opts *so)
{
	enum bp_shuffle m;

	if (bp_shuffle_parse(arg, &m) < 0)
		return cli_usage("--shuffle: '%s' is not none, global or block", arg);
	so->shuffle = (enum bc_shuffle)m;
	return 0;
}

int trainer_opt_device(const char *arg, uint64_t v, bc_stream_opts *so)
{
	if (v > 255)
		return cli_usage("--device: '%s' is not a CUDA device number", arg);
	so->device = (int)v;
	return 0;
}

bool trainer_stream_over(int r)
{
	return r == -ESHUTDOWN || r == -EPIPE || r == -EPROTO || r == -ENOBUFS;
}

bool trainer_last_epoch_done(bc_stream *s, const bc_stream_opts *so, uint64_t ep)
{
	uint64_t e, bi;

	bc_stream_position(s, &e, &bi);
	return bi == 0 && e > so->start_epoch + ep;
}

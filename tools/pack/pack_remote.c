/* SPDX-License-Identifier: MIT */
/*
 * pack_remote.c - batchd-pack's remote flags and the door to its remote
 * module (pack_remote.h): the flags are parsed here, and the module
 * batchd-pack-s3.so (tools/pack/pack_s3.c), which links libcurl, is loaded with
 * dlopen only when a path is remote. Linked in, libcurl and the libraries
 * it brings (TLS, Kerberos, LDAP, IDN: some thirty) would double the start
 * time of every batchd-pack run, and scripts run `cat` and `ls` thousands
 * of times on local packs.
 *
 * The module is looked for beside the executable first (the build tree),
 * then where meson installs it (BATCHD_PACK_S3).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "pack_read.h"
#include "pack_remote.h"
#include "pack_s3.h"
#include "units.h"

int pack_remote_option(pack_remote *r, int c, const char *arg)
{
	switch (c) {
	case O_REMOTE_ENDPOINT:
		r->cfg.endpoint = arg;
		return 0;
	case O_REMOTE_REGION:
		r->cfg.region = arg;
		return 0;
	case O_REMOTE_PROFILE:
		r->cfg.profile = arg;
		return 0;
	case O_REMOTE_ADDRESSING:
		if (!strcmp(arg, "auto"))
			r->cfg.addressing = BP_S3_ADDR_AUTO;
		else if (!strcmp(arg, "path"))
			r->cfg.addressing = BP_S3_ADDR_PATH;
		else if (!strcmp(arg, "virtual"))
			r->cfg.addressing = BP_S3_ADDR_VIRTUAL;
		else
			return cli_usage("--addressing: '%s' is not auto, path or virtual", arg);
		return 0;
	case O_REMOTE_PART_SIZE:
		if (bp_parse_size(arg, &r->part_size) < 0 || r->part_size < (5ull << 20) ||
		    r->part_size > (5ull << 30))
			return cli_usage("--part-size: '%s' is not a size from 5M to 5G ("
					 BP_SIZE_FORMS ")", arg);
		return 0;
	}
	return -1;
}

bool pack_is_remote(const char *s)
{
	return s && (!strncasecmp(s, "s3://", 5) || !strncasecmp(s, "http://", 7) ||
		     !strncasecmp(s, "https://", 8));
}

int pack_remote_check(const pack_remote *r, const char *path)
{
	const bp_s3_config *c = &r->cfg;

	if (pack_is_remote(path))
		return 0;
	if (c->endpoint || c->region || c->profile || c->addressing || r->part_size)
		return cli_usage("--endpoint, --region, --addressing, --profile and --part-size are "
				 "for remote datasets (s3://BUCKET/KEY), not '%s'", path);
	return 0;
}

/* The module, loaded once. @return its table, or NULL (said why). */
static const pack_s3_mod *module(void)
{
	static const pack_s3_mod *mod;
	char exe[PATH_MAX], beside[PATH_MAX + 32] = "";
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const pack_s3_mod *m;
	void *h = NULL;
	char *slash;

	if (mod)
		return mod;
	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/'))) {
			*slash = '\0';
			snprintf(beside, sizeof(beside), "%s/batchd-pack-s3.so", exe);
			if (access(beside, F_OK) == 0)
				h = dlopen(beside, RTLD_NOW | RTLD_LOCAL);
		}
	}
	if (!h && !(h = dlopen(BATCHD_PACK_S3, RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "batchd-pack: remote datasets need the module %s (or one beside "
			"batchd-pack): %s\n", BATCHD_PACK_S3, dlerror());
		return NULL;
	}
	m = dlsym(h, "pack_s3_mod_v1");
	if (!m || m->abi != PACK_S3_ABI) {
		fprintf(stderr, "batchd-pack: the module %s is not of this batchd-pack (abi %u, "
			"not %u): reinstall batchd\n", beside[0] && access(beside, F_OK) == 0
			? beside : BATCHD_PACK_S3, m ? m->abi : 0, PACK_S3_ABI);
		dlclose(h);
		return NULL;
	}
	return mod = m;
}

int pack_remote_create(const char *out, pack_inputs *in, pack_create_opts *o,
		       const pack_remote *rem)
{
	const pack_s3_mod *m = module();
	bool sharded = o->shard_size != 0;
	char tmp[4096], local[4200];
	int r;

	if (!m)
		return -ENOSYS;
	/* Fail on the bucket, the key or the credentials before spending the packing. */
	if ((r = m->prepare(out, sharded, rem)) < 0)
		return r;
	snprintf(tmp, sizeof(tmp), "%s/batchd-pack-XXXXXX", pack_tmp_root());
	if (!mkdtemp(tmp)) {
		r = -errno;
		fprintf(stderr, "batchd-pack: %s: cannot make a temporary directory: %s\n", tmp,
			strerror(errno));
		return r;
	}
	snprintf(local, sizeof(local), "%s/%s", tmp, sharded ? "out" : "out.bpk");
	o->name = out;
	r = pack_create(local, in, o);
	if (r < 0) {
		/* pack_create leaves nothing under its OUT when it fails. */
		rmdir(tmp);
		return r;
	}
	return m->upload(out, tmp, sharded, rem);
}

int pack_remote_open(const char *path, const pack_remote *rem, bool whole, bp_dataset **ret)
{
	const pack_s3_mod *m = module();
	bp_dataset_fault fault = { 0 };
	bool faulted = false;
	int r;

	if (!m)
		return -ENOSYS;
	r = m->open(path, rem, whole, ret, &fault, &faulted);
	if (r < 0 && faulted)
		pack_say_open_fault(path, r, &fault);
	return r;
}

/* SPDX-License-Identifier: MIT */
/*
 * dataset_remote.c - finding a dataset in a bucket (dataset_priv.h,
 * bd__dataset_scan_remote): the location, what lies there, and a shard
 * set whose reads go through the remote cache (remote.h).
 *
 * A bucket has no directories, only keys; a dataset named "x" below a
 * remote s3://b/p is the object p/x when there is one (a one-file
 * dataset, whatever its name), else the *.bpk keys directly below p/x/,
 * in bytewise order as a local directory's entries are: the same names
 * give the same global sample ids wherever a copy lives. Names starting
 * with '.' are skipped (uploaders' temporaries, as local writers'). An
 * open costs one HEAD, or a HEAD and a listing; the listing's sizes and
 * ETags are the version's identity, so a cached version is reused
 * without reading anything else.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset_priv.h"
#include "log.h"
#include "remote.h"
#include "s3.h"
#include "util.h"

/* Most shards a remote dataset may have: as a local one. */
#define MAX_OBJECTS BP_DATASET_MAX_SHARDS

/* Does loc lie under root (the same bucket, and root's key a prefix ending at a '/')? */
static bool beneath(const bp_s3_loc *root, const bp_s3_loc *loc)
{
	size_t n = strlen(root->key);

	if (root->plain != loc->plain)
		return false;
	if (!root->plain && strcmp(root->bucket, loc->bucket))
		return false;
	while (n && root->key[n - 1] == '/')
		n--;
	if (strncmp(root->key, loc->key, n))
		return false;
	if (!root->plain && n == 0)
		return true;
	return loc->key[n] == '/' && loc->key[n + 1] != '\0';
}

/* root joined with the relative name path, parsed. */
static int join(const char *root, const char *path, bp_s3_loc *ret, char *err, size_t errlen)
{
	size_t n = strlen(root);
	char *s;
	int r;

	while (n && root[n - 1] == '/')
		n--;
	while (*path == '/')
		path++;
	if (asprintf(&s, "%.*s/%s", (int)n, root, path) < 0)
		return -ENOMEM;
	r = bp_s3_loc_parse(s, ret, err, errlen);
	free(s);
	return r;
}

static bool is_shard_key(const char *key, const char *prefix)
{
	const char *name = key + strlen(prefix);
	size_t n = strlen(name);

	return n > 4 && name[0] != '.' && !strchr(name, '/') && !strcmp(name + n - 4, ".bpk");
}

static int by_key(const void *a, const void *b)
{
	return strcmp(((const bp_s3_object *)a)->key, ((const bp_s3_object *)b)->key);
}

/*
 * What loc names: one object, or the shards below it. @return 0 with
 * *ret (n >= 1) and *ret_dir; -ENOENT (err says what was looked for);
 * another negative errno with err.
 */
static int list_objects(const bp_s3_loc *loc, bp_s3_object **ret, size_t *ret_n, bool *ret_dir,
			char *err, size_t errlen)
{
	const bp_s3 *s3 = bd_remote_s3();
	bp_s3_error e = { 0 };
	bp_s3_object one = { 0 }, *all = NULL;
	char head[BP_S3_MSG_MAX], *prefix = NULL;
	size_t n = 0, k = 0;
	int r;

	r = bp_s3_head(s3, loc, &one, &e);
	if (r < 0 && r != -ENOENT)
		bd_remote_count_failure();
	if (r == 0) {
		*ret = bd_calloc(1, sizeof(one));
		if (!*ret) {
			free(one.key);
			return -ENOMEM;
		}
		**ret = one;
		*ret_n = 1;
		*ret_dir = false;
		return 0;
	}
	if (r != -ENOENT || loc->plain) {
		snprintf(err, errlen, "%s", e.msg);
		return r;
	}
	/* The HEAD's answer, for the message should there be no shards below either. */
	snprintf(head, sizeof(head), "%s", e.msg);
	if (asprintf(&prefix, "%s%s", loc->key, loc->key[0] && loc->key[strlen(loc->key) - 1] != '/'
		     ? "/" : "") < 0)
		return -ENOMEM;
	r = bp_s3_list(s3, loc->bucket, prefix, MAX_OBJECTS, &all, &n, &e);
	if (r < 0)
		bd_remote_count_failure();
	if (r < 0) {
		snprintf(err, errlen, "%s", e.msg);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (is_shard_key(all[i].key, prefix)) {
			bp_s3_object t = all[k];

			all[k++] = all[i];
			all[i] = t;
		}
	}
	if (k == 0) {
		snprintf(err, errlen, "no *.bpk objects below s3://%s/%s, and %s", loc->bucket, prefix,
			 head);
		r = -ENOENT;
		goto out;
	}
	qsort(all, k, sizeof(*all), by_key);
	for (size_t i = k; i < n; i++)
		free(all[i].key);
	*ret = all;
	*ret_n = k;
	*ret_dir = true;
	all = NULL;
	n = 0;
out:
	bp_s3_objects_free(all, n);
	free(prefix);
	return r;
}

/* The shard set and identity of the objects found, each through its cache object. */
static int make_set(const bp_s3_loc *loc, const char *path, bp_s3_object *obj, size_t n, bool dir,
		    const bd_read_policy *rp, bd__scan *sc, char *err, size_t errlen)
{
	bp_shard_set *set = &sc->set;

	set->count = n;
	set->dir = dir;
	set->read = bd_robj_read;
	set->names = bd_calloc(n, sizeof(*set->names));
	set->fds = bd_calloc(n, sizeof(*set->fds));
	set->read_ctx = bd_calloc(n, sizeof(*set->read_ctx));
	sc->robj = bd_calloc(n, sizeof(*sc->robj));
	sc->disk = bd_calloc(1, sizeof(*sc->disk) + n * sizeof(sc->disk->shards[0]));
	if (!set->names || !set->fds || !set->read_ctx || !sc->robj || !sc->disk)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		set->fds[i] = -1;
	*sc->disk = (struct bd_dataset_disk){ .dir = dir, .remote = true, .direct = rp->direct,
					      .tier = rp->tier, .count = n };
	for (size_t i = 0; i < n; i++) {
		bp_s3_loc oloc = { .plain = loc->plain, .bucket = loc->bucket, .key = obj[i].key };
		const char *base = strrchr(obj[i].key, '/');
		int r = bd_robj_get(&oloc, &obj[i], &sc->robj[i], err, errlen);

		/* The cache's descriptors are all used: unused versions give theirs back first. */
		while (r == -EMFILE && bd__dataset_evict_unused_remote()) {
			err[0] = '\0';
			r = bd_robj_get(&oloc, &obj[i], &sc->robj[i], err, errlen);
		}
		if (r < 0)
			return r;
		sc->nrobj++;
		set->names[i] = strdup(dir ? (base ? base + 1 : obj[i].key) : path);
		set->fds[i] = fcntl(bd_robj_fd(sc->robj[i]), F_DUPFD_CLOEXEC, 0);
		if (!set->names[i] || set->fds[i] < 0)
			return -ENOMEM;
		set->read_ctx[i] = sc->robj[i];
		sc->disk->shards[i] = (bd__shard_id){ .name = set->names[i], .size = obj[i].size,
						     .etag = bd_robj_etag(sc->robj[i]) };
	}
	return 0;
}

/* Scan one location: list it, then the set. */
static int scan_loc(const bp_s3_loc *loc, const char *path, const bd_read_policy *rp,
		    bd__scan *sc, char *err, size_t errlen)
{
	bp_s3_object *obj = NULL;
	size_t n = 0;
	bool dir = false;
	int r;

	*sc = (bd__scan){ 0 };
	r = list_objects(loc, &obj, &n, &dir, err, errlen);
	if (r < 0)
		return r;
	r = asprintf(&sc->place, loc->plain ? "%s%s" : "s3://%s/%s", loc->plain ? "" : loc->bucket,
		     loc->key) < 0 ? -ENOMEM : 0;
	if (r == 0)
		r = make_set(loc, path, obj, n, dir, rp, sc, err, errlen);
	bp_s3_objects_free(obj, n);
	if (r == -ENOMEM && !err[0])
		snprintf(err, errlen, "dataset %s: out of memory", path);
	if (r < 0)
		bd__scan_free(sc);
	return r;
}

int bd__dataset_scan_remote(const char *const *remotes, size_t nremotes, const char *path,
			    const bd_read_policy *rp, bd__scan *sc, char *err, size_t errlen)
{
	bp_s3_loc loc = { 0 }, root = { 0 };
	int r = -ENOENT;

	if (!bd_remote_enabled() || !nremotes) {
		snprintf(err, errlen, "dataset %s: no [datasets] remote is configured: add the bucket "
			 "prefix it lies below to batchd.conf", path);
		return bp_s3_is_remote(path) ? -EACCES : -ENOENT;
	}
	if (bp_s3_is_remote(path)) {
		r = bp_s3_loc_parse(path, &loc, err, errlen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < nremotes && r != 1; i++) {
			if (bp_s3_loc_parse(remotes[i], &root, err, errlen) == 0 && beneath(&root, &loc))
				r = 1;
			bp_s3_loc_free(&root);
		}
		err[0] = '\0';
		if (r != 1) {
			snprintf(err, errlen, "dataset %s: not below any [datasets] remote: add its "
				 "bucket prefix to batchd.conf", path);
			bp_s3_loc_free(&loc);
			return -EACCES;
		}
		r = scan_loc(&loc, path, rp, sc, err, errlen);
		bp_s3_loc_free(&loc);
		goto out;
	}
	/* A name: below each remote in turn, the first that has it. */
	for (size_t i = 0; i < nremotes && r == -ENOENT; i++) {
		err[0] = '\0';
		r = join(remotes[i], path, &loc, err, errlen);
		if (r < 0)
			break;
		r = scan_loc(&loc, path, rp, sc, err, errlen);
		bp_s3_loc_free(&loc);
	}
out:
	if (r < 0 && r != -ENOMEM && strncmp(err, "dataset ", 8)) {
		char why[BP_S3_MSG_MAX + 64];

		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "dataset %s: %s", path, why);
	}
	return r;
}

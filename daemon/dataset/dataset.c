/* SPDX-License-Identifier: MIT */
/*
 * dataset.c - load, cache and share datasets (see dataset.h); finding
 * them under the roots is dataset_path.c's.
 *
 * A dataset is named by a path, but what a session must get is what that
 * path holds when it opens: shards are replaced by rename (rsync, cp -a,
 * tar x) or rewritten in place, and timestamps are put back by the tools
 * that do it. So the cache does not trust the path or its mtime: every open
 * looks at each shard (fstat and its 80-byte footer, no data) and reuses a
 * loaded version only when all of them are the ones it was loaded from;
 * anything else is a new version. Old versions live on only as long as
 * the sessions reading them, so replaced files do not stay open (and their
 * disk space allocated) until the daemon exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "remote.h"
#include "pack_fields.h"
#include "dataset_priv.h"
#include "protocol.h"
#include "io.h"
#include "fault.h"
#include "log.h"
#include "util.h"

/* ---- what is on disk now ------------------------------------------------------------------ */

static void put_objects(struct bd_robj **robj, size_t n)
{
	for (size_t i = 0; robj && i < n; i++)
		bd_robj_put(robj[i]);
	free(robj);
}

void bd__scan_free(bd__scan *sc)
{
	/* The shards' descriptors first: each object counts its copy until put (remote.h). */
	bp_shard_set_close(&sc->set);
	put_objects(sc->robj, sc->nrobj);
	free(sc->disk);
	free(sc->place);
}

static bool same_shard(const bd__shard_id *a, const bd__shard_id *b, bool dir)
{
	if (a->etag || b->etag)
		return a->etag && b->etag && !strcmp(a->name, b->name) && a->size == b->size &&
		       !strcmp(a->etag, b->etag);
	/* A one-file dataset's shard is named by whatever path the client gave. */
	return (!dir || !strcmp(a->name, b->name)) && a->dev == b->dev && a->ino == b->ino &&
	       a->size == b->size && a->ctime_ns == b->ctime_ns && a->have_footer &&
	       b->have_footer && !memcmp(a->footer, b->footer, sizeof(a->footer));
}

static bool same_disk(const struct bd_dataset_disk *a, const struct bd_dataset_disk *b)
{
	if (a->dev != b->dev || a->ino != b->ino || a->dir != b->dir || a->direct != b->direct ||
	    a->tier != b->tier || a->remote != b->remote ||
	    a->count != b->count)
		return false;
	for (size_t i = 0; i < a->count; i++)
		if (!same_shard(&a->shards[i], &b->shards[i], a->dir))
			return false;
	return true;
}

/* Who each shard of the set is: fstat, then the footer (a failed read just never matches). */
static int identify(bd__scan *sc, const struct stat *top, const bd_read_policy *rp)
{
	size_t n = sc->set.count;
	struct bd_dataset_disk *disk = bd_calloc(1, sizeof(*disk) + n * sizeof(disk->shards[0]));

	if (!disk)
		return -ENOMEM;
	*disk = (struct bd_dataset_disk){ .dev = top->st_dev, .ino = top->st_ino,
					  .dir = sc->set.dir, .direct = rp->direct, .tier = rp->tier,
					  .count = n };
	for (size_t i = 0; i < n; i++) {
		bd__shard_id *id = &disk->shards[i];
		struct stat st;

		if (fstat(sc->set.fds[i], &st) < 0) {
			int r = -errno;

			free(disk);
			return r;
		}
		id->name = sc->set.names[i];
		id->dev = st.st_dev;
		id->ino = st.st_ino;
		id->size = (uint64_t)st.st_size;
		id->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
		/* After the fstat: a change from here on shows as another ctime next time. */
		id->have_footer = id->size >= BP_PACK_FOOTER_SIZE &&
				  bp_pread_full(sc->set.fds[i], id->footer, sizeof(id->footer),
						id->size - BP_PACK_FOOTER_SIZE) == 0;
	}
	sc->disk = disk;
	return 0;
}

static const char *file_kind(mode_t mode)
{
	return S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
	       : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket"
	       : S_ISDIR(mode) ? "a directory" : S_ISLNK(mode) ? "a symbolic link"
	       : "not a regular file";
}

/* Why the shards of path (open as dirfd) could not be had, into err. */
static void set_refusal(int dirfd, bool dir, const char *path, int r,
			const bp_dataset_fault *fault, char *err, size_t errlen)
{
	struct stat st;
	char msg[512];

	if (dir && (r == -EINVAL || r == -ELOOP) && fault->shard[0] &&
	    fstatat(dirfd, fault->shard, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "dataset %s: %s is %s, not a regular file: every *.bpk "
			 "entry of a dataset directory must be a pack (remove it, or rename it so "
			 "that it does not end in .bpk)", path, fault->shard, file_kind(st.st_mode));
	} else if (fault->pack.what) {
		bp_dataset_fault_format(fault, msg, sizeof(msg));
		snprintf(err, errlen, "dataset %s: %s", path, msg);
	} else {
		snprintf(err, errlen, "dataset %s: %s", path, strerror(-r));
	}
}

/* Resolve path, open its shards and identify them: all an open costs when cached. */
static int scan_open(const char *const *roots, size_t nroots, const char *path,
		     const bd_read_policy *rp, bd__scan *sc, char *err, size_t errlen)
{
	bp_dataset_fault fault = { 0 };
	struct stat st;
	int fd, r;

	*sc = (bd__scan){ 0 };
	fd = bd__dataset_open_top(roots, nroots, path, &st, &sc->place, err, errlen);
	if (fd < 0)
		return fd;
	r = bp_shard_set_open(fd, path, &sc->set, &fault);
	if (r < 0)
		set_refusal(fd, S_ISDIR(st.st_mode), path, r, &fault, err, errlen);
	close(fd);
	if (r == 0)
		r = identify(sc, &st, rp);
	if (r < 0) {
		if (!err[0])
			snprintf(err, errlen, "dataset %s: %s", path, strerror(-r));
		bd__scan_free(sc);
	}
	return r;
}

/* ---- loading ------------------------------------------------------------------------------ */

static uint64_t next_uid;

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Keep the BD_TOPK largest sample sizes (min-heap), then prefix-sum them. */
static void compute_topk(bd_dataset *d)
{
	uint64_t heap[BD_TOPK];
	uint32_t n = 0;

	for (size_t s = 0; s < bp_dataset_shard_count(d->ds); s++) {
		const bp_shard *sh = bp_dataset_shard(d->ds, s);

		for (uint64_t i = 0; i < sh->footer.sample_count; i++) {
			uint64_t off, size;
			uint32_t k;

			bp_pack_index_sample_span(&sh->index, i, &off, &size);
			if (n < BD_TOPK) {
				/* sift up */
				for (k = n++; k && heap[(k - 1) / 2] > size; k = (k - 1) / 2)
					heap[k] = heap[(k - 1) / 2];
				heap[k] = size;
			} else if (size > heap[0]) {
				/* replace the minimum, sift down */
				for (k = 0;;) {
					uint32_t c = 2 * k + 1;

					if (c >= n)
						break;
					if (c + 1 < n && heap[c + 1] < heap[c])
						c++;
					if (heap[c] >= size)
						break;
					heap[k] = heap[c];
					k = c;
				}
				heap[k] = size;
			}
		}
	}
	qsort(heap, n, sizeof(heap[0]), cmp_desc);
	d->topk = n;
	d->top_prefix[0] = 0;
	for (uint32_t i = 0; i < n; i++)
		d->top_prefix[i + 1] = d->top_prefix[i] + heap[i];
}

uint64_t bd_dataset_batch_bound(const bd_dataset *d, uint32_t n)
{
	uint64_t smallest_kept;

	if (n <= d->topk)
		return d->top_prefix[n];
	/* Samples beyond the k largest are no larger than the k-th. */
	smallest_kept = d->top_prefix[d->topk] - d->top_prefix[d->topk - 1];
	return d->top_prefix[d->topk] + (uint64_t)(n - d->topk) * smallest_kept;
}

/*
 * Give each shard a descriptor for block reads: O_DIRECT when wanted and
 * supported (reopened through /proc/self/fd, checked to be the same inode).
 */
static int setup_reads(bd_dataset *d, enum bd_direct_mode direct, char *err, size_t errlen)
{
	size_t n = bp_dataset_shard_count(d->ds);

	d->read_fd = bd_calloc(n, sizeof(*d->read_fd));
	d->align = bd_calloc(n, sizeof(*d->align));
	if (!d->read_fd || !d->align)
		return -ENOMEM;
	d->direct = direct != BD_DIRECT_OFF;
	for (size_t i = 0; i < n; i++) {
		const bp_shard *sh = bp_dataset_shard(d->ds, i);
		struct stat a, b;
		uint32_t mem_align = 0, off_align = 0;
		int fd = -1;

		d->read_fd[i] = -1;
		if (direct != BD_DIRECT_OFF) {
			fd = bd_fault_direct_off() ? -EINVAL
						   : bd__dataset_reopen_fd(sh->fd, O_RDONLY | O_DIRECT);
			/* The message below reads errno, as the checks after this one set it. */
			if (fd < 0)
				errno = -fd;
			if (fd >= 0 && (fstat(fd, &a) < 0 || fstat(sh->fd, &b) < 0 ||
					a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
				close(fd);
				fd = -1;
				errno = ESTALE;
			}
			if (fd >= 0 && bd_io_dio_align(fd, &mem_align, &off_align) < 0) {
				close(fd);
				fd = -1;
			}
			if (fd < 0 && direct == BD_DIRECT_ON) {
				snprintf(err, errlen, "%s: shard %s: O_DIRECT unavailable: %s", d->name,
					 sh->name, strerror(errno));
				return -EOPNOTSUPP;
			}
		}
		if (fd >= 0) {
			d->read_fd[i] = fd;
			d->align[i] = mem_align > off_align ? mem_align : off_align;
			continue;
		}
		d->direct = false;
		d->read_fd[i] = fcntl(sh->fd, F_DUPFD_CLOEXEC, 0);
		if (d->read_fd[i] < 0)
			return -errno;
	}
	return 0;
}

/* ---- tiers -------------------------------------------------------------------------- */

const char *bd_tier_name(enum bd_tier t)
{
	static const char *const names[] = { "auto", "ram", "page", "direct" };

	return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

enum bd_tier bd_tier_choose(const bd_read_policy *p, uint64_t raw, uint64_t stored)
{
	if (p->tier != BD_TIER_AUTO)
		return p->tier;
	if (p->cache_budget && raw <= p->cache_budget)
		return BD_TIER_RAM;
	/* Half: the page cache must keep it while sessions, the cache and trainers take the rest. */
	if (p->memory && stored <= p->memory / 2)
		return BD_TIER_PAGE;
	return BD_TIER_DIRECT;
}

/*
 * Are at least half of d's blocks in the page cache now? mincore over a
 * mapping of each shard up to its index (which loading has just read);
 * nothing is read. A shard that cannot be mapped counts as resident:
 * buffered reads stay the choice when in doubt.
 */
static bool mostly_resident(const bd_dataset *d)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t in = 0, all = 0;

	for (size_t i = 0; i < bp_dataset_shard_count(d->ds); i++) {
		const bp_shard *sh = bp_dataset_shard(d->ds, i);
		size_t len = (size_t)sh->footer.index_offset, pages = (len + (size_t)page - 1) / (size_t)page;
		unsigned char *vec = len ? bd_malloc(pages) : NULL;
		void *map = vec ? mmap(NULL, len, PROT_READ, MAP_SHARED, sh->fd, 0) : MAP_FAILED;

		all += len;
		if (map == MAP_FAILED || mincore(map, len, vec) < 0) {
			in += len;
		} else {
			for (size_t k = 0; k < pages; k++)
				in += (vec[k] & 1) ? (uint64_t)page : 0;
		}
		if (map != MAP_FAILED)
			munmap(map, len);
		free(vec);
	}
	return in >= all / 2;
}

/* Choose d's tier; @return the read mode it asks for ([io] direct = on or off decides alone). */
static enum bd_direct_mode choose_reads(bd_dataset *d, const bd_read_policy *rp)
{
	bd_read_policy p = *rp;
	uint64_t raw = bp_dataset_raw_bytes(d->ds), stored = bp_dataset_stored_bytes(d->ds);

	d->tier = bd_tier_choose(&p, raw, stored);
	/* Only the page-or-direct choice weighs the machine's memory: read it when that is left. */
	if (d->tier == BD_TIER_DIRECT && p.tier == BD_TIER_AUTO && p.memory_now) {
		p.memory = p.memory_now();
		d->tier = bd_tier_choose(&p, raw, stored);
	}
	d->cache_all = d->tier == BD_TIER_RAM;
	if (rp->direct != BD_DIRECT_AUTO)
		return rp->direct;
	/*
	 * The ram tier reads each block once and keeps it decoded: what the
	 * page cache does not hold already is read with O_DIRECT, so that the
	 * first epoch does not fill the page cache with a second copy and pay
	 * for copying out of it.
	 */
	if (d->tier == BD_TIER_RAM)
		return mostly_resident(d) ? BD_DIRECT_OFF : BD_DIRECT_AUTO;
	return d->tier == BD_TIER_DIRECT ? BD_DIRECT_AUTO : BD_DIRECT_OFF;
}

double bd_dataset_amplification(const bd_dataset *d, int shuffle, uint64_t cache)
{
	uint64_t raw = bp_dataset_raw_bytes(d->ds), blocks = bp_dataset_blocks(d->ds);
	double per_block, kept, amp;

	if (shuffle != BP_SHUFFLE_GLOBAL || d->tier == BD_TIER_RAM || !raw || !blocks)
		return 1.0;
	per_block = (double)bp_dataset_samples(d->ds) / (double)blocks;
	kept = cache >= raw ? 1.0 : (double)cache / (double)raw;
	amp = per_block * (1.0 - kept);
	return amp > 1.0 ? amp : 1.0;
}

static void dataset_free(bd_dataset *d)
{
	if (!d)
		return;
	for (size_t i = 0; d->read_fd && i < bp_dataset_shard_count(d->ds); i++)
		if (d->read_fd[i] >= 0)
			close(d->read_fd[i]);
	free(d->read_fd);
	free(d->align);
	bp_dataset_close(d->ds);
	/* After the shards: their reads go through these objects. */
	put_objects(d->robj, d->robj ? d->disk->count : 0);
	free(d->disk);
	free(d->place);
	free(d->name);
	/* Charged once loaded (load): given back with the memory. */
	bd_budget_give(d->budget, BD_BUDGET_DATASETS, d->bytes);
	free(d);
}

/* A remote shard's load failed on a fetch: say what the bucket answered, after err. */
static void remote_refusal(const bd__scan *sc, char *err, size_t errlen)
{
	char why[BP_S3_MSG_MAX];
	size_t n = strlen(err);

	for (size_t i = 0; i < sc->nrobj; i++)
		if (bd_robj_failed(sc->robj[i], why, sizeof(why))) {
			snprintf(err + n, errlen - n, " (%s)", why);
			return;
		}
}

/* Load the scanned shards into a new version; the scan's set, disk and place become its. */
static int load(bd__scan *sc, const char *path, const bd_read_policy *rp, bd_dataset **ret,
		char *err, size_t errlen)
{
	enum bd_direct_mode direct;
	bp_dataset_fault fault = { 0 };
	bd__charge ch = { .rp = rp, .path = path, .when = "read from its shards' footers, before "
		      "loading", .shards = sc->set.count, .err = err, .errlen = errlen };
	bd_dataset *d = bd_calloc(1, sizeof(*d));
	int r;

	if (!d || !(d->name = strdup(path))) {
		free(d);
		snprintf(err, errlen, "dataset %s: out of memory", path);
		return -ENOMEM;
	}
	/* Each part of its memory is charged before the reader allocates it. */
	sc->set.charge = bd__charge_load;
	sc->set.charge_ctx = &ch;
	r = bp_dataset_from_set(&sc->set, &d->ds, &fault);
	if (r < 0 && ch.refused) /* err says why */
		goto fail;
	if (r < 0) {
		set_refusal(-1, false, path, r, &fault, err, errlen);
		remote_refusal(sc, err, errlen);
		goto fail;
	}
	d->disk = sc->disk;
	sc->disk = NULL;
	/* The names moved from the set into the dataset's shards. */
	for (size_t i = 0; i < d->disk->count; i++)
		d->disk->shards[i].name = bp_dataset_shard(d->ds, i)->name;
	d->place = sc->place;
	sc->place = NULL;
	d->robj = sc->robj;
	sc->robj = NULL;
	/*
	 * A remote dataset's cache files are read buffered: a read covers
	 * exactly the chunks it acquired (remote.h), never an aligned margin.
	 */
	direct = choose_reads(d, rp);
	r = setup_reads(d, d->robj ? BD_DIRECT_OFF : direct, err, errlen);
	if (r < 0) {
		if (!err[0])
			snprintf(err, errlen, "dataset %s: %s", path, strerror(-r));
		goto fail;
	}
	r = bd__charge_loaded(d, &ch);
	if (r < 0)
		goto fail;
	compute_topk(d);
	d->samples_per_block = bp_dataset_samples(d->ds) / bp_dataset_blocks(d->ds);
	d->uid = __atomic_add_fetch(&next_uid, 1, __ATOMIC_RELAXED);
	bd_log(LOG_INFO, "dataset %s: %llu samples in %zu shards, %llu MiB decoded, %llu MiB "
	       "stored, %.1f MiB in memory (index and tables): tier %s, %s reads", path,
	       (unsigned long long)bp_dataset_samples(d->ds), bp_dataset_shard_count(d->ds),
	       (unsigned long long)(bp_dataset_raw_bytes(d->ds) >> 20),
	       (unsigned long long)(bp_dataset_stored_bytes(d->ds) >> 20),
	       (double)d->bytes / (1 << 20), bd_tier_name(d->tier),
	       d->direct ? "O_DIRECT" : "buffered");
	*ret = d;
	return 0;
fail:
	dataset_free(d);
	bd__charge_drop(&ch);
	return r;
}

/* ---- the cache ---------------------------------------------------------------------------- */

static struct {
	pthread_mutex_t mu;
	bd_dataset *list;        /* every cached version, newest first */
	uint64_t clock;          /* ticks at each last put: the LRU order */
	uint64_t loaded, freed, evicted;
} cache = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void unlink_version(bd_dataset *d)
{
	for (bd_dataset **p = &cache.list; *p; p = &(*p)->next)
		if (*p == d) {
			*p = d->next;
			break;
		}
	d->cached = false;
}

/* Take d out of the cache onto dead, to be freed once the lock is dropped. */
static void retire(bd_dataset *d, bd_dataset **dead)
{
	if (d->cached)
		unlink_version(d);
	d->next = *dead;
	*dead = d;
	cache.freed++;
}

static void free_dead(bd_dataset *dead)
{
	while (dead) {
		bd_dataset *next = dead->next;

		dataset_free(dead);
		dead = next;
	}
}

/* Are a and b versions of one dataset: the same resolved path, or the same directory? */
static bool same_place(const bd_dataset *a, const bd_dataset *b)
{
	return (a->place && b->place && !strcmp(a->place, b->place)) ||
	       (a->disk->dir && b->disk->dir && !a->disk->remote && !b->disk->remote &&
		a->disk->dev == b->disk->dev &&
		a->disk->ino == b->disk->ino);
}

/* d is what its place holds now: older versions of it go when no session uses them. */
static void make_current(bd_dataset *d, bd_dataset **dead)
{
	bd_dataset *w, *next;

	d->current = true;
	for (w = cache.list; w; w = next) {
		next = w->next;
		if (w == d || !w->current || !same_place(w, d))
			continue;
		w->current = false;
		if (w->refs == 0)
			retire(w, dead);
	}
}

/*
 * The least recently used version no session uses (of a remote dataset
 * when remote), and how many there are and hold.
 */
static bd_dataset *oldest_unused(bool remote, size_t *ret_n, uint64_t *ret_bytes)
{
	bd_dataset *oldest = NULL;
	uint64_t bytes = 0;
	size_t n = 0;

	for (bd_dataset *d = cache.list; d; d = d->next) {
		if (d->refs || (remote && !d->disk->remote))
			continue;
		n++;
		bytes += d->bytes;
		if (!oldest || d->last_used < oldest->last_used)
			oldest = d;
	}
	*ret_n = n;
	*ret_bytes = bytes;
	return oldest;
}

/* Keep at most BD_DATASET_KEEP_UNUSED unused versions and BD_DATASET_KEEP_BYTES of theirs. */
static void trim(bd_dataset **dead)
{
	for (;;) {
		uint64_t bytes;
		size_t n;
		bd_dataset *oldest = oldest_unused(false, &n, &bytes);

		if (n <= BD_DATASET_KEEP_UNUSED && bytes <= BD_DATASET_KEEP_BYTES)
			return;
		retire(oldest, dead);
	}
}

/* Free the least recently used unused version (remote: of a remote dataset). @return whether one was. */
static bool evict_one(bool remote)
{
	bd_dataset *d, *dead = NULL;
	uint64_t bytes;
	size_t n;

	pthread_mutex_lock(&cache.mu);
	d = oldest_unused(remote, &n, &bytes);
	if (d) {
		retire(d, &dead);
		cache.evicted++;
	}
	pthread_mutex_unlock(&cache.mu);
	if (d)
		bd_log(LOG_INFO, "dataset %s: an unused version evicted, %.1f MiB of its index and "
		       "tables given back to the memory budget", d->name, (double)d->bytes / (1 << 20));
	/* Outside the lock: closing shards and freeing an index takes a while. */
	free_dead(dead);
	return d != NULL;
}

bool bd_dataset_cache_evict_one(void)
{
	return evict_one(false);
}

bool bd__dataset_evict_unused_remote(void)
{
	return evict_one(true);
}

/* A cached version the scan matches, referenced; NULL when there is none. */
static bd_dataset *cache_find(const struct bd_dataset_disk *disk)
{
	bd_dataset *d, *dead = NULL;

	pthread_mutex_lock(&cache.mu);
	for (d = cache.list; d; d = d->next)
		if (same_disk(d->disk, disk))
			break;
	if (d) {
		/* Atomic though under the lock: I/O threads read it (bd_dataset_shared). */
		__atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
		/* An older version found on disk again (its files linked back): current again. */
		if (!d->current)
			make_current(d, &dead);
	}
	pthread_mutex_unlock(&cache.mu);
	free_dead(dead);
	return d;
}

/*
 * Cache d, just loaded, as the current version of its place. @return d,
 * or the identical version another open loaded meanwhile (d is freed).
 */
static bd_dataset *cache_insert(bd_dataset *d)
{
	bd_dataset *had, *dead = NULL;

	pthread_mutex_lock(&cache.mu);
	for (had = cache.list; had; had = had->next)
		if (same_disk(had->disk, d->disk))
			break;
	if (had) {
		__atomic_add_fetch(&had->refs, 1, __ATOMIC_RELAXED);
		d->next = dead;
		dead = d;
		d = had;
	} else {
		__atomic_store_n(&d->refs, 1, __ATOMIC_RELAXED);
		d->cached = true;
		d->next = cache.list;
		cache.list = d;
		cache.loaded++;
		make_current(d, &dead);
		trim(&dead);
	}
	pthread_mutex_unlock(&cache.mu);
	free_dead(dead);
	return d;
}

/*
 * Scan path: a remote location under the remotes among roots, or a name
 * under the local roots, then (when none has it) under the remotes.
 */
static int find(const char *const *roots, size_t nroots, const char *path,
		const bd_read_policy *rp, bd__scan *sc, char *err, size_t errlen)
{
	const char **local = NULL, **remote = NULL;
	size_t nl = 0, nr = 0;
	int r = -ENOMEM;

	local = calloc(nroots + 1, sizeof(*local));
	remote = calloc(nroots + 1, sizeof(*remote));
	if (!local || !remote)
		goto out;
	for (size_t i = 0; i < nroots; i++)
		if (bp_s3_is_remote(roots[i]))
			remote[nr++] = roots[i];
		else
			local[nl++] = roots[i];
	if (bp_s3_is_remote(path)) {
		r = bd__dataset_scan_remote(remote, nr, path, rp, sc, err, errlen);
		goto out;
	}
	r = scan_open(local, nl, path, rp, sc, err, errlen);
	if ((r == -ENOENT || (r == -EACCES && !nl)) && nr && path[0] != '/') {
		char local_err[512];

		snprintf(local_err, sizeof(local_err), "%s", err);
		err[0] = '\0';
		r = bd__dataset_scan_remote(remote, nr, path, rp, sc, err, errlen);
		if (r == -ENOENT && nl) {
			size_t n = strlen(err);

			snprintf(err + n, errlen - n, "; %s", local_err);
		}
	}
out:
	if (r == -ENOMEM && !err[0])
		snprintf(err, errlen, "dataset %s: out of memory", path);
	free(local);
	free(remote);
	return r;
}

/*
 * A remote dataset whose bytes did not check at load: drop its objects'
 * cached chunks, so that a second load reads them from the bucket again
 * (a bad reply, or a cache file changed under us, must not stay cached).
 * @return whether anything was dropped.
 */
static bool drop_cached(const bd__scan *sc, const char *path, const char *err)
{
	if (!sc->robj || !sc->disk)
		return false;
	bd_log(LOG_WARNING, "dataset %s: %s: its cached bytes are dropped and fetched again", path,
	       err);
	for (size_t i = 0; i < sc->nrobj; i++)
		bd_robj_invalidate(sc->robj[i], 0, sc->disk->shards[i].size);
	return true;
}

int bd_dataset_get(const char *const *roots, size_t nroots, const char *path,
		   const bd_read_policy *rp, bd_dataset **ret, char *err, size_t errlen)
{
	bd_dataset *d;
	bd__scan sc;
	bool again;
	int r;

	for (int attempt = 0;; attempt++) {
		err[0] = '\0';
		r = find(roots, nroots, path, rp, &sc, err, errlen);
		if (r < 0)
			return r;
		d = cache_find(sc.disk);
		if (!d) {
			/* Loading happens outside the lock; of two racing loads one is kept. */
			r = load(&sc, path, rp, &d, err, errlen);
			if (r == 0)
				d = cache_insert(d);
		}
		again = r == -EBADMSG && attempt == 0 && drop_cached(&sc, path, err);
		bd__scan_free(&sc);
		if (!again)
			break;
	}
	if (r == 0)
		*ret = d;
	return r;
}

void bd_dataset_put(bd_dataset *d)
{
	bd_dataset *dead = NULL;

	if (!d)
		return;
	pthread_mutex_lock(&cache.mu);
	if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_RELAXED) == 0) {
		d->last_used = ++cache.clock;
		if (!d->cached || !d->current)
			retire(d, &dead);
		else
			trim(&dead);
	}
	pthread_mutex_unlock(&cache.mu);
	free_dead(dead);
}

void bd_dataset_cache_clear(void)
{
	bd_dataset *d, *next, *dead = NULL;

	pthread_mutex_lock(&cache.mu);
	for (d = cache.list; d; d = next) {
		next = d->next;
		/*
		 * What sessions still use goes with the last of them
		 * (bd_dataset_put), no longer charged: the budget goes first.
		 */
		if (d->refs == 0) {
			retire(d, &dead);
		} else {
			unlink_version(d);
			d->budget = NULL;
		}
	}
	pthread_mutex_unlock(&cache.mu);
	free_dead(dead);
}

void bd_dataset_cache_stats(bd_dataset_stats *ret)
{
	bd_dataset_stats st = { 0 };

	pthread_mutex_lock(&cache.mu);
	st.loaded = cache.loaded;
	st.freed = cache.freed;
	st.evicted = cache.evicted;
	for (bd_dataset *d = cache.list; d; d = d->next) {
		st.held++;
		st.bytes += d->bytes;
		if (!d->refs) {
			st.unused++;
			st.unused_bytes += d->bytes;
		}
	}
	pthread_mutex_unlock(&cache.mu);
	*ret = st;
}

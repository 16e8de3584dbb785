/* SPDX-License-Identifier: MIT */
/*
 * remote_map.c - the cache directory of remote objects (remote.h): one
 * sparse data file and one map file per object version under
 * DIR/objects, named by a hash of the version's identity.
 *
 * A map file is the object's identity, the list of its chunks on disk
 * and the XXH3-64 of each of those chunks' bytes as they came, closed by
 * an XXH3-64 of everything before it; it is written to a temporary and
 * renamed over the old one after the data file is fdatasync'd, so
 * whatever map a crash leaves behind lists only chunks whose bytes
 * reached the disk. At start every map is read back: a map that does not
 * check, or whose chunk size or data file disagree, is deleted with its
 * data (refetched when needed, never guessed at), as are data files
 * without a map and temporaries; the chunks a map lists are served only
 * once their bytes match its hashes (remote_verify.c).
 *
 * Whoever may write the directory is not trusted either: every file is
 * opened relative to the objects directory's descriptor, never through a
 * symlink (O_NOFOLLOW), and used only when it is a regular file of ours
 * with one link; data and map files are made under unpredictable
 * temporary names (O_EXCL) and renamed into place, which replaces a link
 * planted there rather than writing through it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "log.h"
#include "pack_file.h"
#include "remote_priv.h"
#include "units.h"
#include "util.h"

#define MAP_MAGIC "BDCMAP3\n"
/* A present chunk in a map: its index (u32) and the XXH3-64 of its bytes. */
#define MAP_ENTRY 12u
#define MAP_MAX (UINT64_C(64) << 20)

/*
 * The fixed part of a map file; the bucket, key and ETag follow, then the
 * count of present chunks (u32), each present chunk's index and hash in
 * increasing index order, and the file's hash: a map grows with what is
 * cached, never with the size the bucket claims.
 */
typedef struct map_head {
	char magic[8];
	uint32_t chunk;
	uint32_t nchunks;
	uint64_t size;
	uint16_t bucket_len, key_len, etag_len, pad;
} map_head;

/* ---- objects ----------------------------------------------------------------------------- */

static void identity_id(const char *bucket, const char *key, const char *etag, uint64_t size,
			char id[33])
{
	XXH3_state_t *st = XXH3_createState();
	XXH128_hash_t h;

	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, bucket ? bucket : "", strlen(bucket ? bucket : "") + 1);
	XXH3_128bits_update(st, key, strlen(key) + 1);
	XXH3_128bits_update(st, etag, strlen(etag) + 1);
	XXH3_128bits_update(st, &size, sizeof(size));
	h = XXH3_128bits_digest(st);
	XXH3_freeState(st);
	snprintf(id, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
}

/* ---- data files' descriptors ------------------------------------------------------------ */

/*
 * Every data file open is counted against R.files_max, the cache's share
 * of the daemon's descriptors, and so are the copies a reference from
 * bd_robj_get stands for (its dataset's shard and read descriptors, both
 * closed before bd_robj_put), so that remote opens, however many and
 * whoever makes them, leave the rest to local datasets, connections and
 * sessions. Any thread: the count is atomic.
 */
#define COPIES 2u

static void data_fd_set(bd_robj *o, int fd)
{
	o->fd = fd;
	if (fd >= 0)
		__atomic_add_fetch(&R.files, 1, __ATOMIC_RELAXED);
}

static void data_fd_close(bd_robj *o)
{
	if (o->fd < 0)
		return;
	close(o->fd);
	o->fd = -1;
	__atomic_sub_fetch(&R.files, 1, __ATOMIC_RELAXED);
}

/*
 * Room for need more descriptors of name's data file? Unused objects'
 * files (closed at the next sync anyway) are closed now to make it. Under
 * R.mu. @return 0; -EMFILE, err naming the figures and what to change.
 * Opens running at once on the remote opens' pool may each pass: the
 * share may be passed by COPIES + 1 descriptors a thread of that pool.
 */
static int data_fd_room(const char *name, unsigned need, char *err, size_t errlen)
{
	struct rlimit rl = { 0 };

	for (bd_robj *o = R.objects; o; o = o->next) {
		if (__atomic_load_n(&R.files, __ATOMIC_RELAXED) + need <= R.files_max)
			return 0;
		if (!o->refs && !o->dirty && !o->punches)
			data_fd_close(o);
	}
	if (__atomic_load_n(&R.files, __ATOMIC_RELAXED) + need <= R.files_max)
		return 0;
	getrlimit(RLIMIT_NOFILE, &rl);
	snprintf(err, errlen, "remote cache: %s: the cache and its datasets hold %u descriptors of "
		 "data files, their share of batchd's (half of its RLIMIT_NOFILE, %llu): close "
		 "other remote sessions, or raise batchd's LimitNOFILE", name, R.files_max,
		 (unsigned long long)rl.rlim_cur);
	return -EMFILE;
}

void bd__robj_free(bd_robj *o)
{
	if (!o)
		return;
	data_fd_close(o);
	bp_s3_loc_free(&o->loc);
	free(o->name);
	bd__chunks_free(o);
	free(o);
}

/* What an object's record takes besides its chunk table: the struct, its name and location. */
static size_t record_bytes(const char *bucket, const char *key)
{
	return sizeof(bd_robj) + 2 * (strlen(key) + (bucket ? strlen(bucket) : 0) + 8);
}

/*
 * A new object record for loc/etag/size with no chunks present, charged to
 * R.table_bytes; its files are the caller's. @return NULL: no memory, or
 * *ret_err -ENOSPC when its table would go over R.table_max.
 */
static bd_robj *robj_new(const char *bucket, const char *key, const char *etag, uint64_t size,
			 int *ret_err)
{
	bd_robj *o = calloc(1, sizeof(*o));
	size_t n;

	*ret_err = -ENOMEM;
	if (!o)
		return NULL;
	o->fd = -1;
	o->size = size;
	o->nchunks = (uint32_t)((size + R.chunk - 1) / R.chunk);
	snprintf(o->etag, sizeof(o->etag), "%s", etag);
	identity_id(bucket, key, etag, size, o->id);
	o->loc.plain = !bucket;
	o->loc.bucket = bucket ? strdup(bucket) : NULL;
	o->loc.key = strdup(key);
	n = strlen(key) + (bucket ? strlen(bucket) : 0) + 8;
	o->name = malloc(n);
	if (!o->loc.key || (bucket && !o->loc.bucket) || !o->name ||
	    (*ret_err = bd__chunks_init(o, record_bytes(bucket, key))) < 0) {
		bd__robj_free(o);
		return NULL;
	}
	if (bucket)
		snprintf(o->name, n, "s3://%s/%s", bucket, key);
	else
		snprintf(o->name, n, "%s", key);
	return o;
}

static bool same_key(const bd_robj *o, const bp_s3_loc *loc)
{
	return !strcmp(o->loc.key, loc->key) &&
	       (!o->loc.bucket == !loc->bucket) &&
	       (!loc->bucket || !strcmp(o->loc.bucket, loc->bucket));
}

/*
 * Open name in the objects directory with flags: never through a symlink,
 * and only a regular file of this user's with one link (O_NONBLOCK while
 * opening, so that a FIFO planted there cannot hang us). @return the fd;
 * -ELOOP (a symlink), -EPERM (anything else not ours), -errno.
 */
static int obj_open(const char *name, int flags, struct stat *ret_st)
{
	struct stat st;
	int fd, r;

	fd = openat(R.objdir, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
		r = -EPERM;
		goto fail;
	}
	/* io_uring would answer EAGAIN on a file marked non-blocking. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		r = -errno;
		goto fail;
	}
	if (ret_st)
		*ret_st = st;
	return fd;
fail:
	close(fd);
	return r;
}

/* A name nobody can plant a link at beforehand: ".ID.NONCE.tmp" (scan() removes leftovers). */
static int temp_name(const char *id, char buf[80])
{
	uint64_t nonce;

	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		return -errno;
	snprintf(buf, 80, ".%s.%016llx.tmp", id, (unsigned long long)nonce);
	return 0;
}

/*
 * A new, empty data file of o's size under a temporary name (tmp), which
 * place_data gives it: two opens making one object at once must not
 * unlink each other's file. @return the fd, or -errno (err says).
 */
static int create_data(const bd_robj *o, char tmp[80], char *err, size_t errlen)
{
	int fd = temp_name(o->id, tmp);

	if (fd == 0)
		fd = obj_open(tmp, O_RDWR | O_CREAT | O_EXCL, NULL);
	if (fd >= 0 && ftruncate(fd, (off_t)o->size) < 0) {
		int r = -errno;

		close(fd);
		unlinkat(R.objdir, tmp, 0);
		fd = r;
	}
	if (fd < 0)
		snprintf(err, errlen, "remote cache %s/objects: a data file for %s: %s: check that "
			 "batchd may write [cache] dir and that it has room", R.dir, o->name,
			 strerror(-fd));
	return fd;
}

/*
 * tmp becomes o's data file, replacing whatever had the name: a rename
 * replaces a symlink planted there, never writes through it. Under R.mu,
 * so that no other open places the same identity's at once.
 * @return 0 or -errno (err says).
 */
static int place_data(const bd_robj *o, const char *tmp, char *err, size_t errlen)
{
	char name[48];
	int r = 0;

	snprintf(name, sizeof(name), "%s.data", o->id);
	if (renameat(R.objdir, tmp, R.objdir, name) < 0) {
		r = -errno;
		unlinkat(R.objdir, tmp, 0);
		snprintf(err, errlen, "remote cache %s/objects/%s: %s: check that batchd may write "
			 "[cache] dir", R.dir, name, strerror(-r));
	}
	return r;
}

/*
 * The object version id, referenced; NULL when unknown. A doomed one is
 * this identity again (the key put back as it was): kept after all.
 * Under R.mu.
 */
static bd_robj *find(const char *id)
{
	for (bd_robj *o = R.objects; o; o = o->next)
		if (!strcmp(o->id, id)) {
			o->doomed = false;
			o->refs++;
			return o;
		}
	return NULL;
}

/* o's data file, when it is a regular file of ours of o's size. @return the fd; -1. */
static int data_open(const bd_robj *o)
{
	char name[48];
	struct stat st;
	int fd;

	snprintf(name, sizeof(name), "%s.data", o->id);
	fd = obj_open(name, O_RDWR, &st);
	if (fd >= 0 && (uint64_t)st.st_size != o->size) {
		close(fd);
		fd = -1;
	}
	return fd < 0 ? -1 : fd;
}

/*
 * o's data file open again after it was closed while unused (sync_object).
 * A file gone or not ours any more: o starts over empty, in a new file.
 * Under R.mu, with a reference held. @return 0 or -errno (err says).
 */
static int reopen(bd_robj *o, char *err, size_t errlen)
{
	char tmp[80];
	int r, fd;

	if (o->fd >= 0)
		return 0;
	if ((fd = data_open(o)) >= 0) {
		data_fd_set(o, fd);
		return 0;
	}
	bd_log(LOG_NOTICE, "remote cache %s: %s: its data file is gone or changed: fetched anew",
	       R.dir, o->name);
	BD_FOR_EACH_CHUNK(o, c)
		if (c->state == BD_CHUNK_PRESENT) {
			if (c->on_lru)
				bd__lru_remove(c);
			c->state = BD_CHUNK_ABSENT;
			R.cache_bytes -= bd__chunk_len(o, c->idx);
		}
	o->dirty = true;
	fd = create_data(o, tmp, err, errlen);
	if (fd >= 0 && (r = place_data(o, tmp, err, errlen)) < 0) {
		close(fd);
		return r;
	}
	if (fd < 0)
		return fd;
	data_fd_set(o, fd);
	return 0;
}

/* Does o hold a chunk on disk? Under R.mu. */
static bool holds_chunks(const bd_robj *o)
{
	BD_FOR_EACH_CHUNK(o, c)
		if (c->state != BD_CHUNK_ABSENT)
			return true;
	return false;
}

/*
 * o, found referenced, for one more dataset: its data file open (room made
 * for it and for the dataset's copy), the copy counted. Under R.mu.
 * @return 0; -errno, the reference dropped (err says).
 */
static int reuse(bd_robj *o, char *err, size_t errlen)
{
	int r = data_fd_room(o->name, COPIES + (o->fd < 0), err, errlen);

	if (r == 0)
		r = reopen(o, err, errlen);
	if (r < 0) {
		bd__robj_unref(o);
		return r;
	}
	__atomic_add_fetch(&R.files, COPIES, __ATOMIC_RELAXED);
	return 0;
}

int bd_robj_get(const bp_s3_loc *loc, const bp_s3_object *ob, bd_robj **ret, char *err,
		size_t errlen)
{
	char id[33], tmp[80];
	bd_robj *o, *fresh;
	int fd, r;

	identity_id(loc->bucket, loc->key, ob->etag, ob->size, id);
	pthread_mutex_lock(&R.mu);
	o = find(id);
	r = o ? reuse(o, err, errlen) : 0;
	pthread_mutex_unlock(&R.mu);
	if (r < 0)
		return r;
	if (o) {
		*ret = o;
		return 0;
	}

	if (ob->size > BD_REMOTE_MAX_OBJECT) {
		snprintf(err, errlen, "%s%s%s%s: the bucket claims %llu bytes, over S3's 5 TiB limit "
			 "for one object: not believed", loc->bucket ? "s3://" : "",
			 loc->bucket ? loc->bucket : "", loc->bucket ? "/" : "", loc->key,
			 (unsigned long long)ob->size);
		return -EFBIG;
	}
	fresh = robj_new(loc->bucket, loc->key, ob->etag, ob->size, &r);
	if (!fresh && r == -ENOSPC) {
		char a[32], b[32], c[32], d[32];

		snprintf(err, errlen, "remote cache: %s%s%s%s (%s) needs %s of chunk tables, and "
			 "%s of the %s they may take are in use: fewer or smaller remote datasets "
			 "at once, or a larger [cache] chunk", loc->bucket ? "s3://" : "",
			 loc->bucket ? loc->bucket : "", loc->bucket ? "/" : "", loc->key,
			 bp_format_size(ob->size, a, sizeof(a)),
			 bp_format_size(bd__robj_table_need(ob->size, record_bytes(loc->bucket, loc->key)),
					b, sizeof(b)),
			 bp_format_size(__atomic_load_n(&R.table_bytes, __ATOMIC_RELAXED), c,
					sizeof(c)),
			 bp_format_size(R.table_max, d, sizeof(d)));
		return -ENOMEM;
	}
	if (!fresh) {
		snprintf(err, errlen, "remote cache: out of memory");
		return -ENOMEM;
	}
	pthread_mutex_lock(&R.mu);
	r = data_fd_room(fresh->name, COPIES + 1, err, errlen);
	pthread_mutex_unlock(&R.mu);
	fd = r < 0 ? r : create_data(fresh, tmp, err, errlen);
	if (fd < 0) {
		bd__robj_free(fresh);
		return fd;
	}
	data_fd_set(fresh, fd);
	fresh->dirty = true;
	fresh->refs = 1;

	pthread_mutex_lock(&R.mu);
	/* Another open may have made it meanwhile: then ours goes. */
	o = find(id);
	r = o ? reuse(o, err, errlen) : place_data(fresh, tmp, err, errlen);
	if (o || r < 0) {
		pthread_mutex_unlock(&R.mu);
		if (o)
			unlinkat(R.objdir, tmp, 0);
		bd__robj_free(fresh);
		if (r < 0)
			return r;
		*ret = o;
		return 0;
	}
	/* Older versions of the key are never served again. */
	for (o = R.objects; o; o = o->next)
		if (same_key(o, loc) && !o->doomed) {
			o->doomed = true;
			R.delete_pending = true;
			bd_log(LOG_INFO, "remote: %s changed in the bucket (ETag %s, %llu bytes, was %s, "
			       "%llu): its cached chunks are dropped", o->name, ob->etag,
			       (unsigned long long)ob->size, o->etag, (unsigned long long)o->size);
		}
	fresh->next = R.objects;
	R.objects = fresh;
	R.nobjects++;
	__atomic_add_fetch(&R.files, COPIES, __ATOMIC_RELAXED); /* its dataset's */
	pthread_mutex_unlock(&R.mu);
	if (R.multi)
		bd__remote_wake();
	*ret = fresh;
	return 0;
}

void bd__robj_unref(bd_robj *o)
{
	if (--o->refs)
		return;
	/* Nothing cached and nothing using it (a failed open's object): its record and files go. */
	if (!o->doomed && !holds_chunks(o))
		o->doomed = true;
	if (o->doomed)
		R.delete_pending = true;
}

void bd_robj_put(bd_robj *o)
{
	bool wake;

	if (!o)
		return;
	pthread_mutex_lock(&R.mu);
	__atomic_sub_fetch(&R.files, COPIES, __ATOMIC_RELAXED); /* its dataset's are closed */
	bd__robj_unref(o);
	wake = R.delete_pending;
	pthread_mutex_unlock(&R.mu);
	if (wake)
		bd__remote_wake();
}

/* ---- map files --------------------------------------------------------------------------- */

/* Map entries in increasing order of chunk index. */
static int by_index(const void *a, const void *b)
{
	uint32_t x, y;

	memcpy(&x, a, 4);
	memcpy(&y, b, 4);
	return x < y ? -1 : x > y;
}

/* o's map as it would be written now. Under R.mu. @return its bytes (malloc'd), *ret_len. */
static uint8_t *map_encode(const bd_robj *o, size_t *ret_len)
{
	size_t bl = o->loc.bucket ? strlen(o->loc.bucket) : 0, kl = strlen(o->loc.key),
	       el = strlen(o->etag);
	uint32_t present = 0;
	size_t len;
	uint8_t *b, *p;
	map_head h = { .chunk = R.chunk, .nchunks = o->nchunks, .size = o->size,
		       .bucket_len = (uint16_t)bl, .key_len = (uint16_t)kl, .etag_len = (uint16_t)el };
	uint64_t sum;

	BD_FOR_EACH_CHUNK(o, c)
		present += c->state == BD_CHUNK_PRESENT;
	len = sizeof(map_head) + bl + kl + el + 4 + MAP_ENTRY * (size_t)present + 8;
	if (!(b = malloc(len)))
		return NULL;
	memcpy(h.magic, MAP_MAGIC, 8);
	memcpy(b, &h, sizeof(h));
	p = b + sizeof(h);
	memcpy(p, o->loc.bucket ? o->loc.bucket : "", bl);
	memcpy(p += bl, o->loc.key, kl);
	memcpy(p += kl, o->etag, el);
	memcpy(p += el, &present, 4);
	p += 4;
	BD_FOR_EACH_CHUNK(o, c)
		if (c->state == BD_CHUNK_PRESENT) {
			memcpy(p, &c->idx, 4);
			memcpy(p + 4, &c->hash, 8);
			p += MAP_ENTRY;
		}
	/* The table holds them in no order; a map lists them by index (map_chunks checks). */
	qsort(p - MAP_ENTRY * (size_t)present, present, MAP_ENTRY, by_index);
	sum = XXH3_64bits(b, len - 8);
	memcpy(p, &sum, 8);
	*ret_len = len;
	return b;
}

/* Write bytes as o's map: data synced first, then a temporary renamed over the map. */
static int map_write(const bd_robj *o, const uint8_t *bytes, size_t len, bool sync_data)
{
	char tmp[80], name[48];
	int fd, r = 0;

	if (sync_data && fdatasync(o->fd) < 0)
		return -errno;
	r = temp_name(o->id, tmp);
	if (r < 0)
		return r;
	snprintf(name, sizeof(name), "%s.map", o->id);
	fd = obj_open(tmp, O_WRONLY | O_CREAT | O_EXCL, NULL);
	if (fd < 0)
		return fd;
	if (bp_pwrite_full(fd, bytes, len, 0) < 0 || fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r == 0 && renameat(R.objdir, tmp, R.objdir, name) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(R.objdir, tmp, 0);
	return r;
}

/*
 * The present chunks a map lists, each (index, hash), in increasing index
 * order below nchunks, into o (unverified). @return false: they do not.
 */
static bool map_chunks(bd_robj *o, const uint8_t *p, uint32_t present)
{
	for (uint32_t k = 0, last = 0; k < present; k++, p += MAP_ENTRY) {
		uint32_t i;
		bd_chunk *c;

		memcpy(&i, p, 4);
		if (i >= o->nchunks || (k && i <= last) || !(c = bd__chunk(o, i)))
			return false;
		c->state = BD_CHUNK_PRESENT;
		c->unverified = true;
		memcpy(&c->hash, p + 4, 8);
		last = i;
	}
	return true;
}

bd_robj *bd__map_decode(const uint8_t *b, size_t len)
{
	map_head h;
	char *bucket = NULL, *key = NULL, *etag = NULL;
	bd_robj *o = NULL;
	size_t strings;
	uint32_t present;
	uint64_t sum;
	const uint8_t *p;
	int err;

	if (len < sizeof(h) + 4 + 8)
		return NULL;
	memcpy(&h, b, sizeof(h));
	strings = (size_t)h.bucket_len + h.key_len + h.etag_len;
	if (memcmp(h.magic, MAP_MAGIC, 8) || h.chunk != R.chunk || !h.key_len ||
	    h.size > BD_REMOTE_MAX_OBJECT || h.etag_len >= BP_S3_ETAG_MAX ||
	    h.nchunks != (h.size + R.chunk - 1) / R.chunk || sizeof(h) + strings + 4 + 8 > len)
		return NULL;
	p = b + sizeof(h);
	memcpy(&present, p + strings, 4);
	if (present > h.nchunks || sizeof(h) + strings + 4 + MAP_ENTRY * (size_t)present + 8 != len)
		return NULL;
	memcpy(&sum, b + len - 8, 8);
	if (XXH3_64bits(b, len - 8) != sum)
		return NULL;
	bucket = h.bucket_len ? strndup((const char *)p, h.bucket_len) : NULL;
	key = strndup((const char *)(p += h.bucket_len), h.key_len);
	etag = strndup((const char *)(p += h.key_len), h.etag_len);
	p += h.etag_len + 4;
	if (key && etag && (bucket || !h.bucket_len))
		o = robj_new(bucket, key, etag, h.size, &err);
	if (o && !map_chunks(o, p, present)) {
		bd__robj_free(o);
		o = NULL;
	}
	free(bucket);
	free(key);
	free(etag);
	return o;
}

/* ---- the fetcher's file work ------------------------------------------------------------- */

static void punch(bd_robj *o, uint32_t i)
{
	uint64_t off = (uint64_t)i * R.chunk;

	if (fallocate(o->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)bd__chunk_len(o, i)) < 0)
		bd_log(LOG_WARNING, "remote cache %s: %s: cannot free chunk %u: %s", R.dir, o->id, i,
		       strerror(errno));
}

static void delete_files(const char *id)
{
	char name[48];

	snprintf(name, sizeof(name), "%s.map", id);
	unlinkat(R.objdir, name, 0);
	snprintf(name, sizeof(name), "%s.data", id);
	unlinkat(R.objdir, name, 0);
}

/* Take doomed objects nothing uses off the list, their files deleted, chunks off the LRU. Under R.mu. */
static bd_robj *take_doomed(void)
{
	bd_robj *dead = NULL;

	for (bd_robj **p = &R.objects; *p;) {
		bd_robj *o = *p;

		if (!o->doomed || o->refs) {
			p = &o->next;
			continue;
		}
		*p = o->next;
		R.nobjects--;
		/*
		 * Its files go under the lock: once off the list, its identity may
		 * be opened again, and a new file of that name must not be lost.
		 */
		delete_files(o->id);
		BD_FOR_EACH_CHUNK(o, c) {
			if (c->on_lru)
				bd__lru_remove(c);
			if (c->state == BD_CHUNK_PRESENT)
				R.cache_bytes -= bd__chunk_len(o, c->idx);
		}
		o->next = dead;
		dead = o;
	}
	R.delete_pending = false;
	return dead;
}

/* One object's share of a sync: its map (when dirty and asked, or before punches), its punches. */
static void sync_object(bd_robj *o, bool all)
{
	uint8_t *map = NULL;
	size_t len = 0;
	bool synced = false, landed;
	uint32_t *holes = NULL, nholes = 0;

	pthread_mutex_lock(&R.mu);
	bd__chunks_trim(o);
	landed = o->landed;
	if (o->dirty && (all || o->punches)) {
		map = map_encode(o, &len);
		o->dirty = !map;
		o->landed = false;
	}
	/* An unused object's chunks evicted since its file was closed: open it to punch them. */
	if (o->punches && o->fd < 0)
		data_fd_set(o, data_open(o));
	if (o->punches && o->fd < 0)
		o->punches = 0; /* its file is gone or not ours: nothing of ours to punch */
	if (o->punches && (holes = malloc(o->punches * sizeof(*holes)))) {
		BD_FOR_EACH_CHUNK(o, c)
			if (c->punch && nholes < o->punches) {
				c->punch = false;
				holes[nholes++] = c->idx;
			}
		o->punches = 0;
	}
	pthread_mutex_unlock(&R.mu);
	if (map) {
		int r = map_write(o, map, len, landed);

		synced = r == 0;
		if (r < 0)
			bd_log(LOG_WARNING, "remote cache %s: %s: cannot write its map: %s", R.dir,
			       o->name, strerror(-r));
		free(map);
	}
	/*
	 * The map is written before the punches, so that a crash leaves no map
	 * listing a hole; when it cannot be (a full disk: the punches are what
	 * frees it), they go ahead all the same: a listed chunk that reads as
	 * zeros fails its hash at the next start and is fetched again
	 * (remote_verify.c).
	 */
	if (map && !synced) {
		pthread_mutex_lock(&R.mu);
		o->dirty = true;
		pthread_mutex_unlock(&R.mu);
	}
	for (uint32_t k = 0; k < nholes; k++)
		punch(o, holes[k]);
	free(holes);
	/* Unused and synced: its descriptor goes until an open wants it again (reopen). */
	pthread_mutex_lock(&R.mu);
	if (!o->refs && !o->dirty && !o->punches)
		data_fd_close(o);
	pthread_mutex_unlock(&R.mu);
}

void bd__remote_sync(bool all)
{
	bd_robj *dead, *head;

	R.punch_pending = false;
	pthread_mutex_lock(&R.mu);
	dead = R.delete_pending ? take_doomed() : NULL;
	pthread_mutex_unlock(&R.mu);
	while (dead) {
		bd_robj *next = dead->next;

		bd__robj_free(dead);
		dead = next;
	}
	/*
	 * Objects are taken off the list only here and at close, on this
	 * thread, and added only at its head: from the head read under the
	 * lock, the walk needs no lock.
	 */
	pthread_mutex_lock(&R.mu);
	head = R.objects;
	pthread_mutex_unlock(&R.mu);
	for (bd_robj *o = head; o; o = o->next)
		sync_object(o, all);
}

/* ---- the directory ----------------------------------------------------------------------- */

static int mkdir_p(const char *dir)
{
	char path[4096];
	size_t n = strlen(dir);

	if (n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Read the map named name into an object with its data file open. NULL: it goes (files deleted). */
static bd_robj *load_one(const char *name)
{
	char id[33], data[48];
	uint8_t *b = NULL;
	struct stat st, ds;
	bd_robj *o = NULL;
	int fd;

	snprintf(id, sizeof(id), "%.*s", (int)(strlen(name) - 4), name);
	fd = obj_open(name, O_RDONLY, &st);
	if (fd >= 0 && (uint64_t)st.st_size <= MAP_MAX &&
	    (b = malloc((size_t)st.st_size + 1)) &&
	    bp_pread_full(fd, b, (size_t)st.st_size, 0) == 0)
		o = bd__map_decode(b, (size_t)st.st_size);
	if (fd >= 0)
		close(fd);
	free(b);
	if (o && strcmp(o->id, id)) {
		bd__robj_free(o);
		o = NULL;
	}
	snprintf(data, sizeof(data), "%s.data", id);
	/* Its data file checked, not kept open: an open that uses o opens it (reopen). */
	if (o && (fd = obj_open(data, O_RDONLY, &ds)) >= 0) {
		close(fd);
		if ((uint64_t)ds.st_size == o->size)
			o->mtime = (int64_t)st.st_mtim.tv_sec;
	}
	if (o && (fd < 0 || (uint64_t)ds.st_size != o->size)) {
		bd__robj_free(o);
		o = NULL;
	}
	if (!o) {
		bd_log(LOG_NOTICE, "remote cache %s: %s does not check: deleted (refetched when needed)",
		       R.dir, name);
		delete_files(id);
	}
	return o;
}

static int by_mtime(const void *a, const void *b)
{
	const bd_robj *x = *(bd_robj *const *)a, *y = *(bd_robj *const *)b;

	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* The objects found, oldest map first, their present chunks on the LRU in that order. */
static int adopt(bd_robj **found, size_t n)
{
	if (n)
		qsort(found, n, sizeof(*found), by_mtime);
	for (size_t k = n; k-- > 0;) {
		bd_robj *o = found[k];

		o->next = R.objects;
		R.objects = o;
		R.nobjects++;
	}
	for (size_t k = 0; k < n; k++)
		BD_FOR_EACH_CHUNK(found[k], c)
			if (c->state == BD_CHUNK_PRESENT) {
				R.cache_bytes += bd__chunk_len(found[k], c->idx);
				bd__lru_append(c);
			}
	return 0;
}

/* Load every map; delete temporaries and data files without one. */
static int scan(void)
{
	DIR *d = fdopendir(dup(R.objdir));
	bd_robj **found = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);

		if (e->d_name[0] == '.' && len > 4 && !strcmp(e->d_name + len - 4, ".tmp")) {
			unlinkat(R.objdir, e->d_name, 0);
		} else if (len == 36 && !strcmp(e->d_name + 32, ".map")) {
			bd_robj *o = load_one(e->d_name);

			if (o && n == cap) {
				bd_robj **g = realloc(found, (cap = cap ? 2 * cap : 64) * sizeof(*g));

				if (!g) {
					bd__robj_free(o);
					o = NULL;
				} else {
					found = g;
				}
			}
			if (o)
				found[n++] = o;
		}
	}
	rewinddir(d);
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char map[48];

		if (len == 37 && !strcmp(e->d_name + 32, ".data")) {
			snprintf(map, sizeof(map), "%.32s.map", e->d_name);
			if (faccessat(R.objdir, map, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
				unlinkat(R.objdir, e->d_name, 0);
		}
	}
	closedir(d);
	adopt(found, n);
	free(found);
	return 0;
}

int bd__remote_open_dir(const char *dir, char *err, size_t errlen)
{
	char objects[4200];
	struct stat st;
	int r;

	snprintf(objects, sizeof(objects), "%s/objects", dir);
	r = mkdir_p(objects);
	if (r < 0) {
		snprintf(err, errlen, "[cache] dir %s: cannot create %s: %s: give batchd a directory it "
			 "may write (systemd: CacheDirectory=batchd)", dir, objects, strerror(-r));
		return r;
	}
	/* Not through a symlink, and ours: whoever else owns it could swap anything in it. */
	R.objdir = open(objects, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (R.objdir >= 0 && fstat(R.objdir, &st) == 0 && st.st_uid != geteuid()) {
		snprintf(err, errlen, "[cache] dir %s: %s is owned by uid %u, not by batchd's uid %u: "
			 "remove it or give it to batchd", dir, objects, (unsigned)st.st_uid,
			 (unsigned)geteuid());
		close(R.objdir);
		R.objdir = -1;
		return -EPERM;
	}
	if (R.objdir < 0 && lstat(objects, &st) == 0 && S_ISLNK(st.st_mode)) {
		snprintf(err, errlen, "[cache] dir %s: %s is a symbolic link, which batchd does not "
			 "follow there: make it a directory of batchd's", dir, objects);
		return -ELOOP;
	}
	if (R.objdir < 0 || faccessat(R.objdir, ".", W_OK, AT_EACCESS) < 0) {
		r = -errno;
		snprintf(err, errlen, "[cache] dir %s: %s: %s: give batchd a directory it may write "
			 "(systemd: CacheDirectory=batchd)", dir, objects, strerror(-r));
		if (R.objdir >= 0)
			close(R.objdir);
		R.objdir = -1;
		return r;
	}
	R.dir = strdup(dir);
	r = R.dir ? scan() : -ENOMEM;
	if (r < 0) {
		snprintf(err, errlen, "[cache] dir %s: cannot read it: %s", dir, strerror(-r));
		bd__remote_close_dir();
		return r;
	}
	/* A smaller max_size than last time: down to it now. */
	pthread_mutex_lock(&R.mu);
	while (R.cache_bytes > R.max_size && bd__evict_one())
		;
	pthread_mutex_unlock(&R.mu);
	bd__remote_sync(true);
	return 0;
}

void bd__remote_close_dir(void)
{
	bd__remote_sync(true);
	while (R.objects) {
		bd_robj *o = R.objects;

		R.objects = o->next;
		bd__robj_free(o);
	}
	R.nobjects = 0;
	R.lru_head = R.lru_tail = NULL;
	R.cache_bytes = 0;
	if (R.objdir >= 0)
		close(R.objdir);
	R.objdir = -1;
	free(R.dir);
	R.dir = NULL;
}

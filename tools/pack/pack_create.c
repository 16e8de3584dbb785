/* SPDX-License-Identifier: MIT */
/*
 * pack_create.c - the packing pipeline behind `batchd-pack create`.
 *
 * The main thread reads samples in input order and lays them into blocks,
 * and cuts a sample larger than the frame size into frames, a block each;
 * a pool of workers compresses blocks (one ZSTD_CCtx each), so the frames
 * of one large sample compress in parallel; the main thread writes
 * finished blocks strictly in order. Jobs live in a ring of twice as
 * many slots as workers: before reusing a slot the main thread waits for
 * its previous block and writes it, which both keeps the output ordered and
 * bounds memory to (2 x threads) blocks in flight.
 *
 * --max-side (pack_image.h): the workers also re-encode a block's large
 * images before compressing it, each with its own fitter, and the block's
 * sizes change with them; a job carries its samples' bytes field sizes
 * for that, and the writer is handed those in place of the scan's. A
 * sample over the frame size is re-encoded on the main thread before it
 * is cut, since its frames go to several workers; if it then fits a
 * frame, it goes whole in a block of its own.
 *
 * --check-images (pack_image.h) takes the same road: the workers decode
 * every image of a block whole before compressing it. With
 * --on-error=skip a sample whose image does not decode is taken out of
 * its block there; the job says which (its faults, by index among the
 * samples read), so that the writer is handed the values and keys of the
 * samples kept alone, and the main thread names the ones left out as it
 * writes the block, in sample order. A block left with no sample is not
 * written. Samples were counted, keyed and trained on at the scan; one
 * left out is simply not in the pack, and the summary counts it.
 *
 * Samples with fields (a schema beyond the bytes of old): the writer gets
 * each sample's values and key when the block holding it is written, from
 * what the scan kept (pack_inputs_fields), so values need no trip through
 * the workers, and a shard's writer gets exactly its own samples' values.
 *
 * Output goes to a hidden temporary name beside OUT (".OUT.tmp-XXXXXX",
 * which dataset readers ignore), is fsynced, and is renamed into place
 * without replacing anything; on any failure or signal it is removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "batchd-build.h"
#include "cli.h"
#include "pack.h"
#include "pack_create.h"
#include "pack_dict.h"
#include "pack_file.h"
#include "pack_image.h"
#include "pack_writer.h"
#include "progress.h"
#include "units.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

/* ---- compression pool ----------------------------------------------------- */

enum job_state { JOB_FREE, JOB_QUEUED, JOB_DONE };

typedef struct job {
	enum job_state state;
	uint8_t *raw, *out;
	size_t raw_cap, out_cap;
	uint64_t raw_size;
	uint64_t *sizes;         /* sample sizes in this block */
	size_t n, sizes_cap;
	size_t nread;            /* samples read into it (n is those kept, once worked) */
	uint64_t framed;         /* a frame: the size of the sample it is part of; else 0 */
	uint64_t first;          /* global id of its first sample (a frame: of its sample) */
	uint64_t in_size;        /* its samples' bytes as read, for the progress line */
	/* --max-side, --check-images: each sample's bytes field sizes (nf a sample), what the worker did. */
	uint64_t *fsizes;
	size_t fsizes_cap;
	bool fitted;             /* re-encoded already (by the main thread): compress only */
	pack_fit_counts counts;
	pack_fit_fault fault;
	pack_fit_faults left;    /* samples left out (--on-error=skip), in order */
	bp_pack_encoded enc;
	int err;
} job;

typedef struct pool {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	job *jobs;
	size_t njobs;
	size_t *queue, qhead, qlen; /* FIFO of job indices, capacity njobs */
	bool stop;
	pthread_t *threads;
	unsigned nthreads, started;
	const ZSTD_CDict *cdict;
	int level;
	pack_fit_opts fit;       /* --max-side, --check-images, --on-error */
	bool images;             /* either of the first two: blocks go through a fitter */
	uint32_t nf;             /* bytes fields a sample */
} pool;

/*
 * A block's work: its images re-encoded (--max-side) or decoded
 * (--check-images), the samples whose images do not decode taken out
 * (--on-error=skip), then compressed.
 */
static int work(pool *p, ZSTD_CCtx *cctx, pack_fit *fit, job *j)
{
	int r;

	if (!cctx)
		return -ENOMEM;
	if (p->images && !j->framed && !j->fitted) {
		if (!fit)
			return -ENOMEM;
		r = pack_fit_block(fit, &j->raw, &j->raw_cap, &j->raw_size, j->sizes, j->fsizes,
				   &j->n, p->nf, &j->counts, &j->fault, &j->left);
		if (r < 0)
			return r;
		/* Every sample left out: no block to write. */
		if (j->n == 0)
			return 0;
		/* The main thread sized out for the bytes as read. */
		if (bp_buf_reserve(&j->out, &j->out_cap, ZSTD_compressBound(j->raw_size)) < 0)
			return -ENOMEM;
	}
	return bp_pack_block_encode(cctx, p->cdict, p->level, j->raw, j->raw_size, j->out,
				    j->out_cap, &j->enc);
}

static void *worker_main(void *arg)
{
	pool *p = arg;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	pack_fit *fit = NULL;

	/* No fitter: every block this worker takes fails with -ENOMEM. */
	if (p->images && pack_fit_new(&p->fit, &fit) < 0)
		fit = NULL;

	for (;;) {
		job *j;

		pthread_mutex_lock(&p->mu);
		while (!p->qlen && !p->stop)
			pthread_cond_wait(&p->work, &p->mu);
		if (!p->qlen) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		j = &p->jobs[p->queue[p->qhead]];
		p->qhead = (p->qhead + 1) % p->njobs;
		p->qlen--;
		pthread_mutex_unlock(&p->mu);

		/* The job is ours alone until we mark it done under the lock. */
		j->err = work(p, cctx, fit, j);

		pthread_mutex_lock(&p->mu);
		j->state = JOB_DONE;
		pthread_cond_broadcast(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
	ZSTD_freeCCtx(cctx);
	pack_fit_free(fit);
	return NULL;
}

static void pool_stop(pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->threads[i], NULL);
	p->started = 0;
}

static void pool_free(pool *p)
{
	pool_stop(p);
	for (size_t i = 0; p->jobs && i < p->njobs; i++) {
		free(p->jobs[i].raw);
		free(p->jobs[i].out);
		free(p->jobs[i].sizes);
		free(p->jobs[i].fsizes);
		pack_fit_faults_free(&p->jobs[i].left);
	}
	free(p->jobs);
	free(p->queue);
	free(p->threads);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mu);
}

static int pool_init(pool *p, const pack_create_opts *o, const ZSTD_CDict *cdict, uint32_t nf,
		     const pack_fit_opts *fit)
{
	unsigned threads = o->threads;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	p->cdict = cdict;
	p->level = o->level;
	p->fit = *fit;
	p->images = fit->max_side || fit->check;
	p->nf = nf;
	p->nthreads = threads;
	p->njobs = 2 * (size_t)threads;
	p->jobs = calloc(p->njobs, sizeof(*p->jobs));
	p->queue = calloc(p->njobs, sizeof(*p->queue));
	p->threads = calloc(threads, sizeof(*p->threads));
	if (!p->jobs || !p->queue || !p->threads)
		return -ENOMEM;
	for (; p->started < threads; p->started++) {
		int r = pthread_create(&p->threads[p->started], NULL, worker_main, p);

		if (r)
			return -r;
	}
	return 0;
}

/* Wait until job j is no longer queued. */
static void pool_wait(pool *p, job *j)
{
	pthread_mutex_lock(&p->mu);
	while (j->state == JOB_QUEUED)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void pool_submit(pool *p, job *j)
{
	pthread_mutex_lock(&p->mu);
	j->state = JOB_QUEUED;
	p->queue[(p->qhead + p->qlen) % p->njobs] = (size_t)(j - p->jobs);
	p->qlen++;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->mu);
}

/* ---- output: one file or a directory of shards ------------------------- */

typedef struct output {
	const char *final;       /* OUT as given */
	const pack_inputs *in;   /* the schema, keys and each sample's values */
	bp_field_value vals[BP_FIELD_MAX];
	char *tmp;               /* temporary file or directory beside it */
	bool sharded;
	int dirfd;               /* sharded: the temporary directory */
	int fd;                  /* current shard */
	unsigned shard;          /* shards finished */
	bp_pack_writer *w;
	const void *dict;
	size_t dict_size;
	uint64_t shard_size;
	uint32_t nf;             /* bytes fields a sample */
	pack_fit_opts fit;       /* --max-side, --check-images, --on-error */
	bool images;             /* either of the first two: bytes field sizes come with the jobs */
	/* Totals for the summary. */
	uint64_t blocks, stored, raw, by_codec[3], framed;
	pack_fit_counts fits;
	progress prog;
	uint64_t in_done;        /* bytes as read, of the blocks written */
} output;

static char *tmp_name_beside(const char *path)
{
	char *a = strdup(path), *b = strdup(path), *out = NULL;

	if (a && b && asprintf(&out, "%s/.%s.tmp-XXXXXX", dirname(a), basename(b)) < 0)
		out = NULL;
	free(a);
	free(b);
	return out;
}

/*
 * mode as open(2) and mkdir(2) would create it: less the umask. mkdtemp and
 * mkostemp make 0700 and 0600 whatever the umask, which would lock out a
 * batchd running as its own user.
 */
static mode_t less_umask(mode_t mode)
{
	mode_t mask = umask(0);

	umask(mask);
	return mode & ~mask;
}

/* A shard's writer on o->fd, with the schema and keys when the inputs have them, or a token pack's. */
static int writer_new(output *o)
{
	bp_pack_fault fault = { 0 };
	int r = bp_pack_writer_new(o->fd, o->dict, o->dict_size, &o->w);

	if (r == 0 && o->in->tok.width)
		r = bp_pack_writer_set_tokens(o->w, o->in->tok.width, o->in->tok.eos);
	if (r == 0 && o->in->fields)
		r = bp_pack_writer_set_schema_checked(o->w, &o->in->schema, o->in->keys, &fault);
	/* The scan checked names and counts; what is left is a limit, such as the schema's size. */
	if (r == -EINVAL && fault.what)
		fprintf(stderr, "batchd-pack: %s: the pack format refuses this schema: %s\n",
			o->final, fault.what);
	return r;
}

static int output_open(output *o)
{
	o->tmp = tmp_name_beside(o->final);
	if (!o->tmp)
		return -ENOMEM;
	o->fd = o->dirfd = -1;
	if (o->sharded) {
		if (!mkdtemp(o->tmp))
			return -errno;
		o->dirfd = open(o->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (o->dirfd < 0 || fchmod(o->dirfd, less_umask(0755)) < 0)
			return -errno;
		return 0;
	}
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd < 0)
		return -errno;
	if (fchmod(o->fd, less_umask(0644)) < 0)
		return -errno;
	return writer_new(o);
}

static int shard_begin(output *o)
{
	char name[32];

	snprintf(name, sizeof(name), "part-%06u.bpk", o->shard);
	o->fd = openat(o->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (o->fd < 0)
		return -errno;
	return writer_new(o);
}

static int shard_end(output *o)
{
	int r = bp_pack_writer_finish(o->w, NULL);
	const char *key;
	size_t len;

	/* The scan refused duplicate keys; this is the writer's own check agreeing. */
	if (r == -EEXIST && bp_pack_writer_duplicate_key(o->w, &key, &len) == 0)
		fprintf(stderr, "batchd-pack: %s: duplicate key '%.*s'\n", o->final, (int)len, key);

	if (r == 0 && fsync(o->fd) < 0)
		r = -errno;
	if (close(o->fd) < 0 && r == 0)
		r = -errno;
	o->fd = -1;
	bp_pack_writer_free(o->w);
	o->w = NULL;
	if (r == 0)
		o->shard++;
	return r;
}

/*
 * The values and keys of job j's samples kept (of a frame's sample when
 * it is the first frame), handed to the writer ahead of their block: the
 * samples read, first .. first+nread-1, but those left out. Through a
 * fitter, the bytes fields' sizes are the job's (fsizes, nf a sample
 * kept), the images in them re-encoded.
 */
static int output_fields(output *o, const job *j)
{
	size_t n = j->framed ? bp_pack_writer_owed(o->w) == 0 : j->nread, left = 0, k = 0;

	for (size_t i = 0; i < n; i++) {
		const bp_schema *s = &o->in->schema;
		const char *key;
		size_t len;
		int r;

		if (left < j->left.n && j->left.v[left].sample == i) {
			left++;
			continue;
		}
		pack_inputs_fields(o->in, j->first + i, o->vals, &key, &len);
		for (uint32_t f = 0, b = 0; o->images && f < s->count; f++) {
			if (s->fields[f].type == BP_FIELD_BYTES)
				o->vals[f].size = j->fsizes[k * o->nf + b++];
		}
		k++;
		r = bp_pack_writer_add_fields(o->w, o->vals, key, len);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Write one finished block. */
static int output_block(output *o, const job *j)
{
	int r;

	if (!o->w && (r = shard_begin(o)) < 0)
		return r;
	if (o->in->fields && (r = output_fields(o, j)) < 0)
		return r;
	if (j->framed) {
		/* The writer counts a framed sample once, at its first frame. */
		o->framed += bp_pack_writer_owed(o->w) == 0;
		r = bp_pack_writer_add_frame(o->w, &j->enc, j->raw_size, j->framed);
	} else {
		r = bp_pack_writer_add(o->w, &j->enc, j->raw_size, j->sizes, j->n);
	}
	if (r < 0)
		return r;
	o->blocks++;
	o->stored += j->enc.stored_size;
	o->raw += j->raw_size;
	o->by_codec[j->enc.codec]++;
	o->in_done += j->in_size;
	progress_update(&o->prog, o->in_done, false);
	/* A shard ends between samples: a framed sample's frames stay together. */
	if (o->sharded && bp_pack_writer_offset(o->w) >= o->shard_size &&
	    bp_pack_writer_owed(o->w) == 0)
		return shard_end(o);
	return 0;
}

static int fsync_parent(const char *path)
{
	char *a = strdup(path);
	int fd, r = 0;

	if (!a)
		return -ENOMEM;
	fd = open(dirname(a), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(a);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

static int output_commit(output *o)
{
	int r;

	if (o->w && (r = shard_end(o)) < 0)
		return r;
	if (o->sharded && fsync(o->dirfd) < 0)
		return -errno;
	if (renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->final, RENAME_NOREPLACE) < 0) {
		if (errno != EINVAL && errno != ENOSYS)
			return -errno;
		/* File systems without RENAME_NOREPLACE: check, then rename. */
		if (access(o->final, F_OK) == 0)
			return -EEXIST;
		if (rename(o->tmp, o->final) < 0)
			return -errno;
	}
	free(o->tmp);
	o->tmp = NULL;
	return fsync_parent(o->final);
}

/* Remove whatever a failed create left under the temporary name. */
static void output_discard(output *o)
{
	if (o->fd >= 0)
		close(o->fd);
	bp_pack_writer_free(o->w);
	o->w = NULL;
	if (o->tmp && o->sharded && o->dirfd >= 0) {
		for (unsigned i = 0; i <= o->shard; i++) {
			char name[32];

			snprintf(name, sizeof(name), "part-%06u.bpk", i);
			unlinkat(o->dirfd, name, 0);
		}
		rmdir(o->tmp);
	} else if (o->tmp) {
		unlink(o->tmp);
	}
	if (o->dirfd >= 0)
		close(o->dirfd);
	free(o->tmp);
	o->tmp = NULL;
}

/* ---- the packing pass ------------------------------------------------------ */

/* Write a compressed block; input errors were reported where they happened. */
static int emit(output *out, job *j)
{
	char name[4352];
	int r = j->err;

	j->state = JOB_FREE;
	if (r < 0 && j->fault.why[0]) {
		pack_inputs_name(out->in, j->first + j->fault.sample, name, sizeof(name));
		pack_fit_report(out->in, &out->fit, name, &j->fault, false);
		return r;
	}
	if (r < 0) {
		fprintf(stderr, "batchd-pack: %s a block failed: %s\n",
			out->fit.max_side ? "re-encoding images of or compressing"
			: out->fit.check ? "decoding images of or compressing" : "compressing",
			strerror(-r));
		return r;
	}
	for (size_t k = 0; k < j->left.n; k++) {
		pack_inputs_name(out->in, j->first + j->left.v[k].sample, name, sizeof(name));
		pack_fit_report(out->in, &out->fit, name, &j->left.v[k], true);
	}
	out->fits.fitted += j->counts.fitted;
	out->fits.kept += j->counts.kept;
	out->fits.other += j->counts.other;
	out->fits.left += j->counts.left;
	if (!j->framed && j->n == 0) {
		out->in_done += j->in_size;
		progress_update(&out->prog, out->in_done, false);
		return 0;
	}
	r = output_block(out, j);
	if (r < 0)
		fprintf(stderr, "batchd-pack: writing %s: %s\n", out->final, strerror(-r));
	return r;
}

/* The slot of block *seq, its earlier block written first; emptied. @return 0 or an error. */
static int take_slot(pool *p, output *out, uint64_t seq, job **ret)
{
	job *j = &p->jobs[seq % p->njobs];
	int r;

	pool_wait(p, j);
	if (j->state == JOB_DONE && (r = emit(out, j)) < 0)
		return r;
	j->raw_size = 0;
	j->n = j->nread = 0;
	j->left.n = 0;
	j->framed = 0;
	j->in_size = 0;
	j->fitted = false;
	j->counts = (pack_fit_counts){ 0 };
	j->fault.why[0] = '\0';
	*ret = j;
	return 0;
}

/* Room in j for one more sample's size and its nf bytes field sizes. @return 0 or -ENOMEM. */
static int job_room(job *j, uint32_t nf)
{
	size_t cap;
	void *v;

	if (j->n == j->sizes_cap) {
		cap = j->sizes_cap * 2 + 8;
		if (!(v = realloc(j->sizes, cap * sizeof(*j->sizes))))
			return -ENOMEM;
		j->sizes = v;
		j->sizes_cap = cap;
	}
	if ((j->n + 1) * nf > j->fsizes_cap) {
		cap = (j->n * 2 + 8) * nf;
		if (!(v = realloc(j->fsizes, cap * sizeof(*j->fsizes))))
			return -ENOMEM;
		j->fsizes = v;
		j->fsizes_cap = cap;
	}
	return 0;
}

/* Hand block j (filled) to the workers as block *seq. @return 0 or -ENOMEM. */
static int submit(pool *p, job *j, uint64_t *seq)
{
	if (bp_buf_reserve(&j->out, &j->out_cap, ZSTD_compressBound(j->raw_size)) < 0)
		return -ENOMEM;
	j->nread = j->n;
	pool_submit(p, j);
	(*seq)++;
	return 0;
}

/* Write the blocks still in flight, oldest first. */
static int drain(pool *p, output *out, uint64_t seq)
{
	uint64_t oldest = seq > p->njobs ? seq - p->njobs : 0;
	int r;

	for (uint64_t s = oldest; s < seq; s++) {
		job *k = &p->jobs[s % p->njobs];

		pool_wait(p, k);
		if (k->state == JOB_DONE && (r = emit(out, k)) < 0)
			return r;
	}
	return 0;
}

/*
 * A sample over the frame size, read whole; with --max-side or
 * --check-images, fitted on the main thread.
 */
typedef struct big_sample {
	uint8_t *buf;
	size_t cap;
	pack_fit *fit;
	pack_fit_faults left;    /* the sample, when left out */
	uint64_t fs[BP_FIELD_MAX]; /* its bytes field sizes */
} big_sample;

/*
 * --max-side, --check-images for the big sample (*size bytes, sample
 * id): *size becomes what it is after. @return 0; 1 left out
 * (--on-error=skip), said; or a negative errno, said. The blocks in
 * flight (before block seq) hold earlier samples: they are written
 * before either is said, so that what is said comes in sample order.
 */
static int fit_big(pack_iter *it, pool *p, output *out, uint64_t id, uint64_t *size,
		   uint64_t seq, big_sample *big)
{
	pack_fit_fault fault = { .field = PACK_FIT_WHOLE };
	uint64_t sizes[1] = { *size };
	size_t n = 1;
	int r = 0, d;

	if (!big->fit)
		r = pack_fit_new(&out->fit, &big->fit);
	if (r == 0) {
		pack_fit_field_sizes(out->in, id, *size, big->fs);
		big->left.n = 0;
		r = pack_fit_block(big->fit, &big->buf, &big->cap, size, sizes, big->fs, &n,
				   out->nf, &out->fits, &fault, &big->left);
	}
	if (r == 0 && n == 1)
		return 0;
	if ((d = drain(p, out, seq)) < 0)
		return d;
	if (r == 0) {
		pack_fit_report(out->in, &out->fit, pack_iter_name(it), &big->left.v[0], true);
		return 1;
	}
	if (!fault.why[0])
		snprintf(fault.why, sizeof(fault.why), "%s", strerror(-r));
	pack_fit_report(out->in, &out->fit, pack_iter_name(it), &fault, false);
	return r;
}

/* A big sample re-encoded to within a frame: a block of its own, to compress as it is. */
static int pack_whole(pool *p, output *out, const big_sample *big, uint64_t size, uint64_t id,
		      uint64_t in_size, uint64_t *seq)
{
	job *j;
	int r = take_slot(p, out, *seq, &j);

	if (r < 0)
		return r;
	if (bp_buf_reserve(&j->raw, &j->raw_cap, size) < 0 || job_room(j, out->nf) < 0)
		return -ENOMEM;
	memcpy(j->raw, big->buf, size);
	memcpy(j->fsizes, big->fs, out->nf * sizeof(*j->fsizes));
	j->sizes[j->n++] = size;
	j->raw_size = size;
	j->in_size = in_size;
	j->first = id;
	j->fitted = true;
	return submit(p, j, seq);
}

/*
 * The current sample, of size bytes > the frame size, as frames of that
 * size (the last one the rest), each a block of its own. The sample is
 * read whole into big first, since inputs read a sample at a time; with
 * --max-side or --check-images it is fitted there (and perhaps left out),
 * and if it then fits a frame it goes whole in a block.
 */
static int pack_framed(pack_iter *it, const pack_create_opts *o, pool *p, output *out,
		       uint64_t size, uint64_t id, uint64_t *seq, big_sample *big)
{
	uint64_t in_size = size;
	int r = bp_buf_reserve(&big->buf, &big->cap, size);

	if (r == 0)
		r = pack_iter_read(it, big->buf);
	if (r == 0 && out->images)
		r = fit_big(it, p, out, id, &size, *seq, big);
	if (r == 1) {
		out->in_done += in_size;
		progress_update(&out->prog, out->in_done, false);
		return 0;
	}
	if (r == 0 && out->images && size <= o->frame_size)
		return pack_whole(p, out, big, size, id, in_size, seq);
	for (uint64_t at = 0; r == 0 && at < size;) {
		uint64_t n = size - at < o->frame_size ? size - at : o->frame_size;
		job *j;

		r = take_slot(p, out, *seq, &j);
		if (r < 0)
			break;
		if (bp_buf_reserve(&j->raw, &j->raw_cap, n) < 0 ||
		    (out->images && job_room(j, out->nf) < 0))
			return -ENOMEM;
		memcpy(j->raw, big->buf + at, n);
		if (out->images)
			memcpy(j->fsizes, big->fs, out->nf * sizeof(*j->fsizes));
		j->raw_size = n;
		j->in_size = at == 0 ? in_size : 0;
		j->framed = size;
		j->first = id;
		r = submit(p, j, seq);
		at += n;
	}
	return r;
}

/* Append the current sample (size bytes, global id) to block j. @return 0 or a negative errno. */
static int add_sample(pack_iter *it, const output *out, job *j, uint64_t size, uint64_t id)
{
	if (bp_buf_reserve(&j->raw, &j->raw_cap, j->raw_size + size) < 0 ||
	    job_room(j, out->images ? out->nf : 0) < 0)
		return -ENOMEM;
	if (out->images)
		pack_fit_field_sizes(out->in, id, size, j->fsizes + j->n * out->nf);
	j->sizes[j->n++] = size;
	j->raw_size += size;
	j->in_size += size;
	return pack_iter_read(it, j->raw + j->raw_size - size);
}

static int pack_samples(pack_inputs *in, const pack_create_opts *o, pool *p, output *out)
{
	uint64_t seq = 0, size, id = 0;
	big_sample big = { 0 };
	pack_iter *it;
	job *j = NULL;
	int r, more;

	r = pack_iter_new(in, &it);
	if (r < 0)
		return r;
	more = pack_iter_next(it, &size);
	while (more == 1) {
		if (interrupted) {
			r = -EINTR;
			goto out;
		}
		if (size > o->frame_size) {
			/* The block before it was closed when its size was seen: j is NULL. */
			r = pack_framed(it, o, p, out, size, id++, &seq, &big);
			if (r < 0)
				goto out;
			more = pack_iter_next(it, &size);
			continue;
		}
		if (!j && (r = take_slot(p, out, seq, &j)) < 0)
			goto out;
		if (j->n == 0)
			j->first = id;
		r = add_sample(it, out, j, size, id++);
		if (r < 0)
			goto out;

		more = pack_iter_next(it, &size);
		/* Close the block at the target size, before the limit, before a frame, or at the end. */
		if (more != 1 || o->block_size == 0 || j->raw_size >= o->block_size ||
		    j->raw_size + size > BP_PACK_MAX_BLOCK || size > o->frame_size) {
			r = submit(p, j, &seq);
			if (r < 0)
				goto out;
			j = NULL;
		}
	}
	r = more;
	if (r == 0)
		r = drain(p, out, seq);
out:
	free(big.buf);
	pack_fit_free(big.fit);
	pack_fit_faults_free(&big.left);
	pack_iter_free(it);
	return r;
}

/*
 * The summary line's part for what the inputs held besides the samples
 * packed: how many were left out and why (undecodable: --on-error=skip
 * with --check-images or --max-side), hidden names ignored, and
 * empty samples (packed). Nothing when there were none, so a clean
 * input's line is as it always was.
 */
static void print_tally(const pack_tally *t, uint64_t undecodable)
{
	const struct {
		uint64_t n;
		const char *one, *many;
	} why[] = {
		{ t->special, "special file", "special files" },
		{ t->symlinks, "symlink", "symlinks" },
		{ t->unreadable, "unreadable", "unreadable" },
		{ undecodable, "image that does not decode", "images that do not decode" },
	};
	uint64_t left = 0;
	const char *sep = " (";

	for (size_t k = 0; k < sizeof(why) / sizeof(why[0]); k++)
		left += why[k].n;
	if (left) {
		printf("; %" PRIu64 " left out", left);
		for (size_t k = 0; k < sizeof(why) / sizeof(why[0]); k++) {
			if (!why[k].n)
				continue;
			printf("%s%" PRIu64 " %s", sep, why[k].n, why[k].n == 1 ? why[k].one : why[k].many);
			sep = ", ";
		}
		printf(")");
	}
	if (t->hidden)
		printf("; %" PRIu64 " hidden ignored (names starting with '.')", t->hidden);
	if (t->empty)
		printf("; %" PRIu64 " empty (0 bytes)", t->empty);
}

/*
 * A token pack's summary line: "OUT: N documents, T tokens (uint16, eos
 * 50256) in B blocks; R MB raw, S MB stored (ratio X.XX)", then what else
 * there is to say.
 */
static void print_tokens(const char *path, const pack_inputs *in, const output *out, double secs)
{
	printf("%s: %" PRIu64 " document%s, %" PRIu64 " token%s (%s, ", path, in->samples,
	       in->samples == 1 ? "" : "s", in->tally.tokens, in->tally.tokens == 1 ? "" : "s",
	       in->tok.width == 2 ? "uint16" : "uint32");
	if (in->tok.eos == BP_TOKENS_NO_EOS)
		printf("no eos");
	else
		printf("eos %" PRIu64, in->tok.eos);
	printf(") in %" PRIu64 " blocks", out->blocks);
	if (out->framed)
		printf(" (%" PRIu64 " documents in frames)", out->framed);
	printf("; %.2f MB raw, %.2f MB stored (ratio %.2f)", (double)out->raw / 1e6,
	       (double)out->stored / 1e6, out->stored ? (double)out->raw / (double)out->stored : 1.0);
	if (out->sharded)
		printf("; %u shards", out->shard);
	if (in->tally.eos_added)
		printf("; eos appended to %" PRIu64, in->tally.eos_added);
	if (in->tally.empty_docs)
		printf("; %" PRIu64 " empty documents left out", in->tally.empty_docs);
	if (out->dict_size)
		printf("; dictionary %zu bytes", out->dict_size);
	printf("; %.2f s, %.1f MB/s\n", secs, secs > 0 ? (double)in->raw_bytes / secs / 1e6 : 0.0);
}

static void print_summary(const char *path, const pack_inputs *in, const output *out,
			  const pack_create_opts *o, double secs)
{
	char raw[32], stored[32];

	if (in->tok.width) {
		print_tokens(path, in, out, secs);
		return;
	}

	printf("%s: %" PRIu64 " samples in %" PRIu64 " blocks", path, in->samples - out->fits.left,
	       out->blocks);
	if (out->framed)
		printf(" (%" PRIu64 " samples in frames)", out->framed);
	if (out->sharded)
		printf(", %u shards", out->shard);
	print_tally(&in->tally, out->fits.left);
	printf("; %s raw -> %s stored (%.2fx)", bp_format_size(out->raw, raw, sizeof(raw)),
	       bp_format_size(out->stored, stored, sizeof(stored)),
	       out->stored ? (double)out->raw / (double)out->stored : 1.0);
	if (out->images)
		pack_fit_print(&out->fits, &out->fit, in->raw_bytes);
	if (out->dict_size)
		printf("; dictionary %zu bytes", out->dict_size);
	for (uint32_t f = 0; in->fields && f < in->schema.count; f++)
		printf("%s%s:%s", f ? "," : "; fields ", in->schema.fields[f].name,
		       bp_field_type_name(in->schema.fields[f].type));
	if (in->fields)
		printf("; %s", in->keys ? "keys" : "no keys");
	printf("; %" PRIu64 " zstd, %" PRIu64 " zstd+dict, %" PRIu64 " raw blocks",
	       out->by_codec[BP_CODEC_ZSTD], out->by_codec[BP_CODEC_ZSTD_DICT],
	       out->by_codec[BP_CODEC_RAW]);
	printf("; %.2f s, %.1f MB/s\n", secs, secs > 0 ? (double)in->raw_bytes / secs / 1e6 : 0.0);
}

#if BATCHD_FAULT_INJECTION
/*
 * Tests only (-Dfault_injection=true): run $BATCHD_PACK_AFTER_SCAN between
 * the scan and the reads, so a test can change the inputs exactly there
 * (tests/cli/test-pack-confined.sh swaps a directory for a symlink).
 */
static int after_scan(void)
{
	const char *cmd = getenv("BATCHD_PACK_AFTER_SCAN");

	if (cmd && system(cmd) != 0) {
		fprintf(stderr, "batchd-pack: BATCHD_PACK_AFTER_SCAN failed: %s\n", cmd);
		return -ECANCELED;
	}
	return 0;
}
#else
static int after_scan(void)
{
	return 0;
}
#endif

int pack_create(const char *path, pack_inputs *in, const pack_create_opts *o)
{
	struct sigaction sa = { .sa_handler = on_signal }, old[3];
	static const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
	output out = { .final = path, .in = in, .sharded = o->shard_size != 0, .fd = -1,
		       .dirfd = -1, .shard_size = o->shard_size };
	ZSTD_CDict *cdict = NULL;
	void *dict = NULL;
	double t0 = cli_now();
	struct stat st;
	pool p;
	int r;

	if (lstat(path, &st) == 0) {
		fprintf(stderr, "batchd-pack: %s: already exists; remove it or choose another name\n",
			path);
		return -EEXIST;
	}
	r = pack_inputs_scan(in);
	if (r == 0)
		r = after_scan();
	if (r < 0)
		return r;
	r = pack_train_dict(in, o, &dict, &out.dict_size);
	if (r < 0)
		return r;
	out.dict = dict;
	if (dict && !(cdict = ZSTD_createCDict(dict, out.dict_size, o->level))) {
		free(dict);
		return -ENOMEM;
	}

	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);
	out.nf = in->fields ? bp_schema_bytes_fields(&in->schema) : 1;
	out.fit = (pack_fit_opts){ .max_side = o->max_side, .quality = o->jpeg_quality,
				   .check = o->check_images,
				   .skip = in->fo.on_error == ON_ERROR_SKIP };
	out.images = o->max_side || o->check_images;
	r = pool_init(&p, o, cdict, out.nf, &out.fit);
	if (r < 0) {
		fprintf(stderr, "batchd-pack: cannot start compression threads: %s\n", strerror(-r));
		goto out;
	}
	r = output_open(&out);
	if (r < 0) {
		fprintf(stderr, "batchd-pack: %s: cannot create: %s\n", path, strerror(-r));
		goto out;
	}
	progress_start(&out.prog, "packing", in->raw_bytes);
	r = pack_samples(in, o, &p, &out);
	progress_end(&out.prog);
	if (r == -EINTR) {
		fprintf(stderr, "batchd-pack: interrupted; %s not created\n", o->name ? o->name : path);
		goto out;
	}
	if (r < 0)
		goto out;
	r = output_commit(&out);
	if (r < 0) {
		fprintf(stderr, "batchd-pack: %s: cannot finish: %s\n", path, strerror(-r));
		goto out;
	}
	print_summary(o->name ? o->name : path, in, &out, o, cli_now() - t0);
out:
	pool_free(&p);
	output_discard(&out);
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
	ZSTD_freeCDict(cdict);
	free(dict);
	return r;
}

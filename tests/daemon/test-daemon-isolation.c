/* SPDX-License-Identifier: MIT */
/*
 * test-daemon-isolation.c - what goes wrong in one session costs that
 * session alone: a real batchd on a temporary socket, driven through
 * libbatchclient and, where the point is abuse, a raw protocol client.
 *
 * A corrupt block fails its own batches and nothing else; a dead client's
 * session and memory come back; paths outside the roots, odd files, GPU
 * placement without CUDA, abusive messages, sessions over the memory
 * budget and hostile control memory are refused or end that session
 * only, while a stream beside them goes on, byte for byte as the pack
 * has it.
 *
 * Why a suite of its own: test-daemon.c proves what a trainer gets from a
 * healthy daemon; this one proves that one client's damage (its dataset,
 * its death, its messages, its shared memory) reaches nobody else. Both
 * start their daemon through daemon-fixture.h and end every fixture by
 * stopping it with SIGTERM and asserting exit 0 (in sanitizer builds: no
 * leak either).
 *
 * The datasets are daemon-testlib.h's, made once in main() with
 * batchd-pack. BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "daemon-fixture.h"
#include "daemon-testlib.h"
#include "ring.h"

static char E[2048];             /* why dt_* failed */

/* ---- fixtures --------------------------------------------------------------- */

static void setup_mem32(void)
{
	dt_setup_dir();
	D.memory = "32M";
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd --memory 32M did not start");
}

/* ---- helpers ------------------------------------------------------------------ */

static bool cuda_available(void)
{
	char *json = dt_status_ok();
	bool yes = strstr(json, "\"cuda\": {\"available\": true") != NULL;

	free(json);
	return yes;
}

/* ---- 1. a corrupt block fails its own batches and nothing else ---------------------- */

static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	char buf[65536];
	ssize_t n;

	ck_assert_int_ge(in, 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	close(in);
	close(out);
}

START_TEST(test_corrupt_block)
{
	const char *name = datasets[_i];
	char bad[64], from[512], to[512], shard_path[PATH_MAX], want[128];
	const bp_shard *sh;
	const char *shard_name;
	bp_pack_block blk;
	uint64_t block = 0, lo, hi;
	size_t si;
	uint8_t byte;
	int fd;
	bc_client *c = dt_connect_ok();
	bc_stream_opts ob, og;
	bc_stream *sb, *sg;
	dt_run rb = { 0 }, rg = { 0 };
	dt_ref ref;
	uint64_t nb;

	/* The corrupt copy, beside the pristine dataset in the daemon's root. */
	dt_ref_ok(&ref, name);
	snprintf(bad, sizeof(bad), "bad-%s", name);
	snprintf(from, sizeof(from), "%s/%s", dt_g.packs, name);
	dt_root_path(&D, bad, to, sizeof(to));
	si = bp_dataset_shard_count(ref.ds) > 1 ? 1 : 0;
	sh = bp_dataset_shard(ref.ds, si);
	if (bp_dataset_shard_count(ref.ds) > 1) {
		ck_assert_int_eq(mkdir(to, 0755), 0);
		for (size_t i = 0; i < bp_dataset_shard_count(ref.ds); i++) {
			char a[PATH_MAX + 300], b2[PATH_MAX + 300];

			snprintf(a, sizeof(a), "%s/%s", from, bp_dataset_shard(ref.ds, i)->name);
			snprintf(b2, sizeof(b2), "%s/%s", to, bp_dataset_shard(ref.ds, i)->name);
			copy_file(a, b2);
		}
		snprintf(shard_path, sizeof(shard_path), "%s/%s", to, sh->name);
	} else {
		copy_file(from, to);
		snprintf(shard_path, sizeof(shard_path), "%s", to);
	}
	/* A block in the second half with some stored bytes: flip one in its middle. */
	for (block = sh->index.block_count / 2; block < sh->index.block_count; block++) {
		bp_pack_index_block(&sh->index, block, &blk);
		if (blk.stored_size >= 16)
			break;
	}
	ck_assert_uint_lt(block, sh->index.block_count);
	fd = open(shard_path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, (off_t)(blk.offset + blk.stored_size / 2)), 1);
	byte ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &byte, 1, (off_t)(blk.offset + blk.stored_size / 2)), 1);
	close(fd);
	lo = sh->first_sample + blk.first_sample;
	hi = lo + blk.sample_count;

	dt_opts(&ob, bad, 10, BC_SHUFFLE_NONE, 0);
	dt_opts(&og, name, 10, BC_SHUFFLE_NONE, 0);
	sb = dt_open_ok(c, &ob);
	sg = dt_open_ok(c, &og);
	nb = bc_stream_batches_per_epoch(sb);
	/* Interleaved, so both sessions' blocks are in the pipeline together. */
	for (uint64_t k = 0; k < nb; k++) {
		dt_consume_ok(sb, &ref, 1, DT_KEEP_FAILURES, &rb, "corrupt stream");
		dt_consume_ok(sg, &ref, 1, 0, &rg, "good stream beside a corrupt one");
	}
	ck_assert_uint_eq(rg.batches, nb);
	ck_assert_uint_eq(rg.failures, 0);
	expect_sampler_order(&rg, &ref, &og);

	snprintf(want, sizeof(want), "block %" PRIu64, block);
	for (uint64_t k = 0; k < nb; k++) {
		const dt_event *ev = &rb.ev[k];
		bool hit = k * 10 < hi && lo < (k + 1) * 10;

		expect(ev->epoch == 0 && ev->batch == k, "corrupt stream: event %" PRIu64 " is batch %"
		       PRIu64, k, ev->batch);
		expect(hit ? ev->result == -EBADMSG : ev->result == 0,
		       "%s, block %" PRIu64 " (samples %" PRIu64 "..%" PRIu64 ") corrupt: batch %"
		       PRIu64 " gave %s (%d)", name, block, lo, hi - 1, k, bc_strerror(ev->result),
		       ev->result);
		if (!hit)
			for (uint32_t i = 0; i < ev->count; i++)
				expect(rb.ids[ev->first + i] == k * 10 + i, "corrupt stream: batch %" PRIu64
				       " holds id %" PRIu64, k, rb.ids[ev->first + i]);
	}
	/* A one-file dataset is its own shard; a directory's shards go by file name. */
	shard_name = bp_dataset_shard_count(ref.ds) > 1 ? sh->name : bad;
	expect(rb.failures >= 1, "no batch failed");
	expect(strstr(rb.last_error, bad) && strstr(rb.last_error, shard_name) &&
	       strstr(rb.last_error, want),
	       "bc_stream_error does not name dataset %s, shard %s and %s: \"%s\"", bad,
	       shard_name, want, rb.last_error);
	dt_run_free(&rb);
	dt_run_free(&rg);
	ck_assert_int_eq(bc_close(sb), 0);
	ck_assert_int_eq(bc_close(sg), 0);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 2. a client that dies gives its session and memory back ------------------------- */

struct idle_ctx {
	uint64_t used0;
	size_t sessions;
	uint64_t used;
};

static bool back_to_baseline(const char *json, void *arg)
{
	struct idle_ctx *ic = arg;

	ic->sessions = dt_json_sessions(json);
	return dt_json_u64(json, "\"memory\": {", "sessions", &ic->used) && ic->sessions == 0 &&
	       ic->used == ic->used0;
}

START_TEST(test_client_death)
{
	struct idle_ctx ic = { 0 };
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	char *json, ready;
	uint64_t used = 0;
	int up[2], down[2], st;
	pid_t pid;

	json = dt_status_ok();
	ck_assert(dt_json_u64(json, "\"memory\": {", "sessions", &ic.used0));
	ck_assert_uint_eq(dt_json_sessions(json), 0);
	free(json);

	/* up: child -> parent "streaming"; down: parent -> child "die now". */
	ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(down, O_CLOEXEC), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		bc_batch *b;
		int fails = 0;

		close(up[0]);
		close(down[1]);
		if (bc_connect(D.sock, &c) < 0)
			_exit(2);
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_GLOBAL, 3);
		o.prefetch = 4;
		if (bc_open(c, &o, &s) < 0)
			_exit(3);
		for (int i = 0; i < 3; i++) {
			fails += bc_next(s, &b, WAIT_MS) != 0;
			if (!fails && i < 2)
				bc_release(b);   /* the last one stays held */
		}
		if (fails || write(up[1], "k", 1) != 1)
			_exit(4);
		if (_i == 0 && read(down[0], &ready, 1) == 1)
			_exit(0);        /* gone without bc_close or bc_disconnect */
		pause();                 /* killed with SIGKILL below */
		_exit(5);
	}
	close(up[1]);
	close(down[0]);
	ck_assert_msg(read(up[0], &ready, 1) == 1, "the client child failed to start a stream");
	close(up[0]);

	json = dt_status_ok();
	expect(dt_json_sessions(json) == 1 && dt_json_u64(json, "\"memory\": {", "sessions", &used) &&
	       used > ic.used0, "while the child streams: %s", json);
	free(json);
	if (_i == 1)
		kill(pid, SIGKILL);
	else
		ck_assert_int_eq(write(down[1], "x", 1), 1);
	close(down[1]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	if (_i == 0)
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	else
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %d", st);

	expect(dt_wait_status(D.sock, back_to_baseline, &ic, TRIES),
	       "after the client died: %zu sessions, %" PRIu64 " bytes of session memory (baseline %" PRIu64 ")",
	       ic.sessions, ic.used, ic.used0);

	/* And the daemon serves the next client as usual. */
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_GLOBAL, 3);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 10, 0, &run, "after a client died");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 3. paths outside the roots, odd files, and GPU placement are refused ------------ */

struct fifo_watch {
	const char *path;
	volatile int done;
	bool blocked;
};

/* If the open is still pending after a while, see whether the daemon is stuck
 * in open(2) on the FIFO (a writer can then open it) and let it go. */
static void *fifo_watch_main(void *arg)
{
	struct fifo_watch *fw = arg;

	for (int i = 0; i < 200 && !__atomic_load_n(&fw->done, __ATOMIC_ACQUIRE); i++)
		usleep(10000);
	while (!__atomic_load_n(&fw->done, __ATOMIC_ACQUIRE)) {
		int fd = open(fw->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);

		if (fd >= 0) {
			fw->blocked = true;
			close(fd);
		}
		usleep(10000);
	}
	return NULL;
}

START_TEST(test_refused_paths)
{
	char abs_out[PATH_MAX], link[PATH_MAX], target[PATH_MAX], path[PATH_MAX];
	struct fifo_watch fw = { 0 };
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *host, *s;
	dt_run run = { 0 };
	dt_ref ref;
	pthread_t t;
	int r;

	dt_ref_ok(&ref, DSET_ONE);
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
	host = dt_open_ok(c, &o);
	dt_consume_ok(host, &ref, 2, 0, &run, "host stream before the refusals");

	/* A real dataset, but outside the root; and something that is no dataset at all. */
	snprintf(abs_out, sizeof(abs_out), "%s/" DSET_ONE, dt_g.packs);
	dt_open_refused(c, abs_out, -EACCES, abs_out);
	dt_open_refused(c, "/etc/passwd", -EACCES, "/etc/passwd");
	dt_open_refused(c, "../x", -EACCES, "../x");
	dt_open_refused(c, "shards/../../x", -EACCES, "shards/../../x");

	/* Symlinks inside the root that lead out of it, absolute or relative. */
	ck_assert_int_eq(symlink(abs_out, dt_root_path(&D, "abs-link.bpk", link, sizeof(link))), 0);
	dt_open_refused(c, "abs-link.bpk", -EACCES, "abs-link.bpk");
	snprintf(target, sizeof(target), "../../packs/" DSET_ONE);
	ck_assert_int_eq(symlink(target, dt_root_path(&D, "rel-link.bpk", link, sizeof(link))), 0);
	dt_open_refused(c, "rel-link.bpk", -EACCES, "rel-link.bpk");
	ck_assert_int_eq(symlink("/dev/null", dt_root_path(&D, "null.bpk", link, sizeof(link))), 0);
	dt_open_refused(c, "null.bpk", -EACCES, "null.bpk");

	dt_open_refused(c, "missing.bpk", -ENOENT, "missing.bpk");
	dt_open_refused(c, dt_root_path(&D, "missing.bpk", path, sizeof(path)), -ENOENT, path);
	ck_assert_int_eq(mkdir(dt_root_path(&D, "empty", path, sizeof(path)), 0755), 0);
	dt_open_refused(c, "empty", -ENODATA, "empty");

	/* A FIFO is no dataset; opening it must neither succeed nor hang the daemon. */
	fw.path = dt_root_path(&D, "fifo.bpk", path, sizeof(path));
	ck_assert_int_eq(mkfifo(fw.path, 0644), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, fifo_watch_main, &fw), 0);
	dt_opts(&o, "fifo.bpk", 4, BC_SHUFFLE_NONE, 0);
	s = NULL;
	r = bc_open(c, &o, &s);
	__atomic_store_n(&fw.done, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	if (r == 0)
		bc_close(s);
	expect(!fw.blocked, "the daemon blocked in open(2) on a FIFO in its root (freed by the "
	       "test opening the write end); the open then gave %s (%d): \"%s\"", bc_strerror(r),
	       r, bc_client_error(c));
	expect(r == -EINVAL && strstr(bc_client_error(c), "fifo.bpk"),
	       "open fifo.bpk: %s (%d): \"%s\", expected -EINVAL naming it", bc_strerror(r), r,
	       bc_client_error(c));

	/* An absolute path under the root is fine. */
	dt_opts(&o, dt_root_path(&D, DSET_ONE, path, sizeof(path)), 8, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 3, 0, &run, "absolute path under the root");
	ck_assert_int_eq(bc_close(s), 0);

	/* GPU placement on a daemon without CUDA: refused, host sessions unharmed. */
	if (!cuda_available()) {
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
		o.device = 0;
		s = NULL;
		r = bc_open(c, &o, &s);
		if (r == 0)
			bc_close(s);
		expect(r == -ENODEV && strstr(bc_client_error(c), "no CUDA device"),
		       "device 0 without CUDA: %s (%d): \"%s\"", bc_strerror(r), r,
		       bc_client_error(c));
	} else {
		/* With a device: a GPU session, or a clear refusal; never harm to the host stream. */
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
		o.device = 0;
		s = NULL;
		r = bc_open(c, &o, &s);
		if (r == 0)
			bc_close(s);
		printf("NOTE: CUDA device present; device 0 open gave %s (%d): %s\n",
		       bc_strerror(r), r, bc_client_error(c));
		expect(r == 0 || r == -EOPNOTSUPP, "device 0 with CUDA: %s (%d): \"%s\"",
		       bc_strerror(r), r, bc_client_error(c));
	}
	dt_consume_ok(host, &ref, 5, 0, &run, "host stream after the refusals");
	ck_assert_int_eq(bc_close(host), 0);
	/* Closed sessions leave the list once their last reads are back; refused ones never join. */
	expect(dt_wait_sessions(D.sock, 0, TRIES), "refused opens left sessions behind");
	dt_run_free(&run);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 4. protocol abuse from a raw socket ------------------------------------------------ */

enum abuse {
	ABUSE_GARBAGE, ABUSE_MAGIC, ABUSE_STATUS_FIRST, ABUSE_OPEN_FIRST, ABUSE_OVERSIZE,
	ABUSE_EMPTY, ABUSE_SECOND_HELLO, ABUSE_SHORT_OPEN, ABUSE_VERSION, ABUSE_HEADER_VERSION,
	ABUSE_REPLY_TYPE, ABUSE_FDS, ABUSE_COUNT,
};

static const char *const abuse_names[] = {
	"garbage bytes", "wrong magic", "STATUS before HELLO", "OPEN before HELLO",
	"oversize datagram", "empty datagram", "second HELLO", "truncated OPEN",
	"unsupported HELLO range", "unsupported header version", "a daemon-to-client type",
	"file descriptors",
};

/* Send the abuse; @return the ERROR code it should draw (0: any, or none). */
static int abuse_send(int fd, enum abuse a)
{
	bp_msg_hello h = { .min_version = 1, .max_version = 1 };
	bp_msg_open m = { .batch_size = 1, .world = 1, .placement = BP_PLACEMENT_HOST,
			  .path = DSET_ONE, .path_len = sizeof(DSET_ONE) - 1 };
	static uint8_t buf[BP_MSG_MAX + 4096];
	uint64_t st = 0x9e3779b97f4a7c15u;
	size_t len = 0;
	int code = 0;

	switch (a) {
	case ABUSE_GARBAGE:
		for (len = 0; len < 61; len++)
			buf[len] = (uint8_t)((st = st * 6364136223846793005u + 1) >> 56);
		code = -EBADMSG;
		break;
	case ABUSE_MAGIC:
		len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
		buf[0] ^= 0xff;
		code = -EBADMSG;
		break;
	case ABUSE_STATUS_FIRST:
		len = (size_t)bp_msg_status_encode(buf, sizeof(buf));
		code = -EPROTO;
		break;
	case ABUSE_OPEN_FIRST:
		len = (size_t)bp_msg_open_encode(&m, buf, sizeof(buf));
		code = -EPROTO;
		break;
	case ABUSE_OVERSIZE:
		/* A HELLO header claiming the whole oversized length. */
		len = sizeof(buf);
		memset(buf, 'x', len);
		bp_msg_hello_encode(&h, buf, sizeof(buf));
		buf[8] = (uint8_t)len, buf[9] = (uint8_t)(len >> 8), buf[10] = (uint8_t)(len >> 16);
		code = -EBADMSG;
		break;
	case ABUSE_EMPTY:
		len = 0;
		break;
	case ABUSE_SECOND_HELLO:
	case ABUSE_SHORT_OPEN:
	case ABUSE_REPLY_TYPE:
		ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
		if (a == ABUSE_SECOND_HELLO) {
			len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
			code = -EPROTO;
		} else if (a == ABUSE_REPLY_TYPE) {
			bp_msg_session sm = { .session = 1 };

			len = (size_t)bp_msg_session_encode(BP_MSG_CLOSED, &sm, buf, sizeof(buf));
			code = -EPROTO;
		} else {
			/* A valid header over a body cut short. */
			len = (size_t)bp_msg_open_encode(&m, buf, sizeof(buf)) - 8;
			buf[8] = (uint8_t)len, buf[9] = (uint8_t)(len >> 8);
			buf[10] = buf[11] = 0;
			code = -EBADMSG;
		}
		break;
	case ABUSE_VERSION:
		h.min_version = h.max_version = 99;
		len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
		code = -EPROTONOSUPPORT;
		break;
	case ABUSE_HEADER_VERSION:
		/* A good magic with a version this daemon does not speak, whatever follows. */
		len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
		buf[6] = 2, buf[7] = 0;
		code = -EPROTONOSUPPORT;
		break;
	case ABUSE_FDS: {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} ctl;
		struct iovec iov;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				     .msg_controllen = sizeof(ctl.b) };
		struct cmsghdr *cm;
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

		ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
		len = (size_t)bp_msg_status_encode(buf, sizeof(buf));
		iov = (struct iovec){ .iov_base = buf, .iov_len = len };
		memset(&ctl, 0, sizeof(ctl));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &devnull, sizeof(int));
		ck_assert_int_eq(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)len);
		close(devnull);
		return -EBADMSG;
	}
	case ABUSE_COUNT:
		break;
	}
	ck_assert_int_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
	return code;
}

START_TEST(test_protocol_abuse)
{
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;

	for (int a = 0; a < ABUSE_COUNT; a++) {
		int fd = dt_raw_connect(D.sock), want, got, r;

		ck_assert_int_ge(fd, 0);
		want = abuse_send(fd, (enum abuse)a);
		r = dt_raw_expect_close(fd, &got, WAIT_MS);
		/* An ERROR, or a closed connection: either is a refusal. */
		expect(r == 0 || got < 0, "%s: neither answered nor closed", abuse_names[a]);
		expect(!want || !got || got == want, "%s: answered %s (%d), expected %s (%d)",
		       abuse_names[a], bc_strerror(got), got, bc_strerror(want), want);
		close(fd);
	}

	/* Nobody else noticed. */
	dt_ref_ok(&ref, DSET_BLK);
	c = dt_connect_ok();
	dt_opts(&o, DSET_BLK, 16, BC_SHUFFLE_GLOBAL, 4);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, bc_stream_batches_per_epoch(s) + 1, 0, &run, "after the abuse");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 5. the memory budget ----------------------------------------------------------------- */

START_TEST(test_memory_budget)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s = NULL, *held[64];
	bc_stream_opts o;
	dt_run run = { 0 };
	dt_ref ref;
	bp_msg_hello_ok ok;
	size_t nheld = 0;
	int fd, r;

	/* The daemon's largest batch, from its HELLO_OK. */
	fd = dt_raw_connect(D.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dt_raw_hello(fd, &ok), 0);
	close(fd);

	/* One session bigger than the whole budget. */
	dt_opts(&o, DSET_ONE, ok.max_batch_size, BC_SHUFFLE_GLOBAL, 1);
	o.prefetch = 64;
	r = bc_open(c, &o, &s);
	expect(r == -ENOMEM && strstr(bc_client_error(c), "memory budget"),
	       "a %u-sample batch with prefetch 64 under --memory 32M: %s (%d): \"%s\"",
	       o.batch_size, bc_strerror(r), r, bc_client_error(c));
	o.batch_size = ok.max_batch_size + 1;
	r = bc_open(c, &o, &s);
	expect(r == -EINVAL, "batch %u, over max_batch_size: %s (%d): \"%s\"", o.batch_size,
	       bc_strerror(r), r, bc_client_error(c));

	/* Sessions that fit, until the budget is spent; then one more after a close. */
	dt_opts(&o, DSET_ONE, 256, BC_SHUFFLE_GLOBAL, 1);
	o.prefetch = 8;
	while (nheld < ARRAY_SIZE(held) && (r = bc_open(c, &o, &s)) == 0)
		held[nheld++] = s;
	expect(nheld >= 1 && r == -ENOMEM && strstr(bc_client_error(c), "memory budget"),
	       "%zu sessions of batch 256 opened, then %s (%d): \"%s\"", nheld, bc_strerror(r), r,
	       bc_client_error(c));
	ck_assert_int_eq(bc_close(held[--nheld]), 0);
	/* The close is answered after the session is let go; its memory may come back later. */
	for (int i = 0; i < TRIES && (r = bc_open(c, &o, &s)) == -ENOMEM; i++)
		usleep(10000);
	expect(r == 0, "no room after closing a session: %s (%d): \"%s\"", bc_strerror(r), r,
	       bc_client_error(c));
	held[nheld++] = s;
	dt_ref_ok(&ref, DSET_ONE);
	dt_consume_ok(s, &ref, bc_stream_batches_per_epoch(s), 0, &run, "a session within budget");
	dt_run_free(&run);
	dt_ref_close(&ref);
	while (nheld)
		ck_assert_int_eq(bc_close(held[--nheld]), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- 6. hostile control memory ends that session only ------------------------------------- */

START_TEST(test_hostile_control)
{
	bp_msg_open m = { .seed = 1, .batch_size = 8, .world = 1, .prefetch = 4,
			  .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_NONE,
			  .path = DSET_ONE, .path_len = sizeof(DSET_ONE) - 1 };
	const unsigned want_seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE;
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *good;
	dt_run run = { 0 };
	dt_ref ref, ref1;
	bp_msg_ready ready;
	const volatile bp_ring_header *hdr;
	const bp_ring_desc *d;
	const bp_ring_sample *t;
	bp_ring_ctrl *ctrl;
	uint8_t *data;
	struct pollfd pfd;
	uint64_t one = 1;
	int fds[BP_READY_FDS], fd, r;
	void *m2;

	dt_ref_ok(&ref, DSET_BLK);
	dt_ref_ok(&ref1, DSET_ONE);
	dt_opts(&o, DSET_BLK, 20, BC_SHUFFLE_GLOBAL, 9);
	good = dt_open_ok(c, &o);
	dt_consume_ok(good, &ref, 3, 0, &run, "good stream before");

	fd = dt_raw_connect(D.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
	r = dt_raw_open(fd, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);

	/* The data memfd is the daemon's alone: no writable mapping, no resizing, no writes. */
	expect((fcntl(fds[0], F_GET_SEALS) & want_seals) == want_seals, "data memfd seals %#x",
	       fcntl(fds[0], F_GET_SEALS));
	m2 = mmap(NULL, ready.data_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	expect(m2 == MAP_FAILED && errno == EPERM, "data memfd mapped writable (%s)",
	       m2 == MAP_FAILED ? strerror(errno) : "succeeded");
	errno = 0;
	expect(ftruncate(fds[0], 0) < 0 && errno == EPERM, "data memfd shrunk (%s)",
	       strerror(errno));
	errno = 0;
	expect(ftruncate(fds[0], (off_t)ready.data_size * 2) < 0 && errno == EPERM,
	       "data memfd grown (%s)", strerror(errno));
	errno = 0;
	expect(pwrite(fds[0], "x", 1, 0) < 0 && errno == EPERM, "data memfd written (%s)",
	       strerror(errno));
	errno = 0;
	expect(ftruncate(fds[1], 0) < 0 && errno == EPERM, "control memfd shrunk (%s)",
	       strerror(errno));

	data = mmap(NULL, ready.data_size, PROT_READ, MAP_SHARED, fds[0], 0);
	ck_assert_ptr_ne(data, MAP_FAILED);
	ctrl = mmap(NULL, ready.ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	ck_assert_ptr_ne(ctrl, MAP_FAILED);
	hdr = (const bp_ring_header *)data;
	ck_assert_uint_eq(hdr->magic, BP_RING_MAGIC);
	ck_assert_uint_eq(hdr->slots, ready.slots);

	/* Read batch 0 straight off the ring: the layout of ring.h, byte exact. */
	expect(dt_ring_wait_produced(hdr, 1, TRIES), "nothing published on the raw session");
	d = (const bp_ring_desc *)(data + BP_RING_HEADER_SIZE);
	expect(d->seq == 0 && d->epoch == 0 && d->batch == 0 && d->count == 8 && d->status == 0,
	       "descriptor 0: seq %" PRIu64 " epoch %" PRIu64 " batch %" PRIu64 " count %u status %d",
	       d->seq, d->epoch, d->batch, d->count, d->status);
	t = (const bp_ring_sample *)(data + d->record);
	for (uint32_t i = 0; i < d->count; i++) {
		expect(t[i].id == i, "raw batch 0 sample %u has id %" PRIu64, i, t[i].id);
		expect(dt_ref_check(&ref1, t[i].id, data + d->payload + t[i].offset,
				    (size_t)t[i].size, E, sizeof(E)) == 0, "raw batch 0: %s", E);
	}

	/* Harmless noise first (informational fields), then a release of a batch never published. */
	ctrl->consumed = UINT64_MAX;
	ctrl->reserved = 0xdeadbeef;
	__atomic_store_n(&ctrl->release[0], (uint64_t)ready.slots * 1000 + 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(write(fds[2], &one, sizeof(one)), (ssize_t)sizeof(one));
	expect(dt_ring_wait_stopped(hdr, TRIES), "the daemon did not end the session "
	       "after a release mark for a batch never published");
	expect(hdr->error == -EPROTO, "stopped with error %d, expected -EPROTO", hdr->error);
	/* ... and poked the published pipe (nothing else wrote it: we never slept). */
	pfd = (struct pollfd){ .fd = fds[3], .events = POLLIN };
	expect(poll(&pfd, 1, WAIT_MS) == 1 && (pfd.revents & POLLIN),
	       "the published pipe was not poked when the session stopped");
	expect(dt_wait_sessions(D.sock, 1, TRIES), "the hostile session was not let go");

	/* The normal stream goes on. */
	dt_consume_ok(good, &ref, bc_stream_batches_per_epoch(good), 0, &run, "good stream after");
	expect_sampler_order(&run, &ref, &o);
	munmap(data, ready.data_size);
	munmap(ctrl, ready.ctrl_size);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(fd);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(good), 0);
	dt_ref_close(&ref);
	dt_ref_close(&ref1);
	bc_disconnect(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------ */

static Suite *daemon_isolation_suite(void)
{
	Suite *s = suite_create("daemon-isolation");

	tcase_add_loop_test(dt_tcase(s, "corrupt_block", setup), test_corrupt_block, 0,
			    ARRAY_SIZE(datasets));
	tcase_add_loop_test(dt_tcase(s, "client_death", setup), test_client_death, 0, 2);
	tcase_add_test(dt_tcase(s, "refused_paths", setup), test_refused_paths);
	tcase_add_test(dt_tcase(s, "protocol_abuse", setup), test_protocol_abuse);
	tcase_add_test(dt_tcase(s, "memory_budget", setup_mem32), test_memory_budget);
	tcase_add_test(dt_tcase(s, "hostile_control", setup), test_hostile_control);
	return s;
}

int main(void)
{
	return dt_check_main(&D, daemon_isolation_suite);
}

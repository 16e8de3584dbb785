/* SPDX-License-Identifier: MIT */
/*
 * daemon-testlib.h - what the suites that run a real daemon (test-daemon*.c,
 * test-faults*.c, test-paths.c, the service suites and gpu/test-gpu.c)
 * need around it: test datasets, starting and stopping batchd, a reference
 * reader to check delivered bytes against, a consumer that records what a
 * stream delivered, status JSON peeking, a raw protocol client that speaks to the
 * socket without libbatchclient, and the Check helpers (connect, open,
 * consume or fail the test; fixtures; main) the Check suites share.
 *
 * Why a separate file: the cases should read as behaviours ("every epoch
 * is a partition of the dataset"); the plumbing (fork/exec, SCM_RIGHTS,
 * mkdtemp trees) and the helpers every suite would otherwise write again
 * live here.
 *
 * Layout on disk: dt_global_setup() (called once from main(), before Check
 * forks any test) makes a mkdtemp directory holding packs/ with the three
 * test datasets. Each test's fixture makes its own directory below it with
 * a socket, a log file and root/ (hard links to the packs, so tests may add
 * symlinks, FIFOs and corrupt copies without disturbing each other).
 *
 * Two ways to read the status document: dt_json_u64 finds a number in its
 * text (cheap, for predicates polled many times), dt_status_u64 and dt_ju64
 * walk it parsed by json-c (exact paths, for what a test asserts).
 *
 * Thread rules: everything here is called from the test's main thread,
 * except dt_consume() and the dt_ref_* functions, which may run in several
 * threads at once on different dt_ref / dt_run objects.
 */
#ifndef BATCHD_TESTS_DAEMON_TESTLIB_H
#define BATCHD_TESTS_DAEMON_TESTLIB_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>
#include <json-c/json.h>

#include "batchclient.h"
#include "pack_file.h"
#include "protocol.h"
#include "ring.h"

/* The test datasets, by their names under a daemon root. */
/*
 * DSET_ONE and DSET_SHARDS store keys (file names), as batchd-pack does by
 * default; DSET_BLK is a pack as written before fields (--no-keys), so
 * both kinds are served through every test that reads them.
 */
#define DSET_ONE    "one.bpk"     /* 1000 samples, one per block; keys */
#define DSET_BLK    "blk.bpk"     /* 1000 samples in 16 KiB blocks; no keys, footer version 1 */
#define DSET_SHARDS "shards"      /* 1000 samples, 16 KiB blocks, 3 shards; keys */
#define DSET_SAMPLES 1000u

typedef struct dt_global {
	char dir[128];           /* mkdtemp, removed by dt_global_teardown */
	char packs[160];         /* dir/packs */
	const char *batchd;      /* $BATCHD */
	const char *batchd_pack; /* $BATCHD_PACK */
	size_t shards;           /* shards of DSET_SHARDS */
} dt_global;

extern dt_global dt_g;

/* Make the datasets. @return 0, or -1 with a message on stderr. */
int dt_global_setup(void);
/* Remove everything dt_global_setup and the tests made. */
void dt_global_teardown(void);
/* Recursively remove path (a file or a directory tree). */
void dt_rm_rf(const char *path);

/* One daemon under test. */
typedef struct dt_daemon {
	char dir[192];           /* per-test mkdtemp directory */
	char root[224];          /* dir/root, the daemon's one dataset root */
	char sock[224];          /* dir/sock (fits sun_path: dt_g.dir is short) */
	char log[224];           /* dir/batchd.log: the daemon's stderr */
	pid_t pid;               /* 0 when not running */
	const char *engine;      /* --io-engine, NULL = default */
	const char *direct;      /* --direct, NULL = "off" */
	const char *memory;      /* --memory, NULL = default */
	/*
	 * -c FILE: when set, batchd gets `-c config` (plus engine/direct/memory
	 * when set) and none of --socket, --root, --log-level, so the file
	 * decides them and a SIGHUP reload can change them; the file must name
	 * sock as [daemon] socket.
	 */
	const char *config;
	const char *const *args; /* more arguments (NULL-terminated), NULL = none */
	/*
	 * dt_daemon_start: count the daemon as up once its socket answers at
	 * all, even with a refusal (an [access] allow-list that excludes us).
	 */
	bool any_answer;
	/*
	 * dt_daemon_start: more environment for the daemon alone, on top of the
	 * test's own ("NAME=value" strings, NULL-terminated), NULL = none.
	 */
	const char *const *env;
	/*
	 * dt_daemon_start: an exit before the socket answers is an outcome the
	 * test examines, not a failure: return 1 and do not dump the log.
	 */
	bool may_exit;
	int exit_status;         /* wait status of a daemon that exited before answering */
} dt_daemon;

/* Make d's directory tree (root/ with links to the packs). @return 0 or -1. */
int dt_daemon_init(dt_daemon *d);
/*
 * Start batchd on d (killed with SIGKILL if the calling process dies),
 * then wait until its socket answers a HELLO. @return 0; 1 when it exited
 * before answering and d->may_exit is set; -1 when it exited (without
 * may_exit) or never answered (log dumped to stderr). d->exit_status gets
 * the wait status of a daemon that exited before answering.
 */
int dt_daemon_start(dt_daemon *d);
/*
 * "ASAN_OPTIONS=" the test's own ASAN_OPTIONS extended by extra, into buf,
 * for d->env: AddressSanitizer options for one daemon alone (they mean
 * nothing to other builds). @return buf.
 */
const char *dt_asan_options_env(char *buf, size_t len, const char *extra);
/*
 * Wait up to timeout_ms for d to exit on its own (after a signal the test
 * sent). @return as dt_daemon_stop (the log is dumped when not 0);
 * -ETIMEDOUT when it is still running (it keeps running; pid stays set).
 */
int dt_daemon_wait(dt_daemon *d, int timeout_ms);
/*
 * SIGTERM, then wait for it to exit. @return its exit status (0 is a
 * clean stop), 128 + signal when killed, -1 when waitpid failed. Dumps the
 * daemon's log to stderr when the status is not 0.
 */
int dt_daemon_stop(dt_daemon *d);
/* Does the daemon's log (its stderr) contain needle? */
bool dt_log_contains(const dt_daemon *d, const char *needle);
/* Print the last max_lines lines of the daemon's log to stderr. */
void dt_daemon_dump_log(const dt_daemon *d, int max_lines);
/* root/name into buf. */
const char *dt_root_path(const dt_daemon *d, const char *name, char *buf, size_t len);

/* A reference reader over a dataset (through lib/pack/pack_file.h). */
typedef struct dt_ref {
	bp_dataset *ds;
	bp_sample_reader *r;
} dt_ref;

int dt_ref_open(dt_ref *ref, const char *path);
void dt_ref_close(dt_ref *ref);
/* Is (data, len) exactly sample id? @return 0, or -1 with why in err. */
int dt_ref_check(dt_ref *ref, uint64_t id, const void *data, size_t len, char *err,
		 size_t errlen);

/* What a stream delivered: one event per bc_next() result that is not a timeout. */
typedef struct dt_event {
	int result;              /* 0 a batch, BC_EPOCH_END, or a negative errno */
	uint64_t epoch, batch;   /* for batches */
	uint32_t count;
	size_t first;            /* index into ids/hashes of sample 0 */
} dt_event;

typedef struct dt_run {
	dt_event *ev;
	size_t nev, evcap;
	uint64_t *ids;
	uint64_t *hashes;        /* XXH64 of each sample's bytes */
	size_t nids, idcap;
	size_t batches;          /* events with result 0 */
	size_t epoch_ends;
	size_t failures;         /* events with result < 0 */
	char last_error[BP_RING_REASON_MAX + 1]; /* bc_stream_error of the last failure */
} dt_run;

void dt_run_free(dt_run *run);

/*
 * Check a batch without releasing it: each sample equals the pack's (ref)
 * and bc_batch_data() holds them back to back. @return 0, or -1 with why in err.
 */
int dt_batch_check(const bc_batch *b, dt_ref *ref, char *err, size_t errlen);

enum {
	DT_STOP_EPOCH_END = 1,   /* stop after the first BC_EPOCH_END (recorded) */
	DT_KEEP_FAILURES = 2,    /* record failed batches and carry on, else stop */
};

/*
 * Take up to max_batches batches (failed ones count) from s, checking each
 * sample against ref (NULL: no check) byte for byte and that bc_batch_data()
 * holds the samples back to back; record everything into run; release
 * each batch once checked. timeout_ms is per bc_next call.
 * @return 0; -1 with why in err (a mismatch, a timeout, an unexpected errno).
 */
int dt_consume(bc_stream *s, dt_ref *ref, size_t max_batches, unsigned flags, int timeout_ms,
	       dt_run *run, char *err, size_t errlen);

/* The daemon's status JSON (one request on a fresh connection). @return 0 or negative errno. */
int dt_status(const char *sock, char **ret_json);
/* The first number after `"key": ` following `after` (NULL: from the start). */
bool dt_json_u64(const char *json, const char *after, const char *key, uint64_t *ret);
/* Sessions listed in the status JSON. */
size_t dt_json_sessions(const char *json);

/* ---- raw protocol (no libbatchclient) ---- */

/* A SOCK_SEQPACKET connection to sock. @return the fd, or negative errno. */
int dt_raw_connect(const char *sock);
/*
 * Receive one datagram (waiting up to timeout_ms). @return its length, 0 when
 * the daemon closed the connection, -ETIMEDOUT, or negative errno. Received
 * descriptors go to fds (up to nfds; the rest are closed).
 */
int dt_raw_recv(int fd, uint8_t *buf, size_t cap, int *fds, int nfds, int *ret_nfds,
		int timeout_ms);
/* HELLO, expect HELLO_OK (its numbers into ret, may be NULL; server is set to NULL). @return 0 or negative errno. */
int dt_raw_hello(int fd, bp_msg_hello_ok *ret);
/* OPEN m, expect READY with BP_READY_FDS fds. @return 0, or the ERROR code / negative errno. */
int dt_raw_open(int fd, const bp_msg_open *m, bp_msg_ready *ret, int fds[BP_READY_FDS]);
/*
 * After a protocol violation: read until the daemon closes the connection.
 * *ret_code gets the code of the first ERROR received, else 0. @return 0
 * when it closed; -ETIMEDOUT when it kept the connection open (for up to
 * timeout_ms, or 2 s after an ERROR).
 */
int dt_raw_expect_close(int fd, int *ret_code, int timeout_ms);

/* Wait until pred(ctx) holds, polling every 10 ms up to tries times. */
bool dt_wait_for(bool (*pred)(void *ctx), void *ctx, int tries);
/*
 * Wait as dt_wait_for until pred(json, ctx) holds for a fresh status JSON
 * of the daemon on sock (a status that cannot be had counts as not yet).
 */
bool dt_wait_status(const char *sock, bool (*pred)(const char *json, void *ctx), void *ctx,
		    int tries);
/* dt_wait_status until the status lists exactly n sessions. */
bool dt_wait_sessions(const char *sock, size_t n, int tries);
/*
 * Wait as dt_wait_for until the ring whose header is mapped at hdr has
 * published at least n batches / has stopped.
 */
bool dt_ring_wait_produced(const volatile bp_ring_header *hdr, uint64_t n, int tries);
bool dt_ring_wait_stopped(const volatile bp_ring_header *hdr, int tries);
/* Sleep ms milliseconds (through EINTR). */
void dt_sleep_ms(int ms);
/* Can this process set up an io_uring? If not, why into why. */
bool dt_io_uring_usable(char *why, size_t len);

/* ---- Check suites ---- */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define WAIT_MS 30000            /* per bc_next: generous, sanitizer builds are slow */
#define TRIES 3000               /* polls of 10 ms for things that happen "soon" */

/*
 * The suite's daemon under test, which the helpers below act on (its
 * fixture inits and starts it; dt_teardown stops it). Set by dt_check_main.
 */
extern dt_daemon *dt_suite_daemon;

/* Fail the test with the daemon's recent log: most failures are explained there. */
#define dt_expect(cond, ...) do { \
	if (!(cond)) { \
		dt_daemon_dump_log(dt_suite_daemon, 60); \
		ck_abort_msg(__VA_ARGS__); \
	} \
} while (0)

/*
 * main() of a Check suite on daemon d: make the datasets (in the parent, so
 * they are removed even when a forked test fails), run make()'s suite, and
 * remove them. @return the process's exit status.
 */
int dt_check_main(dt_daemon *d, Suite *(*make)(void));
/* A TCase named name in s, with the fixtures setup and dt_teardown. */
TCase *dt_tcase(Suite *s, const char *name, void (*setup)(void));
/* Fixture: make the daemon's directory tree (it is not started). */
void dt_setup_dir(void);
/*
 * Fixture step: make the daemon's tree, write its -c FILE (dir/batchd.conf:
 * its socket, log level info, its root, then extra, more sections) and
 * start it, failing the test when it does not.
 */
void dt_conf_start(const char *extra);
/* The same file, in a tree already made; the daemon is not started. */
void dt_conf_write(const char *extra);
/* Fixture: stop the daemon, failing unless it exits 0 at SIGTERM; remove its tree. */
void dt_teardown(void);

/* These fail the test (with the daemon's log) when the call fails. */
bc_client *dt_connect_ok(void);
bc_stream *dt_open_ok(bc_client *c, const bc_stream_opts *o);
/* bc_open o on c, which must fail with want and a message: @return the message (in c). */
const char *dt_open_fails(bc_client *c, const bc_stream_opts *o, int want);
/*
 * dt_open_fails for path (batch 4, no shuffle), the message mentioning
 * `mention` unless that is NULL. @return the message (in c).
 */
const char *dt_open_refused(bc_client *c, const char *path, int code, const char *mention);
/* A TCP port free on 127.0.0.1 right now, or -1. */
int dt_free_port(void);
/*
 * A hand-written HTTP/1.0 request to 127.0.0.1:port; the body of the
 * response (read until the server closes, within 10 s) into *ret_body
 * (caller frees; NULL on failure). @return the status code, or -1.
 */
int dt_http_request(int port, const char *method, const char *path, char **ret_body);
/* dt_ref_open on the pack name of the datasets. */
void dt_ref_ok(dt_ref *ref, const char *name);
/* dt_consume with WAIT_MS; what names the stream in the message. */
void dt_consume_ok(bc_stream *s, dt_ref *ref, size_t batches, unsigned flags, dt_run *run,
		   const char *what);
/* The status JSON; caller frees. */
char *dt_status_ok(void);
/* The status JSON parsed (json-c); caller puts it. */
json_object *dt_status_json_ok(void);
/* The integer at dotted path (json_path.h) in o; fails the test when there is none. */
uint64_t dt_ju64(json_object *o, const char *path);
/* The integer at path in a fresh status ("memory.used"). */
uint64_t dt_status_u64(const char *path);
/*
 * The integer key of the one session on dataset (as the client named it;
 * NULL: the only session) in a fresh status; fails the test unless
 * exactly one session matches.
 */
uint64_t dt_session_u64(const char *dataset, const char *key);

/* Stream options with these set, the rest bc_stream_opts_init's. */
void dt_opts(bc_stream_opts *o, const char *dataset, uint32_t batch, enum bc_shuffle mode,
	     uint64_t seed);
/*
 * The sampler the daemon should be running for o over ref's pack (none and
 * global only: block mode's chunk is the daemon's choice). Fails the test
 * when bd_sampler_init does.
 */
struct bd_sampler;
void dt_sampler_for(struct bd_sampler *sp, const dt_ref *ref, const bc_stream_opts *o);

#endif

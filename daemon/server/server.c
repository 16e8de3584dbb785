/* SPDX-License-Identifier: MIT */
/*
 * server.c - the control plane's life: start (socket, pipeline, GPU
 * thread, NVML sampler, metrics listener, signals and timers), accepting
 * connections (and riding out a shortage of file descriptors), reload on
 * SIGHUP, the end of sessions, and an orderly stop (see server.h). The clients and
 * their requests are in connection.c and open_request.c; the protocol is
 * lib/proto/PROTOCOL.md.
 */
#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "blockcache.h"
#include "dataset.h"
#include "metrics_http.h"
#include "log.h"
#include "remote.h"
#include "machine.h"
#include "nvml.h"
#include "open_pool.h"
#include "server_state.h"
#include "service.h"
#include "socket_path.h"
#include "units.h"
#include "util.h"

#ifndef BATCHD_CONFIG_FILE
#error "define BATCHD_CONFIG_FILE (daemon/meson.build)"
#endif

#define STOP_GRACE_MS 10000
#define RATELOG_NS (UINT64_C(10) * 1000000000u)
#define BACKOFF_MIN_MS 100u     /* accepting paused after running out of fds: doubling */
#define BACKOFF_MAX_MS 1000u
#define ACCEPT_BATCH 128        /* connections per wake-up, so the loop serves the others too */

/* ---- sessions ---------------------------------------------------------------------------- */

/*
 * A session's last line: why it ended, whose it was, what it delivered and
 * what waiting for data cost its trainer (the stall, as status.c reports it).
 */
static void log_ended(const bd_server *srv, bd_session *s, const bd_session_info *si, uid_t uid)
{
	double age = (double)si->age_ns / 1e9, stall = (double)si->wait_ns / 1e9;
	double price = srv->cfg.gpu_hour_price;
	char size[32], cost[48] = "";
	const char *why;

	switch (si->end_reason) {
	case 0:
		why = "closed by its client";
		break;
	case -ECONNRESET:      /* its connection ended without a CLOSE */
	case -EPIPE:           /* it never got READY */
		why = "client gone";
		break;
	case -ETIME:
		why = "lease expired";
		break;
	case -EPROTO:
		why = "ring protocol violation";
		break;
	case -ESHUTDOWN:
		why = "batchd stopping";
		break;
	default:
		why = strerror(-si->end_reason);
	}
	if (price > 0)
		snprintf(cost, sizeof(cost), " (cost %.4f)",
			 price / 3600.0 * stall * BD_SESSION_TRAINER_GPUS);
	bd_log(LOG_INFO, "session %" PRIu64 " ended (%s): uid %u, dataset %s, %" PRIu64 " batches, "
	       "%s, %.1f MB/s mean, stall %.1f%%, lost GPU-time %.*f s%s", si->id, why,
	       (unsigned)uid, bd_session_dataset(s), si->delivered,
	       bp_format_size(si->delivered_bytes, size, sizeof(size)),
	       age > 0 ? (double)si->delivered_bytes / age / 1e6 : 0.0, 100.0 * si->stall_ratio,
	       stall < 10 ? 2 : stall < 1000 ? 1 : 0, stall * BD_SESSION_TRAINER_GPUS, cost);
}

static void on_session_ended(bd_session *s, void *ctx)
{
	bd_server *srv = ctx;
	bd_session_info si;
	uid_t uid = (uid_t)-1;

	/* Fold the session's counters into the totals before it goes. */
	bd_session_get_info(s, &si);
	srv->totals.sessions++;
	srv->totals.ring_violations += si.protocol_violation;
	bd__totals_add(&srv->totals, &si);

	for (entry **p = &srv->entries; *p; p = &(*p)->next) {
		entry *e = *p;

		if (e->s != s)
			continue;
		if (e->c)
			e->c->sessions--;
		uid = e->uid;
		*p = e->next;
		free(e);
		srv->nsessions--;
		break;
	}
	log_ended(srv, s, &si, uid);
	if (!srv->stopping)
		bd__server_notify_status(srv);
	bd__server_stop_if_drained(srv);
}

/* ---- listening ---------------------------------------------------------------------------- */

/* A group name or number. @return 0 or -EINVAL. */
static int resolve_group(const char *g, gid_t *ret)
{
	struct group *gr = getgrnam(g);
	unsigned long gid;
	char *end;

	if (gr) {
		*ret = gr->gr_gid;
		return 0;
	}
	errno = 0;
	gid = strtoul(g, &end, 10);
	if (!*g || *end || errno || gid >= (gid_t)-1)
		return -EINVAL;
	*ret = (gid_t)gid;
	return 0;
}

/* Apply [daemon] socket_mode and socket_group to the socket file. */
static int socket_access(bd_server *srv, const char *path)
{
	const char *g = srv->cfg.socket_group;
	gid_t gid;

	if (g && resolve_group(g, &gid) < 0)
		return bd_log_ret(LOG_ERR, -EINVAL, "socket %s: group %s does not exist", path, g);
	if (g && chown(path, (uid_t)-1, gid) < 0)
		return bd_log_ret(LOG_ERR, -errno, "socket %s: chown to group %s: %s", path, g,
				  strerror(errno));
	if (chmod(path, srv->cfg.socket_mode) < 0)
		return bd_log_ret(LOG_ERR, -errno, "socket %s: chmod %o: %s", path,
				  srv->cfg.socket_mode, strerror(errno));
	return 0;
}

/*
 * The default socket's directory when it is batchd's own and missing:
 * /run/batchd for a root batchd started by hand (the service's
 * RuntimeDirectory= makes it otherwise). Any other directory is the
 * user's to make. @return 0 or -errno (logged).
 */
static int own_socket_dir(const bd_server *srv, const char *path)
{
	static const char own[] = "/run/batchd";

	if (srv->cfg.socket || strncmp(path, own, sizeof(own) - 1) || path[sizeof(own) - 1] != '/' ||
	    mkdir(own, 0755) == 0 || errno == EEXIST)
		return 0;
	return bd_log_ret(LOG_ERR, -errno, "socket %s: cannot create %s: %s; give another "
			  "socket with --socket PATH (or [daemon] socket)", path, own,
			  strerror(errno));
}

static int listen_on(bd_server *srv, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, r;

	if ((r = own_socket_dir(srv, path)) < 0)
		return r;
	if (strlen(path) >= sizeof(sa.sun_path))
		return bd_log_ret(LOG_ERR, -ENAMETOOLONG, "socket %s: path too long", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return bd_log_ret(LOG_ERR, -errno, "socket: %s", strerror(errno));
	/* A socket file left by a daemon that died: replace it if nobody answers. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return bd_log_ret(LOG_ERR, -EADDRINUSE, "socket %s: another batchd is running",
					  path);
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	}
	/* The kernel caps the backlog at net.core.somaxconn; bursts wait there, not in connect(). */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, SOMAXCONN) < 0) {
		r = -errno;
		close(fd);
		if (r == -ENOENT)
			return bd_log_ret(LOG_ERR, r, "socket %s: its directory does not exist: create "
					  "it, or give another socket with --socket PATH (or [daemon] "
					  "socket)", path);
		if (r == -EACCES)
			return bd_log_ret(LOG_ERR, r, "socket %s: %s: give a socket in a directory "
					  "you may write with --socket PATH (or [daemon] socket)",
					  path, strerror(-r));
		return bd_log_ret(LOG_ERR, r, "socket %s: %s", path, strerror(-r));
	}
	r = socket_access(srv, path);
	if (r < 0) {
		close(fd);
		unlink(path);
		return r;
	}
	srv->listen_fd = fd;
	snprintf(srv->socket_path, sizeof(srv->socket_path), "%s", path);
	return 0;
}

/* ---- accepting --------------------------------------------------------------------------- */

bool bd__ratelog(bd_ratelog *r, uint64_t n, uint64_t *ret_count)
{
	uint64_t now = bd_now_ns();

	r->pending += n;
	if (r->last_ns && now - r->last_ns < RATELOG_NS)
		return false;
	*ret_count = r->pending;
	r->pending = 0;
	r->last_ns = now;
	return true;
}

static void on_accept(uv_poll_t *h, int status, int events);

static void on_backoff_done(uv_timer_t *t)
{
	bd_server *srv = t->data;

	if (srv->stopping)
		return;
	/* Another thread may have taken the descriptor shed_pending gave up. */
	if (srv->reserve_fd < 0)
		srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_poll_start(&srv->listen_poll, UV_READABLE, on_accept);
}

/*
 * Stop watching the socket for a while, 100 ms doubling to 1 s: while the
 * cause lasts every accept would fail at once, and a readable socket that
 * is never drained would wake the loop again and again.
 */
static void accept_pause(bd_server *srv)
{
	uv_poll_stop(&srv->listen_poll);
	uv_timer_start(&srv->accept_backoff, on_backoff_done, srv->backoff_ms, 0);
	srv->backoff_ms = srv->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : srv->backoff_ms * 2;
}

/*
 * Out of file descriptors (EMFILE, ENFILE). The spare descriptor is given
 * up to accept each pending connection and close it at once, so its peer
 * sees a closed connection instead of waiting in the backlog, then
 * accepting pauses. @return the connections closed so.
 */
static uint64_t shed_pending(bd_server *srv)
{
	uint64_t shed = 0;

	while (srv->reserve_fd >= 0 && shed < ACCEPT_BATCH) {
		int fd;

		close(srv->reserve_fd);
		fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			close(fd);
			shed++;
		}
		srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
	}
	return shed;
}

/* accept failed with err (not EAGAIN): shed what waits if out of fds, pause, log once per 10 s. */
static void accept_failed(bd_server *srv, int err)
{
	bool no_fds = err == EMFILE || err == ENFILE;
	uint64_t shed = no_fds ? shed_pending(srv) : 0, count;
	struct rlimit rl = { 0 };

	srv->totals.cut[BD_CUT_FDS] += shed;
	accept_pause(srv);
	if (!bd__ratelog(&srv->fds_log, shed, &count))
		return;
	if (!no_fds) {
		bd_log(LOG_WARNING, "accept: %s; accepting pauses up to %u ms at a time", strerror(err),
		       BACKOFF_MAX_MS);
		return;
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	bd_log(LOG_WARNING, "accept: %s (RLIMIT_NOFILE %llu): %" PRIu64 " new connection%s closed "
	       "unserved since the last such line; accepting pauses up to %u ms at a time",
	       strerror(err), (unsigned long long)rl.rlim_cur, count, count == 1 ? "" : "s",
	       BACKOFF_MAX_MS);
}

/* The listening socket is readable: take the pending connections. */
static void on_accept(uv_poll_t *h, int status, int events)
{
	bd_server *srv = h->data;

	for (int i = 0; i < ACCEPT_BATCH; i++) {
		int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			srv->backoff_ms = BACKOFF_MIN_MS;
			bd__client_accepted(srv, fd);
			continue;
		}
		/* What failed was that one connection: take the next. */
		if (errno == EINTR || errno == ECONNABORTED || errno == EPERM || errno == EPROTO)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			accept_failed(srv, errno);
		return;
	}
}

/* ---- signals, timers, reload -------------------------------------------------------------- */

static void on_signal(uv_signal_t *h, int sig)
{
	bd_server *srv = h->data;

	bd_log(LOG_NOTICE, "%s: stopping", strsignal(sig));
	bd_server_stop(srv);
}

static void on_stop_timeout(uv_timer_t *t)
{
	bd_log(LOG_WARNING, "sessions did not drain in %d ms; exiting anyway", STOP_GRACE_MS);
	uv_stop(t->loop);
}

static void on_watchdog(uv_timer_t *t)
{
	/* Pinged from the loop: a loop stuck anywhere stops the pings. */
	bd_service_notify("WATCHDOG=1");
}

/*
 * Every BD_TUNE_INTERVAL_MS: as few decode workers as keep the clients
 * from waiting (tune.h), or all of them with [decode] autotune = no.
 */
static void on_tune(uv_timer_t *t)
{
	bd_server *srv = t->data;
	bd_pipeline_stats ps;
	bd_tune_sample s = { 0 };
	uint64_t now = bd_now_ns();
	unsigned active;

	bd_pipeline_get_stats(srv->pipeline, &ps);
	for (entry *e = srv->entries; e; e = e->next) {
		bd_session_info si;

		bd_session_get_info(e->s, &si);
		s.wait_ns += si.wait_ns;
	}
	s.interval_ns = now - srv->tuned_ns;
	s.busy_ns = ps.decode_busy_ns;
	s.queued = ps.decode_queued;
	srv->tuned_ns = now;
	active = srv->cfg.decode_autotune ? bd_tune_step(&srv->tuner, &s)
					  : bd_tune_hold(&srv->tuner, &s);
	if (active != ps.decoders_active)
		bd_pipeline_set_decoders(srv->pipeline, active);
}

/* Once a second: end sessions whose clients stopped releasing ([session] lease_timeout). */
static void on_lease_check(uv_timer_t *t)
{
	bd_server *srv = t->data;
	uint64_t lease_ns = (uint64_t)srv->cfg.lease_timeout * 1000000000u;

	if (!lease_ns)
		return;
	for (entry *e = srv->entries; e; e = e->next)
		bd_session_lease_expired(e->s, lease_ns);
}

void bd__server_notify_status(bd_server *srv)
{
	bd_budget_view v;

	bd_budget_get(&srv->ledger, &v);
	bd_service_notify("STATUS=serving %u session%s on %s; I/O %s; CUDA %s; memory %" PRIu64
			  " of %" PRIu64 " MiB", srv->nsessions, srv->nsessions == 1 ? "" : "s",
			  srv->socket_path, bd_io_engine_name(bd_pipeline_engine(srv->pipeline)),
			  srv->cuda.devices ? "available" : "unavailable", bd_budget_used(&v) >> 20,
			  srv->budget >> 20);
}

/* Two optional strings differ: one is set and the other not, or their text. */
static bool str_changed(const char *a, const char *b)
{
	return (a || b) && (!a || !b || strcmp(a, b));
}

/*
 * [memory] budget = auto: half of what the machine (or the daemon's cgroup)
 * has available at start, at least 1 GiB where that much is available.
 */
static uint64_t machine_budget(void)
{
	const uint64_t floor = UINT64_C(1) << 30;
	uint64_t mem = bd_machine_memory(), b = mem / 2;

	if (!mem)
		return floor; /* /proc unreadable: the old fixed default */
	if (b < floor)
		b = mem < floor ? mem : floor;
	return b > BD_CONFIG_MIN_BUDGET ? b : BD_CONFIG_MIN_BUDGET;
}

/* The budget the configuration asks for now. */
static uint64_t resolve_budget(const bd_server *srv)
{
	return srv->cfg.memory_budget ? srv->cfg.memory_budget : srv->auto_budget;
}

/*
 * The memory sessions and dataset versions share: the budget less the
 * block cache's blocks and its bucket table, which the cache's own budget
 * does not count (blockcache.h), and less what the remote cache's chunk
 * tables may take (remote.h). Both keep their start-time sizes until a
 * restart.
 */
static void set_ledger(bd_server *srv)
{
	bd_budget_set(&srv->ledger, srv->budget,
		      srv->cache_budget + bd_cache_table_bytes(srv->cache_budget) +
		      srv->remote_tables, !srv->cfg.memory_budget);
}

/* What a reload cannot change without a restart: say so, keep the running value. */
static void reload_fixed(bd_server *srv, bd_config *next)
{
	const bd_config *cur = &srv->cfg;

#define FIXED(cond, what) \
	do { \
		if (cond) \
			bd_log(LOG_WARNING, "reload: %s changed; it takes effect at restart", what); \
	} while (0)
	FIXED(str_changed(cur->socket, next->socket), "[daemon] socket");
	FIXED(cur->io_engine != next->io_engine, "[io] engine");
	FIXED(cur->direct != next->direct, "[io] direct");
	FIXED(cur->queue_depth != next->queue_depth, "[io] queue_depth");
	FIXED(cur->session_blocks != next->session_blocks, "[io] session_blocks");
	FIXED(cur->io_threads != next->io_threads, "[io] threads");
	FIXED(cur->decode_threads != next->decode_threads, "[decode] threads");
	FIXED(str_changed(cur->metrics_listen, next->metrics_listen), "[metrics] listen");
#undef FIXED
	/* Keep what the running daemon was built with. */
	free(next->socket);
	next->socket = cur->socket ? strdup(cur->socket) : NULL;
	free(next->metrics_listen);
	next->metrics_listen = cur->metrics_listen ? strdup(cur->metrics_listen) : NULL;
	next->io_engine = cur->io_engine;
	next->direct = cur->direct;
	next->queue_depth = cur->queue_depth;
	next->session_blocks = cur->session_blocks;
	next->io_threads = cur->io_threads;
	next->decode_threads = cur->decode_threads;
}

__attribute__((format(printf, 3, 4)))
static void reload_refused(bd_server *srv, bd_config *next, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	srv->totals.reload_failures++;
	bd_log(LOG_ERR, "reload refused, the running configuration stays: %s", why);
	bd_config_free(next);
	bd_service_notify("READY=1");
	bd__server_notify_status(srv);
}

/*
 * SIGHUP: read the same file and flags again. Roots, limits, access lists,
 * the memory budget, prefetch defaults and the log level apply to new
 * sessions at once; running sessions keep what they have. A bad file
 * changes nothing.
 */
static void reload(bd_server *srv)
{
	char err[512];
	bd_config next;
	int r;

	bd_service_notify("RELOADING=1");
	bd_config_init(&next);
	r = bd_config_from_args(&next, srv->argc, srv->argv, BATCHD_CONFIG_FILE, err, sizeof(err));
	if (r == 0)
		r = bd_config_check_roots(&next, err, sizeof(err));
	if (r != 0) {
		reload_refused(srv, &next, "%s", r < 0 ? err : "unexpected --help/--version");
		return;
	}
	if (next.socket_group && resolve_group(next.socket_group, &(gid_t){ 0 }) < 0) {
		reload_refused(srv, &next, "[daemon] socket_group: group %s does not exist",
			       next.socket_group);
		return;
	}
	reload_fixed(srv, &next);
	bd_config_free(&srv->cfg);
	srv->cfg = next;
	srv->budget = resolve_budget(srv);
	if (!srv->socket_activated)
		socket_access(srv, srv->socket_path);
	bd_log_set_level(srv->cfg.log_level);
	set_ledger(srv);
	srv->env.default_prefetch = srv->cfg.prefetch;
	srv->env.max_prefetch = srv->cfg.max_prefetch;
	srv->env.image_max_pixels = srv->cfg.image_max_pixels;
	srv->env.stream_first_pass = srv->cfg.stream_first_pass;
	bd__clients_handshake_arm(srv);
	bd_nvml_set_interval(srv->cfg.gpu_interval);
	srv->totals.reloads++;
	bd_log(LOG_NOTICE, "configuration reloaded: %zu dataset root%s, memory budget %" PRIu64
	       " MiB, log level %s", srv->cfg.nroots, srv->cfg.nroots == 1 ? "" : "s",
	       srv->budget >> 20, bd_config_log_level_name(srv->cfg.log_level));
	bd_service_notify("READY=1");
	bd__server_notify_status(srv);
}

static void on_sighup(uv_signal_t *h, int sig)
{
	reload(h->data);
}

/* ---- start ------------------------------------------------------------------------------- */

/* The server takes cfg over (cfg is left empty). @return it, or NULL when out of memory. */
static bd_server *server_alloc(uv_loop_t *loop, bd_config *cfg, int argc, char **argv,
			       const bd_cuda_state *cuda)
{
	bd_server *srv = calloc(1, sizeof(*srv));

	if (!srv)
		return NULL;
	srv->loop = loop;
	srv->cfg = *cfg;
	memset(cfg, 0, sizeof(*cfg));
	srv->argc = argc;
	srv->argv = argv;
	srv->cuda = *cuda;
	srv->listen_fd = -1;
	srv->reserve_fd = -1;
	srv->backoff_ms = BACKOFF_MIN_MS;
	srv->next_session = 1;
	srv->started_ns = bd_now_ns();
	bd_budget_init(&srv->ledger);
	return srv;
}

/* [daemon] socket, or the default (config.h). @return 0 or -errno (logged). */
static int socket_path(const bd_server *srv, char *path, size_t len)
{
	int r;

	if (srv->cfg.socket) {
		snprintf(path, len, "%s", srv->cfg.socket);
		return 0;
	}
	r = bd_config_default_socket(path, len);
	if (r < 0)
		return bd_log_ret(LOG_ERR, r, "no socket path: XDG_RUNTIME_DIR is unset for this "
				  "user; give one with --socket PATH (or [daemon] socket), and "
				  "BATCHD_SOCKET=PATH to the trainers");
	return 0;
}

/*
 * The decoded-block cache: [memory] cache, or half the budget (auto), so a
 * dataset whose decoded bytes fit is served from memory after its first
 * epoch (the ram tier, dataset.h). At most the budget less the minimum,
 * which sessions keep.
 */
static uint64_t cache_budget(const bd_server *srv)
{
	uint64_t want = srv->cfg.cache_size == BD_CONFIG_CACHE_AUTO ? srv->budget / 2
							      : srv->cfg.cache_size;
	uint64_t most = srv->budget - BD_CONFIG_MIN_BUDGET;
	char a[32], b[32], c[32], d[32];

	if (want > most) {
		bd_log(LOG_WARNING, "[memory] cache = %s leaves sessions less than %s of the %s "
		       "[memory] budget%s: the cache gets %s; lower [memory] cache or raise "
		       "[memory] budget", bp_format_size(want, a, sizeof(a)),
		       bp_format_size(BD_CONFIG_MIN_BUDGET, b, sizeof(b)),
		       bp_format_size(srv->budget, c, sizeof(c)),
		       srv->cfg.memory_budget ? "" : " (auto: half the memory available)",
		       bp_format_size(most, d, sizeof(d)));
		want = most;
	}
	return want;
}

/* The I/O and decode threads and the block cache. @return 0 or -errno (logged). */
static int start_pipeline(bd_server *srv)
{
	const bd_config *cfg = &srv->cfg;
	bd_pipeline_opts po;
	int r;

	srv->cache_budget = cache_budget(srv);
	po = (bd_pipeline_opts){
		.engine = cfg->io_engine == BD_CFG_IO_URING ? BD_IO_URING
			  : cfg->io_engine == BD_CFG_IO_PREAD ? BD_IO_PREAD : BD_IO_AUTO,
		.queue_depth = cfg->queue_depth,
		.session_blocks = cfg->session_blocks,
		.io_threads = cfg->io_threads,
		.decode_threads = cfg->decode_threads,
		.pool_buffers = 64,
		.pool_buffer_size = 512u << 10,
		.cache_budget = srv->cache_budget,
	};
	r = bd_pipeline_new(srv->loop, &po, &srv->pipeline);
	if (r < 0)
		return bd_log_ret(LOG_ERR, r, "cannot start the I/O engine (%s): %s",
				  bd_config_io_engine_name(cfg->io_engine), strerror(-r));
	return 0;
}

/*
 * The remote cache and its fetcher, when [datasets] remote lists a
 * bucket: before any dataset can be opened. @return 0 or -errno (logged).
 */
static int start_remote(bd_server *srv)
{
	const bd_config *cfg = &srv->cfg;
	char dir[4096], err[1024];
	bd_remote_opts o;
	int r;

	if (!cfg->nremotes)
		return 0;
	if (cfg->cache_dir)
		snprintf(dir, sizeof(dir), "%s", cfg->cache_dir);
	else if (bd_config_default_cache_dir(dir, sizeof(dir)) < 0)
		return bd_log_ret(LOG_ERR, -ENOENT, "[datasets] remote needs a cache: set [cache] dir "
				  "in batchd.conf (no $CACHE_DIRECTORY, $XDG_CACHE_HOME or $HOME here)");
	o = (bd_remote_opts){
		.s3 = { .endpoint = cfg->remote_endpoint, .region = cfg->remote_region,
			.addressing = (bp_s3_addressing)cfg->remote_addressing,
			.credentials = cfg->remote_credentials, .profile = cfg->remote_profile,
			/* No file named: the daemon's environment (systemd EnvironmentFile=). */
			.allow_env = !cfg->remote_credentials,
			.retries = cfg->remote_retries, .timeout = cfg->remote_timeout,
			.min_rate = cfg->remote_min_rate },
		.dir = dir,
		.max_size = cfg->cache_max_size,
		.chunk = (uint32_t)cfg->cache_chunk,
		.requests = cfg->remote_requests,
	};
	r = bd_remote_start(&o, err, sizeof(err));
	if (r < 0)
		return bd_log_ret(LOG_ERR, r, "remote datasets: %s", err);
	r = bd_open_pool_new(srv->loop, &srv->open_pool);
	if (r < 0)
		return bd_log_ret(LOG_ERR, r, "remote datasets: cannot start the threads that open "
				  "them: %s", strerror(-r));
	srv->remote_tables = bd_remote_table_budget(o.max_size, o.chunk);
	return 0;
}

/* The GPU thread, when CUDA has devices; without it the daemon serves host sessions only. */
static void start_gpu(bd_server *srv)
{
	int r;

	if (!srv->cuda.devices)
		return;
	r = bd_gpu_new(srv->loop, &srv->gpu);
	if (r < 0) {
		snprintf(srv->cuda.reason, sizeof(srv->cuda.reason),
			 "cannot start the GPU thread: %s", strerror(-r));
		srv->cuda.devices = 0;
		srv->gpu = NULL;
	}
}

/* What every session is made with. */
static void session_env(bd_server *srv)
{
	srv->env = (bd_session_env){
		.loop = srv->loop,
		.pipeline = srv->pipeline,
		.gpu = srv->gpu,
		.cuda = &srv->cuda,
		.budget = &srv->ledger,
		.default_prefetch = srv->cfg.prefetch,
		.max_prefetch = srv->cfg.max_prefetch,
		.image_max_pixels = srv->cfg.image_max_pixels,
		.stream_first_pass = srv->cfg.stream_first_pass,
		.read_depth = srv->cfg.queue_depth * srv->cfg.io_threads,
		.ended = on_session_ended,
		.ctx = srv,
	};
}

/* systemd's socket, when it passed one; else bind path. @return 0 or -errno (logged). */
static int open_socket(bd_server *srv, const char *path)
{
	struct sockaddr_un sa;
	socklen_t sl = sizeof(sa);
	int fd = bd_service_listen_fd();

	if (fd == -EINVAL)
		return bd_log_ret(LOG_ERR, -EINVAL, "socket activation: the passed socket is not "
				  "one listening AF_UNIX SOCK_SEQPACKET socket "
				  "(ListenSequentialPacket=)");
	if (fd < 0)
		return listen_on(srv, path);
	srv->listen_fd = fd;
	srv->socket_activated = true;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0])
		snprintf(srv->socket_path, sizeof(srv->socket_path), "%s", sa.sun_path);
	return 0;
}

/* HTTP has no peer credentials: per-session series only with [metrics] sessions = yes. */
static void render_metrics(void *ctx, bd_text *out)
{
	bd_server *srv = ctx;
	bd_view v = { .all = srv->cfg.metrics_sessions };

	bd__server_metrics(srv, &v, out);
}

/* The [metrics] listen HTTP endpoint, when configured. @return 0 or -errno (logged). */
static int start_http(bd_server *srv)
{
	const char *addr = srv->cfg.metrics_listen;
	int r;

	if (!addr)
		return 0;
	r = bd_http_start(srv->loop, addr, render_metrics, srv, &srv->http);
	if (r < 0)
		return bd_log_ret(LOG_ERR, r, "[metrics] listen %s: %s", addr,
				  r == -EOPNOTSUPP ? "batchd was built without libmicrohttpd"
						   : strerror(-r));
	return 0;
}

/* Accepting, the signals, the lease check and the systemd watchdog. */
static void start_handles(bd_server *srv)
{
	uv_loop_t *loop = srv->loop;
	uint64_t wd = bd_service_watchdog_usec();

	/* Held back for the day accept() runs out of descriptors (accept_failed). */
	srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_timer_init(loop, &srv->accept_backoff);
	uv_timer_init(loop, &srv->handshake);
	uv_timer_init(loop, &srv->throttle);
	srv->accept_backoff.data = srv->handshake.data = srv->throttle.data = srv;
	uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	srv->listen_poll.data = srv;
	uv_poll_start(&srv->listen_poll, UV_READABLE, on_accept);
	uv_signal_init(loop, &srv->sigterm);
	uv_signal_init(loop, &srv->sigint);
	uv_signal_init(loop, &srv->sighup);
	srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv;
	uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
	uv_signal_start(&srv->sigint, on_signal, SIGINT);
	uv_signal_start(&srv->sighup, on_sighup, SIGHUP);
	uv_timer_init(loop, &srv->stop_timer);
	uv_timer_init(loop, &srv->watchdog);
	uv_timer_init(loop, &srv->lease);
	srv->lease.data = srv;
	uv_timer_start(&srv->lease, on_lease_check, 1000, 1000);
	uv_timer_init(loop, &srv->tune);
	srv->tune.data = srv;
	bd_tune_init(&srv->tuner, srv->cfg.decode_threads);
	srv->tuned_ns = bd_now_ns();
	uv_timer_start(&srv->tune, on_tune, BD_TUNE_INTERVAL_MS, BD_TUNE_INTERVAL_MS);
	if (wd)
		uv_timer_start(&srv->watchdog, on_watchdog, 0, wd / 2000 ? wd / 2000 : 1);
	signal(SIGPIPE, SIG_IGN);
}

/* Whether a client of this user finds path (bound already) without being told. */
static bool clients_find(const char *path)
{
	char def[sizeof(((struct sockaddr_un *)NULL)->sun_path) + 16];

	return bp_socket_default(def, sizeof(def)) >= 0 && !strcmp(path, def);
}

/* Log what the daemon runs with, then tell systemd it is ready. */
static void announce(bd_server *srv)
{
	const bd_config *cfg = &srv->cfg;

	bd_log(LOG_NOTICE, "listening on %s%s; I/O %s (%u thread%s, queue depth %u), %u decode "
	       "threads, memory budget %" PRIu64 " MiB%s (block cache %" PRIu64 " MiB), %zu dataset "
	       "root%s, %zu remote%s; CUDA: %s%s%s%s",
	       srv->socket_path, srv->socket_activated ? " (socket activation)" : "",
	       bd_io_engine_name(bd_pipeline_engine(srv->pipeline)), cfg->io_threads,
	       cfg->io_threads == 1 ? "" : "s", cfg->queue_depth, cfg->decode_threads,
	       srv->budget >> 20, cfg->memory_budget ? "" : " (auto: half the memory available)",
	       srv->cache_budget >> 20, cfg->nroots, cfg->nroots == 1 ? "" : "s",
	       cfg->nremotes, cfg->nremotes == 1 ? "" : "s",
	       srv->cuda.devices ? "available" : "unavailable, host sessions only: ",
	       srv->cuda.devices ? "" : srv->cuda.reason,
	       srv->http ? "; metrics on http://" : "", srv->http ? cfg->metrics_listen : "");
	if (!clients_find(srv->socket_path))
		bd_log(LOG_NOTICE, "trainers and batchctl look elsewhere by default: give them "
		       "BATCHD_SOCKET=%s (or batchctl -s %s)", srv->socket_path, srv->socket_path);
	/* Ready only now: the socket is bound, the I/O backend and CUDA state are known. */
	bd_service_notify("READY=1");
	bd__server_notify_status(srv);
}

int bd_server_new(uv_loop_t *loop, bd_config *cfg, int argc, char **argv,
		  const bd_cuda_state *cuda, bd_server **ret)
{
	bd_server *srv = server_alloc(loop, cfg, argc, argv, cuda);
	char path[108];
	int r;

	if (!srv)
		return -ENOMEM;
	r = socket_path(srv, path, sizeof(path));
	if (r < 0)
		goto fail;
	srv->auto_budget = machine_budget();
	srv->budget = resolve_budget(srv);
	r = start_remote(srv);
	if (r < 0)
		goto fail;
	r = start_pipeline(srv);
	if (r < 0)
		goto fail;
	start_gpu(srv);
	/* Telemetry is optional: without NVML the status says why, and batchd serves on. */
	bd_nvml_start(&srv->cuda, srv->cfg.gpu_interval);
	set_ledger(srv);
	session_env(srv);
	r = open_socket(srv, path);
	if (r < 0)
		goto fail;
	r = start_http(srv);
	if (r < 0)
		goto fail;
	start_handles(srv);
	announce(srv);
	*ret = srv;
	return 0;
fail:
	bd_nvml_stop();
	bd_gpu_free(srv->gpu);
	bd_remote_cancel();
	bd_open_pool_close(srv->open_pool);
	bd_pipeline_free(srv->pipeline);
	bd_remote_stop();
	bd_config_free(&srv->cfg);
	bd_budget_destroy(&srv->ledger);
	free(srv);
	return r;
}

/* ---- stop -------------------------------------------------------------------------------- */

/* The first call: stop accepting, end every session, say goodbye to every client. */
static void stop_begin(bd_server *srv)
{
	srv->stopping = true;
	bd_service_notify("STOPPING=1");
	uv_poll_stop(&srv->listen_poll);
	uv_close((uv_handle_t *)&srv->listen_poll, NULL);
	close(srv->listen_fd);
	uv_timer_stop(&srv->accept_backoff);
	uv_timer_stop(&srv->handshake);
	uv_timer_stop(&srv->throttle);
	if (srv->reserve_fd >= 0)
		close(srv->reserve_fd);
	srv->reserve_fd = -1;
	/* A socket systemd made is systemd's to remove. */
	if (!srv->socket_activated)
		unlink(srv->socket_path);
	bd_http_stop(srv->http);
	srv->http = NULL;
	for (entry *e = srv->entries; e; e = e->next)
		bd_session_close(e->s, -ESHUTDOWN);
	bd__clients_goodbye(srv);
	/*
	 * Opens waiting on a bucket (on the thread pool) and blocks waiting for
	 * the fetcher fail now with ECANCELED, not when a slow server lets go:
	 * nothing being served any more, nothing is worth waiting for.
	 */
	bd_remote_cancel();
	uv_timer_start(&srv->stop_timer, on_stop_timeout, STOP_GRACE_MS, 0);
}

void bd_server_stop(bd_server *srv)
{
	if (!srv->stopping)
		stop_begin(srv);
	if (srv->nsessions || srv->opening)
		return; /* on_session_ended / open_work_done call again */
	/* Everything is back: close the long-lived handles so uv_run returns. */
	uv_timer_stop(&srv->stop_timer);
	uv_close((uv_handle_t *)&srv->stop_timer, NULL);
	uv_close((uv_handle_t *)&srv->watchdog, NULL);
	uv_close((uv_handle_t *)&srv->lease, NULL);
	uv_close((uv_handle_t *)&srv->tune, NULL);
	uv_close((uv_handle_t *)&srv->accept_backoff, NULL);
	uv_close((uv_handle_t *)&srv->handshake, NULL);
	uv_close((uv_handle_t *)&srv->throttle, NULL);
	uv_close((uv_handle_t *)&srv->sigterm, NULL);
	uv_close((uv_handle_t *)&srv->sigint, NULL);
	uv_close((uv_handle_t *)&srv->sighup, NULL);
	/* Its threads are idle: every open is done. */
	bd_open_pool_close(srv->open_pool);
	srv->open_pool = NULL;
	/* No fetch may hand a block back to an I/O thread once they are gone. */
	bd_remote_cancel();
	bd_pipeline_free(srv->pipeline);
	srv->pipeline = NULL;
	bd_gpu_free(srv->gpu);
	srv->gpu = NULL;
	bd_nvml_stop();
}

void bd__server_stop_if_drained(bd_server *srv)
{
	if (srv->stopping && !srv->nsessions && !srv->opening)
		bd_server_stop(srv);
}

void bd_server_free(bd_server *srv)
{
	if (!srv)
		return;
	bd_dataset_cache_clear();
	/* After the datasets: they hold the objects in the remote cache. */
	bd_remote_stop();
	bd_config_free(&srv->cfg);
	bd_budget_destroy(&srv->ledger);
	free(srv);
}

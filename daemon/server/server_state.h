/* SPDX-License-Identifier: MIT */
/*
 * server_state.h - the control plane's state and the calls between its
 * files: server.c (start, reload, stop), connection.c (clients, the wire,
 * requests), open_request.c (OPEN and new sessions) and status.c (the status
 * document and the metrics, built from this state). The state is one
 * struct owned by the loop thread, so the files share it directly rather
 * than through accessors.
 *
 * Thread rules: loop thread only.
 */
#ifndef BATCHD_DAEMON_SERVER_STATE_H
#define BATCHD_DAEMON_SERVER_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "budget.h"
#include "config.h"
#include "cuda_probe.h"
#include "metrics.h"
#include "pipeline.h"
#include "protocol.h"
#include "server.h"
#include "session.h"
#include "tune.h"
#include "util.h"

typedef struct client client;
typedef struct entry entry;

/* A session as the server tracks it. */
struct entry {
	bd_session *s;
	client *c;               /* NULL once its client is gone */
	uid_t uid;               /* of the client that opened it (kept after it left) */
	pid_t pid;
	double amplification;    /* decoded / delivered bytes to expect (bd_dataset_amplification) */
	entry *next;
};

/* A reply waiting for room in the client's socket. */
typedef struct outmsg {
	struct outmsg *next;
	size_t len;
	int nfds;
	int fds[BP_READY_FDS_GPU];   /* our duplicates, closed once sent */
	uint8_t data[];
} outmsg;

/*
 * One user (uid) with connections, and what its connections share: their
 * count ([limits] connections_per_uid) and a token bucket of requests
 * ([limits] requests_per_uid). Made at the user's first connection, freed
 * with its last (users.c).
 */
typedef struct bd_user {
	uid_t uid;
	unsigned conns;
	double tokens;           /* requests it may make now; at most requests_per_uid */
	uint64_t refill_ns;      /* when tokens was last brought up to date */
	struct bd_user *next;
} bd_user;

/* Limits every client meets; HELLO_OK tells it the first two. */
#define MAX_SESSIONS_PER_CLIENT 64u
#define MAX_BATCH_SIZE          65536u
#define MAX_SESSIONS            4096u

struct client {
	bd_server *srv;
	outmsg *outq, *outq_tail;
	uint64_t outq_bytes;
	uint64_t accepted_ns;    /* for [limits] handshake_timeout */
	int fd;
	uv_poll_t poll;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool hello, busy, gone, closed_handle;
	bool throttled;          /* its user is out of requests: not read until the throttle timer */
	bool waited;             /* its next request was throttled (counted once read) */
	bd_user *user;
	unsigned sessions;
	client *next;
};

/* Why OPEN requests were refused, for the errors metric. */
enum bd_refusal {
	BD_REFUSED_NOT_FOUND,    /* -ENOENT, -ENODATA */
	BD_REFUSED_ACCESS,       /* -EACCES, -EPERM: outside the roots (allow-lists: denied) */
	BD_REFUSED_INVALID,      /* -EINVAL, -ERANGE */
	BD_REFUSED_MEMORY,       /* -ENOMEM: budget or per-uid memory */
	BD_REFUSED_LIMIT,        /* -EMFILE, -EUSERS: session limits */
	BD_REFUSED_CORRUPT,      /* -EBADMSG, -ENOTSUP, -E2BIG: the pack */
	BD_REFUSED_DEVICE,       /* -ENODEV; any refusal of a GPU placement but -ENOMEM */
	BD_REFUSED_OTHER,
	BD_REFUSED_KINDS
};

/* Why connections were cut or refused by the daemon's own limits, for the metrics. */
enum bd_cut {
	BD_CUT_QUEUE,            /* dropped: more than [limits] client_queue left unread */
	BD_CUT_HANDSHAKE,        /* dropped: no HELLO within [limits] handshake_timeout */
	BD_CUT_PER_UID,          /* refused: [limits] connections_per_uid */
	BD_CUT_MAX,              /* refused: [limits] max_connections */
	BD_CUT_FDS,              /* refused: the daemon is out of file descriptors */
	BD_CUT_KINDS
};

/* A log line that may repeat at most once per interval; what it skipped is counted. */
typedef struct bd_ratelog {
	uint64_t last_ns;        /* when it was last written; 0: never */
	uint64_t pending;        /* events since then that were not logged */
} bd_ratelog;

typedef struct bd_totals {
	/* Sessions that ended, so totals do not drop when they go. */
	uint64_t sessions, batches, bytes, failed;
	uint64_t skipped;        /* bad images left out of their batches (on_error=skip) */
	bd_hist wait;            /* client-reported bc_next time */
	uint64_t refused[BD_REFUSED_KINDS];
	uint64_t protocol_violations;   /* connections cut for breaking the protocol */
	uint64_t ring_violations;       /* sessions ended for bad release marks */
	uint64_t denied;                /* connections refused by the allow-lists */
	uint64_t cut[BD_CUT_KINDS];     /* connections dropped or refused by the limits */
	uint64_t reloads, reload_failures;
	uint64_t throttled;             /* requests that waited for [limits] requests_per_uid */
} bd_totals;

struct bd_server {
	uv_loop_t *loop;
	bd_config cfg;
	int argc;
	char **argv;             /* to reload the same file and flags on SIGHUP */
	bd_cuda_state cuda;
	bd_gpu *gpu;             /* the GPU thread, when CUDA is usable */
	char socket_path[108];
	int listen_fd;
	bool socket_activated;   /* systemd owns the socket file */
	uv_poll_t listen_poll;
	int reserve_fd;          /* /dev/null, given up to shed a connection when out of fds */
	unsigned backoff_ms;     /* the next pause of accepting after running out of fds */
	bd_ratelog fds_log, refused_log, handshake_log;
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t stop_timer, watchdog, lease;
	uv_timer_t accept_backoff; /* accepting paused: out of fds, or accept failing */
	uv_timer_t handshake;    /* the earliest [limits] handshake_timeout deadline */
	uv_timer_t throttle;     /* reads throttled connections again ([limits] requests_per_uid) */
	uv_timer_t tune;         /* the decode worker count, every BD_TUNE_INTERVAL_MS */
	bd_tune tuner;
	uint64_t tuned_ns;       /* when it last stepped */
	bd_pipeline *pipeline;
	bd_session_env env;
	uint64_t budget;         /* the memory budget in force: [memory] budget, or auto's */
	uint64_t auto_budget;    /* what budget = auto means: fixed at start */
	uint64_t cache_budget;
	struct bd_open_pool *open_pool; /* remote opens' threads (open_pool.h); NULL without remotes */
	uint64_t remote_tables;  /* set aside for the remote cache's chunk tables (remote.h) */
	client *clients;
	unsigned nclients;
	bd_user *users;          /* every uid with a connection */
	uint64_t queued_bytes;   /* replies queued for all clients (outq_bytes summed) */
	entry *entries;
	unsigned nsessions, opening;
	uint64_t next_session;
	/*
	 * What sessions and dataset versions hold of the budget (budget.h):
	 * the budget less the block cache's share, taken on the loop (sessions)
	 * and on the workers (versions loading).
	 */
	bd_budget ledger;
	uint64_t started_ns;
	bd_totals totals;
	struct bd_http *http;
	bool stopping;
	uint8_t buf[BP_MSG_MAX];
};

/*
 * Whose sessions a report shows: every user's (an admin, or HTTP with
 * [metrics] sessions = yes), only those of uid (mine), or none. Totals are
 * always shown.
 */
typedef struct bd_view {
	bool all;
	bool mine;
	uid_t uid;
} bd_view;

/* ---- server.c ---- */

/* The systemd STATUS= line, after anything it shows changed. */
void bd__server_notify_status(bd_server *srv);
/* Finish a stop once the last session has ended and no open is in flight. */
void bd__server_stop_if_drained(bd_server *srv);
/*
 * Count n events of a log line written at most once per 10 s. @return
 * true when the line is due now, with the events it stands for (these
 * and those not logged since the last line) in *ret_count.
 */
bool bd__ratelog(bd_ratelog *r, uint64_t n, uint64_t *ret_count);

/* ---- connection.c ---- */

/*
 * A connection accept() just returned: refuse it (an ERROR, then closed)
 * when it is over [limits] max_connections or connections_per_uid or not
 * in the [access] allow-lists, else start serving it. Takes fd over.
 */
void bd__client_accepted(bd_server *srv, int fd);
/* Arm the handshake timer for the oldest connection still without HELLO (after accept, reload). */
void bd__clients_handshake_arm(bd_server *srv);
/*
 * Send a reply (with descriptors for READY), queued when the socket is
 * full. @return 0, or -EPIPE when the client is gone or was cut off for it.
 */
int bd__client_send(client *c, const uint8_t *msg, int len, const int *fds, int nfds);
/* Send an ERROR with a printf-style message (cut at BP_ERRMSG_MAX). */
__attribute__((format(printf, 3, 4)))
void bd__client_error(client *c, int code, const char *fmt, ...);
/*
 * Stop reading the client's requests while its OPEN runs; resume after.
 * A client dropped in between stays allocated until resumed, then is freed.
 */
void bd__client_pause(client *c);
void bd__client_resume(client *c);
/* Send every client GOODBYE and cut it off (the daemon is stopping). */
void bd__clients_goodbye(bd_server *srv);

/* ---- users.c ---- */

/* uid's entry with one more connection (made when it has none). @return NULL when out of memory. */
bd_user *bd__user_get(bd_server *srv, uid_t uid);
/* One connection of u fewer; u is freed with its last. */
void bd__user_put(bd_server *srv, bd_user *u);
/* Connections uid holds now. */
unsigned bd__user_conns(const bd_server *srv, uid_t uid);
/*
 * May u make a request now ([limits] requests_per_uid)? Brings its bucket
 * up to date. When not, *wait_ns says when it may. bd__user_spend takes
 * the request from the bucket once it was read.
 */
bool bd__user_may_request(const bd_server *srv, bd_user *u, uint64_t *wait_ns);
void bd__user_spend(const bd_server *srv, bd_user *u);

/* ---- open_request.c ---- */

/* Answer a decoded OPEN: check it, look the dataset up, start the session. */
void bd__client_open(client *c, const bp_msg_open *m);

/* ---- status.c ---- */

/* The status document (JSON) and the metrics (Prometheus text), showing v's sessions. */
void bd__server_status(bd_server *srv, const bd_view *v, bd_text *out);
void bd__server_metrics(bd_server *srv, const bd_view *v, bd_text *out);
/* Fold a session's delivery counters (batches, bytes, failures, waits) into t. */
void bd__totals_add(bd_totals *t, const bd_session_info *si);

#endif

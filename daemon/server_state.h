/* SPDX-License-Identifier: MIT */
/*
 * server_state.h - the control plane's state and the calls between its
 * files: server.c (start, reload, stop), connection.c (clients, the wire,
 * requests), open.c (OPEN and new sessions) and status.c (the status
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

#include "config.h"
#include "cuda_probe.h"
#include "metrics.h"
#include "pipeline.h"
#include "protocol.h"
#include "server.h"
#include "session.h"
#include "util.h"

typedef struct client client;
typedef struct entry entry;

/* A session as the server tracks it. */
struct entry {
	bd_session *s;
	client *c;               /* NULL once its client is gone */
	uid_t uid;               /* of the client that opened it (kept after it left) */
	pid_t pid;
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

#define MAX_OUTQ (UINT64_C(16) << 20)  /* queued reply bytes per client */

/* Limits every client meets; HELLO_OK tells it the first two. */
#define MAX_SESSIONS_PER_CLIENT 64u
#define MAX_BATCH_SIZE          65536u
#define MAX_SESSIONS            4096u
#define MAX_CLIENTS             1024u

struct client {
	bd_server *srv;
	outmsg *outq, *outq_tail;
	uint64_t outq_bytes;
	int fd;
	uv_poll_t poll;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool hello, busy, gone, closed_handle;
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

typedef struct bd_totals {
	/* Sessions that ended, so totals do not drop when they go. */
	uint64_t sessions, batches, bytes, failed;
	bd_hist wait;            /* client-reported bc_next time */
	uint64_t refused[BD_REFUSED_KINDS];
	uint64_t protocol_violations;   /* connections cut for breaking the protocol */
	uint64_t ring_violations;       /* sessions ended for bad release marks */
	uint64_t denied;                /* connections refused by the allow-lists */
	uint64_t reloads, reload_failures;
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
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t stop_timer, watchdog, lease;
	bd_pipeline *pipeline;
	bd_session_env env;
	uint64_t cache_budget;
	client *clients;
	unsigned nclients;
	entry *entries;
	unsigned nsessions, opening;
	uint64_t next_session;
	uint64_t budget_used;
	uint64_t started_ns;
	bd_totals totals;
	struct bd_http *http;
	bool stopping;
	uint8_t buf[BP_MSG_MAX];
};

/* ---- server.c ---- */

/* The systemd STATUS= line, after anything it shows changed. */
void bd__server_notify_status(bd_server *srv);
/* Finish a stop once the last session has ended and no open is in flight. */
void bd__server_stop_if_drained(bd_server *srv);

/* ---- connection.c ---- */

/* The listening socket's poll callback: accept every pending connection. */
void bd__server_accept(uv_poll_t *h, int status, int events);
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

/* ---- open.c ---- */

/* Answer a decoded OPEN: check it, look the dataset up, start the session. */
void bd__client_open(client *c, const bp_msg_open *m);

/* ---- status.c ---- */

/* The status document (JSON) and the metrics (Prometheus text). */
void bd__server_status(bd_server *srv, bd_text *out);
void bd__server_metrics(bd_server *srv, bd_text *out);
/* Fold a session's delivery counters (batches, bytes, failures, waits) into t. */
void bd__totals_add(bd_totals *t, const bd_session_info *si);

#endif

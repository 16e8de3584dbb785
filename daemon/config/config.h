/* SPDX-License-Identifier: MIT */
/*
 * config.h - batchd's settings: defaults, the configuration file, the
 * command line.
 *
 * Every tunable of the daemon lives in one plain struct so the rest of the
 * daemon reads settings, never parses them. The file (INI, parsed with
 * inih) is read first and command-line flags override it, so a unit file
 * can carry the site's configuration while an operator tries one change
 * from a shell. Everything is validated here, once, with messages that
 * name the file and line (or the flag), the value and what is allowed:
 * the daemon refuses to start on a bad setting instead of guessing.
 *
 * File syntax (see conf/batchd.conf): `[section]` headers, `key = value`
 * lines, keys case-sensitive lower-case, surrounding blanks ignored, a
 * repeated key overrides the earlier one (except [datasets] root, which
 * accumulates). Comments: whole lines starting with ';' or '#', and
 * inline after a blank (`queue_depth = 64  # note`). Indentation is
 * cosmetic: there are no continuation lines. A line may hold at most
 * BD_CONFIG_MAX_LINE characters once leading blanks and comments are
 * removed (inih's fixed line buffer); longer lines are refused, never
 * split.
 *
 * Threads: none of these functions keeps state between calls, but
 * bd_config_from_args() uses getopt (process-global state) and
 * bd_config_default_socket() reads the environment: call those from the
 * main thread while no other thread runs setenv() or getopt(). A
 * bd_config is owned by the thread that built it (the loop thread once the
 * daemon runs; SIGHUP builds a fresh one there and swaps it in).
 */
#ifndef BATCHD_DAEMON_CONFIG_H
#define BATCHD_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* [io] engine. */
typedef enum bd_config_io_engine {
	BD_CFG_IO_AUTO = 0,     /* io_uring when it works here, else pread */
	BD_CFG_IO_URING,        /* io_uring; the daemon may still fall back */
	BD_CFG_IO_PREAD,        /* pread thread pool */
} bd_config_io_engine;

/* [io] direct: O_DIRECT reads. */
typedef enum bd_config_direct {
	BD_CFG_DIRECT_AUTO = 0, /* O_DIRECT where the filesystem supports it */
	BD_CFG_DIRECT_ON,
	BD_CFG_DIRECT_OFF,
} bd_config_direct;

/* [memory] tier: where datasets are served from after the first epoch (dataset.h, enum bd_tier). */
typedef enum bd_config_tier {
	BD_CFG_TIER_AUTO = 0,   /* chosen per dataset from its size, the cache and the machine */
	BD_CFG_TIER_RAM,
	BD_CFG_TIER_PAGE,
	BD_CFG_TIER_DIRECT,
} bd_config_tier;

#define BD_CONFIG_CACHE_AUTO        UINT64_MAX  /* [memory] cache = auto */

/* Limits and defaults. The ranges are inclusive. */
#define BD_CONFIG_SOCKET_MAX        107u   /* sizeof(sun_path) - 1 */
#define BD_CONFIG_MAX_ROOTS         256u
#define BD_CONFIG_MAX_FILE          (UINT64_C(1) << 20)  /* bytes */
#define BD_CONFIG_MAX_LINE          198    /* characters, see above */

#define BD_CONFIG_DEFAULT_LOG_LEVEL 6      /* LOG_INFO */
#define BD_CONFIG_DEFAULT_BUDGET    0      /* auto: half the memory available at start */
#define BD_CONFIG_MIN_BUDGET        (UINT64_C(16) << 20)
#define BD_CONFIG_DEFAULT_QD        64u
#define BD_CONFIG_MAX_QD            4096u
#define BD_CONFIG_DEFAULT_IO_THR    1u
#define BD_CONFIG_MAX_IO_THR        64u
#define BD_CONFIG_MAX_DECODE_THR    256u
#define BD_CONFIG_DEFAULT_PREFETCH  8u
#define BD_CONFIG_DEFAULT_MAX_PF    64u
#define BD_CONFIG_MAX_PREFETCH      1022u  /* + 2 held = the ring's 1024 slots */
#define BD_CONFIG_MAX_IDS           1024u  /* allow_uid / allow_gid / admin_uid / admin_gid entries */
#define BD_CONFIG_DEFAULT_CLIENT_Q  (UINT64_C(1) << 20)
#define BD_CONFIG_MIN_CLIENT_Q      (UINT64_C(64) << 10)
#define BD_CONFIG_MAX_CLIENT_Q      (UINT64_C(1) << 30)
#define BD_CONFIG_DEFAULT_HANDSHAKE 5u     /* seconds */
#define BD_CONFIG_DEFAULT_GPU_INTERVAL 5u  /* seconds */
#define BD_CONFIG_MAX_GPU_INTERVAL 3600u
#define BD_CONFIG_MAX_HANDSHAKE     3600u
#define BD_CONFIG_DEFAULT_CONN_UID  64u
#define BD_CONFIG_DEFAULT_MAX_CONN  1024u
#define BD_CONFIG_MAX_CONN          65536u
#define BD_CONFIG_DEFAULT_REQ_UID   1000u  /* requests per second */
#define BD_CONFIG_MAX_REQ_UID       1000000u
#define BD_CONFIG_DEFAULT_REMOTE_REQ 32u
#define BD_CONFIG_MAX_REMOTE_REQ    1024u
#define BD_CONFIG_DEFAULT_RETRIES   5u
#define BD_CONFIG_MAX_RETRIES       100u
#define BD_CONFIG_DEFAULT_TIMEOUT   30u
#define BD_CONFIG_MAX_TIMEOUT       3600u
#define BD_CONFIG_DEFAULT_MIN_RATE  (UINT64_C(16) << 10)
#define BD_CONFIG_MAX_MIN_RATE      (UINT64_C(1) << 30)
#define BD_CONFIG_DEFAULT_CACHE_MAX (UINT64_C(10) << 30)
#define BD_CONFIG_MIN_CACHE_MAX     (UINT64_C(64) << 20)
#define BD_CONFIG_DEFAULT_CHUNK     (UINT64_C(4) << 20)
#define BD_CONFIG_MIN_CHUNK         (UINT64_C(64) << 10)
#define BD_CONFIG_MAX_CHUNK         (UINT64_C(64) << 20)
#define BD_CONFIG_DEFAULT_IMAGE_PIXELS (UINT64_C(64) << 20) /* lib/image's BI_MAX_PIXELS */
#define BD_CONFIG_MIN_IMAGE_PIXELS  (UINT64_C(1) << 16)
#define BD_CONFIG_MAX_IMAGE_PIXELS  (UINT64_C(1) << 30)

typedef struct bd_config {
	char *file;              /* the configuration file read (-c, or the default file); NULL = none */
	bool no_file;            /* --no-config: no file read on purpose (the default file was not looked for) */
	char *socket;            /* [daemon] socket; NULL = default (bd_config_default_socket) */
	int log_level;           /* [daemon] log_level: err|warning|notice|info|debug as syslog LOG_*; default info */
	char **roots;            /* [datasets] root, repeatable: absolute, normalized, no duplicates, file order */
	size_t nroots;
	unsigned *root_lines;    /* per root, its line in file; NULL when the roots came from --root */
	uint64_t memory_budget;  /* [memory] budget; at least 16M; 0 = auto (default): half of the memory available when the daemon starts (MemAvailable, or the room under its cgroup limit when lower), at least 1G */
	uint64_t cache_size;     /* [memory] cache: the decoded-block cache; BD_CONFIG_CACHE_AUTO (default) = half the budget; below the budget */
	bd_config_tier tier;     /* [memory] tier = auto|ram|page|direct; default auto */
	bd_config_io_engine io_engine; /* [io] engine = auto|io_uring|pread; default auto */
	bd_config_direct direct; /* [io] direct = auto|on|off; default auto */
	unsigned queue_depth;    /* [io] queue_depth, 1..4096, default 64 */
	unsigned session_blocks; /* [io] session_blocks, 0..65536, 0 = 2 x queue_depth x threads */
	unsigned io_threads;     /* [io] threads, 1..64, default 1 */
	unsigned decode_threads; /* [decode] threads, 0..256; 0 = CPUs this process may use, resolved by the loaders */
	/*
	 * [io] first_pass: stream (default) reads a ram-tier dataset ahead in
	 * file order on a shuffled first pass (session_warm.c); batches reads
	 * only the blocks the batches ask for, in their order.
	 */
	bool stream_first_pass;
	bool decode_autotune;    /* [decode] autotune: run as few of them as keep clients from waiting (tune.h); default yes */
	unsigned prefetch;       /* [session] prefetch: batches staged ahead by default, 1..1022, default 8 */
	unsigned max_prefetch;   /* [session] max_prefetch: most a client may ask for, prefetch..1022, default 64 */
	unsigned lease_timeout;  /* [session] lease_timeout: seconds a client may hold batches without releasing any before its session is ended; 0 = never (default) */
	unsigned socket_mode;    /* [daemon] socket_mode: octal permission bits, default 0660 */
	char *socket_group;      /* [daemon] socket_group: group name or number owning the socket; NULL = ours */
	unsigned sessions_per_uid; /* [limits] sessions_per_uid: 0 = no limit beyond the global ones; default 0 */
	uint64_t memory_per_uid; /* [limits] memory_per_uid: shared memory one uid may hold; 0 = no limit */
	uint64_t client_queue;   /* [limits] client_queue: reply bytes a client may leave unread and still send requests; 64K..1G, default 1M */
	unsigned handshake_timeout; /* [limits] handshake_timeout: seconds a new connection has to complete HELLO; 0 = no limit; default 5 */
	unsigned connections_per_uid; /* [limits] connections_per_uid: connections one uid may hold; 0 = only max_connections; default 64 */
	unsigned max_connections; /* [limits] max_connections: connections in all, 1..65536, default 1024 */
	unsigned requests_per_uid; /* [limits] requests_per_uid: requests per second one uid's connections may make together (as many again at once); 0 = no limit; default 1000 */
	uint32_t *allow_uids;    /* [access] allow_uid, repeatable (name or number); none = everyone */
	size_t nallow_uids;
	uint32_t *allow_gids;    /* [access] allow_gid, repeatable (name or number); a peer in any passes */
	size_t nallow_gids;
	uint32_t *admin_uids;    /* [access] admin_uid, repeatable: users who see every user's sessions (root always does) */
	size_t nadmin_uids;
	uint32_t *admin_gids;    /* [access] admin_gid, repeatable: groups whose members see every user's sessions */
	size_t nadmin_gids;
	char *metrics_listen;    /* [metrics] listen = HOST:PORT of a loopback HTTP /metrics; NULL = off */
	bool metrics_sessions;   /* [metrics] sessions: per-session series over HTTP too; default no (totals only) */
	double gpu_hour_price;   /* [metrics] gpu_hour_price: what one GPU-hour costs, no currency, finite, >= 0; 0 (default) = no stall cost figures */
	unsigned gpu_interval;   /* [metrics] gpu_interval: seconds between NVML samples of the GPUs, 1..3600, default 5; 0 = no GPU telemetry */
	char **remotes;          /* [datasets] remote, repeatable: s3://bucket/prefix or http(s)://host/path, no duplicates, file order */
	size_t nremotes;
	char *remote_endpoint;   /* [remote] endpoint: http(s)://host[:port]; NULL = https://s3.REGION.amazonaws.com */
	char *remote_region;     /* [remote] region; NULL = us-east-1 */
	int remote_addressing;   /* [remote] addressing: auto|path|virtual as enum bp_s3_addressing (0, 1, 2) */
	char *remote_credentials; /* [remote] credentials: an AWS credentials file (absolute); NULL = the environment, else unsigned */
	char *remote_profile;    /* [remote] profile in that file; NULL = default */
	unsigned remote_requests; /* [remote] requests: GETs in flight, 1..1024, default 32 */
	unsigned remote_retries; /* [remote] retries per request, 0..100, default 5 */
	unsigned remote_timeout; /* [remote] timeout: seconds a request may go without a byte, 1..3600, default 30 */
	uint64_t remote_min_rate; /* [remote] min_rate: bytes/s a request must average over timeout seconds, 0..1G, default 16K; 0: only a stall fails */
	char *cache_dir;         /* [cache] dir (absolute); NULL = $CACHE_DIRECTORY, /var/cache/batchd as root, else $XDG_CACHE_HOME/batchd or ~/.cache/batchd */
	uint64_t cache_max_size; /* [cache] max_size: disk the remote cache may hold, at least 64M, default 10G */
	uint64_t cache_chunk;    /* [cache] chunk: bytes fetched and cached at once, 64K..64M, a multiple of 4K, default 4M */
	uint64_t image_max_pixels; /* [images] max_pixels: a larger image is refused unread (a bomb), 64K..1G, default 64M (BI_MAX_PIXELS) */
} bd_config;

/*
 * Fill c with the defaults. socket is NULL, there are no roots, and
 * decode_threads is 0 (unresolved). Owns nothing yet, but pair it with
 * bd_config_free() anyway.
 */
void bd_config_init(bd_config *c);

/*
 * Free what c owns and leave it zeroed. Accepts NULL, a zeroed struct and
 * any struct these functions left behind, including after an error.
 */
void bd_config_free(bd_config *c);

/*
 * Read the configuration file at path on top of c (call bd_config_init()
 * first). Keys present in the file replace c's values; roots listed in the
 * file replace c's roots, and when the file lists none c's roots stay.
 * decode_threads 0 is then resolved to the number of CPUs this process may
 * run on (at least 1, at most 256).
 *
 * @return 0, or a negative errno with c untouched and a one-line message
 * (no trailing newline) in err, which is written only on error and may be
 * NULL:
 *   -EINVAL  the content is wrong: "PATH:LINE: what is wrong" (unknown
 *            section or key, bad value quoted with what is allowed,
 *            relative root, syntax, over-long line, NUL byte);
 *   -EFBIG   the file is over BD_CONFIG_MAX_FILE: "PATH: ...";
 *   -ENOMEM;
 *   any open/read errno, e.g. -ENOENT with
 *            "PATH: No such file or directory".
 */
int bd_config_load_file(bd_config *c, const char *path, char *err, size_t errlen);

/*
 * Same as bd_config_load_file() for the len bytes at text (need not be
 * NUL-terminated); name stands for the file in messages.
 */
int bd_config_load_string(bd_config *c, const char *name, const char *text, size_t len,
			  char *err, size_t errlen);

/*
 * Apply batchd's command line to c (call bd_config_init() first):
 *   batchd [-c FILE | --no-config] [--socket PATH] [--root DIR]...
 *          [--memory SIZE] [--io-engine auto|io_uring|pread]
 *          [--direct auto|on|off] [--log-level LEVEL] [--help] [--version]
 * All flags are validated first; then a file is loaded as by
 * bd_config_load_file(): FILE (the last -c/--config), which must exist;
 * or, with neither -c nor --no-config, default_file when it exists (absent
 * is not an error: c keeps the defaults; NULL: look for none); then the
 * flags override it, whatever their order. c->file says which file was
 * read, c->no_file whether --no-config was given. The --root flags
 * together replace the file's roots. decode_threads is resolved as in
 * bd_config_load_file(). Of -c and --no-config, the later wins.
 *
 * --help and --version print to stdout and return 1 (exit 0). argv is not
 * permuted; positional arguments are refused.
 *
 * @return 0 or 1; or a negative errno with c untouched and a message in
 * err: -EINVAL naming the flag ("--memory: '12Q' is not a size ..."),
 * unknown options and stray arguments; load errors as for
 * bd_config_load_file(); -ENOMEM.
 * Thread: main thread only (getopt).
 */
int bd_config_from_args(bd_config *c, int argc, char **argv, const char *default_file,
			char *err, size_t errlen);

/*
 * Check that every root of c is a directory the daemon can read and
 * search (it is opened with access(2)'s real ids, as the daemon's user).
 * @return 0, or the first failure's negative errno with
 * "[datasets] root /x (FILE:LINE): No such file or directory: create it or
 * remove the line" (or "--root /x: ...") in err (written only on error,
 * may be NULL).
 * Thread: any; reads the filesystem.
 */
int bd_config_check_roots(const bd_config *c, char *err, size_t errlen);

/*
 * Where the socket goes when the configuration names none:
 * $RUNTIME_DIRECTORY/batchd.sock (the first entry when systemd lists
 * several, colon-separated), else /run/batchd/batchd.sock when running as
 * root, else $XDG_RUNTIME_DIR/batchd.sock. Empty or relative variables
 * count as unset.
 *
 * @return 0 with the path in buf (written only on success); -ENOENT when
 * none applies; -ENAMETOOLONG when the path exceeds BD_CONFIG_SOCKET_MAX;
 * -ENOBUFS when it does not fit in len.
 * Thread: reads the environment, see above.
 */
int bd_config_default_socket(char *buf, size_t len);

/*
 * Where the remote cache goes when [cache] dir names none:
 * $CACHE_DIRECTORY (systemd CacheDirectory=; the first entry), else
 * /var/cache/batchd as root, else $XDG_CACHE_HOME/batchd, else
 * $HOME/.cache/batchd. @return 0 with the path in buf; -ENOENT when none
 * applies; -ENOBUFS when it does not fit in len. Thread: reads the environment.
 */
int bd_config_default_cache_dir(char *buf, size_t len);

/* "auto", "io_uring", ...; "?" for values outside the enums. */
const char *bd_config_io_engine_name(bd_config_io_engine e);
const char *bd_config_direct_name(bd_config_direct d);
const char *bd_config_tier_name(bd_config_tier t);
const char *bd_config_log_level_name(int level);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * config_args.c - batchd's command line and the default socket path (see
 * config.h). Every flag is validated before anything is applied, with the
 * value parsers the file uses (config_value.c), so a bad flag leaves the
 * configuration as it was, as a bad file does.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_parse.h"

/* From the build as a flag (daemon/meson.build, tests/meson.build). */
#ifndef BATCHD_VERSION
#error "define BATCHD_VERSION (-DBATCHD_VERSION=\"x.y.z\")"
#endif

/* ---- the command line -------------------------------------------------- */

enum {
	OPT_SOCKET = 0x100,
	OPT_ROOT,
	OPT_MEMORY,
	OPT_IO_ENGINE,
	OPT_DIRECT,
	OPT_LOG_LEVEL,
	OPT_NO_CONFIG,
	OPT_REMOTE,
	OPT_CACHE_DIR,
};

static const struct option options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "no-config", no_argument, NULL, OPT_NO_CONFIG },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "root", required_argument, NULL, OPT_ROOT },
	{ "remote", required_argument, NULL, OPT_REMOTE },
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "io-engine", required_argument, NULL, OPT_IO_ENGINE },
	{ "direct", required_argument, NULL, OPT_DIRECT },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* usage_head, the default file's path, usage_tail. */
static const char usage_head[] =
	"Usage: batchd [OPTION]...\n"
	"Plan, read, decompress and stage training batches for local trainers.\n"
	"\n"
	"  -c, --config FILE       read FILE first (it must exist); the options below\n"
	"                          override it. Without -c: ";
static const char usage_tail[] =
	",\n                          when it exists\n"
	"      --no-config         read no configuration file (only defaults and flags)\n"
	"      --socket PATH       control socket (default: $RUNTIME_DIRECTORY/batchd.sock,\n"
	"                          else /run/batchd/batchd.sock as root,\n"
	"                          else $XDG_RUNTIME_DIR/batchd.sock)\n"
	"      --root DIR          serve datasets below DIR (absolute); repeat for more;\n"
	"                          replaces the roots of the file\n"
	"      --remote URL        serve datasets below URL (s3://BUCKET/PREFIX or\n"
	"                          https://HOST/PATH); repeat for more; replaces the\n"
	"                          remotes of the file ([remote] there says how to reach them)\n"
	"      --cache-dir DIR     keep remote datasets' fetched bytes in DIR ([cache] dir)\n"
	"      --memory SIZE       memory budget, e.g. 512M, 4G (at least 16M), or auto;\n"
	"                          K, M, G, T, KiB.. are powers of 1024, KB, MB, GB, TB of 1000\n"
	"      --io-engine ENGINE  auto, io_uring or pread\n"
	"      --direct MODE       O_DIRECT reads: auto, on or off\n"
	"      --log-level LEVEL   err, warning, notice, info or debug\n"
	"  -h, --help              show this help and exit\n"
	"  -V, --version           show the version and exit\n";

/* Flags seen, validated, not yet applied. */
struct flags {
	const char *config;
	bool no_config;
	char *socket;
	char **roots;
	size_t nroots;
	char **remotes;
	size_t nremotes;
	char *cache_dir;
	bool budget_set, engine_set, direct_set, level_set;
	uint64_t budget;
	bd_config_io_engine engine;
	bd_config_direct direct;
	int level;
};

static void flags_free(struct flags *f)
{
	free(f->socket);
	bd__config_roots_free(f->roots, f->nroots);
	bd__config_roots_free(f->remotes, f->nremotes);
	free(f->cache_dir);
}

static const char *opt_name(int val)
{
	switch (val) {
	case 'c':
		return "-c";
	case 'h':
		return "--help";
	case 'V':
		return "--version";
	case OPT_SOCKET:
		return "--socket";
	case OPT_ROOT:
		return "--root";
	case OPT_MEMORY:
		return "--memory";
	case OPT_IO_ENGINE:
		return "--io-engine";
	case OPT_DIRECT:
		return "--direct";
	case OPT_LOG_LEVEL:
		return "--log-level";
	case OPT_NO_CONFIG:
		return "--no-config";
	case OPT_REMOTE:
		return "--remote";
	case OPT_CACHE_DIR:
		return "--cache-dir";
	default:
		return NULL;
	}
}

/* Validate one flag's argument into f. @return 0, -EINVAL, -ENOMEM. */
static int parse_flag(struct flags *f, int opt, const char *arg, char *what, size_t wlen)
{
	switch (opt) {
	/* The later of -c and --no-config wins, as for any repeated flag. */
	case 'c':
		f->config = arg;
		f->no_config = false;
		return 0;
	case OPT_NO_CONFIG:
		f->config = NULL;
		f->no_config = true;
		return 0;
	case OPT_SOCKET:
		return bd__config_set_socket(&f->socket, arg, what, wlen);
	case OPT_ROOT:
		return bd__config_add_root(&f->roots, &f->nroots, arg, what, wlen);
	case OPT_REMOTE:
		return bd__config_add_remote(&f->remotes, &f->nremotes, arg, what, wlen);
	case OPT_CACHE_DIR:
		return bd__config_set_abs_path(&f->cache_dir, arg, what, wlen);
	case OPT_MEMORY:
		f->budget_set = true;
		return bd__config_parse_budget(arg, &f->budget, what, wlen);
	case OPT_IO_ENGINE:
		f->engine_set = true;
		return bd__config_parse_engine(arg, &f->engine, what, wlen);
	case OPT_DIRECT:
		f->direct_set = true;
		return bd__config_parse_direct(arg, &f->direct, what, wlen);
	case OPT_LOG_LEVEL:
		f->level_set = true;
		return bd__config_parse_log_level(arg, &f->level, what, wlen);
	default:
		return -EINVAL;
	}
}

/* Fold validated flags into c; moves f's allocations. Cannot fail. */
static void flags_apply(struct flags *f, bd_config *c)
{
	bd_config next = bd__config_scalars(c);

	next.socket = f->socket;
	next.roots = f->roots;
	next.nroots = f->nroots;
	next.remotes = f->remotes;
	next.nremotes = f->nremotes;
	next.cache_dir = f->cache_dir;
	f->socket = NULL;
	f->roots = NULL;
	f->nroots = 0;
	f->remotes = NULL;
	f->nremotes = 0;
	f->cache_dir = NULL;
	if (f->budget_set)
		next.memory_budget = f->budget;
	if (f->engine_set)
		next.io_engine = f->engine;
	if (f->direct_set)
		next.direct = f->direct;
	if (f->level_set)
		next.log_level = f->level;
	next.no_file = f->no_config;
	bd__config_commit(c, &next);
}

/*
 * The file the flags ask for: -c FILE (must exist), none (--no-config), or
 * default_file when it is there. @return 0 or load errors.
 */
static int load(bd_config *c, const struct flags *f, const char *default_file, char *err,
		size_t errlen)
{
	if (f->config)
		return bd_config_load_file(c, f->config, err, errlen);
	if (f->no_config || !default_file)
		return 0;
	/*
	 * Absent is the one failure that means "no file": anything else (a
	 * file batchd may not read, a directory) is an operator's mistake.
	 */
	if (access(default_file, F_OK) < 0 && errno == ENOENT)
		return 0;
	return bd_config_load_file(c, default_file, err, errlen);
}

int bd_config_from_args(bd_config *c, int argc, char **argv, const char *default_file,
			char *err, size_t errlen)
{
	struct flags f = { 0 };
	char what[512];
	const char *flag;
	int opt, r = 0;

	/* Fresh getopt state (GNU: optind 0 reinitializes); our own messages. */
	optind = 0;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+:c:hV", options, NULL)) != -1) {
		switch (opt) {
		case 'h':
			printf("%s%s%s", usage_head, default_file ? default_file : "no file",
			       usage_tail);
			r = 1;
			goto out;
		case 'V':
			printf("batchd %s\n", BATCHD_VERSION);
			r = 1;
			goto out;
		case ':':
			flag = opt_name(optopt);
			bd__config_msg(err, errlen, "%s: needs an argument",
				       flag ? flag : argv[optind - 1]);
			r = -EINVAL;
			goto out;
		case '?':
			flag = optopt ? opt_name(optopt) : NULL;
			if (flag)
				bd__config_msg(err, errlen, "%s: takes no argument", flag);
			else if (optopt)
				bd__config_msg(err, errlen, "unknown option '-%c' (see --help)",
					       optopt);
			else
				bd__config_msg(err, errlen, "unknown option '%s' (see --help)",
					       argv[optind - 1]);
			r = -EINVAL;
			goto out;
		default:
			r = parse_flag(&f, opt, optarg, what, sizeof(what));
			if (r < 0) {
				bd__config_msg(err, errlen, "%s: %s", opt_name(opt), what);
				goto out;
			}
		}
	}
	if (optind < argc) {
		char q[BD__CONFIG_QBUF];

		bd__config_msg(err, errlen, "unexpected argument %s (see --help)",
			       bd__config_quote(q, sizeof(q), argv[optind]));
		r = -EINVAL;
		goto out;
	}
	r = load(c, &f, default_file, err, errlen);
	if (r < 0)
		goto out;
	flags_apply(&f, c);
out:
	flags_free(&f);
	return r;
}

/* ---- default socket ---------------------------------------------------- */

/* dir (n bytes, trailing slashes dropped) + "/batchd.sock" into buf. */
static int socket_in(char *buf, size_t len, const char *dir, size_t n)
{
	static const char leaf[] = "/batchd.sock";
	size_t total;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n == 1)
		n = 0;   /* "/" */
	total = n + sizeof(leaf) - 1;
	if (total > BD_CONFIG_SOCKET_MAX)
		return -ENAMETOOLONG;
	if (total >= len)
		return -ENOBUFS;
	memcpy(buf, dir, n);
	memcpy(buf + n, leaf, sizeof(leaf));
	return 0;
}

int bd_config_default_socket(char *buf, size_t len)
{
	const char *dir;

	/* secure_getenv: a setuid or file-capability batchd ignores these. */
	dir = secure_getenv("RUNTIME_DIRECTORY");
	if (dir && dir[0] == '/')
		return socket_in(buf, len, dir, strcspn(dir, ":"));
	if (geteuid() == 0)
		return socket_in(buf, len, "/run/batchd", strlen("/run/batchd"));
	dir = secure_getenv("XDG_RUNTIME_DIR");
	if (dir && dir[0] == '/')
		return socket_in(buf, len, dir, strlen(dir));
	return -ENOENT;
}

/* ---- default cache directory ---------------------------------------------------------- */

int bd_config_default_cache_dir(char *buf, size_t len)
{
	const char *dir = secure_getenv("CACHE_DIRECTORY");
	int n;

	if (dir && dir[0] == '/')
		n = snprintf(buf, len, "%.*s", (int)strcspn(dir, ":"), dir);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/var/cache/batchd");
	else if ((dir = secure_getenv("XDG_CACHE_HOME")) && dir[0] == '/')
		n = snprintf(buf, len, "%s/batchd", dir);
	else if ((dir = secure_getenv("HOME")) && dir[0] == '/')
		n = snprintf(buf, len, "%s/.cache/batchd", dir);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENOBUFS : 0;
}

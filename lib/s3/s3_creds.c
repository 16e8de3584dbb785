/* SPDX-License-Identifier: MIT */
/*
 * s3_creds.c - where an S3 client's credentials come from (s3.h,
 * Credentials): a credentials file in the AWS syntax (read with inih, as
 * batchd.conf is), the environment, or none.
 *
 * A file the configuration names holds a secret the daemon is trusted
 * with, so it must be as private as an ssh key: a regular file that only
 * its owner may read, and that owner the caller (or the caller root).
 * Anything else is refused with the fix, instead of serving with a secret
 * every local user can read. The tools' fallbacks (~/.aws/credentials)
 * follow the AWS CLI, which makes no such check.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "s3_priv.h"

#define CREDS_FILE_MAX (1u << 20)

/* What a pass over a credentials file found for one profile. */
typedef struct scan {
	const char *profile;
	bool found;               /* a [profile] section */
	char *key_id, *secret, *token;
	char seen[200];           /* the sections there, for the message when profile is missing */
	char last[64];
	bool nomem;
} scan;

static int take(char **dst, const char *value, scan *sc)
{
	free(*dst);
	*dst = strdup(value);
	sc->nomem |= !*dst;
	return *dst != NULL;
}

static void note_section(scan *sc, const char *section)
{
	size_t n = strlen(sc->seen), len = strlen(section);

	if (!strcmp(section, sc->last) || len >= sizeof(sc->last))
		return;
	memcpy(sc->last, section, len + 1);
	if (n + len + 5 > sizeof(sc->seen))
		return;
	if (n) {
		memcpy(sc->seen + n, ", ", 2);
		n += 2;
	}
	sc->seen[n++] = '[';
	memcpy(sc->seen + n, section, len);
	n += len;
	sc->seen[n++] = ']';
	sc->seen[n] = '\0';
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
	scan *sc = user;

	note_section(sc, section);
	if (strcmp(section, sc->profile))
		return 1;
	sc->found = true;
	if (!strcmp(name, "aws_access_key_id"))
		return take(&sc->key_id, value, sc);
	if (!strcmp(name, "aws_secret_access_key"))
		return take(&sc->secret, value, sc);
	if (!strcmp(name, "aws_session_token"))
		return take(&sc->token, value, sc);
	return 1;
}

static void scan_free(scan *sc)
{
	free(sc->key_id);
	bp__s3_wipe_free(sc->secret);
	bp__s3_wipe_free(sc->token);
}

/*
 * Is path a credential systemd passed us (LoadCredential=): a file in
 * $CREDENTIALS_DIRECTORY, a directory only the service's user can read?
 * There a root-owned 0400 file with a read ACL for the service shows as
 * 0440 (the ACL's mask in the group bits), and is still private.
 */
static bool systemd_credential(const char *path, const struct stat *st)
{
	const char *dir = secure_getenv("CREDENTIALS_DIRECTORY");
	size_t n = dir ? strlen(dir) : 0;

	return n > 1 && dir[0] == '/' && !strncmp(path, dir, n) && path[n] == '/' &&
	       !strchr(path + n + 1, '/') && (st->st_uid == 0 || st->st_uid == geteuid()) &&
	       !(st->st_mode & 007);
}

/* A named file must be ours (or we root) and private. @return 0 or -EACCES/-EINVAL with err. */
static int check_private(const char *path, const struct stat *st, char *err, size_t errlen)
{
	if (!S_ISREG(st->st_mode)) {
		bp__s3_say(err, errlen, "credentials file %s: not a regular file", path);
		return -EINVAL;
	}
	if (systemd_credential(path, st))
		return 0;
	if (st->st_mode & 077) {
		bp__s3_say(err, errlen, "credentials file %s: mode %04o lets group or others read the "
			"secret; chmod 600 %s", path, (unsigned)(st->st_mode & 07777), path);
		return -EACCES;
	}
	if (st->st_uid != geteuid() && geteuid() != 0) {
		bp__s3_say(err, errlen, "credentials file %s: owned by uid %u, not by uid %u that reads "
			"it; chown it to that user and chmod 600 %s", path, (unsigned)st->st_uid,
			(unsigned)geteuid(), path);
		return -EACCES;
	}
	return 0;
}

/*
 * Parse path for profile into sc. strict: the configuration named the
 * file (check_private). @return 0 (sc->found says whether the profile is
 * there); -ENOENT, -EACCES, -EINVAL, -ENOMEM with err.
 */
static int read_file(const char *path, bool strict, scan *sc, char *err, size_t errlen)
{
	struct stat st;
	FILE *f;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		bp__s3_say(err, errlen, "credentials file %s: %s", path, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		bp__s3_say(err, errlen, "credentials file %s: %s", path, strerror(-r));
		return r;
	}
	r = strict ? check_private(path, &st, err, errlen) : 0;
	if (r == 0 && (!S_ISREG(st.st_mode) || st.st_size > CREDS_FILE_MAX)) {
		bp__s3_say(err, errlen, "credentials file %s: not a regular file of at most 1 MiB", path);
		r = -EINVAL;
	}
	if (r < 0 || !(f = fdopen(fd, "r"))) {
		close(fd);
		return r < 0 ? r : -ENOMEM;
	}
	r = ini_parse_file(f, on_key, sc);
	fclose(f);
	if (sc->nomem || r == -2)
		return -ENOMEM;
	if (r != 0) {
		bp__s3_say(err, errlen, "credentials file %s: line %d: expected '[profile]' or "
			"'key = value'", path, r);
		return -EINVAL;
	}
	return 0;
}

/* sc's profile into ret, or say what is missing. @return 0 or -EINVAL. */
static int from_scan(const char *path, scan *sc, bp__s3_creds *ret, char *err, size_t errlen)
{
	const char *lacks = !sc->key_id ? "aws_access_key_id" : !sc->secret ? "aws_secret_access_key"
									: NULL;

	if (lacks) {
		bp__s3_say(err, errlen, "credentials file %s: profile [%s] has no %s", path, sc->profile,
		    lacks);
		return -EINVAL;
	}
	ret->key_id = sc->key_id;
	ret->secret = sc->secret;
	ret->token = sc->token;
	sc->key_id = sc->secret = sc->token = NULL;
	snprintf(ret->source, sizeof(ret->source), "file %s [%s]", path, sc->profile);
	return 0;
}

static int profile_ok(const char *p, char *err, size_t errlen)
{
	size_t n = strlen(p);

	if (n && n <= 64 && strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			       "0123456789._-") == n)
		return 0;
	bp__s3_say(err, errlen, "profile '%.64s' is not a profile name (letters, digits, '.', '_', '-')",
	    p);
	return -EINVAL;
}

/* The configuration's own file: everything about it must be right. */
static int from_named(const char *path, const char *profile, bp__s3_creds *ret, char *err,
		      size_t errlen)
{
	scan sc = { .profile = profile };
	int r = read_file(path, true, &sc, err, errlen);

	if (r == 0 && !sc.found) {
		bp__s3_say(err, errlen, "credentials file %s: no profile [%s] (it has %s)", path, profile,
		    sc.seen[0] ? sc.seen : "none");
		r = -EINVAL;
	}
	if (r == 0)
		r = from_scan(path, &sc, ret, err, errlen);
	scan_free(&sc);
	return r;
}

/*
 * AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, as the AWS CLI reads
 * them: a missing default file or default profile is no credentials; one
 * the user named (the variable, a profile) must be there.
 */
static int from_shared(const char *profile, bool named, bp__s3_creds *ret, char *err,
		       size_t errlen)
{
	const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home = getenv("HOME");
	char path[PATH_MAX];
	scan sc = { .profile = profile };
	int r;

	if (file && *file)
		snprintf(path, sizeof(path), "%s", file);
	else if (home && *home)
		snprintf(path, sizeof(path), "%s/.aws/credentials", home);
	else
		return 0;
	if (access(path, F_OK) < 0 && !(file && *file) && !named)
		return 0;
	r = read_file(path, false, &sc, err, errlen);
	if (r == 0 && !sc.found && named) {
		bp__s3_say(err, errlen, "credentials file %s: no profile [%s] (it has %s)", path, profile,
		    sc.seen[0] ? sc.seen : "none");
		r = -EINVAL;
	}
	if (r == 0 && sc.found)
		r = from_scan(path, &sc, ret, err, errlen);
	scan_free(&sc);
	return r;
}

/* AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, both or neither. @return 1 (found), 0, or -EINVAL/-ENOMEM. */
static int from_env(bp__s3_creds *ret, char *err, size_t errlen)
{
	const char *id = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	const char *tok = getenv("AWS_SESSION_TOKEN");

	id = id && *id ? id : NULL;
	sk = sk && *sk ? sk : NULL;
	if (!id && !sk)
		return 0;
	if (!id || !sk) {
		bp__s3_say(err, errlen, "%s is set but %s is not: set both, or neither",
		    id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
		    id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
		return -EINVAL;
	}
	ret->key_id = strdup(id);
	ret->secret = strdup(sk);
	ret->token = tok && *tok ? strdup(tok) : NULL;
	if (!ret->key_id || !ret->secret || (tok && *tok && !ret->token))
		return -ENOMEM;
	snprintf(ret->source, sizeof(ret->source), "environment");
	return 1;
}

int bp__s3_creds_resolve(const bp_s3_config *c, bp__s3_creds *ret, char *err, size_t errlen)
{
	const char *env_profile = getenv("AWS_PROFILE");
	const char *profile = c->profile ? c->profile
			    : c->allow_env && env_profile && *env_profile ? env_profile : "default";
	bp__s3_creds cr = { 0 };
	int r = profile_ok(profile, err, errlen);

	snprintf(cr.source, sizeof(cr.source), "none");
	if (r == 0 && c->credentials)
		r = from_named(c->credentials, profile, &cr, err, errlen);
	else if (r == 0 && c->allow_env && (r = from_env(&cr, err, errlen)) == 0)
		r = from_shared(profile, strcmp(profile, "default") != 0, &cr, err, errlen);
	if (r < 0) {
		bp__s3_creds_free(&cr);
		return r;
	}
	*ret = cr;
	return 0;
}

void bp__s3_creds_free(bp__s3_creds *c)
{
	if (!c)
		return;
	free(c->key_id);
	bp__s3_wipe_free(c->secret);
	bp__s3_wipe_free(c->token);
	c->key_id = c->secret = c->token = NULL;
}

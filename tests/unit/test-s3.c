/* SPDX-License-Identifier: MIT */
/*
 * test-s3.c - the Check suite for the S3 client (lib/s3/) where no
 * S3 server is needed: locations (good ones, and each rule a bad one
 * breaks), credentials (the named file's mode and owner, profiles, the
 * environment, session tokens, the shared file), the backoff's bounds,
 * query strings and URLs as SigV4 wants them signed, the XML replies
 * (errors, listing pages, multipart replies, a DTD refused, ETags and
 * keys with control characters refused), and ranged GETs (the
 * synchronous ones, and the daemon's on a multi handle) against a small
 * HTTP server in a child process that drops a connection halfway through
 * a range, answers 503, ignores Range or sends the wrong range.
 *
 * How a failed reply becomes an errno and a message: test-s3-errors.c.
 * tests/remote/test-s3-server.sh tests the same client against a real
 * S3 server (moto) through batchd-pack.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "s3-testlib.h"
#include "s3.h"
#include "s3_priv.h"

/* ---- locations ---------------------------------------------------------------------- */

static void parse_ok(const char *s, const char *bucket, const char *key)
{
	char err[256] = "";
	bp_s3_loc l;

	ck_assert_msg(bp_s3_loc_parse(s, &l, err, sizeof(err)) == 0, "%s: %s", s, err);
	ck_assert(!l.plain);
	ck_assert_str_eq(l.bucket, bucket);
	ck_assert_str_eq(l.key, key);
	bp_s3_loc_free(&l);
}

static void parse_bad(const char *s, const char *says)
{
	char err[256] = "";
	bp_s3_loc l = { 0 };

	ck_assert_int_eq(bp_s3_loc_parse(s, &l, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, says), "'%s': message '%s' lacks '%s'", s, err, says);
	ck_assert_ptr_null(l.bucket);
}

START_TEST(test_loc_good)
{
	char err[256];
	bp_s3_loc l;

	parse_ok("s3://my-bucket/a/b.bpk", "my-bucket", "a/b.bpk");
	parse_ok("s3://bkt", "bkt", "");
	parse_ok("s3://bkt/", "bkt", "");
	parse_ok("s3://b.k-t9/pre/fix/", "b.k-t9", "pre/fix/");
	parse_ok("s3://bkt/a.b/..c/c..", "bkt", "a.b/..c/c..");
	/* A C string ends at NUL: nothing after one can reach the key. */
	parse_ok("s3://bkt/a\0/../etc", "bkt", "a");
	ck_assert_int_eq(bp_s3_loc_parse("https://example.com/d/x.bpk?v=1", &l, err, sizeof(err)), 0);
	ck_assert(l.plain);
	ck_assert_ptr_null(l.bucket);
	ck_assert_str_eq(l.key, "https://example.com/d/x.bpk?v=1");
	bp_s3_loc_free(&l);
	bp_s3_loc_free(&l);
	bp_s3_loc_free(NULL);
	ck_assert(bp_s3_is_remote("s3://b/k"));
	ck_assert(bp_s3_is_remote("http://h/p"));
	ck_assert(bp_s3_is_remote("https://h/p"));
	ck_assert(!bp_s3_is_remote("/srv/s3://x"));
	ck_assert(!bp_s3_is_remote("data.bpk"));
	ck_assert(!bp_s3_is_remote(NULL));
}
END_TEST

START_TEST(test_loc_bad)
{
	char key[1100];

	parse_bad("s3://ab/k", "3 to 63");
	parse_bad("s3://abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd/k", "3 to 63");
	parse_bad("s3://Bucket/k", "lowercase");
	parse_bad("s3://bk_t/k", "lowercase");
	parse_bad("s3://-bkt/k", "begin and end");
	parse_bad("s3://bkt./k", "begin and end");
	parse_bad("s3://bk..t/k", "\"..\"");
	parse_bad("s3://bk.-t/k", "\"..\"");
	parse_bad("s3://bk-.t/k", "\"..\"");
	parse_bad("s3:///k", "3 to 63");
	parse_bad("s3://bkt//k", "starts with '/'");
	parse_bad("s3://bkt/a//b", "\"//\"");
	parse_bad("s3://bkt/a/../b", "\"..\" component");
	parse_bad("s3://bkt/..", "\"..\" component");
	parse_bad("s3://bkt/./a", "\"..\" component");
	parse_bad("s3://bkt/a/.", "\"..\" component");
	parse_bad("s3://bkt/a/./", "\"..\" component");
	parse_bad("s3://bkt/a\x01z", "control byte");
	parse_bad("s3://bkt/a\nz", "control byte");
	memset(key, 'k', sizeof(key));
	memcpy(key, "s3://bkt/", 9);
	key[sizeof(key) - 1] = '\0';
	parse_bad(key, "1024");
	parse_bad("ftp://host/x", "not a remote location");
	parse_bad("s3:/bkt/x", "not a remote location");
	parse_bad("", "not a remote location");
	parse_bad("https://", "no host");
	parse_bad("https:///x.bpk", "no host");
	parse_bad("https://host/a b.bpk", "blanks");
	parse_bad("https://host/a.bpk#frag", "'#'");
}
END_TEST

/* ---- credentials --------------------------------------------------------------------- */

static char dir[64];

static void clear_env(void)
{
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

static void creds_setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/test-s3-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	clear_env();
	setenv("HOME", dir, 1);
}

static void creds_teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* dir/name holding text, of mode mode. @return its path (static). */
static const char *write_file(const char *name, const char *text, mode_t mode)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(chmod(path, mode), 0);
	return path;
}

static const char two_profiles[] =
	"# a comment\n"
	"[default]\n"
	"aws_access_key_id = AKIDDEFAULT\n"
	"aws_secret_access_key = secret/default+1\n"
	"\n"
	"[ci]\n"
	"aws_access_key_id=AKIDCI\n"
	"aws_secret_access_key=secretci\n"
	"aws_session_token = TOKEN==\n";

static int resolve(const bp_s3_config *c, bp__s3_creds *cr, char *err, size_t len)
{
	memset(cr, 0, sizeof(*cr));
	err[0] = '\0';
	return bp__s3_creds_resolve(c, cr, err, len);
}

START_TEST(test_creds_file)
{
	const char *path = write_file("creds", two_profiles, 0600);
	bp_s3_config c = { .credentials = path };
	bp__s3_creds cr;
	char err[512];

	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "AKIDDEFAULT");
	ck_assert_str_eq(cr.secret, "secret/default+1");
	ck_assert_ptr_null(cr.token);
	ck_assert_msg(strstr(cr.source, path) && strstr(cr.source, "[default]"), "%s", cr.source);
	bp__s3_creds_free(&cr);

	c.profile = "ci";
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "AKIDCI");
	ck_assert_str_eq(cr.token, "TOKEN==");
	bp__s3_creds_free(&cr);

	c.profile = "prod";
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "no profile [prod]") && strstr(err, "[default], [ci]"), "%s", err);
	c.profile = "bad profile";
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a profile name"), "%s", err);

	/* The named file's secret is refused when others could read it, with the fix. */
	c.profile = NULL;
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "chmod 600") && strstr(err, path) && strstr(err, "0644"), "%s",
		      err);
	ck_assert_int_eq(chmod(path, 0640), 0);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "chmod 600"), "%s", err);
	/*
	 * In systemd's $CREDENTIALS_DIRECTORY an ACL's mask shows in the group
	 * bits: 0440 is private there, 0444 is not, and nowhere else is 0440.
	 */
	ck_assert_int_eq(setenv("CREDENTIALS_DIRECTORY", dir, 1), 0);
	ck_assert_int_eq(chmod(path, 0440), 0);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "AKIDDEFAULT");
	bp__s3_creds_free(&cr);
	ck_assert_int_eq(chmod(path, 0444), 0);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EACCES);
	ck_assert_int_eq(setenv("CREDENTIALS_DIRECTORY", "/run/credentials/other.service", 1), 0);
	ck_assert_int_eq(chmod(path, 0440), 0);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EACCES);
	ck_assert_int_eq(unsetenv("CREDENTIALS_DIRECTORY"), 0);
	ck_assert_int_eq(chmod(path, 0600), 0);

	c.credentials = write_file("nosecret", "[default]\naws_access_key_id = A\n", 0600);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "aws_secret_access_key"), "%s", err);
	c.credentials = write_file("garbage", "[default]\nthis is not ini\n", 0600);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "line 2"), "%s", err);
	c.credentials = "/nonexistent/creds";
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "/nonexistent/creds"), "%s", err);
	c.credentials = dir;
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
}
END_TEST

START_TEST(test_creds_env)
{
	bp_s3_config c = { .allow_env = true };
	bp__s3_creds cr;
	char err[512];
	bp_s3 *s;

	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_ptr_null(cr.key_id);
	ck_assert_str_eq(cr.source, "none");

	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "AWS_SECRET_ACCESS_KEY is not"), "%s", err);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), 0);
	ck_assert(bp_s3_signed(s));
	ck_assert_str_eq(bp_s3_credentials_source(s), "environment");
	ck_assert_str_eq(s->key_id, "AKIDENV");
	ck_assert_str_eq(s->token_header, "x-amz-security-token: envtoken");
	bp_s3_free(s);

	/* The daemon's way: the environment is not looked at, nor ~/.aws. */
	write_file("creds", two_profiles, 0600);
	c.allow_env = false;
	ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), 0);
	ck_assert(!bp_s3_signed(s));
	ck_assert_str_eq(bp_s3_credentials_source(s), "none");
	bp_s3_free(s);
	bp_s3_free(NULL);
}
END_TEST

START_TEST(test_creds_shared)
{
	bp_s3_config c = { .allow_env = true };
	bp__s3_creds cr;
	char err[512], aws[128];
	const char *path;

	/* No ~/.aws/credentials: unsigned, unless a profile was asked for. */
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_ptr_null(cr.key_id);
	c.profile = "ci";
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, ".aws/credentials"), "%s", err);

	snprintf(aws, sizeof(aws), "%s/.aws", dir);
	ck_assert_int_eq(mkdir(aws, 0700), 0);
	/* The AWS CLI's file is read as the CLI reads it, whatever its mode. */
	write_file(".aws/credentials", two_profiles, 0644);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "AKIDCI");
	ck_assert_str_eq(cr.token, "TOKEN==");
	bp__s3_creds_free(&cr);

	c.profile = NULL;
	setenv("AWS_PROFILE", "ci", 1);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "AKIDCI");
	bp__s3_creds_free(&cr);
	setenv("AWS_PROFILE", "nope", 1);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "no profile [nope]"), "%s", err);
	unsetenv("AWS_PROFILE");

	path = write_file("other", "[default]\naws_access_key_id=OTHER\naws_secret_access_key=x\n",
			  0600);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "OTHER");
	bp__s3_creds_free(&cr);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/other", 1);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), -ENOENT);

	/* The environment's keys come before any file. */
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
	ck_assert_int_eq(resolve(&c, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.key_id, "AKIDENV");
	ck_assert_ptr_null(cr.token);
	bp__s3_creds_free(&cr);
}
END_TEST

/* ---- backoff -------------------------------------------------------------------------- */

START_TEST(test_backoff)
{
	for (unsigned a = 0; a <= 40; a++) {
		unsigned base = 100, lo = ~0u, hi = 0;

		for (unsigned i = 1; i < a && base < 5000; i++)
			base *= 2;
		base = base > 5000 ? 5000 : base;
		for (int i = 0; i < 2000; i++) {
			unsigned ms = bp_s3_backoff_ms(a);

			ck_assert_msg(ms >= base / 2 && ms <= base, "attempt %u: %u ms not in [%u, %u]",
				      a, ms, base / 2, base);
			lo = ms < lo ? ms : lo;
			hi = ms > hi ? ms : hi;
		}
		/* Jitter: retries of many requests do not all land at once. */
		ck_assert_msg(hi - lo >= base / 4, "attempt %u: %u..%u ms", a, lo, hi);
	}
	ck_assert_uint_le(bp_s3_backoff_ms(1), 100);
	ck_assert_uint_ge(bp_s3_backoff_ms(100), 2500);
	ck_assert_uint_le(bp_s3_backoff_ms(~0u), 5000);
}
END_TEST

/* ---- queries and URLs ------------------------------------------------------------------ */

START_TEST(test_query)
{
	bp__s3_param p[] = {
		{ "prefix", "data set/ü+" }, { "list-type", "2" }, { "delimiter", "/" },
		{ "continuation-token", "1a/b+c=" },
	};
	bp__s3_param up[] = { { "uploads", NULL } };
	bp__s3_param part[] = { { "uploadId", "x~y_z.-" }, { "partNumber", "12" } };
	char *q;

	q = bp__s3_query(p, 4);
	ck_assert_str_eq(q, "continuation-token=1a%2Fb%2Bc%3D&delimiter=%2F&list-type=2&"
			 "prefix=data%20set%2F%C3%BC%2B");
	free(q);
	q = bp__s3_query(up, 1);
	ck_assert_str_eq(q, "uploads=");
	free(q);
	/* Sorted by name, whatever order the caller gives them in. */
	q = bp__s3_query(part, 2);
	ck_assert_str_eq(q, "partNumber=12&uploadId=x~y_z.-");
	free(q);
	q = bp__s3_query(NULL, 0);
	ck_assert_str_eq(q, "");
	free(q);
	q = bp__s3_encode("a b/c%~", true);
	ck_assert_str_eq(q, "a%20b/c%25~");
	free(q);
	q = bp__s3_encode("a b/c", false);
	ck_assert_str_eq(q, "a%20b%2Fc");
	free(q);
}
END_TEST

static bp_s3 *client(const char *endpoint, const char *region, bp_s3_addressing a)
{
	bp_s3_config c = { .endpoint = endpoint, .region = region, .addressing = a };
	char err[256];
	bp_s3 *s = NULL;

	clear_env();
	ck_assert_msg(bp_s3_new(&c, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

static void url_is(const bp_s3 *s, const char *loc, const char *q, const char *want)
{
	char err[256];
	bp_s3_loc l;
	char *u;

	ck_assert_int_eq(bp_s3_loc_parse(loc, &l, err, sizeof(err)), 0);
	u = bp__s3_url(s, &l, q);
	ck_assert_str_eq(u, want);
	free(u);
	bp_s3_loc_free(&l);
}

START_TEST(test_urls)
{
	bp_s3 *s = client("http://127.0.0.1:9000", NULL, BP_S3_ADDR_AUTO);
	bp_s3_config c = { 0 };
	char err[256];

	ck_assert_str_eq(s->sigv4, "aws:amz:us-east-1:s3");
	url_is(s, "s3://bkt/a/b c+.bpk", NULL, "http://127.0.0.1:9000/bkt/a/b%20c%2B.bpk");
	url_is(s, "s3://bkt/", "list-type=2", "http://127.0.0.1:9000/bkt/?list-type=2");
	url_is(s, "https://cdn.example/x.bpk", "ignored=1", "https://cdn.example/x.bpk");
	bp_s3_free(s);
	s = client("http://minio.local:9000/", "eu-west-3", BP_S3_ADDR_VIRTUAL);
	ck_assert_str_eq(s->sigv4, "aws:amz:eu-west-3:s3");
	url_is(s, "s3://bkt/k", "", "http://bkt.minio.local:9000/k");
	bp_s3_free(s);
	/* AWS by default: virtual-host, except where a dotted bucket breaks the certificate. */
	s = client(NULL, "eu-west-1", BP_S3_ADDR_AUTO);
	url_is(s, "s3://bkt/k", NULL, "https://bkt.s3.eu-west-1.amazonaws.com/k");
	url_is(s, "s3://b.kt/k", NULL, "https://s3.eu-west-1.amazonaws.com/b.kt/k");
	bp_s3_free(s);
	s = client(NULL, "eu-west-1", BP_S3_ADDR_PATH);
	url_is(s, "s3://bkt/k", NULL, "https://s3.eu-west-1.amazonaws.com/bkt/k");
	bp_s3_free(s);

	const char *bad[] = { "ftp://h", "http://", "http://h/path", "http://u@h", "http://h?x",
			      "h:9000" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c.endpoint = bad[i];
		ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), -EINVAL);
		ck_assert_msg(strstr(err, "endpoint"), "%s: %s", bad[i], err);
	}
	c.endpoint = NULL;
	c.region = "US_EAST";
	ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "region 'US_EAST'"), "%s", err);
}
END_TEST

/* ---- XML -------------------------------------------------------------------------------- */

#define NS " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

START_TEST(test_xml_error)
{
	static const char err[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey"
				  "</Code><Message>The specified key &amp; more.</Message><Key>k"
				  "</Key></Error>";
	static const char laughs[] = "<?xml version=\"1.0\"?><!DOCTYPE Error [<!ENTITY a \"aaaa\">"
				     "<!ENTITY b \"&a;&a;&a;&a;\">]><Error><Code>&b;</Code></Error>";
	char code[64], msg[128];

	ck_assert_int_eq(bp__s3_xml_error(err, strlen(err), code, msg, sizeof(msg)), 0);
	ck_assert_str_eq(code, "NoSuchKey");
	ck_assert_str_eq(msg, "The specified key & more.");
	ck_assert_int_eq(bp__s3_xml_error("<Error/>", 8, code, msg, sizeof(msg)), 0);
	ck_assert_str_eq(code, "");
	ck_assert_int_eq(bp__s3_xml_error(laughs, strlen(laughs), code, msg, sizeof(msg)), -EPROTO);
	ck_assert_int_eq(bp__s3_xml_error("<Other/>", 8, code, msg, sizeof(msg)), -EPROTO);
	ck_assert_int_eq(bp__s3_xml_error("<Error>", 7, code, msg, sizeof(msg)), -EPROTO);
	ck_assert_int_eq(bp__s3_xml_error("", 0, code, msg, sizeof(msg)), -EPROTO);
	ck_assert_int_eq(bp__s3_xml_error("not xml", 7, code, msg, sizeof(msg)), -EPROTO);
}
END_TEST

static const char page1[] =
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult" NS "><Name>bkt</Name>"
	"<Prefix>ds/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"
	"<IsTruncated>true</IsTruncated><NextContinuationToken>tok/1+</NextContinuationToken>"
	"<Contents><Key>ds/b.bpk</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
	"<ETag>&quot;0123abcd&quot;</ETag><Size>123456789012</Size><StorageClass>STANDARD"
	"</StorageClass></Contents>"
	"<Contents><Key>ds/a &amp; b.bpk</Key><ETag>\"ff\"</ETag><Size>0</Size></Contents>"
	"<CommonPrefixes><Prefix>ds/sub/</Prefix></CommonPrefixes></ListBucketResult>";
static const char page2[] =
	"<ListBucketResult" NS "><IsTruncated>false</IsTruncated>"
	"<Contents><Key>ds/c.bpk</Key><Size>7</Size></Contents></ListBucketResult>";

static void list_bad(const char *xml, size_t max, int want)
{
	bp__s3_list l = { .max = max };

	ck_assert_int_eq(bp__s3_xml_list(xml, strlen(xml), "ds/", &l), want);
	bp_s3_objects_free(l.v, l.n);
	free(l.next);
}

START_TEST(test_xml_list)
{
	bp__s3_list l = { 0 };

	ck_assert_int_eq(bp__s3_xml_list(page1, strlen(page1), "ds/", &l), 0);
	ck_assert(l.truncated);
	ck_assert_str_eq(l.next, "tok/1+");
	ck_assert_uint_eq(l.n, 2);
	ck_assert_str_eq(l.v[0].key, "ds/b.bpk");
	ck_assert_uint_eq(l.v[0].size, 123456789012ull);
	ck_assert_str_eq(l.v[0].etag, "\"0123abcd\"");
	ck_assert_str_eq(l.v[1].key, "ds/a & b.bpk");
	ck_assert_uint_eq(l.v[1].size, 0);
	ck_assert_int_eq(bp__s3_xml_list(page2, strlen(page2), "ds/", &l), 0);
	ck_assert(!l.truncated);
	ck_assert_ptr_null(l.next);
	ck_assert_uint_eq(l.n, 3);
	ck_assert_str_eq(l.v[2].key, "ds/c.bpk");
	ck_assert_str_eq(l.v[2].etag, "");
	bp_s3_objects_free(l.v, l.n);

	list_bad(page1, 1, -E2BIG);
	list_bad("<ListBucketResult><Contents><Key>other/x.bpk</Key><Size>1</Size></Contents>"
		 "</ListBucketResult>", 0, -EPROTO);
	list_bad("<ListBucketResult><Contents><Key>ds/x</Key><Size>-1</Size></Contents>"
		 "</ListBucketResult>", 0, -EPROTO);
	list_bad("<ListBucketResult><Contents><Key>ds/x</Key><Size>99999999999999999999</Size>"
		 "</Contents></ListBucketResult>", 0, -EPROTO);
	list_bad("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", 0,
		 -EPROTO);
	list_bad("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", 0, -EPROTO);
	list_bad("<Error><Code>AccessDenied</Code></Error>", 0, -EPROTO);
	list_bad("<ListBucketResult>", 0, -EPROTO);
	/* Header bytes in an ETag (it goes back in If-Match), control characters in a key. */
	list_bad("<ListBucketResult><Contents><Key>ds/x</Key><ETag>\"e&#13;&#10;X-Injected: 1\""
		 "</ETag><Size>1</Size></Contents></ListBucketResult>", 0, -EILSEQ);
	list_bad("<ListBucketResult><Contents><Key>ds/x&#10;y</Key><Size>1</Size></Contents>"
		 "</ListBucketResult>", 0, -EILSEQ);
	ck_assert(bp__s3_etag_ok("W/\"0-9a\"", 8) && bp__s3_etag_ok("", 0));
	ck_assert(!bp__s3_etag_ok("\"a b\"", 5) && !bp__s3_etag_ok("\"\x7f\"", 3));
	ck_assert(!bp__s3_etag_ok(page1, BP_S3_ETAG_MAX));
}
END_TEST

START_TEST(test_xml_multipart)
{
	static const char init[] = "<InitiateMultipartUploadResult" NS "><Bucket>b</Bucket><Key>k"
				   "</Key><UploadId>VXBsb2FkIElE</UploadId>"
				   "</InitiateMultipartUploadResult>";
	static const char done[] = "<CompleteMultipartUploadResult" NS "><Location>http://x/b/k"
				   "</Location><ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>"
				   "</CompleteMultipartUploadResult>";
	static const char fail[] = "<Error><Code>InternalError</Code><Message>We encountered an "
				   "internal error.</Message></Error>";
	char etags[3][BP_S3_ETAG_MAX] = { "\"aa\"", "\"b&b\"", "\"cc\"" };
	char etag[BP_S3_ETAG_MAX], code[64], msg[128];
	char *id = NULL, *body;

	ck_assert_int_eq(bp__s3_xml_upload_id(init, strlen(init), &id), 0);
	ck_assert_str_eq(id, "VXBsb2FkIElE");
	free(id);
	ck_assert_int_eq(bp__s3_xml_upload_id("<InitiateMultipartUploadResult/>", 32, &id), -EPROTO);
	ck_assert_int_eq(bp__s3_xml_upload_id(fail, strlen(fail), &id), -EPROTO);

	ck_assert_int_eq(bp__s3_xml_complete(done, strlen(done), etag, code, msg, sizeof(msg)), 0);
	ck_assert_str_eq(etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
	/* An <Error> in a 200. */
	ck_assert_int_eq(bp__s3_xml_complete(fail, strlen(fail), etag, code, msg, sizeof(msg)), 1);
	ck_assert_str_eq(code, "InternalError");
	ck_assert_str_eq(msg, "We encountered an internal error.");
	ck_assert_int_eq(bp__s3_xml_complete(init, strlen(init), etag, code, msg, sizeof(msg)),
			 -EPROTO);

	body = bp__s3_xml_complete_body(etags, 3);
	ck_assert_str_eq(body, "<CompleteMultipartUpload" NS "><Part><PartNumber>1</PartNumber>"
			 "<ETag>\"aa\"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>\"b&amp;b\""
			 "</ETag></Part><Part><PartNumber>3</PartNumber><ETag>\"cc\"</ETag></Part>"
			 "</CompleteMultipartUpload>");
	free(body);
}
END_TEST

START_TEST(test_content_md5)
{
	int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
	char md5[32];

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "xxabcyy", 7), 7);
	/* RFC 1321's vectors, base64 as Content-MD5 wants them (RFC 1864). */
	ck_assert_int_eq(bp__s3_content_md5(fd, 2, 3, md5), 0);
	ck_assert_str_eq(md5, "kAFQmDzST7DWlj99KOF/cg==");
	ck_assert_int_eq(bp__s3_content_md5(fd, 0, 0, md5), 0);
	ck_assert_str_eq(md5, "1B2M2Y8AsgTpgAmY7PhCfg==");
	ck_assert_int_eq(bp__s3_content_md5(fd, 5, 3, md5), -EIO);
	close(fd);
}
END_TEST

/* ---- ranged GETs against a scripted server ----------------------------------------------- */

#define OBJ_SIZE 100000u

/* The object's byte at i. */
static unsigned char obj_byte(uint64_t i)
{
	return (unsigned char)(i * 131u + (i >> 8));
}

/*
 * The server's answer to connection number n: "drop" (a 206 cut short
 * halfway), "503", "full" (a 200 with the whole object, Range ignored),
 * "wrong" (a 206 of other bytes), else the range asked for.
 */
typedef struct script {
	const char *steps[8];
} script;

static void serve_range(int c, const char *req, const char *how)
{
	const char *h = strstr(req, "Range: bytes=");
	unsigned long long a = 0, b = OBJ_SIZE - 1, len;
	char head[256];
	unsigned char *body;

	if (h)
		sscanf(h, "Range: bytes=%llu-%llu", &a, &b);
	if (!strcmp(how, "503")) {
		static const char r503[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 62\r\n"
					   "Connection: close\r\n\r\n<Error><Code>SlowDown</Code>"
					   "<Message>slow</Message></Error>\n\n\n";
		(void)!write(c, r503, sizeof(r503) - 1);
		return;
	}
	if (!strcmp(how, "full"))
		a = 0, b = OBJ_SIZE - 1;
	if (!strcmp(how, "wrong"))
		a += 1, b += 1;
	len = b - a + 1;
	body = malloc(len);
	for (unsigned long long i = 0; i < len; i++)
		body[i] = obj_byte(a + i);
	snprintf(head, sizeof(head), "HTTP/1.1 %s\r\nContent-Length: %llu\r\n"
		 "Content-Range: bytes %llu-%llu/%u\r\nETag: \"e1\"\r\nConnection: close\r\n\r\n",
		 strcmp(how, "full") ? "206 Partial Content" : "200 OK", len, a, b, OBJ_SIZE);
	(void)!write(c, head, strlen(head));
	(void)!write(c, body, strcmp(how, "drop") ? len : len / 2);
	free(body);
}

/* s3t_answer_fn for a script: connection n takes step n, then "ok"s. */
static void scripted(int c, const char *req, unsigned n, const void *ctx)
{
	const script *sc = ctx;

	serve_range(c, req, n < 8 && sc->steps[n] ? sc->steps[n] : "ok");
}

/* A child answering connections by sc. @return its pid; *port. */
static pid_t server(const script *sc, int *port)
{
	return s3t_server(scripted, sc, port);
}

/* A GET of [off, off + len) through a server scripted by sc, into a fresh file. */
static int get_scripted(const script *sc, unsigned retries, uint64_t off, uint64_t len,
			int *ret_fd, bp_s3_error *e, bp_s3_stats *stats)
{
	char ep[64], err[256];
	bp_s3_config c = { .retries = retries };
	bp_s3_loc loc = { .bucket = (char *)"bkt", .key = (char *)"o.bpk" };
	bp_s3 *s;
	int port, fd, r;
	pid_t pid = server(sc, &port);

	clear_env();
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
	c.endpoint = ep;
	ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), 0);
	fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
	ck_assert_int_ge(fd, 0);
	/* Poison where the range goes: a byte a retry fails to overwrite shows. */
	for (uint64_t i = 0; i < len; i++)
		ck_assert_int_eq(pwrite(fd, "\xee", 1, (off_t)(1000 + i)), 1);
	r = bp_s3_get_to_fd(s, &loc, "\"e1\"", off, len, fd, 1000, e);
	if (stats)
		bp_s3_stats_get(s, stats);
	s3t_server_stop(pid);
	bp_s3_free(s);
	*ret_fd = fd;
	return r;
}

static void assert_range(int fd, uint64_t off, uint64_t len)
{
	unsigned char *got = malloc(len);

	ck_assert_int_eq(pread(fd, got, len, 1000), (ssize_t)len);
	for (uint64_t i = 0; i < len; i++)
		ck_assert_msg(got[i] == obj_byte(off + i), "byte %llu", (unsigned long long)i);
	free(got);
}

START_TEST(test_get_retries)
{
	const script drop_then_ok = { { "drop", "503", "drop" } };
	const script always_503 = { { "503", "503", "503", "503" } };
	bp_s3_stats st;
	bp_s3_error e;
	int fd;

	ck_assert_int_eq(get_scripted(&drop_then_ok, 5, 5000, 60000, &fd, &e, &st), 0);
	assert_range(fd, 5000, 60000);
	close(fd);
	/* Every attempt counts; the bytes of the dropped ones too (they came). */
	ck_assert_uint_eq(st.requests, 4);
	ck_assert_uint_eq(st.retries, 3);
	ck_assert_uint_ge(st.bytes, 60000);
	ck_assert_uint_le(st.bytes, 120000);
	ck_assert_int_eq(get_scripted(&drop_then_ok, 2, 5000, 60000, &fd, &e, &st), -EAGAIN);
	ck_assert_uint_eq(st.requests, 3);
	ck_assert_uint_eq(st.retries, 2);
	ck_assert(e.retryable);
	ck_assert_msg(strstr(e.msg, "s3://bkt/o.bpk: ") && strstr(e.msg, "after 2 retries"), "%s",
		      e.msg);
	close(fd);
	ck_assert_int_eq(get_scripted(&always_503, 1, 0, 10, &fd, &e, NULL), -EAGAIN);
	ck_assert_int_eq(e.status, 503);
	ck_assert_str_eq(e.code, "SlowDown");
	ck_assert_msg(strstr(e.msg, "HTTP 503 SlowDown: slow (after 1 retries)"), "%s", e.msg);
	close(fd);
}
END_TEST

START_TEST(test_get_checks)
{
	const script full = { { "full" } }, wrong = { { "wrong" } };
	bp_s3_error e;
	int fd;

	/* A 200 of the whole object is that range when the range is the whole object. */
	ck_assert_int_eq(get_scripted(&full, 0, 0, OBJ_SIZE, &fd, &e, NULL), 0);
	assert_range(fd, 0, OBJ_SIZE);
	close(fd);
	ck_assert_int_eq(get_scripted(&full, 0, 10, 100, &fd, &e, NULL), -EPROTO);
	ck_assert_msg(strstr(e.msg, "without the range"), "%s", e.msg);
	close(fd);
	ck_assert_int_eq(get_scripted(&wrong, 0, 10, 100, &fd, &e, NULL), -EPROTO);
	ck_assert_msg(strstr(e.msg, "sent bytes 11-110 for a range of 10-109"), "%s", e.msg);
	close(fd);
}
END_TEST

/* The daemon's way: a handle from bp_s3_request_get run on a multi handle. */
typedef struct sink_buf {
	unsigned char data[OBJ_SIZE];
	size_t n;
	bool refuse;
} sink_buf;

static size_t to_buf(void *ctx, const char *data, size_t n)
{
	sink_buf *b = ctx;

	if (b->refuse || b->n + n > sizeof(b->data))
		return 0;
	memcpy(b->data + b->n, data, n);
	b->n += n;
	return n;
}

static int multi_get(const bp_s3 *s, uint64_t off, uint64_t len, sink_buf *b, bp_s3_error *e)
{
	bp_s3_loc loc = { .bucket = (char *)"bkt", .key = (char *)"o.bpk" };
	CURL_handle *h = bp_s3_request_get(s, &loc, "\"e1\"", off, len, to_buf, b);
	CURLM *m = curl_multi_init();
	CURLMsg *msg = NULL;
	int running = 1, left, r;

	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_eq(bp_s3_request_ctx(h), b);
	ck_assert_int_eq(curl_multi_add_handle(m, h), CURLM_OK);
	while (running) {
		ck_assert_int_eq(curl_multi_perform(m, &running), CURLM_OK);
		if (running)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	ck_assert_ptr_nonnull(msg = curl_multi_info_read(m, &left));
	ck_assert_int_eq(msg->msg, CURLMSG_DONE);
	r = bp_s3_request_result(h, msg->data.result, &loc, e);
	curl_multi_remove_handle(m, h);
	bp_s3_request_free(h);
	curl_multi_cleanup(m);
	return r;
}

START_TEST(test_multi_request)
{
	const script sc = { { "503", "ok", "ok", "drop" } };
	bp_s3_config c = { 0 };
	char ep[64], err[256];
	sink_buf *b = calloc(1, sizeof(*b));
	bp_s3_error e;
	bp_s3 *s;
	int port;
	pid_t pid = server(&sc, &port);

	clear_env();
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
	c.endpoint = ep;
	ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), 0);
	/* An error reply's body never reaches write(); its XML makes the message. */
	ck_assert_int_eq(multi_get(s, 100, 5000, b, &e), -EAGAIN);
	ck_assert(e.retryable);
	ck_assert_uint_eq(b->n, 0);
	ck_assert_msg(strstr(e.msg, "s3://bkt/o.bpk: HTTP 503 SlowDown: slow"), "%s", e.msg);
	ck_assert_int_eq(multi_get(s, 100, 5000, b, &e), 0);
	ck_assert_uint_eq(b->n, 5000);
	for (size_t i = 0; i < b->n; i++)
		ck_assert_int_eq(b->data[i], obj_byte(100 + i));
	b->n = 0;
	b->refuse = true;
	ck_assert_int_eq(multi_get(s, 0, 10, b, &e), -ECANCELED);
	ck_assert(!e.retryable);
	b->refuse = false;
	ck_assert_int_eq(multi_get(s, 0, 20000, b, &e), -EAGAIN);
	ck_assert(e.retryable);
	ck_assert_uint_eq(b->n, 10000);
	ck_assert_ptr_null(bp_s3_request_get(s, &(bp_s3_loc){ .bucket = (char *)"b",
				.key = (char *)"k" }, NULL, 0, 0, to_buf, b));
	s3t_server_stop(pid);
	bp_s3_free(s);
	free(b);
}
END_TEST

static Suite *s3_suite(void)
{
	Suite *s = suite_create("s3");
	TCase *t;

	t = tcase_create("locations");
	tcase_add_test(t, test_loc_good);
	tcase_add_test(t, test_loc_bad);
	suite_add_tcase(s, t);
	t = tcase_create("credentials");
	tcase_add_checked_fixture(t, creds_setup, creds_teardown);
	tcase_add_test(t, test_creds_file);
	tcase_add_test(t, test_creds_env);
	tcase_add_test(t, test_creds_shared);
	suite_add_tcase(s, t);
	t = tcase_create("backoff");
	tcase_add_test(t, test_backoff);
	suite_add_tcase(s, t);
	t = tcase_create("addressing");
	tcase_add_test(t, test_query);
	tcase_add_test(t, test_urls);
	suite_add_tcase(s, t);
	t = tcase_create("xml");
	tcase_add_test(t, test_xml_error);
	tcase_add_test(t, test_xml_list);
	tcase_add_test(t, test_xml_multipart);
	tcase_add_test(t, test_content_md5);
	suite_add_tcase(s, t);
	t = tcase_create("requests");
	tcase_add_test(t, test_get_retries);
	tcase_add_test(t, test_get_checks);
	tcase_add_test(t, test_multi_request);
	tcase_set_timeout(t, 60);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return s3t_run(s3_suite());
}

/* SPDX-License-Identifier: MIT */
/*
 * test-s3-errors.c - the Check suite for what the S3 client (lib/s3/)
 * says when a request fails: how a reply is classified into an errno,
 * whether it is worth a retry, and the sentence a trainer or an operator
 * reads. Above all the redirects, which the client never follows: "the
 * bucket is in another region" only when the reply names a region (the
 * x-amz-bucket-region header, or the <Region> of its <Error>), and a
 * redirect that names none is reported as a redirect, with its Location
 * made safe to print. The replies are set in a request's state directly,
 * and once through curl from a small HTTP server in a child process
 * (s3-testlib.c), so that the headers are seen to be kept.
 *
 * The rest of the client (locations, credentials, XML, ranged GETs):
 * test-s3.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "s3-testlib.h"
#include "s3.h"
#include "s3_priv.h"

/* ---- outcomes -------------------------------------------------------------------------- */

/* What the callbacks kept of a reply: its status, body and the headers the messages use. */
typedef struct reply {
	long status;
	const char *body;         /* NULL: none */
	const char *region;       /* x-amz-bucket-region, NULL: none */
	const char *location;     /* Location, NULL: none */
} reply;

/* The outcome of a transfer that ended with code after reply rp. */
static int outcome_of(const reply *rp, CURLcode code, bp_s3_error *e)
{
	bp__s3_req r = { .status = rp->status, .fd = -1, .in_fd = -1 };
	int err;

	r.h = curl_easy_init();
	ck_assert_ptr_nonnull(r.h);
	if (rp->body) {
		r.body = strdup(rp->body);
		r.body_len = strlen(rp->body);
	}
	if (rp->region)
		snprintf(r.region, sizeof(r.region), "%s", rp->region);
	if (rp->location)
		snprintf(r.location, sizeof(r.location), "%s", rp->location);
	err = bp__s3_req_outcome(&r, code, "s3://b/k", e);
	bp__s3_req_cleanup(&r);
	return err;
}

/* r's outcome for a reply of status with body (may be NULL); a 301 names eu-west-1. */
static int outcome(long status, const char *body, CURLcode code, bp_s3_error *e)
{
	return outcome_of(&(reply){ .status = status, .body = body,
				    .region = status == 301 ? "eu-west-1" : NULL }, code, e);
}

START_TEST(test_outcomes)
{
	static const struct {
		long status;
		int err;
		bool retry;
		const char *body, *msg;
	} t[] = {
		{ 200, 0, false, NULL, NULL },
		{ 206, 0, false, NULL, NULL },
		{ 404, -ENOENT, false, "<Error><Code>NoSuchKey</Code><Message>The specified key "
		  "does not exist.</Message></Error>",
		  "s3://b/k: HTTP 404 NoSuchKey: The specified key does not exist." },
		{ 404, -ENOENT, false, NULL, "s3://b/k: HTTP 404 Not Found" },
		{ 403, -EACCES, false, "<Error><Code>InvalidAccessKeyId</Code><Message>nope</Message>"
		  "</Error>", "s3://b/k: HTTP 403 InvalidAccessKeyId: nope" },
		{ 401, -EACCES, false, NULL, "s3://b/k: HTTP 401" },
		{ 412, -ESTALE, false, NULL, "HTTP 412 Precondition Failed" },
		{ 416, -ERANGE, false, NULL, "HTTP 416" },
		{ 400, -EINVAL, false, "garbage <", "s3://b/k: HTTP 400 Bad Request" },
		{ 503, -EAGAIN, true, "<Error><Code>SlowDown</Code><Message>Please reduce your "
		  "request rate.</Message></Error>", "HTTP 503 SlowDown: Please reduce" },
		{ 500, -EAGAIN, true, NULL, "HTTP 500" },
		{ 429, -EAGAIN, true, NULL, "HTTP 429" },
		{ 408, -EAGAIN, true, NULL, "HTTP 408" },
		{ 301, -EINVAL, false, "<Error><Code>PermanentRedirect</Code></Error>",
		  "another region (eu-west-1): set [remote] region / --region" },
	};
	bp_s3_error e;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		int err = outcome(t[i].status, t[i].body, CURLE_OK, &e);

		ck_assert_msg(err == t[i].err, "HTTP %ld: %d, not %d", t[i].status, err, t[i].err);
		if (!err)
			continue;
		ck_assert_int_eq(e.status, t[i].status);
		ck_assert_int_eq(e.retryable, t[i].retry);
		ck_assert_msg(strstr(e.msg, t[i].msg), "HTTP %ld: '%s' lacks '%s'", t[i].status,
			      e.msg, t[i].msg);
	}
	ck_assert_int_eq(outcome(0, NULL, CURLE_COULDNT_CONNECT, &e), -EAGAIN);
	ck_assert(e.retryable);
	ck_assert_int_eq(e.status, 0);
	ck_assert_msg(!strncmp(e.msg, "s3://b/k: ", 10), "%s", e.msg);
	ck_assert_int_eq(outcome(0, NULL, CURLE_PARTIAL_FILE, &e), -EAGAIN);
	ck_assert_int_eq(outcome(0, NULL, CURLE_OPERATION_TIMEDOUT, &e), -EAGAIN);
	ck_assert_int_eq(outcome(0, NULL, CURLE_GOT_NOTHING, &e), -EAGAIN);
	ck_assert_int_eq(outcome(0, NULL, CURLE_SSL_CONNECT_ERROR, &e), -EIO);
	ck_assert(!e.retryable);
	ck_assert_int_eq(outcome(0, NULL, CURLE_COULDNT_RESOLVE_HOST, &e), -EIO);
}
END_TEST

/* ---- redirects and regions ------------------------------------------------------------- */

#define REGION_FIX(r) "; the bucket is in another region (" r "): set [remote] region / --region"
#define NOT_FOLLOWED "redirects are not followed: check [remote] endpoint / --endpoint"

/* rp's message, which must end with tail and say "another region" only when tail does. */
static void says(const reply *rp, const char *tail)
{
	bp_s3_error e;
	size_t n = strlen(tail), m;

	ck_assert_int_eq(outcome_of(rp, CURLE_OK, &e), -EINVAL);
	ck_assert(!e.retryable);
	ck_assert_int_eq(e.status, rp->status);
	m = strlen(e.msg);
	ck_assert_msg(m >= n && !strcmp(e.msg + m - n, tail), "HTTP %ld: '%s' does not end "
		      "with '%s'", rp->status, e.msg, tail);
	ck_assert_msg(!strstr(e.msg, "another region") == !strstr(tail, "another region"),
		      "HTTP %ld: '%s'", rp->status, e.msg);
	ck_assert_msg(!strncmp(e.msg, "s3://b/k: HTTP ", 15), "%s", e.msg);
}

START_TEST(test_region_named)
{
	/* AWS's own answers: the region in the header, in the <Error>, or both. */
	says(&(reply){ 301, "<Error><Code>PermanentRedirect</Code><Message>The bucket you are "
		       "attempting to access must be addressed using the specified endpoint."
		       "</Message><Endpoint>b.s3.eu-west-1.amazonaws.com</Endpoint></Error>",
		       "eu-west-1", NULL }, REGION_FIX("eu-west-1"));
	says(&(reply){ 307, "<Error><Code>TemporaryRedirect</Code></Error>", "us-west-2",
		       "https://b.s3-us-west-2.amazonaws.com/k" }, REGION_FIX("us-west-2"));
	says(&(reply){ 301, "<Error><Code>PermanentRedirect</Code><Region>ap-south-1</Region>"
		       "</Error>", NULL, NULL }, REGION_FIX("ap-south-1"));
	/* Signed for the wrong region: a 400, the region in <Region>. */
	says(&(reply){ 400, "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the "
		       "region 'us-east-1' is wrong; expecting 'eu-central-1'</Message><Region>"
		       "eu-central-1</Region></Error>", NULL, NULL }, REGION_FIX("eu-central-1"));
	says(&(reply){ 400, "<Error><Code>AuthorizationHeaderMalformed</Code></Error>",
		       "eu-north-1", NULL }, REGION_FIX("eu-north-1"));
}
END_TEST

START_TEST(test_region_not_named)
{
	bp_s3_error e;
	char long_loc[400];

	/* A redirect to another host: where to, and no word of regions. */
	says(&(reply){ 307, NULL, NULL, "http://other.example:9000/b/k?x=1" },
	     "HTTP 307 Temporary Redirect; redirected to other.example:9000 (Location: "
	     "http://other.example:9000/b/k?x=1): " NOT_FOLLOWED);
	says(&(reply){ 301, "<Error><Code>PermanentRedirect</Code></Error>", NULL,
		       "https://user:secret@proxy.example/b/k" },
	     "HTTP 301 PermanentRedirect; redirected to proxy.example (Location: "
	     "https://user:secret@proxy.example/b/k): " NOT_FOLLOWED);
	says(&(reply){ 302, NULL, NULL, "/elsewhere?u=http://x" },
	     "HTTP 302 Found; redirected (Location: /elsewhere?u=http://x): " NOT_FOLLOWED);
	says(&(reply){ 301, NULL, NULL, NULL }, "HTTP 301 Moved Permanently; " NOT_FOLLOWED);
	/* A "region" that is not one (a path, a header injected) names none. */
	says(&(reply){ 301, NULL, "../../etc", "http://h.example/" },
	     "(Location: http://h.example/): " NOT_FOLLOWED);
	says(&(reply){ 307, "<Error><Code>TemporaryRedirect</Code><Region>eu-west-1\nX-Evil: 1"
		       "</Region></Error>", "EU West", NULL }, "; " NOT_FOLLOWED);
	/* AuthorizationHeaderMalformed for another reason: the server's words alone. */
	says(&(reply){ 400, "<Error><Code>AuthorizationHeaderMalformed</Code><Message>a "
		       "non-empty Access Key (AKID) must be provided</Message></Error>", NULL,
		       NULL }, "AuthorizationHeaderMalformed: a non-empty Access Key (AKID) must be "
		       "provided");
	/* A region header on a reply that is no redirect changes nothing. */
	ck_assert_int_eq(outcome_of(&(reply){ 403, "<Error><Code>AccessDenied</Code><Message>"
					      "Access Denied</Message></Error>", "eu-west-1",
					      NULL }, CURLE_OK, &e), -EACCES);
	ck_assert_str_eq(e.msg, "s3://b/k: HTTP 403 AccessDenied: Access Denied");
	/* Location bytes that are not visible ASCII print as '?'; a long one is cut. */
	says(&(reply){ 307, NULL, NULL, "http://h.example/\x1b[31mred\x7f\xc3\xa9" },
	     "redirected to h.example (Location: http://h.example/?[31mred?" "?" "?): " NOT_FOLLOWED);
	memset(long_loc, 'a', sizeof(long_loc) - 1);
	long_loc[sizeof(long_loc) - 1] = '\0';
	memcpy(long_loc, "http://long.example/", 20);
	ck_assert_int_eq(outcome_of(&(reply){ 307, NULL, NULL, long_loc }, CURLE_OK, &e), -EINVAL);
	ck_assert_msg(strstr(e.msg, "redirected to long.example (Location: http://long.example/aaa"),
		      "%s", e.msg);
	ck_assert_msg(strstr(e.msg, "aaa...): " NOT_FOLLOWED), "%s", e.msg);
	ck_assert_uint_lt(strlen(e.msg), sizeof(e.msg));
}
END_TEST

/* bp__s3_xml_error_region of a string. */
static int xml_region(const char *xml, char region[64])
{
	return bp__s3_xml_error_region(xml, strlen(xml), region);
}

START_TEST(test_xml_error_region)
{
	char region[64];

	ck_assert_int_eq(xml_region("<Error><Code>AuthorizationHeaderMalformed</Code><Region>"
				    "eu-west-1</Region></Error>", region), 0);
	ck_assert_str_eq(region, "eu-west-1");
	ck_assert_int_eq(xml_region("<Error><Code>X</Code></Error>", region), 0);
	ck_assert_str_eq(region, "");
	ck_assert_int_eq(xml_region("<Other><Region>r</Region></Other>", region), -EPROTO);
	ck_assert_int_eq(xml_region("not xml", region), -EPROTO);
}
END_TEST

/* ---- through curl ------------------------------------------------------------------------ */

/* s3t_answer_fn: every connection gets the reply text ctx. */
static void answer_text(int c, const char *req, unsigned n, const void *ctx)
{
	(void)req;
	(void)n;
	(void)!write(c, ctx, strlen(ctx));
}

/* A GET of a range of s3://bkt/o.bpk from a server that answers text. @return its errno; e. */
static int get_answered(const char *text, bp_s3_error *e)
{
	char ep[64], err[256];
	bp_s3_config c = { .retries = 0 };
	bp_s3_loc loc = { .bucket = (char *)"bkt", .key = (char *)"o.bpk" };
	bp_s3 *s;
	int port, fd, r;
	pid_t pid = s3t_server(answer_text, text, &port);

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
	c.endpoint = ep;
	ck_assert_int_eq(bp_s3_new(&c, &s, err, sizeof(err)), 0);
	fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
	ck_assert_int_ge(fd, 0);
	r = bp_s3_get_to_fd(s, &loc, "", 0, 10, fd, 0, e);
	s3t_server_stop(pid);
	bp_s3_free(s);
	close(fd);
	return r;
}

START_TEST(test_redirect_served)
{
	static const char to_host[] = "HTTP/1.1 307 Temporary Redirect\r\nLocation: "
				      "http://mirror.example:8080/bkt/o.bpk\r\nContent-Length: 0\r\n"
				      "Connection: close\r\n\r\n";
	static const char to_region[] = "HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: "
					"eu-west-3\r\nContent-Length: 56\r\nConnection: close\r\n\r\n"
					"<Error><Code>PermanentRedirect</Code></Error>\n\n\n\n\n\n\n\n\n\n\n";
	bp_s3_error e;

	ck_assert_int_eq(get_answered(to_host, &e), -EINVAL);
	ck_assert_int_eq(e.status, 307);
	ck_assert_msg(strstr(e.msg, "s3://bkt/o.bpk: HTTP 307 Temporary Redirect; redirected to "
			     "mirror.example:8080 (Location: http://mirror.example:8080/bkt/o.bpk): "
			     NOT_FOLLOWED), "%s", e.msg);
	ck_assert_msg(!strstr(e.msg, "region"), "%s", e.msg);
	ck_assert_int_eq(get_answered(to_region, &e), -EINVAL);
	ck_assert_int_eq(e.status, 301);
	ck_assert_str_eq(e.code, "PermanentRedirect");
	ck_assert_msg(strstr(e.msg, "HTTP 301 PermanentRedirect" REGION_FIX("eu-west-3")), "%s",
		      e.msg);
}
END_TEST

static Suite *s3_errors_suite(void)
{
	Suite *s = suite_create("s3-errors");
	TCase *t;

	t = tcase_create("outcomes");
	tcase_add_test(t, test_outcomes);
	suite_add_tcase(s, t);
	t = tcase_create("redirects");
	tcase_add_test(t, test_region_named);
	tcase_add_test(t, test_region_not_named);
	tcase_add_test(t, test_xml_error_region);
	tcase_add_test(t, test_redirect_served);
	tcase_set_timeout(t, 30);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return s3t_run(s3_errors_suite());
}

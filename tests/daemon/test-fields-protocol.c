/* SPDX-License-Identifier: MIT */
/*
 * test-fields-protocol.c - fields on the wire: the OPEN message's field
 * list and keys flag, encoded and decoded by every rule of PROTOCOL.md's
 * OPEN flags (names, lengths, flags, truncations), and the client's
 * distrust of the schema in the data memfd, against a fake daemon that
 * serves a READY whose schema is damaged.
 *
 * Why a suite of its own: test-fields-daemon.c reads fields from a real
 * batchd; here no batchd runs (the fixture only makes the test's
 * directory), so what the codec and the client refuse is tested apart
 * from what the daemon serves. The schema the fake daemon serves is the
 * fields pack's (fields-pack.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <check.h>

#include "daemon-testlib.h"
#include "fields-pack.h"
#include "pack_fields.h"
#include "protocol.h"
#include "ring.h"

static dt_daemon D;


/* ---- the OPEN field list at the protocol level ------------------------------------------ */

static bp_msg_open open_msg(const char *fields, bool keys)
{
	return (bp_msg_open){ .batch_size = 4, .world = 1, .placement = BP_PLACEMENT_HOST,
			      .keys = keys, .fields = fields,
			      .fields_len = fields ? (uint32_t)strlen(fields) : 0,
			      .path = "data/set", .path_len = 8 };
}

START_TEST(test_protocol_open_fields)
{
	static const char *const good[] = { "a", "img,label", "A-Z.z_9", "x,y,z" };
	static const char *const bad[] = { ",a", "a,", "a,,b", "a b", "a\n", "é" };
	uint8_t buf[BP_MSG_MAX];
	char many[BP_FIELD_LIST_MAX + 2];
	bp_msg_open m, got;
	int n;

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		m = open_msg(good[i], i & 1);
		n = bp_msg_open_encode(&m, buf, sizeof(buf));
		ck_assert_int_eq(n, 88 + 4 + (int)strlen(good[i]) + 8);
		/* Flags: the list, and the keys. */
		ck_assert_uint_eq(buf[66], 1u | (i & 1 ? 2u : 0u));
		ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)n, &got), 0);
		ck_assert_uint_eq(got.fields_len, strlen(good[i]));
		ck_assert_mem_eq(got.fields, good[i], got.fields_len);
		ck_assert(got.keys == (i & 1));
		/* The path still ends the message. */
		ck_assert_ptr_eq(got.path, (const char *)buf + n - 8);
		ck_assert_mem_eq(got.path, "data/set", 8);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		m = open_msg(bad[i], false);
		ck_assert_int_eq(bp_msg_open_encode(&m, buf, sizeof(buf)), -EINVAL);
		/* Forged: the same bytes the encoder would write for a good list of that length. */
		m = open_msg("abcdefgh", false);
		m.fields_len = (uint32_t)strlen(bad[i]);
		m.fields = "abcdefgh";
		n = bp_msg_open_encode(&m, buf, sizeof(buf));
		ck_assert_int_gt(n, 0);
		memcpy(buf + 92, bad[i], strlen(bad[i]));
		ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)n, &got), -EBADMSG);
	}
	/* 64 names of 64 bytes is the most; a 65th name or a 65-byte name is refused. */
	memset(many, 'n', sizeof(many));
	for (size_t i = 64; i < BP_FIELD_LIST_MAX; i += 65)
		many[i] = ',';
	many[BP_FIELD_LIST_MAX] = '\0';
	m = open_msg(many, true);
	ck_assert_int_gt(bp_msg_open_encode(&m, buf, sizeof(buf)), 0);
	many[BP_FIELD_LIST_MAX] = 'n';
	many[BP_FIELD_LIST_MAX + 1] = '\0';
	m = open_msg(many, true);
	ck_assert_int_eq(bp_msg_open_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = open_msg("0123456789012345678901234567890123456789012345678901234567890123,x", false);
	ck_assert_int_gt(bp_msg_open_encode(&m, buf, sizeof(buf)), 0);
	m = open_msg("01234567890123456789012345678901234567890123456789012345678901234", false);
	ck_assert_int_eq(bp_msg_open_encode(&m, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_protocol_open_flags)
{
	uint8_t buf[BP_MSG_MAX], copy[BP_MSG_MAX];
	bp_msg_open m, got;
	int n;

	/* No list: the flag clear and the path right after path_len, as before fields. */
	m = open_msg(NULL, true);
	n = bp_msg_open_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(n, 96);
	ck_assert_uint_eq(buf[66], 2);
	ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)n, &got), 0);
	ck_assert(got.keys && got.fields_len == 0);
	/* The list flag without a list, or an empty list, or an unknown flag. */
	memcpy(copy, buf, (size_t)n);
	copy[66] |= 1;
	ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	for (unsigned bit = 2; bit < 16; bit++) {
		memcpy(copy, buf, (size_t)n);
		copy[66 + bit / 8] |= (uint8_t)(1u << (bit % 8));
		ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	}
	m = open_msg("ab", false);
	n = bp_msg_open_encode(&m, buf, sizeof(buf));
	/* A list length that does not add up with the path's, either way. */
	for (uint32_t lie = 0; lie < 12; lie++) {
		if (lie == 2)
			continue;
		memcpy(copy, buf, (size_t)n);
		copy[88] = (uint8_t)lie;
		ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	}
	memcpy(copy, buf, (size_t)n);
	copy[91] = 0xff; /* a length near 2^32: no wrap into a valid message */
	ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	/* Every truncation of a message with a list is refused. */
	for (int cut = 0; cut < n; cut++)
		ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)cut, &got), -EBADMSG);
}
END_TEST

/* ---- the client's distrust of the schema in the data memfd ----------------------------- */

/*
 * A fake daemon on its own socket: it answers HELLO, then an OPEN with a
 * READY whose data memfd is a well-formed ring in every way but the
 * schema, which `damage` breaks.
 */
enum damage { DAMAGE_BYTES, DAMAGE_OUTSIDE, DAMAGE_MASK, DAMAGE_FLAGS, DAMAGE_NONE };

typedef struct fake {
	int lfd;
	enum damage damage;
	char sock[PATH_MAX];
} fake;

#define FAKE_SLOTS 4u
#define FAKE_DATA (UINT64_C(1) << 16)

static int fake_memfd(uint64_t size, unsigned seals, uint8_t **ret_map)
{
	int fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	*ret_map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(*ret_map != MAP_FAILED);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* The ring the fake daemon serves, with the schema damaged as f says. */
static int fake_ring(const fake *f, int *ret_ctrl)
{
	bp_ring_header *h;
	uint8_t *data, *ctrl;
	uint64_t size = bp_schema_encoded_size(&pack_schema);
	int fd = fake_memfd(FAKE_DATA, F_SEAL_SHRINK | F_SEAL_GROW, &data);

	*ret_ctrl = fake_memfd(bp_ring_ctrl_size(FAKE_SLOTS), F_SEAL_SHRINK | F_SEAL_GROW, &ctrl);
	h = (bp_ring_header *)data;
	*h = (bp_ring_header){ .magic = BP_RING_MAGIC, .version = BP_RING_VERSION,
			       .header_size = BP_RING_HEADER_SIZE, .session = 7,
			       .data_size = FAKE_DATA, .arena_offset = bp_ring_arena_offset(FAKE_SLOTS),
			       .arena_size = FAKE_DATA - bp_ring_arena_offset(FAKE_SLOTS),
			       .batches_per_epoch = 1, .slots = FAKE_SLOTS, .batch_size = 4,
			       .schema_offset = BP_RING_SCHEMA_INLINE, .schema_size = size,
			       .fields = 0x1f };
	bp_schema_encode(&pack_schema, data + BP_RING_SCHEMA_INLINE);
	switch (f->damage) {
	case DAMAGE_BYTES:
		data[BP_RING_SCHEMA_INLINE + 4] = 0xee; /* the first field's type */
		break;
	case DAMAGE_OUTSIDE:
		h->schema_offset = FAKE_DATA - 8;
		break;
	case DAMAGE_MASK:
		h->fields = UINT64_C(1) << FIELD_COUNT;
		break;
	case DAMAGE_FLAGS:
		h->flags = 0x80;
		break;
	case DAMAGE_NONE:
		break;
	}
	munmap(data, FAKE_DATA);
	munmap(ctrl, bp_ring_ctrl_size(FAKE_SLOTS));
	return fd;
}

/* Serve one connection: HELLO_OK, READY for the OPEN, CLOSED for the CLOSE. */
static void *fake_serve(void *arg)
{
	fake *f = arg;
	static uint8_t buf[BP_MSG_MAX];
	int c = accept(f->lfd, NULL, NULL), n, pr[2], pp[2], fds[4];
	bp_msg_hello_ok ok = { .version = 1, .max_sessions = 4, .max_batch_size = 64,
			       .server = "fake", .server_len = 4 };
	bp_msg_ready ready = { .session = 7, .samples = 4, .batches_per_epoch = 1,
			       .data_size = FAKE_DATA, .ctrl_size = bp_ring_ctrl_size(FAKE_SLOTS),
			       .batch_size = 4, .slots = FAKE_SLOTS, .placement = BP_PLACEMENT_HOST };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(fds))];
	} ctl;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	bp_msg_session sm = { .session = 7 };

	if (c < 0 || recv(c, buf, sizeof(buf), 0) <= 0)
		return NULL;
	n = bp_msg_hello_ok_encode(&ok, buf, sizeof(buf));
	send(c, buf, (size_t)n, MSG_NOSIGNAL);
	if (recv(c, buf, sizeof(buf), 0) <= 0 || pipe(pr) < 0 || pipe(pp) < 0)
		goto out;
	fds[0] = fake_ring(f, &fds[1]);
	fds[2] = pr[1];
	fds[3] = pp[0];
	n = bp_msg_ready_encode(&ready, buf, sizeof(buf));
	iov = (struct iovec){ .iov_base = buf, .iov_len = (size_t)n };
	memset(&ctl, 0, sizeof(ctl));
	mh.msg_controllen = CMSG_SPACE(sizeof(fds));
	CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
	CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
	CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), fds, sizeof(fds));
	sendmsg(c, &mh, MSG_NOSIGNAL);
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	close(pr[0]);
	close(pp[1]);
	/* The client ends the session it refused (or closes the stream it took). */
	if (recv(c, buf, sizeof(buf), 0) > 0) {
		n = bp_msg_session_encode(BP_MSG_CLOSED, &sm, buf, sizeof(buf));
		send(c, buf, (size_t)n, MSG_NOSIGNAL);
	}
out:
	close(c);
	return NULL;
}

/* bc_open against a fake daemon serving damage. @return bc_open's result; msg its message. */
static int open_fake(enum damage damage, char *msg, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	fake f = { .damage = damage };
	bc_client *c = NULL;
	bc_stream *s = NULL;
	bc_stream_opts o;
	pthread_t t;
	int r;

	snprintf(f.sock, sizeof(f.sock), "%s/fake.sock", D.dir);
	ck_assert_uint_lt(strlen(f.sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, f.sock, strlen(f.sock) + 1);
	unlink(f.sock);
	f.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f.lfd, 0);
	ck_assert_int_eq(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f.lfd, 1), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, fake_serve, &f), 0);
	ck_assert_int_eq(bc_connect(f.sock, &c), 0);
	bc_stream_opts_init(&o);
	o.dataset = "fake";
	o.batch_size = 4;
	r = bc_open(c, &o, &s);
	snprintf(msg, len, "%s", bc_client_error(c));
	if (r == 0)
		bc_close(s);
	bc_disconnect(c);
	pthread_join(t, NULL);
	close(f.lfd);
	unlink(f.sock);
	return r;
}

START_TEST(test_client_distrusts_schema)
{
	static const struct {
		enum damage d;
		const char *mention;
	} cases[] = {
		{ DAMAGE_BYTES, "schema is damaged" },
		{ DAMAGE_OUTSIDE, "outside the session's memory" },
		{ DAMAGE_MASK, "does not fit the schema" },
		{ DAMAGE_FLAGS, "does not fit the schema" },
	};
	char msg[BP_ERRMSG_MAX + 1];

	/* The fake is good enough to be taken when nothing is damaged. */
	ck_assert_int_eq(open_fake(DAMAGE_NONE, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		ck_assert_int_eq(open_fake(cases[i].d, msg, sizeof(msg)), -EBADMSG);
		ck_assert_msg(strstr(msg, cases[i].mention), "case %zu: %s", i, msg);
	}
}
END_TEST

static void setup_dir_only(void)
{
	dt_setup_dir();
}

static Suite *fields_protocol_suite(void)
{
	Suite *s = suite_create("fields-protocol");
	TCase *tc;

	tc = dt_tcase(s, "protocol", setup_dir_only);
	tcase_add_test(tc, test_protocol_open_fields);
	tcase_add_test(tc, test_protocol_open_flags);
	tcase_add_test(dt_tcase(s, "distrust", setup_dir_only), test_client_distrusts_schema);
	return s;
}

int main(void)
{
	return dt_check_main(&D, fields_protocol_suite);
}

/* SPDX-License-Identifier: MIT */
/*
 * fuzz-protocol.c - libFuzzer target for the control-message decoders.
 *
 * Treats the input as one received datagram, as the daemon and the client
 * do: bp_msg_header_decode() first, then the decoder its type names, and
 * then every decoder regardless, so a decoder that forgets to check the
 * header's type is found too. Beyond "no crash, no sanitizer report" it
 * checks the promises protocol.h makes, and aborts when one is broken:
 *
 *  - errors are the documented ones (header: -EBADMSG, -EPROTONOSUPPORT;
 *    decoders: -EBADMSG only);
 *  - a decoder accepts only what the header decoder accepts, with that
 *    type, so at most one decoder accepts any input;
 *  - strings point into the input and end exactly at its end;
 *  - an accepted message re-encodes to exactly the input bytes (encoder
 *    and decoder share one set of rules; nothing is lost or normalised).
 *    This build speaks one version; when it speaks several, the encoders
 *    must take the version and this check must pass it.
 *
 * Built two ways (tests/meson.build): with -fsanitize=fuzzer as the fuzzer
 * itself, and with tests/fuzz/replay.c as a plain program that replays the
 * seed corpus (tests/fuzz/corpus/protocol) in every `meson test`.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(bool ok, const char *what, uint16_t type, long long v)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-protocol: broken promise: %s (%s, %lld)\n", what,
		bp_msg_type_name(type), v);
	abort();
}

/* A decoded string: inside the input, ending where the input ends. */
static void check_string(const uint8_t *data, size_t size, const char *s, uint32_t len,
			 uint16_t type)
{
	require(len <= size, "string longer than the message", type, len);
	require(len == 0 || (const uint8_t *)s == data + size - len,
		"string does not end the message", type, len);
}

/*
 * Decode data as `type`; on success check the result and re-encode it into
 * out. @return the decoder's result (0 or negative errno).
 */
static int decode_and_recode(uint16_t type, const uint8_t *data, size_t size, uint8_t *out,
			     int *ret_len)
{
	int r, n = -1;

	switch (type) {
	case BP_MSG_HELLO: {
		bp_msg_hello m;
		r = bp_msg_hello_decode(data, size, &m);
		if (r == 0) {
			check_string(data, size, m.name, m.name_len, type);
			n = bp_msg_hello_encode(&m, out, BP_MSG_MAX);
		}
		break;
	}
	case BP_MSG_HELLO_OK: {
		bp_msg_hello_ok m;
		r = bp_msg_hello_ok_decode(data, size, &m);
		if (r == 0) {
			check_string(data, size, m.server, m.server_len, type);
			n = bp_msg_hello_ok_encode(&m, out, BP_MSG_MAX);
		}
		break;
	}
	case BP_MSG_OPEN: {
		bp_msg_open m;
		r = bp_msg_open_decode(data, size, &m);
		if (r == 0) {
			/*
			 * After the path: the resume trailer, the decode trailer,
			 * the sequences trailer and the sources trailer, each when
			 * its flag is set, in that order.
			 */
			size_t dec = m.decode.kind ? 104 : 0, seq = m.sequences ? 8 : 0, src = 0;
			size_t trailer;

			for (uint32_t i = 0; i < m.sources; i++) {
				src += 4 + (i ? 4 + (size_t)m.source[i].path_len : 0);
				if (i)
					require((const uint8_t *)m.source[i].path > data &&
						(const uint8_t *)m.source[i].path +
						m.source[i].path_len <= data + size - 8,
						"OPEN source path outside the message", type,
						m.source[i].path_len);
			}
			src += m.sources ? 16 : 0;
			trailer = (m.start_sample || m.batch_stride > 1 ? 12 : 0) + dec + seq + src;
			require(size >= trailer, "OPEN shorter than its trailers", type, size);
			check_string(data, size - trailer, m.path, m.path_len, type);
			/* The field's name lies inside the decode trailer. */
			require(!dec || ((const uint8_t *)m.decode.field ==
					 data + size - src - seq - dec + 37 &&
					 m.decode.field_len <= 64), "OPEN decode field outside its trailer",
				type, m.decode.field_len);
			require(!seq || (m.seq_len >= 1 && m.seq_len <= BP_SEQ_LEN_MAX),
				"OPEN seq_len out of range", type, m.seq_len);
			require(m.path_len >= 1 && m.rank < m.world && m.batch_stride >= 1 &&
				m.batch_stride <= BP_STRIDE_MAX, "OPEN out of range", type,
				m.path_len);
			n = bp_msg_open_encode(&m, out, BP_MSG_MAX);
		}
		break;
	}
	case BP_MSG_READY: {
		bp_msg_ready m;
		r = bp_msg_ready_decode(data, size, &m);
		if (r == 0) {
			require(m.session != 0 && m.slots != 0, "READY out of range", type, m.slots);
			n = bp_msg_ready_encode(&m, out, BP_MSG_MAX);
		}
		break;
	}
	case BP_MSG_ERROR: {
		bp_msg_error m;
		r = bp_msg_error_decode(data, size, &m);
		if (r == 0) {
			check_string(data, size, m.message, m.message_len, type);
			require(m.code < 0, "ERROR code not negative", type, m.code);
			n = bp_msg_error_encode(&m, out, BP_MSG_MAX);
		}
		break;
	}
	case BP_MSG_CLOSE:
	case BP_MSG_CLOSED: {
		bp_msg_session m;
		r = bp_msg_session_decode(type, data, size, &m);
		if (r == 0) {
			require(m.session != 0, "session id 0", type, 0);
			n = bp_msg_session_encode(type, &m, out, BP_MSG_MAX);
		}
		break;
	}
	case BP_MSG_STATUS:
		r = bp_msg_status_decode(data, size);
		if (r == 0)
			n = bp_msg_status_encode(out, BP_MSG_MAX);
		break;
	case BP_MSG_METRICS:
		r = bp_msg_metrics_decode(data, size);
		if (r == 0)
			n = bp_msg_metrics_encode(out, BP_MSG_MAX);
		break;
	case BP_MSG_STATUS_REPLY:
	case BP_MSG_METRICS_REPLY:
	case BP_MSG_GOODBYE: {
		bp_msg_text m;
		r = bp_msg_text_decode(type, data, size, &m);
		if (r == 0) {
			check_string(data, size, m.text, m.text_len, type);
			n = bp_msg_text_encode(type, &m, out, BP_MSG_MAX);
		}
		break;
	}
	default:
		abort();
	}
	*ret_len = n;
	return r;
}

static void check_decoder(uint16_t type, const uint8_t *data, size_t size, int header_r,
			  const bp_msg_header *h)
{
	static uint8_t out[BP_MSG_MAX];
	int r, n;

	r = decode_and_recode(type, data, size, out, &n);
	require(r == 0 || r == -EBADMSG, "undocumented decoder errno", type, r);
	if (r < 0)
		return;
	require(header_r == 0 && h->type == type, "decoder accepted what the header refuses", type,
		header_r);
	require(n >= 0, "encoder refused a decoded message", type, n);
	require((size_t)n == size, "re-encoding has a different length", type, n);
	require(memcmp(out, data, size) == 0, "re-encoding differs from the input", type,
		(long long)size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bp_msg_header h = { .type = 0 };
	int r;

	r = bp_msg_header_decode(data, size, &h);
	require(r == 0 || r == -EBADMSG || r == -EPROTONOSUPPORT, "undocumented header errno",
		0, r);
	if (r == 0) {
		require(h.magic == BP_PROTO_MAGIC && h.length == size && h.reserved == 0 &&
				size >= BP_MSG_HEADER_SIZE && size <= BP_MSG_MAX,
			"header accepted with a bad field", h.type, (long long)size);
		require(strcmp(bp_msg_type_name(h.type), "UNKNOWN") != 0,
			"header accepted an unknown type", h.type, h.type);
		check_decoder(h.type, data, size, r, &h);
	}
	/* Every decoder, whatever the header says: all but one must refuse. */
	for (uint16_t t = BP_MSG_HELLO; t <= BP_MSG_METRICS_REPLY; t++)
		check_decoder(t, data, size, r, &h);
	return 0;
}

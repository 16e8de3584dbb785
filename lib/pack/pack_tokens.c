/* SPDX-License-Identifier: MIT */
/*
 * pack_tokens.c - token packs (PACK.md §Token packs): the TOKENS section's
 * codec, and what it says checked against the rest of the shard.
 *
 * A token pack is an ordinary pack whose samples are tokenized documents,
 * so blocks, frames, the cache and the copy path serve it as they are; the
 * TOKENS section only says how to read the bytes (the id width, the
 * end-of-document id) and counts them. Its own file, beside the fields it
 * rides on, because what it checks (every sample whole ids, the counts)
 * is its rule alone: pack_fields.c calls it once the schema is known.
 */
#include <errno.h>
#include <string.h>

#include "endian.h"
#include "pack_fields.h"
#include "pack_priv.h"

static int fail(bp_pack_fault *fault, const char *what, uint64_t offset)
{
	if (fault) {
		fault->what = what;
		fault->offset = offset;
		fault->block = -1;
	}
	return -EBADMSG;
}

uint64_t bp_tokens_max_id(uint32_t width)
{
	return width == 2 ? BP_TOKENS_MAX_ID16 : width == 4 ? BP_TOKENS_MAX_ID32 : 0;
}

void bp_tokens_encode(const bp_tokens *t, uint8_t out[BP_TOKENS_SIZE])
{
	memset(out, 0, BP_TOKENS_SIZE);
	bp_put_le32(out + T_VERSION, BP_TOKENS_VERSION);
	bp_put_le32(out + T_WIDTH, t->width);
	bp_put_le64(out + T_EOS, t->eos);
	bp_put_le64(out + T_TOKENS, t->tokens);
	bp_put_le64(out + T_DOCUMENTS, t->documents);
	bp_put_le64(out + T_MAX_ID, t->max_id);
}

int bp_tokens_decode(const uint8_t *buf, size_t len, bp_tokens *ret, bp_pack_fault *fault)
{
	bp_tokens t;
	uint64_t top;

	if (!buf || len != BP_TOKENS_SIZE)
		return fail(fault, "tokens section is not 48 bytes", 0);
	if (bp_le32(buf + T_VERSION) != BP_TOKENS_VERSION)
		return fail(fault, "tokens section of an unknown version", T_VERSION);
	t.width = bp_le32(buf + T_WIDTH);
	top = bp_tokens_max_id(t.width);
	if (!top)
		return fail(fault, "token width is neither 2 nor 4 bytes", T_WIDTH);
	if (bp_le64(buf + T_RESERVED) != 0)
		return fail(fault, "reserved tokens field is not zero", T_RESERVED);
	t.eos = bp_le64(buf + T_EOS);
	t.tokens = bp_le64(buf + T_TOKENS);
	t.documents = bp_le64(buf + T_DOCUMENTS);
	t.max_id = bp_le64(buf + T_MAX_ID);
	if (t.max_id > top)
		return fail(fault, "largest token id beyond its width's ids", T_MAX_ID);
	if (t.eos != BP_TOKENS_NO_EOS && t.eos > top)
		return fail(fault, "end-of-document id beyond its width's ids", T_EOS);
	if (t.tokens > UINT64_MAX / t.width)
		return fail(fault, "token count beyond any shard", T_TOKENS);
	*ret = t;
	return 0;
}

uint64_t bp__tokens_max(const uint8_t *p, size_t n, uint32_t width)
{
	uint64_t max = 0;

	if (width == 2) {
		for (size_t i = 0; i + 2 <= n; i += 2) {
			uint64_t v = (uint64_t)p[i] | (uint64_t)p[i + 1] << 8;

			max = v > max ? v : max;
		}
		return max;
	}
	for (size_t i = 0; i + 4 <= n; i += 4) {
		uint64_t v = bp_le32(p + i);

		max = v > max ? v : max;
	}
	return max;
}

int bp__tokens_parse(const bp_pack_index *idx, const struct bp_schema *schema,
		     const uint8_t *data, uint64_t at, bp_tokens *ret, bp_pack_fault *fault)
{
	uint64_t table = idx->index_offset + idx->block_count * BP_PACK_BLOCK_ENTRY, sum = 0;
	bp_tokens t;
	int r = bp_tokens_decode(data, BP_TOKENS_SIZE, &t, fault);

	if (r < 0) {
		if (fault)
			fault->offset += at;
		return r;
	}
	if (schema->count != 1 || schema->fields[0].type != BP_FIELD_BYTES ||
	    strcmp(schema->fields[0].name, "tokens") != 0)
		return fail(fault, "token pack's schema is not one bytes field \"tokens\"", at);
	if (t.documents != idx->sample_count)
		return fail(fault, "token pack's document count is not its sample count",
			    at + T_DOCUMENTS);
	for (uint64_t id = 0; id < idx->sample_count; id++) {
		uint64_t off, size;

		bp_pack_index_sample_span(idx, id, &off, &size);
		if (size == 0 || size % t.width != 0)
			return fail(fault, size ? "token pack's document is not whole token ids"
						: "token pack's document is empty",
				    table + id * BP_PACK_SAMPLE_ENTRY + 8);
		sum += size; /* < 2^28 bytes a sample, < 2^26 samples: cannot wrap */
	}
	if (t.tokens * t.width != sum)
		return fail(fault, "token count does not match the documents' bytes", at + T_TOKENS);
	*ret = t;
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * util.c - the clock, the text buffer and the allocators (see util.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fault.h"
#include "util.h"

uint64_t bd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bd_text_printf(bd_text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	for (;;) {
		size_t room = t->cap - t->len;

		va_start(ap, fmt);
		n = vsnprintf(t->p ? t->p + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = true;
			return;
		}
		if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		{
			size_t cap = t->cap ? t->cap * 2 : 4096;
			char *p;

			while (cap - t->len <= (size_t)n)
				cap *= 2;
			p = realloc(t->p, cap);
			if (!p) {
				t->oom = true;
				return;
			}
			t->p = p;
			t->cap = cap;
		}
	}
}

void bd_text_free(bd_text *t)
{
	free(t->p);
	*t = (bd_text){ 0 };
}


#if BATCHD_FAULT_INJECTION
void *bd_malloc(size_t n)
{
	return bd_fault_alloc_fails() ? (errno = ENOMEM, NULL) : malloc(n);
}

void *bd_calloc(size_t n, size_t size)
{
	return bd_fault_alloc_fails() ? (errno = ENOMEM, NULL) : calloc(n, size);
}

void *bd_realloc(void *p, size_t n)
{
	return bd_fault_alloc_fails() ? (errno = ENOMEM, NULL) : realloc(p, n);
}
#endif

void bd_text_json_str(bd_text *t, const char *s)
{
	bd_text_printf(t, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			bd_text_printf(t, "\\%c", ch);
		else if (ch < 0x20)
			bd_text_printf(t, "\\u%04x", ch);
		else
			bd_text_printf(t, "%c", ch);
	}
	bd_text_printf(t, "\"");
}

/* SPDX-License-Identifier: MIT */
/*
 * log.c - stderr logging with journald priorities (see log.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static int max_level = LOG_INFO;
static bool journal;

static const char *const names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "err", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

void bd_log_init(int level)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	max_level = level;
	/* JOURNAL_STREAM="DEV:INO" of the stream journald gave us. */
	journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
		  fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

void bd_log_set_level(int level)
{
	__atomic_store_n(&max_level, level, __ATOMIC_RELAXED);
}

int bd_log_level(void)
{
	return __atomic_load_n(&max_level, __ATOMIC_RELAXED);
}

const char *bd_log_level_name(int level)
{
	return level >= LOG_ERR && level <= LOG_DEBUG ? names[level] : "?";
}

int bd_log_parse_level(const char *s)
{
	for (int i = LOG_ERR; i <= LOG_DEBUG; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -EINVAL;
}

void bd_log(int prio, const char *fmt, ...)
{
	char line[2048];
	int n, saved = errno;
	va_list ap;

	if (prio > bd_log_level())
		return;
	if (journal)
		n = snprintf(line, sizeof(line), "<%d>", prio);
	else
		n = snprintf(line, sizeof(line), "batchd[%s]: ", names[prio & 7]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere left to report it. */
	}
	errno = saved;
}

/* SPDX-License-Identifier: MIT */
/*
 * replay.c - run a libFuzzer target over files without libFuzzer.
 *
 * Linked with a fuzz target instead of -fsanitize=fuzzer, this main() feeds
 * it every regular file named on the command line or found (recursively)
 * under a named directory, so the seed corpus and any saved crash inputs
 * become an ordinary regression test, under whatever sanitizers the build
 * uses. Each input is copied into an exactly sized buffer so a read past
 * its end is a sanitizer report, as it would be under libFuzzer.
 *
 * Exit status: 0 after replaying everything; 1 when an argument cannot be
 * read (a missing corpus must not pass as an empty one).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long replayed;

static int replay_file(const char *path)
{
	struct stat st;
	uint8_t *buf;
	size_t done = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		fprintf(stderr, "replay: %s: out of memory\n", path);
		close(fd);
		return -1;
	}
	while (done < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);

		if (n <= 0) {
			fprintf(stderr, "replay: %s: %s\n", path, n ? strerror(errno) : "short read");
			free(buf);
			close(fd);
			return -1;
		}
		done += (size_t)n;
	}
	close(fd);
	LLVMFuzzerTestOneInput(buf, done);
	free(buf);
	replayed++;
	return 0;
}

/* Arguments may be symlinks; inside directories only regular files count. */
static int replay_path(const char *path, int top)
{
	struct dirent *de;
	struct stat st;
	DIR *d;
	int r = 0;

	if ((top ? stat(path, &st) : lstat(path, &st)) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (S_ISREG(st.st_mode))
		return replay_file(path);
	if (!S_ISDIR(st.st_mode))
		return 0;
	d = opendir(path);
	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((de = readdir(d))) {
		char *child;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (asprintf(&child, "%s/%s", path, de->d_name) < 0) {
			r = -1;
			break;
		}
		if (replay_path(child, 0) < 0)
			r = -1;
		free(child);
	}
	closedir(d);
	return r;
}

int main(int argc, char **argv)
{
	int status = 0;

	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], 1) < 0)
			status = 1;
	printf("replayed %lu inputs\n", replayed);
	return status;
}

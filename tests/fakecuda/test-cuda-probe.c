/* SPDX-License-Identifier: MIT */
/*
 * test-cuda-probe.c - the Check suite for daemon/gpu/cuda_probe.c on the fake
 * CUDA (fake_cudart.c), told which machine to be: no driver at all, a
 * driver older than the runtime, a driver without its kernel module, no
 * device, devices hidden by CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES,
 * devices busy or prohibited by their compute mode, a driver mismatch, and
 * a machine that works.
 *
 * An operator reads the probe's reason in the log and in `batchctl status`
 * and acts on it, so every case asserts the words that say what is wrong
 * and what to do, and CUDA's error number kept for searching.
 *
 * The kernel module's file is the build's stand-in (BD_NVIDIA_PROC_VERSION,
 * set by meson.build): each case makes it or removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <cuda_runtime_api.h>

#include "cuda_probe.h"

static const char *const knobs[] = {
	"FAKE_CUDA_NO_DRIVER", "FAKE_CUDA_DRIVER_VERSION", "FAKE_CUDA_ERROR",
	"FAKE_CUDA_COMPUTE_MODE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
};

/* Every case starts on a working machine with two devices and the module loaded. */
static void clean(void)
{
	int fd;

	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		unsetenv(knobs[i]);
	setenv("FAKE_CUDA_DEVICES", "2", 1);
	fd = open(BD_NVIDIA_PROC_VERSION, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "cannot create %s: %s", BD_NVIDIA_PROC_VERSION, strerror(errno));
	close(fd);
}

static void no_module(void)
{
	ck_assert_msg(unlink(BD_NVIDIA_PROC_VERSION) == 0 || errno == ENOENT, "unlink %s: %s",
		      BD_NVIDIA_PROC_VERSION, strerror(errno));
}

/* Probe a machine CUDA cannot use; assert the reason holds every one of words (NULL-ended). */
static void expect_unusable(bd_cuda_state *st, const char *const *words)
{
	ck_assert_int_eq(bd_cuda_probe(st), -ENODEV);
	ck_assert_int_eq(st->devices, 0);
	for (; *words; words++)
		ck_assert_msg(strstr(st->reason, *words), "reason lacks \"%s\": \"%s\"", *words,
			      st->reason);
}

START_TEST(no_driver)
{
	static const char *const words[] = { "no NVIDIA driver on this machine",
		"libcuda.so.1 cannot be loaded", "install it for GPU sessions", "(CUDA error 35)",
		NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_NO_DRIVER", "1", 1);
	no_module();
	expect_unusable(&st, words);
	ck_assert_int_eq(st.driver_version, 0);
	ck_assert_msg(strstr(st.reason, "no " BD_NVIDIA_PROC_VERSION), "%s", st.reason);
}
END_TEST

START_TEST(old_driver)
{
	char rt[64];
	const char *const words[] = { "NVIDIA driver 12.2 is older than the", rt,
		"update the driver", "(CUDA error 35)", NULL };
	bd_cuda_state st;

	snprintf(rt, sizeof(rt), "CUDA %d.%d runtime batchd was built with", CUDART_VERSION / 1000,
		 CUDART_VERSION % 1000 / 10);
	setenv("FAKE_CUDA_DRIVER_VERSION", "12020", 1);
	expect_unusable(&st, words);
	ck_assert_int_eq(st.driver_version, 12020);
	ck_assert_int_eq(st.runtime_version, CUDART_VERSION);
}
END_TEST

START_TEST(module_not_loaded)
{
	static const char *const words[] = { "the NVIDIA kernel module is not loaded",
		"no " BD_NVIDIA_PROC_VERSION, "modprobe nvidia", "(CUDA error 35)", NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_ERROR", "35", 1);
	no_module();
	expect_unusable(&st, words);
}
END_TEST

START_TEST(no_device)
{
	static const char *const words[] = { "the NVIDIA driver sees no CUDA device",
		"nvidia-smi", "(CUDA error 100)", NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_ERROR", "100", 1);
	expect_unusable(&st, words);
}
END_TEST

/* Each variable, set to a value that hides the devices, is named with its value. */
static const struct {
	const char *var, *value, *said;
} hiders[] = {
	{ "CUDA_VISIBLE_DEVICES", "", "CUDA_VISIBLE_DEVICES=\"\"" },
	{ "CUDA_VISIBLE_DEVICES", "7", "CUDA_VISIBLE_DEVICES=\"7\"" },
	{ "NVIDIA_VISIBLE_DEVICES", "void", "NVIDIA_VISIBLE_DEVICES=\"void\"" },
};

START_TEST(hidden)
{
	const char *const words[] = { hiders[_i].said, "hides every CUDA device",
		"unset it", "(CUDA error 100)", NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_ERROR", "100", 1);
	setenv(hiders[_i].var, hiders[_i].value, 1);
	expect_unusable(&st, words);
}
END_TEST

START_TEST(busy)
{
	static const char *const words[] = { "every CUDA device is busy or unavailable",
		"Exclusive_Process", "nvidia-smi -c DEFAULT", "(CUDA error 46)", NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_ERROR", "46", 1);
	expect_unusable(&st, words);
}
END_TEST

START_TEST(prohibited)
{
	static const char *const words[] = { "every CUDA device is in compute mode Prohibited",
		"nvidia-smi -c DEFAULT", NULL };
	static const uint8_t any[16];
	bd_cuda_state st;
	char err[256];

	setenv("FAKE_CUDA_COMPUTE_MODE", "2", 1);
	expect_unusable(&st, words);
	ck_assert_int_eq(bd_cuda_pick(&st, any, 0, err, sizeof(err)), -ENODEV);
	ck_assert_msg(strstr(err, "compute mode Prohibited"), "%s", err);
}
END_TEST

START_TEST(driver_mismatch)
{
	static const char *const words[] = { "different driver versions", "reboot",
		"(CUDA error 803)", NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_ERROR", "803", 1);
	expect_unusable(&st, words);
}
END_TEST

/* An error the probe has no words for keeps the runtime's own, and the number. */
START_TEST(other_error)
{
	static const char *const words[] = { "(CUDA error 999)", NULL };
	bd_cuda_state st;

	setenv("FAKE_CUDA_ERROR", "999", 1);
	expect_unusable(&st, words);
	ck_assert_msg(strlen(st.reason) > strlen(words[0]), "no text before the number: %s",
		      st.reason);
}
END_TEST

START_TEST(usable)
{
	static const uint8_t any[16];
	bd_cuda_state st;
	char err[256] = "";

	ck_assert_int_eq(bd_cuda_probe(&st), 0);
	ck_assert_int_eq(st.devices, 2);
	ck_assert_str_eq(st.reason, "");
	ck_assert_int_eq(st.driver_version, CUDART_VERSION);
	ck_assert_str_eq(st.dev[1].name, "Fake CUDA device 1");
	ck_assert(!st.dev[0].prohibited && !st.dev[1].prohibited);
	ck_assert_int_eq(bd_cuda_pick(&st, any, 1, err, sizeof(err)), 1);
}
END_TEST

/* One device of two prohibited: the other serves, and a request for the first is refused. */
START_TEST(one_prohibited)
{
	static const uint8_t any[16];
	bd_cuda_state st;
	char err[256];

	ck_assert_int_eq(bd_cuda_probe(&st), 0);
	st.dev[0].prohibited = true;
	ck_assert_int_eq(bd_cuda_pick(&st, any, 0, err, sizeof(err)), -EBUSY);
	ck_assert_msg(strstr(err, "CUDA device 0 (Fake CUDA device 0) is in compute mode Prohibited"),
		      "%s", err);
	ck_assert_msg(strstr(err, "nvidia-smi -i 0 -c DEFAULT"), "%s", err);
	ck_assert_int_eq(bd_cuda_pick(&st, any, 1, err, sizeof(err)), 1);
}
END_TEST

static Suite *probe_suite(void)
{
	Suite *s = suite_create("cuda-probe");
	TCase *tc = tcase_create("machines");

	tcase_add_checked_fixture(tc, clean, NULL);
	tcase_add_test(tc, no_driver);
	tcase_add_test(tc, old_driver);
	tcase_add_test(tc, module_not_loaded);
	tcase_add_test(tc, no_device);
	tcase_add_loop_test(tc, hidden, 0, sizeof(hiders) / sizeof(hiders[0]));
	tcase_add_test(tc, busy);
	tcase_add_test(tc, prohibited);
	tcase_add_test(tc, driver_mismatch);
	tcase_add_test(tc, other_error);
	tcase_add_test(tc, usable);
	tcase_add_test(tc, one_prohibited);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(probe_suite());
	int failed;

	/* Each case is a machine of its own: the fake's driver is loaded once a process. */
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

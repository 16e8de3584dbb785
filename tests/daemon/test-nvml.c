/* SPDX-License-Identifier: MIT */
/*
 * test-nvml.c - batchd's GPU telemetry (daemon/gpu/nvml.c) against the fake
 * NVML (tests/fakenvml): the exact metric lines and status fields for the
 * fake's figures, a device without a power sensor or ECC left out of those
 * series (not reported as 0), the devices matched to the fake CUDA's by
 * UUID rather than by position, figures that follow the device between
 * samples, a reload's new gpu_interval, and no telemetry at all, with the reason in the status, when
 * NVML is missing, when nvmlInit fails, and when [metrics] gpu_interval
 * is 0. The metric names pass `promtool check metrics` where promtool is.
 *
 * One of the service suites (service-testlib.h): a real batchd started
 * with `-c FILE` and $BATCHD_NVML_LIBRARY naming the fake.
 *
 * BATCHD and BATCHD_PACK name the binaries; the arguments are the fake
 * NVML library and (where CUDA's headers were) the fake CUDA's directory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "service-testlib.h"

static dt_daemon D;
static const char *fake_nvml, *fake_cuda;   /* argv[1], argv[2] (NULL: none) */

#define expect dt_expect

/* NVML index 0 is CUDA ordinal 1 and the other way round: a match by UUID, not by place. */
#define UUID0 "GPU-face0001-0405-0607-0809-0a0b0c0d0e0f"
#define UUID1 "GPU-face0000-0405-0607-0809-0a0b0c0d0e0f"
#define L0 "uuid=\"" UUID0 "\",index=\"0\""
#define L1 "uuid=\"" UUID1 "\",index=\"1\""

/*
 * Device 0: busy, throttled for power and heat plus a bit newer than
 * batchd (0x1000), ECC on. Device 1: idle, no power sensor, no ECC.
 */
static const char figures[] =
	"# UUID NAME UTIL MEM_UTIL MEM_USED MEM_TOTAL TEMP POWER_MW THROTTLE ECC_C ECC_U\n"
	UUID0 " Fake_H200_b 37 12 1073741824 150754820096 61 152250 0x1024 3 1\n"
	"\n"
	UUID1 " Fake_H200_a 0 0 0 150754820096 30 - 0x1 - -\n";

static char env_lib[512], env_file[512], env_fail[64], env_ld[512], env_cuda[64];
static const char *envv[8];

/* The daemon's environment: the NVML library lib, FAKE_NVML_INIT_FAIL=fail unless NULL. */
static void daemon_env(const char *lib, const char *fail)
{
	const char *cuda = fake_cuda;
	size_t n = 0;

	snprintf(env_lib, sizeof(env_lib), "BATCHD_NVML_LIBRARY=%s", lib);
	snprintf(env_file, sizeof(env_file), "FAKE_NVML_FILE=%s/nvml.txt", D.dir);
	envv[n++] = env_lib;
	envv[n++] = env_file;
	if (fail) {
		snprintf(env_fail, sizeof(env_fail), "FAKE_NVML_INIT_FAIL=%s", fail);
		envv[n++] = env_fail;
	}
	if (cuda) {
		snprintf(env_ld, sizeof(env_ld), "LD_LIBRARY_PATH=%s", cuda);
		snprintf(env_cuda, sizeof(env_cuda), "FAKE_CUDA_DEVICES=2");
		envv[n++] = env_ld;
		envv[n++] = env_cuda;
	}
	envv[n] = NULL;
	D.env = envv;
}

static void write_figures(const char *text)
{
	char path[512], tmp[520];
	FILE *f;

	snprintf(path, sizeof(path), "%s/nvml.txt", D.dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	/* Whole or not at all: the sampler may read it at any moment. */
	ck_assert_int_eq(rename(tmp, path), 0);
}

static const char *fake_lib(void)
{
	ck_assert_msg(fake_nvml != NULL, "usage: test-nvml FAKE_NVML_LIB [FAKE_CUDA_DIR] "
		      "(meson passes them)");
	return fake_nvml;
}

/* Start the daemon on the fake NVML with gpu_interval = 1. */
static void start_fake(const char *fail)
{
	write_figures(figures);
	daemon_env(fake_lib(), fail);
	sv_conf_basic("info", "[metrics]\ngpu_interval = 1\n");
	sv_start_ok();
}

/* text has this line, whole. */
static void expect_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line)))
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return;
		else
			p += n;
	fprintf(stderr, "---- the metrics ----\n%s---- end of the metrics ----\n", text);
	expect(0, "the metrics (above) lack the line\n%s", line);
}

static json_object *gpu_at(json_object *st, size_t i)
{
	json_object *gpus = json_path_get(st, "gpus");

	expect(gpus && json_object_is_type(gpus, json_type_array) &&
	       json_object_array_length(gpus) > i, "status: no gpus[%zu] in %s", i,
	       json_object_to_json_string(st));
	return json_object_array_get_idx(gpus, i);
}

static const char *jstr(json_object *o, const char *key)
{
	json_object *v = json_path_get(o, key);

	expect(v && json_object_is_type(v, json_type_string), "status: no string \"%s\" in %s", key,
	       json_object_to_json_string(o));
	return json_object_get_string(v);
}

static bool jnull(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && v == NULL;
}

/* The "throttle_reasons" of g, joined with commas. */
static const char *reasons(json_object *g, char *buf, size_t len)
{
	json_object *a = json_path_get(g, "throttle_reasons");
	size_t o = 0;

	expect(a && json_object_is_type(a, json_type_array), "no throttle_reasons in %s",
	       json_object_to_json_string(g));
	buf[0] = '\0';
	for (size_t i = 0; i < json_object_array_length(a); i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "",
				      json_object_get_string(json_object_array_get_idx(a, i)));
	return buf;
}

/* ---- figures ------------------------------------------------------------------------- */

static void expect_metric_lines(const char *text)
{
	expect_line(text, "batchd_gpu_utilization_ratio{" L0 "} 0.37");
	expect_line(text, "batchd_gpu_utilization_ratio{" L1 "} 0");
	expect_line(text, "batchd_gpu_memory_utilization_ratio{" L0 "} 0.12");
	expect_line(text, "batchd_gpu_memory_used_bytes{" L0 "} 1073741824");
	expect_line(text, "batchd_gpu_memory_used_bytes{" L1 "} 0");
	expect_line(text, "batchd_gpu_memory_total_bytes{" L0 "} 150754820096");
	expect_line(text, "batchd_gpu_memory_total_bytes{" L1 "} 150754820096");
	expect_line(text, "batchd_gpu_temperature_celsius{" L0 "} 61");
	expect_line(text, "batchd_gpu_temperature_celsius{" L1 "} 30");
	expect_line(text, "batchd_gpu_power_watts{" L0 "} 152.25");
	expect_line(text, "batchd_gpu_throttle_reasons{" L0 ",reason=\"sw_power_cap\"} 1");
	expect_line(text, "batchd_gpu_throttle_reasons{" L0 ",reason=\"sw_thermal_slowdown\"} 1");
	expect_line(text, "batchd_gpu_throttle_reasons{" L0 ",reason=\"gpu_idle\"} 0");
	expect_line(text, "batchd_gpu_throttle_reasons{" L0 ",reason=\"other\"} 1");
	expect_line(text, "batchd_gpu_throttle_reasons{" L1 ",reason=\"gpu_idle\"} 1");
	expect_line(text, "batchd_gpu_throttle_reasons{" L1 ",reason=\"hw_slowdown\"} 0");
	expect_line(text, "batchd_gpu_throttle_reasons{" L1 ",reason=\"other\"} 0");
	/* Aggregate (lifetime) counts: the fake answers one less for volatile ones. */
	expect_line(text, "batchd_gpu_ecc_errors_total{" L0 ",type=\"corrected\"} 3");
	expect_line(text, "batchd_gpu_ecc_errors_total{" L0 ",type=\"uncorrected\"} 1");
	expect_line(text, "# TYPE batchd_gpu_ecc_errors_total counter");
	expect_line(text, "# TYPE batchd_gpu_temperature_celsius gauge");
}

static void expect_metric_counts(void)
{
	sv_prom p;

	sv_metrics_ok(&p);
	ck_assert_uint_eq(sv_prom_count(&p, "batchd_gpu_utilization_ratio"), 2);
	ck_assert_uint_eq(sv_prom_count(&p, "batchd_gpu_temperature_celsius"), 2);
	/* Device 1 has no power sensor and no ECC: no series for it, not a 0. */
	ck_assert_uint_eq(sv_prom_count(&p, "batchd_gpu_power_watts"), 1);
	ck_assert_uint_eq(sv_prom_count(&p, "batchd_gpu_ecc_errors_total"), 2);
	/* Nine reasons NVML defines, and "other", per device. */
	ck_assert_uint_eq(sv_prom_count(&p, "batchd_gpu_throttle_reasons"), 20);
	sv_prom_free(&p);
}

/* `promtool check metrics` on text, where promtool is (the one check skipped without it). */
static void promtool_check(const char *text)
{
	char cmd[256], out[512];
	FILE *f;
	int st;

	if (system("command -v promtool >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test-nvml: promtool not found: metric names not linted\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "promtool check metrics > %s/promtool.out 2>&1", D.dir);
	f = popen(cmd, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	st = pclose(f);
	snprintf(cmd, sizeof(cmd), "%s/promtool.out", D.dir);
	f = fopen(cmd, "r");
	out[0] = '\0';
	if (f) {
		out[fread(out, 1, sizeof(out) - 1, f)] = '\0';
		fclose(f);
	}
	expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "promtool check metrics: %s", out);
}

START_TEST(test_figures_metrics)
{
	char *text;

	start_fake(NULL);
	text = sv_metrics_text_ok();
	expect_metric_lines(text);
	promtool_check(text);
	free(text);
	expect_metric_counts();
}
END_TEST

START_TEST(test_figures_status)
{
	bool cuda = fake_cuda != NULL;
	json_object *st, *g;
	char buf[256];

	start_fake(NULL);
	st = dt_status_json_ok();
	expect(json_object_get_boolean(json_path_get(st, "nvml.available")), "nvml not available: %s",
	       json_object_to_json_string(st));
	ck_assert_str_eq(jstr(st, "nvml.reason"), "");
	ck_assert_uint_eq(dt_ju64(st, "nvml.devices"), 2);
	ck_assert_uint_eq(dt_ju64(st, "nvml.interval_s"), 1);
	g = gpu_at(st, 0);
	ck_assert_uint_eq(dt_ju64(g, "index"), 0);
	/* The fake CUDA's ordinal 1 has UUID0; without CUDA no device is CUDA's. */
	ck_assert_int_eq(json_object_get_int(json_path_get(g, "ordinal")), cuda ? 1 : -1);
	ck_assert_str_eq(jstr(g, "uuid"), UUID0);
	ck_assert_str_eq(jstr(g, "name"), "Fake H200 b");
	ck_assert_uint_eq(dt_ju64(g, "utilization"), 37);
	ck_assert_uint_eq(dt_ju64(g, "memory_utilization"), 12);
	ck_assert_uint_eq(dt_ju64(g, "memory_used"), 1073741824);
	ck_assert_uint_eq(dt_ju64(g, "memory_total"), 150754820096);
	ck_assert_uint_eq(dt_ju64(g, "temperature"), 61);
	ck_assert_double_eq(json_object_get_double(json_path_get(g, "power_watts")), 152.25);
	ck_assert_uint_eq(dt_ju64(g, "throttle_mask"), 0x1024);
	ck_assert_str_eq(reasons(g, buf, sizeof(buf)), "sw_power_cap,sw_thermal_slowdown,other");
	ck_assert_uint_eq(dt_ju64(g, "ecc_corrected"), 3);
	ck_assert_uint_eq(dt_ju64(g, "ecc_uncorrected"), 1);

	g = gpu_at(st, 1);
	ck_assert_uint_eq(dt_ju64(g, "index"), 1);
	ck_assert_int_eq(json_object_get_int(json_path_get(g, "ordinal")), cuda ? 0 : -1);
	ck_assert_str_eq(jstr(g, "uuid"), UUID1);
	ck_assert_str_eq(jstr(g, "name"), "Fake H200 a");
	ck_assert_uint_eq(dt_ju64(g, "utilization"), 0);
	ck_assert_uint_eq(dt_ju64(g, "temperature"), 30);
	expect(jnull(g, "power_watts"), "power_watts of a board without the sensor: %s",
	       json_object_to_json_string(g));
	expect(jnull(g, "ecc_corrected") && jnull(g, "ecc_uncorrected"),
	       "ECC of a device without it: %s", json_object_to_json_string(g));
	ck_assert_str_eq(reasons(g, buf, sizeof(buf)), "gpu_idle");
	ck_assert_uint_eq(json_object_array_length(json_path_get(st, "gpus")), 2);
	json_object_put(st);
}
END_TEST

/* The sampler thread follows the device: new figures within a few gpu_intervals. */
START_TEST(test_resample)
{
	static const char hotter[] =
		UUID0 " Fake_H200_b 99 50 2147483648 150754820096 83 700000 0x40 5 2\n"
		UUID1 " Fake_H200_a 0 0 0 150754820096 30 - 0x1 - -\n";
	double v;
	uint64_t samples;

	start_fake(NULL);
	samples = dt_status_u64("nvml.samples");
	ck_assert_uint_ge(samples, 1);
	write_figures(hotter);
	v = sv_metric_wait("batchd_gpu_temperature_celsius", L0, 83);
	expect(v == 83, "batchd_gpu_temperature_celsius of device 0 after it warmed: %g", v);
	v = sv_metric("batchd_gpu_power_watts", L0);
	expect(v == 700, "batchd_gpu_power_watts %g after the change", v);
	v = sv_metric("batchd_gpu_throttle_reasons", L0 ",reason=\"hw_thermal_slowdown\"");
	expect(v == 1, "hw_thermal_slowdown %g after the change", v);
	v = sv_metric("batchd_gpu_throttle_reasons", L0 ",reason=\"sw_power_cap\"");
	expect(v == 0, "sw_power_cap %g after it cleared", v);
	v = sv_metric("batchd_gpu_ecc_errors_total", L0 ",type=\"corrected\"");
	expect(v == 5, "corrected ECC errors %g after the change", v);
	ck_assert_uint_gt(dt_status_u64("nvml.samples"), samples);
}
END_TEST

/* A reload applies a new gpu_interval; turning telemetry off waits for a restart, and says so. */
START_TEST(test_reload_interval)
{
	json_object *st;

	start_fake(NULL);
	ck_assert_uint_eq(dt_status_u64("nvml.interval_s"), 1);
	sv_conf_basic("info", "[metrics]\ngpu_interval = 7\n");
	sv_hup_and_wait(1, 0);
	ck_assert_uint_eq(dt_status_u64("nvml.interval_s"), 7);
	sv_conf_basic("info", "[metrics]\ngpu_interval = 0\n");
	sv_hup_and_wait(2, 0);
	ck_assert_uint_eq(dt_status_u64("nvml.interval_s"), 7);
	st = dt_status_json_ok();
	expect(json_object_get_boolean(json_path_get(st, "nvml.available")),
	       "telemetry went off at a reload: %s", json_object_to_json_string(st));
	json_object_put(st);
	expect(dt_log_contains(&D, "gpu_interval turned GPU telemetry off; that takes effect at "
			       "restart"), "the reload did not say gpu_interval = 0 waits for a restart");
}
END_TEST

/* ---- no telemetry ----------------------------------------------------------------------- */

/* NVML unavailable for reason: said in the status, no GPU series at all, batchd serving. */
static void expect_unavailable(const char *reason)
{
	static const char *const families[] = {
		"batchd_gpu_utilization_ratio", "batchd_gpu_memory_utilization_ratio",
		"batchd_gpu_memory_used_bytes", "batchd_gpu_memory_total_bytes",
		"batchd_gpu_temperature_celsius", "batchd_gpu_power_watts",
		"batchd_gpu_throttle_reasons", "batchd_gpu_ecc_errors_total",
	};
	json_object *st = dt_status_json_ok();
	json_object *gpus = json_path_get(st, "gpus");
	char *text;
	sv_prom p;

	expect(!json_object_get_boolean(json_path_get(st, "nvml.available")),
	       "nvml available: %s", json_object_to_json_string(st));
	ck_assert_str_eq(jstr(st, "nvml.reason"), reason);
	expect(gpus && json_object_array_length(gpus) == 0, "gpus without NVML: %s",
	       json_object_to_json_string(st));
	json_object_put(st);
	sv_metrics_ok(&p);
	for (size_t i = 0; i < ARRAY_SIZE(families); i++)
		expect(sv_prom_count(&p, families[i]) == 0, "%s without NVML", families[i]);
	sv_prom_free(&p);
	text = sv_metrics_text_ok();
	expect(!strstr(text, "# TYPE batchd_gpu_temperature"), "a GPU family head without NVML:\n%s",
	       text);
	free(text);
	/* The rest of batchd is unaffected. */
	ck_assert_uint_eq(dt_status_u64("all_sessions.open"), 0);
}

START_TEST(test_no_library)
{
	char lib[512], reason[640];

	snprintf(lib, sizeof(lib), "%s/no-driver/libnvidia-ml.so.1", D.dir);
	daemon_env(lib, NULL);
	sv_conf_basic("info", NULL);
	sv_start_ok();
	snprintf(reason, sizeof(reason), "%s not found: no NVIDIA driver", lib);
	expect_unavailable(reason);
	expect(dt_log_contains(&D, "no GPU telemetry: "), "the log does not say why there is no "
	       "GPU telemetry");
}
END_TEST

START_TEST(test_init_fails)
{
	start_fake("9");
	expect_unavailable("nvmlInit failed: Driver Not Loaded (NVML error 9)");
}
END_TEST

START_TEST(test_interval_off)
{
	write_figures(figures);
	daemon_env(fake_lib(), NULL);
	sv_conf_basic("info", "[metrics]\ngpu_interval = 0\n");
	sv_start_ok();
	expect_unavailable("[metrics] gpu_interval = 0: off");
}
END_TEST

static Suite *nvml_suite(void)
{
	Suite *s = suite_create("nvml");

	tcase_add_test(sv_tcase(s, "figures_metrics"), test_figures_metrics);
	tcase_add_test(sv_tcase(s, "figures_status"), test_figures_status);
	tcase_add_test(sv_tcase(s, "resample"), test_resample);
	tcase_add_test(sv_tcase(s, "reload_interval"), test_reload_interval);
	tcase_add_test(sv_tcase(s, "no_library"), test_no_library);
	tcase_add_test(sv_tcase(s, "init_fails"), test_init_fails);
	tcase_add_test(sv_tcase(s, "interval_off"), test_interval_off);
	return s;
}

int main(int argc, char **argv)
{
	fake_nvml = argc > 1 ? argv[1] : NULL;
	fake_cuda = argc > 2 ? argv[2] : NULL;
	return dt_check_main(&D, nvml_suite);
}

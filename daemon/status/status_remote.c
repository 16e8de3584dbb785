/* SPDX-License-Identifier: MIT */
/*
 * status_remote.c - the remote cache in the status reply and the metrics
 * (remote.h): what the fetcher asked the bucket for, and what the cache
 * on disk holds. Kept apart from status.c, which it is called from, so
 * that each stays one screenful per section.
 */
#include <inttypes.h>

#include "metrics.h"
#include "remote.h"
#include "status_remote.h"
#include "util.h"

void bd__status_remote(bd_text *t)
{
	bd_remote_stats st;

	if (!bd_remote_enabled()) {
		bd_text_printf(t, "\"remote\": null, ");
		return;
	}
	bd_remote_stats_get(&st);
	bd_text_printf(t, "\"remote\": {\"requests\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"retries\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"dropped\": %"
		       PRIu64 ", \"inflight\": %u, \"queued\": %u, ", st.requests, st.bytes,
		       st.retries, st.errors, st.dropped, st.inflight, st.queued);
	bd_text_printf(t, "\"cache\": {\"dir\": ");
	bd_text_json_str(t, bd_remote_dir());
	bd_text_printf(t, ", \"max_size\": %" PRIu64 ", \"bytes\": %"
		       PRIu64 ", \"fetched_bytes\": %" PRIu64 ", \"hit_bytes\": %" PRIu64
		       ", \"evicted_bytes\": %" PRIu64 ", \"objects\": %zu, \"table_bytes\": %"
		       PRIu64 ", \"table_max\": %" PRIu64 ", \"files\": %u, \"files_max\": %u}}, ",
		       st.max_size, st.cache_bytes, st.fetched_bytes, st.hit_bytes, st.evicted_bytes,
		       st.objects, st.table_bytes, st.table_max, st.files, st.files_max);
}

static void one(bd_text *t, const char *name, const char *type, const char *help, uint64_t v)
{
	bd_prom_head(t, name, type, help);
	bd_prom_u64(t, name, NULL, v);
}

void bd__metrics_remote(bd_text *t)
{
	bd_remote_stats st;

	if (!bd_remote_enabled())
		return;
	bd_remote_stats_get(&st);
	one(t, "batchd_remote_requests_total", "counter",
	    "HTTP requests sent to the object store (HEAD, LIST, ranged GETs, retries).",
	    st.requests);
	one(t, "batchd_remote_bytes_total", "counter", "Body bytes received from the object store.",
	    st.bytes);
	one(t, "batchd_remote_retries_total", "counter",
	    "Requests retried after a 5xx, 429, timeout or dropped connection.", st.retries);
	one(t, "batchd_remote_errors_total", "counter",
	    "Requests that failed for good (4xx, or retries exhausted).", st.errors);
	one(t, "batchd_remote_dropped_total", "counter",
	    "Chunk fetches dropped, queued or on the wire, once no session wanted them.",
	    st.dropped);
	one(t, "batchd_remote_inflight", "gauge", "Ranged GETs on the wire now.", st.inflight);
	one(t, "batchd_cache_disk_bytes", "gauge", "Bytes of remote chunks in the cache directory.",
	    st.cache_bytes);
	one(t, "batchd_cache_disk_max_bytes", "gauge", "[cache] max_size.", st.max_size);
	one(t, "batchd_cache_disk_fetched_bytes_total", "counter",
	    "Bytes fetched into the cache directory.", st.fetched_bytes);
	one(t, "batchd_cache_disk_hit_bytes_total", "counter",
	    "Bytes of block reads whose chunks were all cached already.", st.hit_bytes);
	one(t, "batchd_cache_disk_evicted_bytes_total", "counter",
	    "Bytes evicted from the cache directory to stay within max_size.", st.evicted_bytes);
	one(t, "batchd_cache_files", "gauge", "Descriptors of the remote cache's data files, datasets' copies included.", st.files);
	one(t, "batchd_cache_files_max", "gauge",
	    "Descriptors of data files the remote cache may hold: half of batchd's RLIMIT_NOFILE.",
	    st.files_max);
	one(t, "batchd_cache_table_bytes", "gauge",
	    "Memory of the remote cache's object records and chunk tables.", st.table_bytes);
	one(t, "batchd_cache_table_max_bytes", "gauge",
	    "What those tables may take, set aside from the sessions' budget.", st.table_max);
}

/* SPDX-License-Identifier: MIT */
/*
 * status.c - what batchd says about itself: the status document (JSON,
 * for `batchctl status|stats|sessions|top`) and the metrics (Prometheus
 * text exposition, for `batchctl metrics` and the HTTP /metrics endpoint).
 *
 * It only reads the control plane's state (server_state.h): the server's
 * totals, the pipeline's and the cache's counters and each open session's
 * info, read on the loop thread at each request and written into a
 * growable text buffer (util.h). Which sessions a report lists depends on
 * who asks (bd_view): a session names its user, process and dataset, so
 * only admins see other users' sessions; totals are everyone's. Keeping the formats here leaves the
 * request handling in connection.c free of them; the field names are
 * what batchctl and Prometheus scrapers read. The GPUs' telemetry comes
 * from the NVML sampler's latest figures (nvml.h), copied out per request.
 *
 * The cost of waiting: a session's stall is the time its trainer spent in
 * bc_next (the client's account, clamped: wait_acct.h), its stall ratio
 * that time over the session's age, and its cost the stall times
 * BD_SESSION_TRAINER_GPUS GPUs at [metrics] gpu_hour_price (the price in
 * force when the report is made; no cost series while it is 0). The
 * metrics list at most BD_METRICS_SESSIONS sessions one by one (the
 * oldest of those the asker may see), so a host crowded with sessions
 * does not flood the scraper with series; the totals count every session,
 * ended ones included.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batchd-build.h"
#include "blockcache.h"
#include "dataset.h"
#include "pack_fields.h"
#include "linger.h"
#include "nvml.h"
#include "protocol.h"
#include "server_state.h"
#include "status_remote.h"
#include "util.h"

/* Sessions the metrics list one by one, at most (the rest only in the totals). */
#define BD_METRICS_SESSIONS 256u

static const char *const cut_names[BD_CUT_KINDS] = {
	[BD_CUT_QUEUE] = "queue",
	[BD_CUT_HANDSHAKE] = "handshake",
	[BD_CUT_PER_UID] = "per_uid",
	[BD_CUT_MAX] = "max_connections",
	[BD_CUT_FDS] = "fds",
};

static const char *const refusal_names[BD_REFUSED_KINDS] = {
	[BD_REFUSED_NOT_FOUND] = "not_found",
	[BD_REFUSED_ACCESS] = "access",
	[BD_REFUSED_INVALID] = "invalid",
	[BD_REFUSED_MEMORY] = "memory",
	[BD_REFUSED_LIMIT] = "limit",
	[BD_REFUSED_CORRUPT] = "corrupt",
	[BD_REFUSED_DEVICE] = "device",
	[BD_REFUSED_OTHER] = "other",
};

/* Does the report for v list session e? */
static bool visible(const bd_view *v, const entry *e)
{
	return v->all || (v->mine && e->uid == v->uid);
}

/* The totals of ended sessions and open ones together, every user's. */
static bd_totals totals_now(bd_server *srv)
{
	bd_totals sum = srv->totals;

	for (entry *e = srv->entries; e; e = e->next) {
		bd_session_info si;

		bd_session_get_info(e->s, &si);
		bd__totals_add(&sum, &si);
	}
	return sum;
}

/* What stall_s seconds of a session's trainer cost at the price in force. */
static double stall_cost(const bd_server *srv, double stall_s)
{
	return srv->cfg.gpu_hour_price / 3600.0 * stall_s * BD_SESSION_TRAINER_GPUS;
}


/* The daemon itself: version, uptime, socket, I/O engine. */
static void status_daemon(bd_text *t, bd_server *srv)
{
	bd_read_buffers rb;

	bd_text_printf(t, "{\"version\": \"%s\", \"uptime_s\": %.3f, \"pid\": %d, ",
		       BATCHD_VERSION, (double)(bd_now_ns() - srv->started_ns) / 1e9, (int)getpid());
	bd_text_printf(t, "\"socket\": ");
	bd_text_json_str(t, srv->socket_path);
	bd_text_printf(t, ", \"io_engine\": \"%s\", \"io_setup_flags\": %u, \"direct\": \"%s\", "
		       "\"tier\": \"%s\", ", bd_io_engine_name(bd_pipeline_engine(srv->pipeline)),
		       bd_pipeline_setup_flags(srv->pipeline), bd_config_direct_name(srv->cfg.direct),
		       bd_config_tier_name(srv->cfg.tier));
	bd_pipeline_read_buffers(srv->pipeline, &rb);
	bd_text_printf(t, "\"read_buffers\": {\"count\": %" PRIu32 ", \"size\": %" PRIu32
		       ", \"pages\": \"%s\"}, ", rb.count, rb.size, rb.pages);
}

/* The "cuda" object: what the probe found, the GPU sessions, each device. */
static void status_cuda(bd_text *t, bd_server *srv)
{
	uint64_t dev_bytes;
	uint32_t gpu_sessions, unpinned;

	bd_text_printf(t, "\"cuda\": {\"available\": %s, \"devices\": %d, \"driver_version\": %d, "
		       "\"runtime_version\": %d, \"reason\": ", srv->cuda.devices ? "true" : "false",
		       srv->cuda.devices, srv->cuda.driver_version, srv->cuda.runtime_version);
	bd_text_json_str(t, srv->cuda.devices ? "" : srv->cuda.reason);
	bd_gpu_totals(srv->gpu, &dev_bytes, &gpu_sessions, &unpinned);
	bd_text_printf(t, ", \"gpu_sessions\": %u, \"device_memory\": %" PRIu64
		       ", \"unpinned_sessions\": %u, \"device_list\": [", gpu_sessions,
		       dev_bytes, unpinned);
	for (int i = 0; i < srv->cuda.devices; i++) {
		const bd_cuda_device *d = &srv->cuda.dev[i];
		char uuid[48];

		bd_text_printf(t, "%s{\"ordinal\": %d, \"name\": ", i ? ", " : "", i);
		bd_text_json_str(t, d->name);
		bd_text_printf(t, ", \"uuid\": \"%s\", \"memory\": %" PRIu64 ", \"pci_bus\": %d, "
			       "\"shareable\": %s, \"lost\": ", bp_cuda_uuid_str(d->uuid, uuid, sizeof(uuid)),
			       d->memory, d->pci_bus, d->shareable ? "true" : "false");
		/* A sticky CUDA error took the device (gpu.h): why, else null. */
		if (bd_gpu_device_lost(srv->gpu, i))
			bd_text_json_str(t, bd_gpu_device_lost(srv->gpu, i));
		else
			bd_text_printf(t, "null");
		bd_text_printf(t, "}");
	}
	bd_text_printf(t, "]}, ");
}

/* A figure NVML may not have: its value, or null. */
static void json_opt_u64(bd_text *t, const char *key, bool has, uint64_t v)
{
	if (has)
		bd_text_printf(t, ", \"%s\": %" PRIu64, key, v);
	else
		bd_text_printf(t, ", \"%s\": null", key);
}

/* One element of "gpus": NVML's figures for one device (nulls where it had none). */
static void status_gpu(bd_text *t, const bd_nvml_gpu *g)
{
	bool first = true;

	bd_text_printf(t, "{\"index\": %d, \"ordinal\": %d, \"uuid\": ", g->index, g->ordinal);
	bd_text_json_str(t, g->uuid);
	bd_text_printf(t, ", \"name\": ");
	bd_text_json_str(t, g->name);
	json_opt_u64(t, "utilization", g->has_util, g->util_gpu);
	json_opt_u64(t, "memory_utilization", g->has_util, g->util_memory);
	json_opt_u64(t, "memory_used", g->has_memory, g->memory_used);
	json_opt_u64(t, "memory_total", g->has_memory, g->memory_total);
	json_opt_u64(t, "temperature", g->has_temperature, g->temperature);
	if (g->has_power)
		bd_text_printf(t, ", \"power_watts\": %.3f", (double)g->power_mw / 1000.0);
	else
		bd_text_printf(t, ", \"power_watts\": null");
	json_opt_u64(t, "throttle_mask", g->has_throttle, g->throttle);
	bd_text_printf(t, ", \"throttle_reasons\": [");
	for (int b = 0; b < 64 && g->has_throttle; b++) {
		const char *name = bd_nvml_throttle_name(b);

		if (!(g->throttle & (UINT64_C(1) << b)))
			continue;
		bd_text_printf(t, "%s\"%s\"", first ? "" : ", ", name ? name : "other");
		first = false;
		if (!name)
			break;   /* "other" once, for every bit newer than this batchd */
	}
	bd_text_printf(t, "]");
	json_opt_u64(t, "ecc_corrected", g->has_ecc, g->ecc_corrected);
	json_opt_u64(t, "ecc_uncorrected", g->has_ecc, g->ecc_uncorrected);
	bd_text_printf(t, "}");
}

/* "nvml": whether there is telemetry and why not; "gpus": each device NVML sees. */
static void status_gpus(bd_text *t)
{
	bd_nvml_snapshot n;

	bd_nvml_read(&n);
	bd_text_printf(t, "\"nvml\": {\"available\": %s, \"reason\": ",
		       n.available ? "true" : "false");
	bd_text_json_str(t, n.available ? "" : n.reason);
	bd_text_printf(t, ", \"devices\": %d, \"interval_s\": %u, \"samples\": %" PRIu64
		       ", \"sample_s\": %.6f}, \"gpus\": [", n.ngpus, n.interval_s, n.samples,
		       (double)n.sample_ns / 1e9);
	for (int i = 0; i < n.ngpus; i++) {
		if (i)
			bd_text_printf(t, ", ");
		status_gpu(t, &n.gpu[i]);
	}
	bd_text_printf(t, "], ");
}

/* The block cache's charge: its blocks and its bucket table. */
static uint64_t cache_charged(const bd_pipeline_stats *ps)
{
	return ps->cache_bytes + bd_cache_table_bytes(ps->cache_budget);
}

/* Memory, clients, threads, the pipeline and the cache. */
static void status_resources(bd_text *t, bd_server *srv, const bd_pipeline_stats *ps)
{
	bd_dataset_stats ds;
	bd_budget_view v;

	bd_budget_get(&srv->ledger, &v);
	bd_dataset_cache_stats(&ds);
	bd_text_printf(t, "\"memory\": {\"budget\": %" PRIu64 ", \"used\": %" PRIu64
		       ", \"sessions\": %" PRIu64 ", \"lingering\": %" PRIu64 ", \"datasets\": %"
		       PRIu64 ", \"datasets_unused\": %" PRIu64 ", \"cache\": %" PRIu64
		       ", \"cache_table\": %" PRIu64 "}, ", srv->budget,
		       bd_budget_used(&v) + cache_charged(ps), v.held[BD_BUDGET_SESSIONS],
		       bd_linger_bytes(bd_pipeline_linger(srv->pipeline)),
		       v.held[BD_BUDGET_DATASETS], ds.unused_bytes, cache_charged(ps),
		       bd_cache_table_bytes(ps->cache_budget));
	bd_text_printf(t, "\"clients\": %u, \"threads\": {\"io\": %u, \"decode\": %u, "
		       "\"decode_active\": %u, \"decode_autotune\": %s, \"decode_ups\": %u, "
		       "\"decode_downs\": %u}, ", srv->nclients, srv->cfg.io_threads,
		       srv->cfg.decode_threads, ps->decoders_active,
		       srv->cfg.decode_autotune ? "true" : "false", srv->tuner.ups, srv->tuner.downs);
	bd_text_printf(t, "\"connections\": {\"queued_bytes\": %" PRIu64 ", \"client_queue\": %"
		       PRIu64 ", \"requests_per_uid\": %u, \"throttled\": %" PRIu64,
		       srv->queued_bytes, srv->cfg.client_queue, srv->cfg.requests_per_uid,
		       srv->totals.throttled);
	for (int k = 0; k < BD_CUT_KINDS; k++)
		bd_text_printf(t, ", \"%s_%s\": %" PRIu64, k <= BD_CUT_HANDSHAKE ? "dropped" : "refused",
			       cut_names[k], srv->totals.cut[k]);
	bd_text_printf(t, "}, ");
	bd_text_printf(t, "\"pipeline\": {\"blocks_read\": %" PRIu64 ", \"bytes_read\": %" PRIu64
		       ", \"blocks_decoded\": %" PRIu64 ", \"raw_bytes\": %" PRIu64
		       ", \"direct_decodes\": %" PRIu64 ", \"copied_bytes\": %" PRIu64
		       ", \"stored_copies\": %" PRIu64 ", \"span_reads\": %" PRIu64
		       ", \"span_blocks\": %" PRIu64 ", \"failures\": %" PRIu64
		       ", \"reads_inflight\": %" PRIu64,
		       ps->blocks_read, ps->bytes_read, ps->blocks_decoded, ps->raw_bytes,
		       ps->direct_decodes, ps->copied_bytes, ps->stored_copies, ps->span_reads,
		       ps->span_blocks, ps->failures, ps->reads_inflight);
	{
		bd_hist rd, dec;

		/* Where the time goes (batchctl doctor): reads, and the decode workers' busy time. */
		bd_pipeline_get_hists(srv->pipeline, &rd, &dec);
		bd_text_printf(t, ", \"read_s\": %.6f, \"reads\": %" PRIu64 ", \"decode_busy_s\": %.6f"
			       ", \"decode_queued\": %" PRIu64 ", \"queue_depth\": %u}, ",
			       (double)rd.sum_ns / 1e9, rd.count, (double)ps->decode_busy_ns / 1e9,
			       ps->decode_queued, srv->cfg.queue_depth * srv->cfg.io_threads);
	}
	bd_text_printf(t, "\"cache\": {\"budget\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"hits\": %"
		       PRIu64 ", \"misses\": %" PRIu64 ", \"waits\": %" PRIu64 ", \"bypasses\": %" PRIu64
		       ", \"evictions\": %" PRIu64 ", \"region_used\": %" PRIu64
		       ", \"populated\": %" PRIu64 ", \"pages\": \"%s\", \"prefault\": \"%s\"}, ",
		       ps->cache_budget, ps->cache_bytes, ps->cache_hits, ps->cache_misses,
		       ps->cache_waits, ps->cache_bypasses, ps->cache_evictions,
		       ps->cache_region_used, ps->cache_region_populated,
		       ps->cache_pages ? ps->cache_pages : "none",
		       ps->cache_prefault ? ps->cache_prefault : "off");
}

/* Ended sessions, refusals by kind, violations and reloads, and all sessions' deliveries. */
static void status_totals(bd_text *t, bd_server *srv)
{
	bd_totals sum = totals_now(srv);

	bd_text_printf(t, "\"ended\": {\"sessions\": %" PRIu64 ", \"batches\": %" PRIu64
		       ", \"bytes\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"skipped\": %" PRIu64
		       "}, \"refused\": {",
		       srv->totals.sessions, srv->totals.batches, srv->totals.bytes,
		       srv->totals.failed, srv->totals.skipped);
	for (int k = 0; k < BD_REFUSED_KINDS; k++)
		bd_text_printf(t, "%s\"%s\": %" PRIu64, k ? ", " : "", refusal_names[k],
			       srv->totals.refused[k]);
	bd_text_printf(t, "}, \"protocol_violations\": %" PRIu64 ", \"ring_violations\": %" PRIu64
		       ", \"denied\": %" PRIu64 ", \"reloads\": %" PRIu64 ", ",
		       srv->totals.protocol_violations, srv->totals.ring_violations,
		       srv->totals.denied, srv->totals.reloads);
	/* Everyone's, whatever "sessions" lists: what batchctl stats adds up. */
	bd_text_printf(t, "\"all_sessions\": {\"open\": %u, \"batches\": %" PRIu64 ", \"bytes\": %"
		       PRIu64 "}, ", srv->nsessions, sum.batches, sum.bytes);
	bd_text_printf(t, "\"stall\": {\"seconds\": %.6f, \"cost\": %.9g, \"gpu_hour_price\": %.9g, "
		       "\"gpus_per_session\": %u}, ", (double)sum.wait.sum_ns / 1e9,
		       stall_cost(srv, (double)sum.wait.sum_ns / 1e9), srv->cfg.gpu_hour_price,
		       BD_SESSION_TRAINER_GPUS);
}

/* The dataset versions open now and since start (dataset.h). */
static void status_datasets(bd_text *t)
{
	bd_dataset_stats ds;

	bd_dataset_cache_stats(&ds);
	bd_text_printf(t, "\"datasets\": {\"held\": %zu, \"unused\": %zu, \"bytes\": %" PRIu64
		       ", \"unused_index_bytes\": %" PRIu64 ", \"loaded\": %" PRIu64 ", \"freed\": %"
		       PRIu64 ", \"evicted\": %" PRIu64 "}, ", ds.held, ds.unused, ds.bytes,
		       ds.unused_bytes, ds.loaded, ds.freed, ds.evicted);
}

/* A token session's rows (docs/tokens.md): how they are cut, how full they are. */
static void status_sequences(bd_text *t, const bd_seqs *q)
{
	if (!q) {
		bd_text_printf(t, ", \"sequences\": null");
		return;
	}
	bd_text_printf(t, ", \"sequences\": {\"mode\": \"%s\", \"seq_len\": %u, \"rows\": %" PRIu64
		       ", \"tokens\": %" PRIu64 ", \"placed\": %" PRIu64 ", \"documents\": %" PRIu64
		       ", \"padding\": %.4f, \"table_bytes\": %" PRIu64 ", \"shared_by\": %u}",
		       q->mode == BP_SEQUENCES_PACKED ? "packed" : "windows", q->seq_len, q->count,
		       q->tokens, q->placed, q->documents, bd_seqs_padding(q), q->heap,
		       bd_seqs_sessions(q));
}

/* A mixture's sources (docs/tokens.md, Mixtures): each one's dataset and positions a period. */
static void status_sources(bd_text *t, const bd_mix *x)
{
	if (!x) {
		bd_text_printf(t, ", \"sources\": null");
		return;
	}
	bd_text_printf(t, ", \"sources\": {\"period\": %u, \"epoch\": %" PRIu64 ", \"list\": [",
		       x->period, x->epoch);
	for (uint32_t i = 0; i < x->n; i++) {
		bd_text_printf(t, "%s{\"dataset\": ", i ? ", " : "");
		bd_text_json_str(t, x->src[i].dset->name);
		bd_text_printf(t, ", \"count\": %u, \"items\": %" PRIu64 "}", x->count[i],
			       x->src[i].count);
	}
	bd_text_printf(t, "]}");
}

/* One element of "sessions". */
static void status_session(bd_text *t, const bd_server *srv, const entry *e)
{
	bd_session_info si;

	bd_session_get_info(e->s, &si);
	bd_text_printf(t, "{\"id\": %" PRIu64 ", \"dataset\": ", si.id);
	bd_text_json_str(t, bd_session_dataset(e->s));
	bd_text_printf(t, ", \"tier\": \"%s\", \"decode_amplification\": %.2f",
		       bd_session_tier(e->s), e->amplification);
	{
		char names[BP_FIELD_MAX * (BP_FIELD_NAME_MAX + 1) + 1];

		/* Names are [A-Za-z0-9_.-]: nothing to escape, but json_str says so itself. */
		bd_text_printf(t, ", \"fields\": ");
		bd_text_json_str(t, bd_session_fields(e->s, names, sizeof(names)));
		bd_text_printf(t, ", \"keys\": %s", bd_session_keys(e->s) ? "true" : "false");
	}
	status_sequences(t, bd_session_sequences(e->s));
	status_sources(t, bd_session_mixture(e->s));
	bd_text_printf(t, ", \"uid\": %u, \"pid\": %d, \"connected\": %s, \"shuffle\": \"%s\", "
		       "\"rank\": %u, \"world\": %u, \"batch_size\": %u, \"epoch\": %" PRIu64
		       ", \"batch\": %" PRIu64 ", \"published\": %" PRIu64 ", \"released\": %"
		       PRIu64 ", \"delivered\": %" PRIu64 ", \"delivered_bytes\": %" PRIu64
		       ", \"failed\": %" PRIu64 ", \"skipped\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"memory\": %" PRIu64
		       ", \"memory_heap\": %" PRIu64 ", \"dataset_memory\": %" PRIu64
		       ", \"slots\": %u, \"planned\": %" PRIu64
		       ", \"inflight\": %u, \"age_s\": %.3f, \"consumed\": %" PRIu64
		       ", \"wait_s\": %.6f, \"waits\": %" PRIu64 ", \"placement\": %d",
		       (unsigned)e->uid, (int)e->pid, e->c ? "true" : "false",
		       bp_shuffle_name(si.shuffle), si.rank, si.world, si.batch_size, si.epoch,
		       si.batch, si.published, si.released, si.delivered, si.delivered_bytes,
		       si.failed, si.skipped, si.bytes, si.memory, si.memory_heap, si.dataset_memory, si.slots,
		       si.planned,
		       si.inflight, (double)si.age_ns / 1e9, si.consumed, (double)si.wait_ns / 1e9,
		       si.waits, si.device);
	/* epoch, batch: how far batchd staged; the trainer's own position beside it. */
	bd_text_printf(t, ", \"trainer_epoch\": %" PRIu64 ", \"trainer_batch\": %" PRIu64
		       ", \"ahead\": %" PRIu64, si.trainer_epoch, si.trainer_batch,
		       si.published - si.delivered);
	bd_text_printf(t, ", \"first_pass\": {\"state\": \"%s\", \"stored_bytes\": %" PRIu64 "}",
		       bd_warm_state_name(si.warm), si.warm_bytes);
	bd_text_printf(t, ", \"stall_seconds\": %.6f, \"stall_ratio\": %.6f, \"stall_cost\": %.9g",
		       (double)si.wait_ns / 1e9, si.stall_ratio,
		       stall_cost(srv, (double)si.wait_ns / 1e9));
	if (si.device >= 0)
		bd_text_printf(t, ", \"gpu\": {\"device\": %d, \"device_bytes\": %" PRIu64
			       ", \"pinned\": %s, \"copies\": %" PRIu64 ", \"copy_bytes\": %"
			       PRIu64 ", \"copy_s\": %.6f, \"slot_waits\": %" PRIu64 "}",
			       si.gpu.device, si.gpu.device_bytes, si.gpu.pinned ? "true" : "false",
			       si.gpu.copies, si.gpu.copy_bytes, (double)si.gpu.copy_ns / 1e9,
			       si.gpu.slot_waits);
	bd_text_printf(t, "}");
}

void bd__server_status(bd_server *srv, const bd_view *v, bd_text *t)
{
	bd_pipeline_stats ps;
	bool first = true;

	bd_pipeline_get_stats(srv->pipeline, &ps);
	status_daemon(t, srv);
	status_cuda(t, srv);
	status_gpus(t);
	status_resources(t, srv, &ps);
	status_totals(t, srv);
	status_datasets(t);
	bd__status_remote(t);
	bd_text_printf(t, "\"sessions_shown\": \"%s\", \"sessions\": [",
		       v->all ? "all" : v->mine ? "own" : "none");
	for (entry *e = srv->entries; e; e = e->next) {
		if (!visible(v, e))
			continue;
		if (!first)
			bd_text_printf(t, ", ");
		first = false;
		status_session(t, srv, e);
	}
	bd_text_printf(t, "]}");
}

/* ---- Prometheus ---------------------------------------------------------------- */

static void counter(bd_text *t, const char *name, const char *help, uint64_t v)
{
	bd_prom_head(t, name, "counter", help);
	bd_prom_u64(t, name, NULL, v);
}

static void gauge(bd_text *t, const char *name, const char *help, uint64_t v)
{
	bd_prom_head(t, name, "gauge", help);
	bd_prom_u64(t, name, NULL, v);
}

/*
 * Per-session series: one family at a time, one line per session listed.
 * A value is a count (u) or a real number (f, which may need the server:
 * the price).
 */
typedef struct session_value {
	uint64_t (*u)(const bd_session_info *si);
	double (*f)(const bd_server *srv, const bd_session_info *si);
} session_value;

static uint64_t v_delivered(const bd_session_info *si) { return si->delivered; }
static uint64_t v_delivered_bytes(const bd_session_info *si) { return si->delivered_bytes; }
static uint64_t v_published(const bd_session_info *si) { return si->published; }
static uint64_t v_failed(const bd_session_info *si) { return si->failed; }
static uint64_t v_skipped(const bd_session_info *si) { return si->skipped; }
static uint64_t v_memory(const bd_session_info *si) { return si->memory; }
static uint64_t v_dataset_memory(const bd_session_info *si) { return si->dataset_memory; }
static uint64_t v_epoch(const bd_session_info *si) { return si->epoch; }
static uint64_t v_gpu_copy_bytes(const bd_session_info *si) { return si->gpu.copy_bytes; }

static double v_stall(const bd_server *srv, const bd_session_info *si)
{
	(void)srv;
	return (double)si->wait_ns / 1e9;
}

static double v_stall_ratio(const bd_server *srv, const bd_session_info *si)
{
	(void)srv;
	return si->stall_ratio;
}

static double v_stall_cost(const bd_server *srv, const bd_session_info *si)
{
	return stall_cost(srv, (double)si->wait_ns / 1e9);
}

/* v's sessions the metrics leave out: all but the oldest BD_METRICS_SESSIONS. */
static unsigned sessions_omitted(const bd_server *srv, const bd_view *v)
{
	unsigned n = 0;

	for (const entry *e = srv->entries; e; e = e->next)
		n += visible(v, e);
	return n > BD_METRICS_SESSIONS ? n - BD_METRICS_SESSIONS : 0;
}

static void family(bd_text *t, bd_server *srv, const bd_view *v, const char *name,
		   const char *type, const char *help, session_value f)
{
	/* The list is newest first: skipping its first ones keeps the oldest. */
	unsigned skip = sessions_omitted(srv, v);

	bd_prom_head(t, name, type, help);
	for (entry *e = srv->entries; e; e = e->next) {
		bd_session_info si;
		char ds[2 * BP_PATH_MAX + 1], labels[2 * BP_PATH_MAX + 128];

		if (!visible(v, e))
			continue;
		if (skip) {
			skip--;
			continue;
		}
		bd_session_get_info(e->s, &si);
		snprintf(labels, sizeof(labels), "session=\"%" PRIu64 "\",dataset=\"%s\",uid=\"%u\",pid=\"%d\"",
			 si.id, bd_prom_escape(bd_session_dataset(e->s), ds, sizeof(ds)),
			 (unsigned)e->uid, (int)e->pid);
		if (f.f)
			bd_prom_f64(t, name, labels, f.f(srv, &si));
		else
			bd_prom_u64(t, name, labels, f.u(&si));
	}
}

static void session_family(bd_text *t, bd_server *srv, const bd_view *v, const char *name,
			   const char *type, const char *help,
			   uint64_t (*f)(const bd_session_info *si))
{
	family(t, srv, v, name, type, help, (session_value){ .u = f });
}

static void session_family_f64(bd_text *t, bd_server *srv, const bd_view *v, const char *name,
			       const char *type, const char *help,
			       double (*f)(const bd_server *srv, const bd_session_info *si))
{
	family(t, srv, v, name, type, help, (session_value){ .f = f });
}

void bd__totals_add(bd_totals *t, const bd_session_info *si)
{
	bd_hist h;

	t->batches += si->delivered;
	t->bytes += si->delivered_bytes;
	t->failed += si->failed;
	t->skipped += si->skipped;
	h.count = si->waits;
	h.sum_ns = si->wait_ns;
	memcpy(h.bucket, si->wait_hist, sizeof(h.bucket));
	bd_hist_merge(&t->wait, &h);
}

/* The daemon, its clients and sessions; sum holds ended and open sessions together. */
static void metrics_server(bd_text *t, bd_server *srv, const bd_totals *sum)
{
	char labels[64];

	bd_prom_head(t, "batchd_build_info", "gauge", "Version of the running batchd.");
	snprintf(labels, sizeof(labels), "version=\"%s\"", BATCHD_VERSION);
	bd_prom_u64(t, "batchd_build_info", labels, 1);
	bd_prom_head(t, "batchd_uptime_seconds", "gauge", "Seconds since batchd started.");
	bd_prom_f64(t, "batchd_uptime_seconds", NULL,
		    (double)(bd_now_ns() - srv->started_ns) / 1e9);
	gauge(t, "batchd_clients", "Connected clients.", srv->nclients);
	gauge(t, "batchd_client_queue_bytes",
	      "Reply bytes queued for clients that have not read them yet, all clients.",
	      srv->queued_bytes);
	gauge(t, "batchd_sessions", "Open sessions.", srv->nsessions);
	counter(t, "batchd_sessions_ended_total", "Sessions that have ended.", srv->totals.sessions);
	counter(t, "batchd_batches_delivered_total",
		"Batches clients took and released, all sessions.", sum->batches);
	counter(t, "batchd_bytes_delivered_total",
		"Payload bytes of the batches clients took and released.", sum->bytes);
	counter(t, "batchd_batches_failed_total", "Batches that could not be built (corrupt or unreadable blocks).",
		sum->failed);
	counter(t, "batchd_images_skipped_total",
		"Bad images left out of their batches (decode on_error=skip), all sessions.",
		sum->skipped);
}

/* The cost of waiting, all sessions, ended and open: seconds, and money at the price set. */
static void metrics_stall(bd_text *t, bd_server *srv, const bd_view *v, const bd_totals *sum)
{
	double stall = (double)sum->wait.sum_ns / 1e9;
	char help[160];

	bd_prom_head(t, "batchd_stall_seconds_total", "counter",
		     "Time trainers spent in bc_next waiting for data (data stall), all sessions; "
		     "lost GPU-time at 1 GPU a session.");
	bd_prom_f64(t, "batchd_stall_seconds_total", NULL, stall);
	if (srv->cfg.gpu_hour_price > 0) {
		bd_prom_head(t, "batchd_stall_cost_total", "counter",
			     "What the data stall cost: [metrics] gpu_hour_price / 3600 x stall seconds "
			     "x 1 GPU a session (no currency; priced at the price in force).");
		bd_prom_f64(t, "batchd_stall_cost_total", NULL, stall_cost(srv, stall));
	}
	snprintf(help, sizeof(help), "Open sessions left out of the per-session series: the oldest %u "
		 "are listed (the totals count them all).", BD_METRICS_SESSIONS);
	gauge(t, "batchd_metrics_sessions_omitted", help, sessions_omitted(srv, v));
}

static void metrics_sessions(bd_text *t, bd_server *srv, const bd_view *v)
{
	session_family(t, srv, v, "batchd_session_batches_delivered_total", "counter",
		       "Batches this session's client took and released.", v_delivered);
	session_family(t, srv, v, "batchd_session_bytes_delivered_total", "counter",
		       "Payload bytes this session's client took and released.", v_delivered_bytes);
	session_family(t, srv, v, "batchd_session_batches_published_total", "counter",
		       "Batches staged and published to this session (prefetch included).", v_published);
	session_family(t, srv, v, "batchd_session_batches_failed_total", "counter",
		       "Batches of this session that failed.", v_failed);
	session_family(t, srv, v, "batchd_session_images_skipped_total", "counter",
		       "Bad images left out of this session's batches (decode on_error=skip).",
		       v_skipped);
	session_family(t, srv, v, "batchd_session_memory_bytes", "gauge",
		       "Memory charged to this session: its shared memory and the daemon heap it holds.",
		       v_memory);
	session_family(t, srv, v, "batchd_session_dataset_memory_bytes", "gauge",
		       "Memory of the dataset versions this session reads (index and tables; a "
		       "mixture's sources), shared with the other sessions on them and charged once.", v_dataset_memory);
	session_family(t, srv, v, "batchd_session_epoch", "gauge",
		       "Epoch of the next batch this session will publish.", v_epoch);
	session_family_f64(t, srv, v, "batchd_session_stall_seconds_total", "counter",
			   "Time this session's trainer spent in bc_next waiting for data (data stall).",
			   v_stall);
	session_family_f64(t, srv, v, "batchd_session_stall_ratio", "gauge",
			   "This session's stall seconds over its age: 0 never waited, 1 always "
			   "waiting.", v_stall_ratio);
	if (srv->cfg.gpu_hour_price > 0)
		session_family_f64(t, srv, v, "batchd_session_stall_cost_total", "counter",
				   "What this session's data stall cost: [metrics] gpu_hour_price / "
				   "3600 x stall seconds x 1 GPU (no currency).", v_stall_cost);
}

/* Client waits, block reads and decodes: the three histograms, then the pipeline's counters. */
static void metrics_pipeline(bd_text *t, bd_server *srv, const bd_totals *sum,
			     const bd_pipeline_stats *ps)
{
	bd_hist rd, dec;

	bd_pipeline_get_hists(srv->pipeline, &rd, &dec);
	bd_prom_head(t, "batchd_client_wait_seconds", "histogram",
		     "Time clients spent in bc_next per batch, as they report it (stall).");
	bd_prom_hist(t, "batchd_client_wait_seconds", NULL, &sum->wait);
	bd_prom_head(t, "batchd_read_latency_seconds", "histogram",
		     "Block reads, submission to completion.");
	bd_prom_hist(t, "batchd_read_latency_seconds", NULL, &rd);
	bd_prom_head(t, "batchd_decode_seconds", "histogram",
		     "Block checks and decompression.");
	bd_prom_hist(t, "batchd_decode_seconds", NULL, &dec);

	gauge(t, "batchd_io_reads_inflight", "Block reads in the I/O engines now (queue depth).",
	      ps->reads_inflight);
	gauge(t, "batchd_decode_threads_active",
	      "Decode workers taking tasks now ([decode] autotune; at most [decode] threads).",
	      ps->decoders_active);
	bd_prom_head(t, "batchd_decode_busy_seconds_total", "counter",
		     "Time decode workers spent on tasks, summed.");
	bd_prom_f64(t, "batchd_decode_busy_seconds_total", NULL, (double)ps->decode_busy_ns / 1e9);
	counter(t, "batchd_io_blocks_read_total", "Blocks read.", ps->blocks_read);
	counter(t, "batchd_io_bytes_read_total", "Bytes read from storage (alignment included).",
		ps->bytes_read);
	counter(t, "batchd_decode_blocks_total", "Blocks checked and decompressed.", ps->blocks_decoded);
	counter(t, "batchd_decode_raw_bytes_total", "Raw bytes decompressed.", ps->raw_bytes);
	counter(t, "batchd_decode_direct_total", "Blocks decompressed straight into a batch.",
		ps->direct_decodes);
	counter(t, "batchd_copied_bytes_total", "Bytes copied out of decoded blocks into batches.",
		ps->copied_bytes);
	counter(t, "batchd_stored_copied_bytes_total",
		"Bytes of blocks stored raw copied from the read buffer to where they decode.",
		ps->stored_copies);
	counter(t, "batchd_span_reads_total",
		"Reads of several blocks at once (a dataset streamed in file order).", ps->span_reads);
	counter(t, "batchd_span_blocks_total", "Blocks read by those reads.", ps->span_blocks);
	/* 1 is the floor: each byte delivered decoded once; the ram tier's later epochs go below. */
	bd_prom_head(t, "batchd_decode_amplification", "gauge",
		     "Raw bytes decompressed per payload byte delivered, since start (all users).");
	bd_prom_f64(t, "batchd_decode_amplification", NULL,
		    sum->bytes ? (double)ps->raw_bytes / (double)sum->bytes : 0.0);
}

/* The block cache and the memory budget it shares with staging and the dataset versions. */
static void metrics_cache(bd_text *t, bd_server *srv, const bd_pipeline_stats *ps)
{
	bd_budget_view v;

	bd_budget_get(&srv->ledger, &v);
	counter(t, "batchd_cache_hits_total", "Decoded-block cache hits.", ps->cache_hits);
	counter(t, "batchd_cache_misses_total", "Decoded-block cache misses (loads).", ps->cache_misses);
	counter(t, "batchd_cache_waits_total", "Requests that waited for a block another was loading.",
		ps->cache_waits);
	counter(t, "batchd_cache_evictions_total", "Decoded blocks evicted.", ps->cache_evictions);
	gauge(t, "batchd_cache_bytes", "Bytes of decoded blocks cached.", ps->cache_bytes);
	gauge(t, "batchd_cache_budget_bytes", "Most bytes the block cache may hold.", ps->cache_budget);
	gauge(t, "batchd_memory_budget_bytes",
	      "The memory budget (staging, dataset indexes and tables, and cache).", srv->budget);
	gauge(t, "batchd_memory_used_bytes",
	      "Memory of the budget in use (staging, dataset indexes and tables, and cache).",
	      bd_budget_used(&v) + cache_charged(ps));
	gauge(t, "batchd_memory_datasets_bytes",
	      "Memory of the budget dataset versions hold: indexes, dictionaries, lookup tables, "
	      "field sections (unused versions included: evicted when room is needed).",
	      v.held[BD_BUDGET_DATASETS]);
	gauge(t, "batchd_memory_lingering_bytes",
	      "Shared memory of ended sessions still held by their clients (charged until freed).",
	      bd_linger_bytes(bd_pipeline_linger(srv->pipeline)));
}

/* Dataset versions: loaded, freed, and what the cache holds now (dataset.h). */
static void metrics_datasets(bd_text *t)
{
	bd_dataset_stats ds;

	bd_dataset_cache_stats(&ds);
	counter(t, "batchd_dataset_versions_loaded_total",
		"Dataset versions loaded (a dataset changed on disk loads anew).", ds.loaded);
	counter(t, "batchd_dataset_versions_freed_total", "Dataset versions closed and freed.",
		ds.freed);
	gauge(t, "batchd_dataset_versions_held", "Dataset versions open now, in use or kept.",
	      (uint64_t)ds.held);
	gauge(t, "batchd_dataset_versions_unused", "Dataset versions kept for reopening, no session.",
	      (uint64_t)ds.unused);
	gauge(t, "batchd_dataset_unused_index_bytes",
	      "Bytes in memory (index and tables) of the unused dataset versions.", ds.unused_bytes);
	counter(t, "batchd_dataset_versions_evicted_total",
		"Unused dataset versions freed to make room in the memory budget.", ds.evicted);
}

static void metrics_errors(bd_text *t, bd_server *srv, const bd_pipeline_stats *ps)
{
	char labels[64];

	bd_prom_head(t, "batchd_errors_total", "counter", "Errors by kind.");
	bd_prom_u64(t, "batchd_errors_total", "kind=\"read\"", ps->read_errors);
	bd_prom_u64(t, "batchd_errors_total", "kind=\"checksum\"", ps->checksum_errors);
	bd_prom_u64(t, "batchd_errors_total", "kind=\"decode\"", ps->decode_errors);
	bd_prom_u64(t, "batchd_errors_total", "kind=\"protocol\"", srv->totals.protocol_violations);
	bd_prom_u64(t, "batchd_errors_total", "kind=\"ring\"", srv->totals.ring_violations);
	bd_prom_u64(t, "batchd_errors_total", "kind=\"denied\"", srv->totals.denied);
	for (int k = 0; k < BD_REFUSED_KINDS; k++) {
		snprintf(labels, sizeof(labels), "kind=\"refused_%s\"", refusal_names[k]);
		bd_prom_u64(t, "batchd_errors_total", labels, srv->totals.refused[k]);
	}
}

/* Connections the daemon's [limits] cut (dropped) or turned away at once (refused). */
static void metrics_connections(bd_text *t, bd_server *srv)
{
	char labels[64];

	bd_prom_head(t, "batchd_clients_dropped_total", "counter",
		     "Connections cut: replies left unread over [limits] client_queue (queue), "
		     "no HELLO within [limits] handshake_timeout (handshake).");
	for (int k = 0; k <= BD_CUT_HANDSHAKE; k++) {
		snprintf(labels, sizeof(labels), "reason=\"%s\"", cut_names[k]);
		bd_prom_u64(t, "batchd_clients_dropped_total", labels, srv->totals.cut[k]);
	}
	bd_prom_head(t, "batchd_connections_refused_total", "counter",
		     "Connections refused when they arrived: [limits] connections_per_uid (per_uid), "
		     "[limits] max_connections, or no file descriptor left (fds).");
	for (int k = BD_CUT_PER_UID; k < BD_CUT_KINDS; k++) {
		snprintf(labels, sizeof(labels), "reason=\"%s\"", cut_names[k]);
		bd_prom_u64(t, "batchd_connections_refused_total", labels, srv->totals.cut[k]);
	}
	bd_prom_head(t, "batchd_requests_throttled_total", "counter",
		     "Requests that waited until their user had requests left "
		     "([limits] requests_per_uid).");
	bd_prom_u64(t, "batchd_requests_throttled_total", NULL, srv->totals.throttled);
}

static void metrics_cuda(bd_text *t, bd_server *srv, const bd_view *v)
{
	uint64_t dev_bytes;
	uint32_t gpu_sessions, unpinned;

	gauge(t, "batchd_cuda_devices", "CUDA devices batchd can use (0: host sessions only).",
	      (uint64_t)srv->cuda.devices);
	bd_gpu_totals(srv->gpu, &dev_bytes, &gpu_sessions, &unpinned);
	gauge(t, "batchd_gpu_sessions", "Sessions delivering to GPU memory.", gpu_sessions);
	gauge(t, "batchd_gpu_device_memory_bytes",
	      "Device memory batchd holds for GPU sessions' slots.", dev_bytes);
	gauge(t, "batchd_gpu_unpinned_sessions",
	      "GPU sessions staging from pageable memory (pinning failed).", unpinned);
	if (srv->cuda.devices) {
		bd_prom_head(t, "batchd_cuda_device_lost", "gauge",
			     "1 once a sticky CUDA error made the device unusable until batchd restarts.");
		for (int i = 0; i < srv->cuda.devices; i++) {
			char uuid[48], labels[96];

			snprintf(labels, sizeof(labels), "ordinal=\"%d\",uuid=\"%s\"", i,
				 bp_cuda_uuid_str(srv->cuda.dev[i].uuid, uuid, sizeof(uuid)));
			bd_prom_u64(t, "batchd_cuda_device_lost", labels,
				    bd_gpu_device_lost(srv->gpu, i) != NULL);
		}
	}
	session_family(t, srv, v, "batchd_session_gpu_copy_bytes_total", "counter",
		       "Bytes copied host-to-device for the session (0 for host sessions).",
		       v_gpu_copy_bytes);
}

/* Per-GPU series: one family at a time, a line per device that has the figure. */
typedef bool (*gpu_value)(const bd_nvml_gpu *g, double *ret);

static bool g_util(const bd_nvml_gpu *g, double *ret)
{
	*ret = g->util_gpu / 100.0;
	return g->has_util;
}

static bool g_mem_util(const bd_nvml_gpu *g, double *ret)
{
	*ret = g->util_memory / 100.0;
	return g->has_util;
}

static bool g_mem_used(const bd_nvml_gpu *g, double *ret)
{
	*ret = (double)g->memory_used;
	return g->has_memory;
}

static bool g_mem_total(const bd_nvml_gpu *g, double *ret)
{
	*ret = (double)g->memory_total;
	return g->has_memory;
}

static bool g_temperature(const bd_nvml_gpu *g, double *ret)
{
	*ret = g->temperature;
	return g->has_temperature;
}

static bool g_power(const bd_nvml_gpu *g, double *ret)
{
	*ret = g->power_mw / 1000.0;
	return g->has_power;
}

static void gpu_labels(const bd_nvml_gpu *g, char *buf, size_t len)
{
	char u[2 * sizeof(g->uuid) + 1];

	snprintf(buf, len, "uuid=\"%s\",index=\"%d\"", bd_prom_escape(g->uuid, u, sizeof(u)),
		 g->index);
}

/*
 * A family only when some device has the figure: absent, not zero, where
 * NVML has none. whole: the figure is a count (bytes, degrees), written
 * in full rather than to 9 digits (exact: every count NVML has is under 2^53).
 */
static void gpu_family(bd_text *t, const bd_nvml_snapshot *n, const char *name, const char *help,
		       gpu_value f, bool whole)
{
	bool head = false;

	for (int i = 0; i < n->ngpus; i++) {
		char labels[256];
		double v;

		if (!f(&n->gpu[i], &v))
			continue;
		if (!head)
			bd_prom_head(t, name, "gauge", help);
		head = true;
		gpu_labels(&n->gpu[i], labels, sizeof(labels));
		if (whole)
			bd_prom_u64(t, name, labels, (uint64_t)v);
		else
			bd_prom_f64(t, name, labels, v);
	}
}

/*
 * Throttle reasons: a series per reason NVML defines, 1 while it holds
 * the clocks down, so a query needs no bit arithmetic and no series comes
 * and goes; bits newer than this batchd add up in reason="other".
 */
static void gpu_throttle(bd_text *t, const bd_nvml_snapshot *n)
{
	const uint64_t known = (UINT64_C(1) << BD_NVML_THROTTLE_BITS) - 1;
	bool head = false;

	for (int i = 0; i < n->ngpus; i++) {
		const bd_nvml_gpu *g = &n->gpu[i];
		char base[256], labels[320];

		if (!g->has_throttle)
			continue;
		if (!head)
			bd_prom_head(t, "batchd_gpu_throttle_reasons", "gauge",
				     "1 while the reason holds the GPU's clocks down (NVML clock "
				     "throttle reasons), else 0.");
		head = true;
		gpu_labels(g, base, sizeof(base));
		for (int b = 0; b <= BD_NVML_THROTTLE_BITS; b++) {
			bool on = b < BD_NVML_THROTTLE_BITS ? g->throttle >> b & 1 : g->throttle & ~known;

			snprintf(labels, sizeof(labels), "%s,reason=\"%s\"", base,
				 b < BD_NVML_THROTTLE_BITS ? bd_nvml_throttle_name(b) : "other");
			bd_prom_u64(t, "batchd_gpu_throttle_reasons", labels, on);
		}
	}
}

static void gpu_ecc(bd_text *t, const bd_nvml_snapshot *n)
{
	bool head = false;

	for (int i = 0; i < n->ngpus; i++) {
		const bd_nvml_gpu *g = &n->gpu[i];
		char base[256], labels[320];

		if (!g->has_ecc)
			continue;
		if (!head)
			bd_prom_head(t, "batchd_gpu_ecc_errors_total", "counter",
				     "Device memory ECC errors over the GPU's life (NVML aggregate "
				     "counts); absent where ECC is unsupported or off.");
		head = true;
		gpu_labels(g, base, sizeof(base));
		snprintf(labels, sizeof(labels), "%s,type=\"corrected\"", base);
		bd_prom_u64(t, "batchd_gpu_ecc_errors_total", labels, g->ecc_corrected);
		snprintf(labels, sizeof(labels), "%s,type=\"uncorrected\"", base);
		bd_prom_u64(t, "batchd_gpu_ecc_errors_total", labels, g->ecc_uncorrected);
	}
}

/* NVML's figures for each GPU, every [metrics] gpu_interval; none at all without NVML. */
static void metrics_gpus(bd_text *t)
{
	bd_nvml_snapshot n;

	bd_nvml_read(&n);
	if (!n.available)
		return;
	gpu_family(t, &n, "batchd_gpu_utilization_ratio",
		   "Fraction of NVML's last sample period a kernel ran on the GPU.", g_util, false);
	gpu_family(t, &n, "batchd_gpu_memory_utilization_ratio",
		   "Fraction of NVML's last sample period device memory was read or written.",
		   g_mem_util, false);
	gpu_family(t, &n, "batchd_gpu_memory_used_bytes", "Device memory in use, every process's.",
		   g_mem_used, true);
	gpu_family(t, &n, "batchd_gpu_memory_total_bytes", "Device memory in all.", g_mem_total, true);
	gpu_family(t, &n, "batchd_gpu_temperature_celsius", "GPU die temperature.", g_temperature, true);
	gpu_family(t, &n, "batchd_gpu_power_watts", "Power drawn by the whole board.", g_power, false);
	gpu_throttle(t, &n);
	gpu_ecc(t, &n);
}

void bd__server_metrics(bd_server *srv, const bd_view *v, bd_text *t)
{
	bd_totals sum = totals_now(srv);
	bd_pipeline_stats ps;

	bd_pipeline_get_stats(srv->pipeline, &ps);
	metrics_server(t, srv, &sum);
	metrics_stall(t, srv, v, &sum);
	metrics_sessions(t, srv, v);
	metrics_pipeline(t, srv, &sum, &ps);
	metrics_cache(t, srv, &ps);
	metrics_datasets(t);
	bd__metrics_remote(t);
	metrics_errors(t, srv, &ps);
	metrics_connections(t, srv);
	metrics_cuda(t, srv, v);
	metrics_gpus(t);
	counter(t, "batchd_reloads_total", "Configuration reloads applied (SIGHUP).",
		srv->totals.reloads);
	counter(t, "batchd_reload_failures_total", "Reloads rejected for a bad configuration.",
		srv->totals.reload_failures);
}

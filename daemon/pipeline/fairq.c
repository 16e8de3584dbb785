/* SPDX-License-Identifier: MIT */
/*
 * fairq.c - who is served next (pipeline.h, "Fairness"): tenants (users,
 * by uid) in round-robin, each tenant's flows (its sessions) in
 * round-robin, one block at a time. A flow may have flow_cap blocks in
 * flight, a tenant share / (tenants with work) across all its flows, so
 * one user's eight sessions of huge batches take half of the pipeline
 * from a second user, not eight ninths of it, and never the engines' and
 * decode queue's every slot.
 *
 * Everything here is under s->mu. A tenant's cap falls as soon as another
 * tenant gets work; it is enforced when the tenant is next popped (it then
 * leaves the ready list until its blocks in flight fall below the cap),
 * and rises when a tenant runs out of work, which puts every tenant that
 * was held back on the ready list again.
 *
 * A warm job's span (io_thread.c) is one claim of many blocks: it counts
 * in flight by the bytes it reads, and its flow owes its tenant's other
 * flows a turn per 128 KiB of it, paid when it is next at the head of the
 * tenant's list (deficit round-robin among one user's flows).
 */
#include <stdlib.h>

#include "pipeline_priv.h"
#include "util.h"

static bool tenant_active(const bd_tenant *t)
{
	return t->queued || t->inflight || t->parked;
}

uint32_t bd__sched_tenant_cap(const bd_sched *s)
{
	uint32_t cap = s->share / (s->active ? s->active : 1);

	return cap ? cap : 1;
}

/* ---- the ready lists ------------------------------------------------------------------- */

/* Put f at the back of its tenant's list if it has a task it may start. */
static void flow_ready(bd_sched *s, bd_flow *f)
{
	bd_tenant *t = f->tenant;

	if (f->ready || !f->queue.head || f->inflight >= s->flow_cap || f->parked >= s->flow_cap)
		return;
	f->ready = true;
	f->next_ready = NULL;
	if (t->ready_tail)
		t->ready_tail->next_ready = f;
	else
		t->ready_head = f;
	t->ready_tail = f;
}

/* Put t at the back of the list if it has a flow to serve and room under its cap. @return whether it joined. */
static bool tenant_ready(bd_sched *s, bd_tenant *t)
{
	if (t->ready || !t->ready_head || t->inflight >= bd__sched_tenant_cap(s))
		return false;
	t->ready = true;
	t->next_ready = NULL;
	if (s->ready_tail)
		s->ready_tail->next_ready = t;
	else
		s->ready_head = t;
	s->ready_tail = t;
	return true;
}

/* Take f off its tenant's ready list, and the tenant off the scheduler's when f was its last. */
static void unready(bd_sched *s, bd_flow *f)
{
	bd_tenant *t = f->tenant, *prev_t = NULL;
	bd_flow *prev = NULL;

	if (!f->ready)
		return;
	for (bd_flow *g = t->ready_head; g != f; g = g->next_ready)
		prev = g;
	if (prev)
		prev->next_ready = f->next_ready;
	else
		t->ready_head = f->next_ready;
	if (t->ready_tail == f)
		t->ready_tail = prev;
	f->ready = false;
	if (t->ready_head || !t->ready)
		return;
	for (bd_tenant *u = s->ready_head; u != t; u = u->next_ready)
		prev_t = u;
	if (prev_t)
		prev_t->next_ready = t->next_ready;
	else
		s->ready_head = t->next_ready;
	if (s->ready_tail == t)
		s->ready_tail = prev_t;
	t->ready = false;
}

/* A tenant ran out of work: every other's cap rose. @return whether one joined the list. */
static bool tenant_idle(bd_sched *s)
{
	bool joined = false;

	s->active--;
	for (bd_tenant *t = s->tenants; t; t = t->next)
		joined |= tenant_ready(s, t);
	joined |= tenant_ready(s, &s->spare_tenant);
	return joined;
}

/* ---- making and freeing ---------------------------------------------------------------- */

static bd_tenant *tenant_of(bd_sched *s, uint32_t uid)
{
	bd_tenant *t;

	for (t = s->tenants; t; t = t->next)
		if (t->uid == uid)
			return t;
	t = bd_calloc(1, sizeof(*t));
	if (!t)
		return &s->spare_tenant; /* shared by every user without one */
	t->uid = uid;
	t->next = s->tenants;
	s->tenants = t;
	return t;
}

/* The owner's flow, made (with its tenant's entry) when it has none. */
static bd_flow *flow_of(bd_sched *s, void *owner, uint32_t uid)
{
	bd_flow *f;

	for (f = s->flows; f; f = f->next)
		if (f->owner == owner)
			return f;
	f = bd_calloc(1, sizeof(*f));
	if (!f)
		return &s->spare; /* shared by every owner without one: fair among the rest */
	f->owner = owner;
	f->tenant = tenant_of(s, uid);
	f->tenant->nflows++;
	f->next = s->flows;
	s->flows = f;
	return f;
}

static void tenant_retire(bd_sched *s, bd_tenant *t)
{
	if (t == &s->spare_tenant || t->nflows || t->ready || tenant_active(t))
		return;
	for (bd_tenant **pp = &s->tenants; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	free(t);
}

/* Free f once its owner is done with it and it has nothing queued or in flight. */
static void flow_retire(bd_sched *s, bd_flow *f)
{
	bd_tenant *t = f->tenant;

	if (f == &s->spare || !f->done || f->queue.head || f->inflight || f->parked || f->ready)
		return;
	for (bd_flow **pp = &s->flows; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	free(f);
	t->nflows--;
	tenant_retire(s, t);
}

void bd__sched_init(bd_sched *s, uint32_t flow_cap, uint32_t share,
		    void (*wake)(void *ctx), void *ctx)
{
	*s = (bd_sched){ .flow_cap = flow_cap ? flow_cap : 1, .wake = wake, .ctx = ctx };
	s->share = share > s->flow_cap ? share : s->flow_cap;
	s->spare.tenant = &s->spare_tenant;
	pthread_mutex_init(&s->mu, NULL);
}

void bd__sched_fini(bd_sched *s)
{
	/* Tasks still queued are not run: their flows and tenants go with the scheduler. */
	while (s->flows) {
		bd_flow *next = s->flows->next;

		free(s->flows);
		s->flows = next;
	}
	while (s->tenants) {
		bd_tenant *next = s->tenants->next;

		free(s->tenants);
		s->tenants = next;
	}
	pthread_mutex_destroy(&s->mu);
}

/* ---- the three moves: queue, claim, finish ---------------------------------------------- */

void bd__sched_push(bd_sched *s, bd_job *job)
{
	bd_flow *f;
	bd_tenant *t;
	bool joined;

	pthread_mutex_lock(&s->mu);
	f = flow_of(s, job->owner, job->tenant);
	t = f->tenant;
	if (!tenant_active(t) && job->ntasks)
		s->active++; /* the others' caps fall: enforced as they are popped */
	for (uint32_t i = 0; i < job->ntasks; i++) {
		job->tasks[i].flow = f;
		bd__fifo_push(&f->queue, &job->tasks[i]);
	}
	t->queued += job->ntasks;
	flow_ready(s, f);
	joined = tenant_ready(s, t);
	if (joined && s->wake)
		s->wake(s->ctx);
	pthread_mutex_unlock(&s->mu);
}

/* The head of t's first ready flow, which goes to the back of t's list. */
static bd_task *take(bd_sched *s, bd_tenant *t, bd_flow **from)
{
	bd_flow *f = t->ready_head;
	bd_task *task;

	/*
	 * A flow that took a span owes its tenant's other flows a turn per
	 * block's worth of it (bd__sched_charge): it goes to the back, once
	 * per turn owed, while another is ready. Alone, it owes nobody.
	 */
	while (f && f->owed) {
		if (!f->next_ready) {
			f->owed = 0;
			break;
		}
		f->owed--;
		t->ready_head = f->next_ready;
		f->next_ready = NULL;
		t->ready_tail->next_ready = f;
		t->ready_tail = f;
		f = t->ready_head;
	}
	*from = f;
	if (!f)
		return NULL;
	t->ready_head = f->next_ready;
	if (!t->ready_head)
		t->ready_tail = NULL;
	f->ready = false;
	/* Empty only when bd__sched_cancel took its tasks. */
	task = bd__fifo_pop(&f->queue);
	if (task) {
		f->inflight++;
		t->inflight++;
		t->queued--;
	}
	flow_ready(s, f);
	return task;
}

bd_task *bd__sched_pop(bd_sched *s, bool *hungry)
{
	bd_tenant *t;
	bd_task *task = NULL;

	pthread_mutex_lock(&s->mu);
	while (!task && (t = s->ready_head)) {
		bd_flow *f = NULL;

		s->ready_head = t->next_ready;
		if (!s->ready_head)
			s->ready_tail = NULL;
		t->ready = false;
		/* Over a cap that fell since it joined: back when its blocks finish. */
		if (t->inflight < bd__sched_tenant_cap(s))
			task = take(s, t, &f);
		tenant_ready(s, t);
		if (f)
			flow_retire(s, f); /* last: it may free t */
	}
	if (hungry)
		*hungry = !task;
	pthread_mutex_unlock(&s->mu);
	return task;
}

bd_task *bd__sched_pop_next(bd_sched *s, const bd_task *prev)
{
	bd_flow *f = prev->flow;
	bd_task *task = NULL;

	if (prev + 1 >= prev->job->tasks + prev->job->ntasks)
		return NULL;
	pthread_mutex_lock(&s->mu);
	if (f->queue.head == prev + 1) {
		task = bd__fifo_pop(&f->queue);
		f->inflight++;
		f->tenant->inflight++;
		f->tenant->queued--;
		/* Over its cap now, or empty: off the list until its blocks finish. */
		if (f->inflight >= s->flow_cap || !f->queue.head)
			unready(s, f);
	}
	pthread_mutex_unlock(&s->mu);
	return task;
}

/*
 * f's blocks in flight (and its tenant's) just fell: it and its tenant may
 * be served again, the threads woken, and f retired. Under mu.
 */
static void gave_back(bd_sched *s, bd_flow *f)
{
	bd_tenant *t = f->tenant;
	bool wake = !tenant_active(t) && tenant_idle(s);

	flow_ready(s, f);
	tenant_ready(s, t);
	/*
	 * A thread that found nothing sleeps until the owner is half below its
	 * caps: one wake-up per refill of the rings, not one per block.
	 */
	wake |= t->ready && f->inflight <= s->flow_cap / 2 &&
		t->inflight <= bd__sched_tenant_cap(s) / 2;
	if (wake && s->wake)
		s->wake(s->ctx);
	flow_retire(s, f); /* last: it may free f and t */
}

void bd__sched_charge(bd_sched *s, bd_task *task, int32_t n, uint32_t turns)
{
	bd_flow *f = task->flow;
	bd_tenant *t = f->tenant;

	if (!n && !turns)
		return;
	pthread_mutex_lock(&s->mu);
	f->owed += turns;
	f->inflight += (uint32_t)n;
	t->inflight += (uint32_t)n;
	if (n > 0) {
		/* Over its cap now: off the list until its blocks finish. */
		if (f->inflight >= s->flow_cap)
			unready(s, f);
	} else {
		gave_back(s, f);
	}
	pthread_mutex_unlock(&s->mu);
}

void bd__sched_done(bd_sched *s, bd_task *task)
{
	bd_flow *f = task->flow;

	pthread_mutex_lock(&s->mu);
	f->inflight--;
	f->tenant->inflight--;
	gave_back(s, f);
	pthread_mutex_unlock(&s->mu);
}

bd_task *bd__sched_cancel(bd_sched *s, void *owner)
{
	bd_task *list = NULL, *task;

	pthread_mutex_lock(&s->mu);
	for (bd_flow *f = s->flows, *next; f; f = next) {
		next = f->next;
		if (f->owner != owner)
			continue;
		/* Counted in flight until bd__sched_done, like a task an I/O thread took. */
		while ((task = bd__fifo_pop(&f->queue))) {
			f->inflight++;
			f->tenant->inflight++;
			f->tenant->queued--;
			task->next = list;
			list = task;
		}
		f->done = true;
		unready(s, f);
		flow_retire(s, f);
	}
	pthread_mutex_unlock(&s->mu);
	return list;
}

void bd__sched_park(bd_sched *s, bd_task *task)
{
	bd_flow *f = task->flow;
	bd_tenant *t = f->tenant;

	pthread_mutex_lock(&s->mu);
	/*
	 * Off the caps, but a flow with flow_cap tasks parked is not served
	 * more until one comes back: parking is no way round the caps, and
	 * the same user's other flows get the slots meanwhile.
	 */
	task->parked = true;
	f->inflight--;
	f->parked++;
	t->inflight--;
	t->parked++;
	flow_ready(s, f);
	if (tenant_ready(s, t) && s->wake)
		s->wake(s->ctx);
	pthread_mutex_unlock(&s->mu);
}

void bd__sched_unpark(bd_sched *s, bd_task *task)
{
	pthread_mutex_lock(&s->mu);
	if (task->parked) {
		bd_flow *f = task->flow;

		task->parked = false;
		f->inflight++;
		f->parked--;
		f->tenant->inflight++;
		f->tenant->parked--;
		flow_ready(s, f);
	}
	pthread_mutex_unlock(&s->mu);
}

/* SPDX-License-Identifier: MIT */
/*
 * open_pool.c - the remote opens' threads (open_pool.h): a queue under a
 * mutex, BD_OPEN_POOL_THREADS threads taking from it, and a uv_async_t
 * that hands finished jobs back to the loop.
 *
 * A thread takes the first queued job whose user has fewer than half the
 * threads busy, so one user's opens stuck on a slow bucket leave the
 * other half to everyone else.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "open_pool.h"

struct bd_open_pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bd_open_job *queue, **queue_tail; /* waiting, in order of arrival */
	bd_open_job *finished;            /* done by a thread, for the loop */
	uid_t busy_uid[BD_OPEN_POOL_THREADS]; /* whose job each thread runs */
	bool busy[BD_OPEN_POOL_THREADS];
	bool stop;
	uv_async_t async;
	pthread_t threads[BD_OPEN_POOL_THREADS];
	unsigned nthreads;
};

/* Threads uid's jobs hold now. Under mu. */
static unsigned running(const bd_open_pool *p, uid_t uid)
{
	unsigned n = 0;

	for (unsigned i = 0; i < BD_OPEN_POOL_THREADS; i++)
		n += p->busy[i] && p->busy_uid[i] == uid;
	return n;
}

/* The first queued job whose user may have another thread, off the queue; NULL: none. Under mu. */
static bd_open_job *take(bd_open_pool *p)
{
	for (bd_open_job **pp = &p->queue; *pp; pp = &(*pp)->next) {
		bd_open_job *j = *pp;

		if (running(p, j->uid) >= BD_OPEN_POOL_THREADS / 2)
			continue;
		*pp = j->next;
		if (p->queue_tail == &j->next)
			p->queue_tail = pp;
		j->next = NULL;
		return j;
	}
	return NULL;
}

struct thread_arg {
	bd_open_pool *p;
	unsigned slot;
};

static void *thread_main(void *arg)
{
	struct thread_arg a = *(struct thread_arg *)arg;
	bd_open_pool *p = a.p;

	free(arg);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		bd_open_job *j = take(p);

		if (!j) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->cv, &p->mu);
			continue;
		}
		p->busy[a.slot] = true;
		p->busy_uid[a.slot] = j->uid;
		pthread_mutex_unlock(&p->mu);
		j->work(j);
		pthread_mutex_lock(&p->mu);
		p->busy[a.slot] = false;
		j->next = p->finished;
		p->finished = j;
		uv_async_send(&p->async);
		/* A job of the user this thread ran may go now. */
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* On the loop: the finished jobs' done, oldest first. */
static void on_finished(uv_async_t *h)
{
	bd_open_pool *p = h->data;
	bd_open_job *list, *rev = NULL;

	pthread_mutex_lock(&p->mu);
	list = p->finished;
	p->finished = NULL;
	pthread_mutex_unlock(&p->mu);
	while (list) {
		bd_open_job *next = list->next;

		list->next = rev;
		rev = list;
		list = next;
	}
	while (rev) {
		bd_open_job *next = rev->next;

		rev->done(rev);
		rev = next;
	}
}

int bd_open_pool_new(uv_loop_t *loop, bd_open_pool **ret)
{
	bd_open_pool *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->queue_tail = &p->queue;
	r = uv_async_init(loop, &p->async, on_finished);
	if (r < 0) {
		free(p);
		return r;
	}
	p->async.data = p;
	for (; p->nthreads < BD_OPEN_POOL_THREADS; p->nthreads++) {
		struct thread_arg *a = malloc(sizeof(*a));

		if (!a) {
			r = -ENOMEM;
			break;
		}
		*a = (struct thread_arg){ .p = p, .slot = p->nthreads };
		r = -pthread_create(&p->threads[p->nthreads], NULL, thread_main, a);
		if (r < 0) {
			free(a);
			break;
		}
	}
	if (r < 0 && !p->nthreads) {
		bd_open_pool_close(p);
		return r;
	}
	/* Fewer threads than asked still serve: at least one is there. */
	*ret = p;
	return 0;
}

void bd_open_pool_queue(bd_open_pool *p, bd_open_job *job)
{
	pthread_mutex_lock(&p->mu);
	job->next = NULL;
	*p->queue_tail = job;
	p->queue_tail = &job->next;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void on_closed(uv_handle_t *h)
{
	bd_open_pool *p = h->data;

	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

void bd_open_pool_close(bd_open_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	uv_close((uv_handle_t *)&p->async, on_closed);
}

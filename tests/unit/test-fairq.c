/* SPDX-License-Identifier: MIT */
/*
 * test-fairq.c - the Check suite for daemon/pipeline/fairq.c, who the pipeline
 * serves next: users (tenants) in round-robin and each user's sessions
 * (flows) in round-robin, a block at a time; a flow's and a user's blocks
 * in flight capped; a user's cap share / users with work, rising again when
 * one runs out; cancelled tasks counted until done; every flow and tenant
 * freed with its last task (AddressSanitizer checks the frees).
 *
 * Jobs are built by hand (the scheduler reads only owner, tenant and the
 * tasks), so every assertion is about exact pop order and counts.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "pipeline_priv.h"

static int wakes;

static void on_wake(void *ctx)
{
	(void)ctx;
	wakes++;
}

/* A job of n tasks for owner of user uid. */
static bd_job *job_new(void *owner, uint32_t uid, uint32_t n)
{
	bd_job *job = calloc(1, sizeof(*job) + n * sizeof(bd_task));

	ck_assert_ptr_nonnull(job);
	job->owner = owner;
	job->tenant = uid;
	job->tasks = (bd_task *)(job + 1);
	job->ntasks = job->max_tasks = n;
	for (uint32_t i = 0; i < n; i++)
		job->tasks[i].job = job;
	return job;
}

static uint32_t uid_of(const bd_task *t)
{
	return t->job->tenant;
}

/* Finish a cancelled list, every task of user uid. @return how many. */
static unsigned drain(bd_sched *s, bd_task *t, uint32_t uid)
{
	unsigned n = 0;

	while (t) {
		bd_task *next = t->next;

		ck_assert_uint_eq(uid_of(t), uid);
		bd__sched_done(s, t);
		t = next;
		n++;
	}
	return n;
}

/* Eight sessions of one user against one session of another: the second gets every other block. */
START_TEST(test_users_alternate)
{
	bd_sched s;
	int owners[9];
	bd_job *a[8], *b;
	bd_task *t;
	bool hungry = false;

	bd__sched_init(&s, 64, 64, on_wake, NULL);
	for (int i = 0; i < 8; i++) {
		a[i] = job_new(&owners[i], 1000, 100);
		bd__sched_push(&s, a[i]);
	}
	b = job_new(&owners[8], 2000, 10);
	bd__sched_push(&s, b);
	ck_assert_uint_eq(s.active, 2);
	/* Popped and finished at once, so no cap is reached: strict alternation. */
	for (int i = 0; i < 20; i++) {
		t = bd__sched_pop(&s, &hungry);
		ck_assert_ptr_nonnull(t);
		ck_assert_uint_eq(uid_of(t), i % 2 ? 2000 : 1000);
		bd__sched_done(&s, t);
	}
	/* The second user is out of work: the first alone, its sessions in turn. */
	ck_assert_uint_eq(s.active, 1);
	for (int i = 0; i < 790; i++) {
		t = bd__sched_pop(&s, &hungry);
		ck_assert_ptr_nonnull(t);
		ck_assert_uint_eq(uid_of(t), 1000);
		ck_assert_ptr_eq(t->job->owner, &owners[(10 + i) % 8]);
		bd__sched_done(&s, t);
	}
	ck_assert_ptr_null(bd__sched_pop(&s, &hungry));
	ck_assert(hungry);
	ck_assert_uint_eq(s.active, 0);
	for (int i = 0; i < 9; i++)
		ck_assert_ptr_null(bd__sched_cancel(&s, &owners[i]));
	/* Nothing queued or in flight and every owner done: all freed. */
	ck_assert_ptr_null(s.flows);
	ck_assert_ptr_null(s.tenants);
	bd__sched_fini(&s);
	for (int i = 0; i < 8; i++)
		free(a[i]);
	free(b);
}
END_TEST

/* A user's blocks in flight stay under share / users with work, across all its sessions. */
START_TEST(test_user_cap)
{
	bd_sched s;
	int owners[5];
	bd_job *a[4], *b;
	bd_task *held[64], *t;
	unsigned nheld = 0, from_b = 0;
	bool hungry;

	bd__sched_init(&s, 16, 32, on_wake, NULL);
	/* One user alone: its four sessions of 16 each may fill all 32. */
	for (int i = 0; i < 4; i++) {
		a[i] = job_new(&owners[i], 7, 100);
		bd__sched_push(&s, a[i]);
	}
	while ((t = bd__sched_pop(&s, &hungry)))
		held[nheld++] = t;
	ck_assert(hungry);
	ck_assert_uint_eq(nheld, 32);
	ck_assert_uint_eq(bd__sched_tenant_cap(&s), 32);

	/* A second user arrives: the first's cap falls to 16, so the second gets what frees. */
	b = job_new(&owners[4], 8, 100);
	wakes = 0;
	bd__sched_push(&s, b);
	ck_assert_int_eq(wakes, 1);
	ck_assert_uint_eq(bd__sched_tenant_cap(&s), 16);
	for (int round = 0; round < 16; round++) {
		bd__sched_done(&s, held[round]);
		held[round] = NULL;
		t = bd__sched_pop(&s, &hungry);
		ck_assert_ptr_nonnull(t);
		/* The first user is over its new cap until 16 of its 32 are done. */
		ck_assert_uint_eq(uid_of(t), 8);
		from_b++;
		held[round] = t;
	}
	ck_assert_uint_eq(from_b, 16);
	/* Both at 16: neither may start more until one finishes. */
	ck_assert_ptr_null(bd__sched_pop(&s, &hungry));
	ck_assert(hungry);
	/* One of the first user's finishes: it is under its cap again, and served. */
	bd__sched_done(&s, held[16]);
	t = bd__sched_pop(&s, &hungry);
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(uid_of(t), 7);
	held[16] = t;

	/* Cancelled: the second user's queued tasks come back counted, in flight until done. */
	ck_assert_uint_eq(drain(&s, bd__sched_cancel(&s, &owners[4]), 8), 84);
	for (unsigned i = 0; i < 32; i++)
		if (held[i])
			bd__sched_done(&s, held[i]);
	/* The second user has no work: the first may have all 32 again. */
	ck_assert_uint_eq(s.active, 1);
	ck_assert_uint_eq(bd__sched_tenant_cap(&s), 32);
	for (int i = 0; i < 4; i++)
		drain(&s, bd__sched_cancel(&s, &owners[i]), 7);
	ck_assert_uint_eq(s.active, 0);
	ck_assert_ptr_null(s.flows);
	ck_assert_ptr_null(s.tenants);
	bd__sched_fini(&s);
	for (int i = 0; i < 4; i++)
		free(a[i]);
	free(b);
}
END_TEST

/* One flow's cap holds whatever the user's share. */
START_TEST(test_flow_cap)
{
	bd_sched s;
	int owner;
	bd_job *j;
	bd_task *t, *held[8];
	unsigned n = 0;

	bd__sched_init(&s, 4, 64, on_wake, NULL);
	j = job_new(&owner, 1, 8);
	bd__sched_push(&s, j);
	while ((t = bd__sched_pop(&s, NULL)))
		held[n++] = t;
	ck_assert_uint_eq(n, 4);
	/* Done below half the cap wakes the threads that found nothing. */
	wakes = 0;
	bd__sched_done(&s, held[0]);
	ck_assert_int_eq(wakes, 0);
	bd__sched_done(&s, held[1]);
	ck_assert_int_eq(wakes, 1);
	for (; (t = bd__sched_pop(&s, NULL)); n++)
		held[n - 2] = t;
	ck_assert_uint_eq(n, 6);
	for (unsigned i = 0; i < 4; i++)
		bd__sched_done(&s, held[i]);
	while ((t = bd__sched_pop(&s, NULL)))
		bd__sched_done(&s, t);
	ck_assert_ptr_null(bd__sched_cancel(&s, &owner));
	ck_assert_ptr_null(s.flows);
	ck_assert_ptr_null(s.tenants);
	bd__sched_fini(&s);
	free(j);
}
END_TEST

/*
 * The end of a test of two owners' jobs a and b, every task done: nothing
 * left to cancel, every flow and tenant freed; then a and b.
 */
static void end_two(bd_sched *s, int owner[2], bd_job *a, bd_job *b)
{
	ck_assert_ptr_null(bd__sched_cancel(s, &owner[0]));
	ck_assert_ptr_null(bd__sched_cancel(s, &owner[1]));
	ck_assert_ptr_null(s->flows);
	ck_assert_ptr_null(s->tenants);
	bd__sched_fini(s);
	free(a);
	free(b);
}

/*
 * A span (io_thread.c): the next task of the job comes only while it is
 * its flow's head, counted in flight, past the flow's cap; the flow then
 * waits until its blocks finish, and another flow's head is never taken.
 */
START_TEST(test_pop_next)
{
	bd_sched s;
	int owner[2];
	bd_job *a, *b;
	bd_task *t, *n, *held[8];
	unsigned k = 0;

	bd__sched_init(&s, 4, 64, on_wake, NULL);
	a = job_new(&owner[0], 1, 8);
	b = job_new(&owner[1], 1, 2);
	bd__sched_push(&s, a);
	bd__sched_push(&s, b);
	t = bd__sched_pop(&s, NULL);
	ck_assert_ptr_eq(t, &a->tasks[0]);
	held[k++] = t;
	/* a's next six, one past another: the flow goes past its cap of 4. */
	for (n = t; k < 7 && (n = bd__sched_pop_next(&s, n)); )
		held[k++] = n;
	ck_assert_uint_eq(k, 7);
	ck_assert_ptr_eq(held[6], &a->tasks[6]);
	ck_assert_uint_eq(a->tasks[0].flow->inflight, 7);
	/* Not the head of its flow: nothing. */
	ck_assert_ptr_null(bd__sched_pop_next(&s, &a->tasks[2]));
	/* Over its cap, a waits; b is served. */
	t = bd__sched_pop(&s, NULL);
	ck_assert_ptr_eq(t, &b->tasks[0]);
	/* The last of a job has no next, even with another job of the same flow behind it. */
	ck_assert_ptr_null(bd__sched_pop_next(&s, &b->tasks[1]));
	n = bd__sched_pop_next(&s, t);
	ck_assert_ptr_eq(n, &b->tasks[1]);
	ck_assert_ptr_null(bd__sched_pop_next(&s, n));
	bd__sched_done(&s, t);
	bd__sched_done(&s, n);
	ck_assert_ptr_null(bd__sched_pop(&s, NULL));
	/* Below half the cap again: a's last task is served. */
	for (unsigned i = 0; i < 5; i++)
		bd__sched_done(&s, held[i]);
	t = bd__sched_pop(&s, NULL);
	ck_assert_ptr_eq(t, &a->tasks[7]);
	bd__sched_done(&s, t);
	bd__sched_done(&s, held[5]);
	bd__sched_done(&s, held[6]);
	end_two(&s, owner, a, b);
}
END_TEST

/*
 * Turns owed (bd__sched_charge): a flow that read a span of three blocks'
 * worth gives its tenant's other flow two more turns than round-robin
 * would; alone, it owes nobody.
 */
START_TEST(test_owed_turns)
{
	bd_sched s;
	int owner[2];
	bd_job *a, *b;
	bd_task *t, *got[6];

	bd__sched_init(&s, 64, 64, on_wake, NULL);
	a = job_new(&owner[0], 1, 4);
	b = job_new(&owner[1], 1, 4);
	bd__sched_push(&s, a);
	bd__sched_push(&s, b);
	t = bd__sched_pop(&s, NULL);
	ck_assert_ptr_eq(t->job, a);
	bd__sched_charge(&s, t, 2, 2);
	ck_assert_uint_eq(t->flow->inflight, 3);
	for (int i = 0; i < 6; i++)
		got[i] = bd__sched_pop(&s, NULL);
	/* Round-robin would give b a b a b a; a owes two turns. */
	ck_assert_ptr_eq(got[0]->job, b);
	ck_assert_ptr_eq(got[1]->job, b);
	ck_assert_ptr_eq(got[2]->job, b);
	ck_assert_ptr_eq(got[3]->job, a);
	ck_assert_ptr_eq(got[4]->job, b);
	ck_assert_ptr_eq(got[5]->job, a);
	/* b is out of tasks: a, alone, is served at once whatever it owes. */
	bd__sched_charge(&s, got[5], 0, 5);
	t = bd__sched_pop(&s, NULL);
	ck_assert_ptr_eq(t, &a->tasks[3]);
	ck_assert_uint_eq(t->flow->owed, 0);
	bd__sched_done(&s, t);
	for (int i = 0; i < 6; i++)
		bd__sched_done(&s, got[i]);
	bd__sched_charge(&s, &a->tasks[0], -2, 0);
	bd__sched_done(&s, &a->tasks[0]);
	end_two(&s, owner, a, b);
}
END_TEST

/* share below a flow's cap is raised to it: one session alone is never held under its own cap. */
START_TEST(test_share_floor)
{
	bd_sched s;

	bd__sched_init(&s, 128, 16, NULL, NULL);
	ck_assert_uint_eq(s.share, 128);
	ck_assert_uint_eq(bd__sched_tenant_cap(&s), 128);
	bd__sched_fini(&s);
}
END_TEST

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("fairness");

	tcase_add_test(tc, test_users_alternate);
	tcase_add_test(tc, test_user_cap);
	tcase_add_test(tc, test_flow_cap);
	tcase_add_test(tc, test_share_floor);
	tcase_add_test(tc, test_pop_next);
	tcase_add_test(tc, test_owed_turns);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sched_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

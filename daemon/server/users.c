/* SPDX-License-Identifier: MIT */
/*
 * users.c - what one user's (uid's) connections share: how many there are
 * ([limits] connections_per_uid) and a token bucket of requests
 * ([limits] requests_per_uid, as many again at once). Every request costs
 * a token; a connection whose user has none is not read until one has
 * accrued (connection.c), so a user who floods the daemon with requests
 * (each a status document to build, a session to set up) gets its rate and
 * no more, however many connections it holds, and the control thread
 * stays free for everyone else. Requests wait; none is refused.
 *
 * Thread rules: loop thread only.
 */
#include <stdlib.h>

#include "server_state.h"

static bd_user *user_find(const bd_server *srv, uid_t uid)
{
	for (bd_user *u = srv->users; u; u = u->next)
		if (u->uid == uid)
			return u;
	return NULL;
}

bd_user *bd__user_get(bd_server *srv, uid_t uid)
{
	bd_user *u = user_find(srv, uid);

	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return NULL;
		u->uid = uid;
		/* A new user starts with a full bucket. */
		u->tokens = srv->cfg.requests_per_uid;
		u->refill_ns = bd_now_ns();
		u->next = srv->users;
		srv->users = u;
	}
	u->conns++;
	return u;
}

void bd__user_put(bd_server *srv, bd_user *u)
{
	if (--u->conns)
		return;
	for (bd_user **pp = &srv->users; *pp; pp = &(*pp)->next)
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	free(u);
}

unsigned bd__user_conns(const bd_server *srv, uid_t uid)
{
	const bd_user *u = user_find(srv, uid);

	return u ? u->conns : 0;
}

bool bd__user_may_request(const bd_server *srv, bd_user *u, uint64_t *wait_ns)
{
	double rate = srv->cfg.requests_per_uid, burst = rate > 1 ? rate : 1;
	uint64_t now = bd_now_ns();

	if (!srv->cfg.requests_per_uid)
		return true;
	u->tokens += (double)(now - u->refill_ns) * rate / 1e9;
	if (u->tokens > burst)
		u->tokens = burst; /* also after a reload lowered the rate */
	u->refill_ns = now;
	if (u->tokens >= 1)
		return true;
	*wait_ns = (uint64_t)((1 - u->tokens) * 1e9 / rate) + 1;
	return false;
}

void bd__user_spend(const bd_server *srv, bd_user *u)
{
	if (srv->cfg.requests_per_uid)
		u->tokens -= 1;
}

/* lib/util/loop: the daemon's epoll loop and timer heap.  Timeouts, TTLs and
 * every connection of corrald hang off these. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/loop.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

#define MS 1000000ull

struct rec {
    int order[256];
    int n;
};
static struct rec rec;

struct tmr {
    struct crl_timer t;
    int id;
    uint64_t fired_ns;
};

static void record_cb(struct crl_timer *t)
{
    struct tmr *x = t->data;
    x->fired_ns = crl_now_ns();
    if (rec.n < 256)
        rec.order[rec.n++] = x->id;
}

/* Spin the loop until `n` timers fired or `ms` passed. */
static void run_until(struct crl_loop *l, int n, int ms)
{
    uint64_t end = crl_now_ns() + (uint64_t)ms * MS;
    while (rec.n < n && crl_now_ns() < end)
        crl_loop_once(l, 10);
}

static void test_timers_fire_in_order(void)
{
    struct crl_loop *l = crl_loop_new();
    ok(l != NULL, "crl_loop_new");
    memset(&rec, 0, sizeof(rec));
    static const unsigned delays_ms[] = {40, 10, 30, 0, 20, 50};
    struct tmr t[6];
    memset(t, 0, sizeof(t));
    uint64_t start = crl_now_ns();
    for (int i = 0; i < 6; i++) {
        t[i].id = i;
        crl_timer_start(l, &t[i].t, delays_ms[i] * MS, record_cb, &t[i]);
        ok(crl_timer_armed(&t[i].t), "timer %d is armed after start", i);
    }
    run_until(l, 6, 2000);
    is_int(rec.n, 6, "all six timers fired");
    int want[] = {3, 1, 4, 2, 0, 5};
    bool in_order = rec.n == 6;
    for (int i = 0; i < rec.n && in_order; i++)
        in_order = rec.order[i] == want[i];
    ok(in_order, "they fired in order of their due time");
    bool on_time = true;
    for (int i = 0; i < 6; i++) {
        on_time = on_time && t[i].fired_ns >= start + delays_ms[i] * MS;
        ok(!crl_timer_armed(&t[i].t), "timer %d is disarmed once it fired", i);
    }
    ok(on_time, "no timer fired before its delay");
    crl_loop_free(l);
}

static void test_timer_stop_and_restart(void)
{
    struct crl_loop *l = crl_loop_new();
    memset(&rec, 0, sizeof(rec));
    struct tmr a = {.id = 1}, b = {.id = 2}, c = {.id = 3};
    crl_timer_start(l, &a.t, 10 * MS, record_cb, &a);
    crl_timer_start(l, &b.t, 20 * MS, record_cb, &b);
    crl_timer_start(l, &c.t, 5 * MS, record_cb, &c);
    crl_timer_stop(l, &c.t);
    ok(!crl_timer_armed(&c.t), "a stopped timer is not armed");
    crl_timer_stop(l, &c.t); /* twice: must not disturb the heap */
    /* Restart pushes a's due time out past b's. */
    crl_timer_start(l, &a.t, 60 * MS, record_cb, &a);
    run_until(l, 2, 2000);
    crl_loop_once(l, 20);
    is_int(rec.n, 2, "exactly two timers fired (the stopped one did not)");
    ok(rec.order[0] == 2 && rec.order[1] == 1, "the restarted timer fired at its new, later time");

    /* Restarting an armed timer with a shorter delay brings it forward and
     * it fires once. */
    memset(&rec, 0, sizeof(rec));
    crl_timer_start(l, &a.t, 10000 * MS, record_cb, &a);
    crl_timer_start(l, &a.t, 1 * MS, record_cb, &a);
    run_until(l, 1, 2000);
    crl_loop_once(l, 20);
    is_int(rec.n, 1, "a timer restarted sooner fires once, soon");
    ok(!crl_timer_armed(&a.t), "and is then disarmed");
    crl_loop_free(l);
}

/* A timer callback that stops another timer due in the same pass. */
static struct crl_loop *g_loop;
static struct tmr *g_victim;
static void stopper_cb(struct crl_timer *t)
{
    record_cb(t);
    crl_timer_stop(g_loop, &g_victim->t);
}

static int periodic_left;
static void periodic_cb(struct crl_timer *t)
{
    record_cb(t);
    if (--periodic_left > 0)
        crl_timer_start(g_loop, t, 1 * MS, periodic_cb, t->data);
}

static void test_timer_callbacks_touch_timers(void)
{
    struct crl_loop *l = g_loop = crl_loop_new();
    memset(&rec, 0, sizeof(rec));
    struct tmr a = {.id = 1}, b = {.id = 2};
    g_victim = &b;
    crl_timer_start(l, &a.t, 5 * MS, stopper_cb, &a);
    crl_timer_start(l, &b.t, 6 * MS, record_cb, &b);
    usleep(20000); /* both are due when the loop next runs timers */
    crl_loop_once(l, 0);
    crl_loop_once(l, 20);
    is_int(rec.n, 1, "a due timer stopped by an earlier callback in the same pass does not fire");

    memset(&rec, 0, sizeof(rec));
    periodic_left = 5;
    crl_timer_start(l, &a.t, 1 * MS, periodic_cb, &a);
    run_until(l, 5, 2000);
    crl_loop_once(l, 20);
    is_int(rec.n, 5, "a timer restarting itself from its callback fires each time");
    crl_loop_free(l);
}

static void test_timer_heap_stress(void)
{
    struct crl_loop *l = crl_loop_new();
    memset(&rec, 0, sizeof(rec));
    enum { N = 200 };
    struct tmr *t = calloc(N, sizeof(*t));
    uint32_t seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i].id = i;
        crl_timer_start(l, &t[i].t, (seed >> 16) % 60 * MS, record_cb, &t[i]);
    }
    /* Stop every third one: removal from the middle of the heap. */
    int stopped = 0;
    for (int i = 0; i < N; i += 3) {
        crl_timer_stop(l, &t[i].t);
        stopped++;
    }
    uint64_t end = crl_now_ns() + 3000 * MS;
    while (rec.n < N - stopped && crl_now_ns() < end)
        crl_loop_once(l, 10);
    crl_loop_once(l, 70);
    is_int(rec.n, N - stopped, "every timer not stopped fired, once");
    bool none_stopped = true, sorted = true;
    for (int i = 0; i < rec.n; i++) {
        none_stopped = none_stopped && rec.order[i] % 3 != 0;
        if (i > 0)
            sorted = sorted && t[rec.order[i - 1]].t.due_ns <= t[rec.order[i]].t.due_ns;
    }
    ok(none_stopped, "no stopped timer fired");
    ok(sorted, "they fired in order of due time");
    free(t);
    crl_loop_free(l);
}

struct pw {
    struct crl_watch w;
    int fds[2];
    int calls;
    uint32_t events;
};
static struct pw *g_pw[2];

static void pipe_cb(struct crl_watch *w, uint32_t events)
{
    struct pw *p = w->data;
    p->calls++;
    p->events = events;
}

static void test_watch_basic(void)
{
    struct crl_loop *l = crl_loop_new();
    struct pw p = {0};
    ok(pipe2(p.fds, O_CLOEXEC | O_NONBLOCK) == 0, "pipe");
    is_int(crl_watch_start(l, &p.w, p.fds[0], EPOLLIN, pipe_cb, &p), 0, "watch the read end");
    ok(p.w.active, "the watch is active");
    crl_loop_once(l, 20);
    is_int(p.calls, 0, "no callback before data arrives");
    ok(write(p.fds[1], "x", 1) == 1, "write a byte");
    crl_loop_once(l, 1000);
    is_int(p.calls, 1, "the callback runs once the fd is readable");
    ok(p.events & EPOLLIN, "with EPOLLIN");
    is_int(crl_watch_modify(l, &p.w, 0), 0, "modify the watch to no events");
    crl_loop_once(l, 20);
    is_int(p.calls, 1, "no callback while the watch wants no events");
    crl_watch_modify(l, &p.w, EPOLLIN);
    crl_loop_once(l, 1000);
    is_int(p.calls, 2, "the callback is back after modifying to EPOLLIN");
    crl_watch_stop(l, &p.w);
    ok(!p.w.active, "a stopped watch is inactive");
    crl_loop_once(l, 20);
    is_int(p.calls, 2, "no callback after stop");
    crl_watch_stop(l, &p.w);
    ok(crl_watch_start(l, &p.w, -1, EPOLLIN, pipe_cb, &p) < 0, "watching a bad fd fails");
    ok(!p.w.active, "and leaves the watch inactive");
    close(p.fds[0]);
    close(p.fds[1]);
    crl_loop_free(l);
}

/* Each callback stops the other watch, whose event may sit later in the
 * same epoll batch, and reuses its memory for a new, active watch (as when
 * the owner frees it and something else is allocated there).  The stale
 * event must not reach whatever now lives at that address. */
static int stale_calls;
static bool stopped_other;
static void stale_cb(struct crl_watch *w, uint32_t events)
{
    stale_calls++;
}

static void stop_other_cb(struct crl_watch *w, uint32_t events)
{
    struct pw *p = w->data;
    p->calls++;
    struct pw *other = g_pw[0] == p ? g_pw[1] : g_pw[0];
    if (!stopped_other) {
        stopped_other = true;
        crl_watch_stop(g_loop, &other->w);
        other->w.active = true;
        other->w.cb = stale_cb;
    }
}

static void test_watch_stop_pending(void)
{
    struct crl_loop *l = g_loop = crl_loop_new();
    for (int i = 0; i < 2; i++) {
        g_pw[i] = calloc(1, sizeof(struct pw));
        if (pipe2(g_pw[i]->fds, O_CLOEXEC | O_NONBLOCK) < 0)
            bail_out("pipe2");
        crl_watch_start(l, &g_pw[i]->w, g_pw[i]->fds[0], EPOLLIN, stop_other_cb, g_pw[i]);
        if (write(g_pw[i]->fds[1], "x", 1) != 1)
            bail_out("write");
    }
    crl_loop_once(l, 1000);
    is_int(g_pw[0]->calls + g_pw[1]->calls, 1, "only the first of two ready watches ran");
    is_int(stale_calls, 0, "the stopped watch's pending event was dropped, not delivered");
    struct pw *left = g_pw[0]->calls ? g_pw[0] : g_pw[1];
    crl_loop_once(l, 20);
    is_int(left->calls, 2, "the survivor is still watched (level-triggered)");
    is_int(stale_calls, 0, "the stopped watch gets no later event either");
    crl_watch_stop(l, &left->w);
    for (int i = 0; i < 2; i++) {
        close(g_pw[i]->fds[0]);
        close(g_pw[i]->fds[1]);
        free(g_pw[i]);
    }
    crl_loop_free(l);
}

static int prepare_calls;
static int prepare_cb(struct crl_loop *l, void *data)
{
    prepare_calls++;
    return *(int *)data;
}

static struct tmr stop_t;
static void stop_cb(struct crl_timer *t)
{
    record_cb(t);
    crl_loop_stop(g_loop);
}

static void test_run_stop_prepare(void)
{
    struct crl_loop *l = g_loop = crl_loop_new();
    memset(&rec, 0, sizeof(rec));
    int wait_ms = 5;
    crl_loop_set_prepare(l, prepare_cb, &wait_ms);
    uint64_t t0 = crl_now_ns();
    crl_loop_once(l, 2000);
    uint64_t took = crl_now_ns() - t0;
    is_int(prepare_calls, 1, "the prepare hook runs before each wait");
    ok(took < 1000 * MS, "its return value caps the wait (took %llu ms)",
       (unsigned long long)(took / MS));
    wait_ms = -1;
    t0 = crl_now_ns();
    crl_loop_once(l, 30);
    took = crl_now_ns() - t0;
    ok(took >= 25 * MS, "a prepare hook returning -1 leaves the caller's timeout (%llu ms)",
       (unsigned long long)(took / MS));
    crl_loop_set_prepare(l, NULL, NULL);

    stop_t.id = 9;
    crl_timer_start(l, &stop_t.t, 10 * MS, stop_cb, &stop_t);
    is_int(crl_loop_run(l), 0, "crl_loop_run returns 0 after crl_loop_stop from a callback");
    is_int(rec.n, 1, "the stopping timer fired");
    crl_loop_free(l);
}

int main(void)
{
    TAP_RUN(test_timers_fire_in_order, 10);
    TAP_RUN(test_timer_stop_and_restart, 10);
    TAP_RUN(test_timer_callbacks_touch_timers, 10);
    TAP_RUN(test_timer_heap_stress, 20);
    TAP_RUN(test_watch_basic, 10);
    TAP_RUN(test_watch_stop_pending, 10);
    TAP_RUN(test_run_stop_prepare, 10);
    return done_testing();
}

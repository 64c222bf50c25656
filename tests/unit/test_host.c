/* lib/core/host and sandbox: a sandbox's life (admission, TTLs, states,
 * failures, the order of its end) driven on the real loop, against a fake
 * backend whose ops complete on loop timers.
 *
 * Nothing here needs root or touches the machine's cgroups or namespaces:
 * the host serves no images, its cgroup manager runs on an empty v2 tree in
 * a temporary directory (as corrald --cgroup v2 --cgroup-root DIR
 * --cgroup-no-limits would), its lock lives there too, and the network
 * namespace pool only opens the current namespace until a backend asks it
 * for one, which the fake never does. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/core/host.h"
#include "../../lib/core/records.h"
#include "../../lib/core/sandbox.h"
#include "../../lib/util/fdio.h"
#include "../../lib/util/log.h"
#include "tap.h"

#define MS 1000000ull

/* ---- the fake backend ---- */

/* What the next sandboxes' ops do; each case sets it. */
static struct {
    unsigned create_ms, destroy_ms, exit_ms;
    bool create_fails_now, create_fails_later;
    bool pause_fails;
    int inits, shutdowns;
} fake;

/* What happened, in order: "create sb-..." is written as "create". */
static char events[2048];

static void event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void event(const char *fmt, ...)
{
    size_t n = strlen(events);
    if (n + 2 >= sizeof(events))
        return;
    if (n)
        events[n++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(events + n, sizeof(events) - n, fmt, ap);
    va_end(ap);
}

struct fake_sb {
    struct crl_timer t; /* the create, then the destroy, completing */
};

struct fake_proc {
    struct crl_timer t; /* its start, then its exit */
};

static struct crl_loop *loop_of(struct crl_sandbox *sb)
{
    return sb->host->loop;
}

static int fake_init(struct crl_host *h, void **state, struct crl_err *err)
{
    fake.inits++;
    *state = &fake;
    return 0;
}

static int fake_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    return 0;
}

static void fake_shutdown(struct crl_host *h, void *state)
{
    fake.shutdowns++;
}

static void fake_created(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    if (fake.create_fails_later) {
        /* A backend that fails undoes its part before it says so. */
        free(sb->priv);
        sb->priv = NULL;
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_INTERNAL, "the fake failed later");
        crl_sandbox_created(sb, &e);
        return;
    }
    crl_sandbox_created(sb, NULL);
}

static int fake_create(struct crl_sandbox *sb, struct crl_err *err)
{
    event("create");
    if (fake.create_fails_now)
        return crl_err_set(err, CRL_E_INTERNAL, "the fake refused");
    struct fake_sb *f = calloc(1, sizeof(*f));
    if (!f)
        return crl_err_sys(err, ENOMEM, "fake");
    sb->priv = f;
    crl_timer_start(loop_of(sb), &f->t, fake.create_ms * MS, fake_created, sb);
    return 0;
}

static void fake_destroyed(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    free(sb->priv);
    sb->priv = NULL;
    event("destroyed");
    crl_sandbox_destroyed(sb);
}

static void fake_destroy(struct crl_sandbox *sb)
{
    struct fake_sb *f = sb->priv;
    event("destroy");
    crl_timer_start(loop_of(sb), &f->t, fake.destroy_ms * MS, fake_destroyed, sb);
}

static int fake_stats(struct crl_sandbox *sb, struct crl_usage *u)
{
    memset(u, 0, sizeof(*u));
    u->cpu_s = 1.5;
    u->memory_bytes = 1 << 20;
    u->pids = 1;
    return 0;
}

static void proc_started(struct crl_timer *t)
{
    struct crl_proc *p = t->data;
    p->started = true;
    p->pid = 1000 + (pid_t)p->seq;
    p->on_start(p, NULL);
}

static int fake_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct fake_proc *fp = calloc(1, sizeof(*fp));
    if (!fp)
        return crl_err_sys(err, ENOMEM, "fake proc");
    p->priv = fp;
    event("spawn %llu", (unsigned long long)p->seq);
    crl_timer_start(loop_of(sb), &fp->t, 0, proc_started, p);
    return 0;
}

static void proc_exited(struct crl_timer *t)
{
    struct crl_proc *p = t->data;
    free(p->priv);
    p->priv = NULL;
    p->exited = true;
    p->status = SIGKILL;
    p->on_exit(p);
}

static int fake_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct fake_proc *fp = p->priv;
    event("kill %llu", (unsigned long long)p->seq);
    if (fp && !crl_timer_armed(&fp->t))
        crl_timer_start(loop_of(sb), &fp->t, fake.exit_ms * MS, proc_exited, p);
    return 0;
}

static int fake_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    event("pause");
    return fake.pause_fails ? crl_err_set(err, CRL_E_INTERNAL, "the fake cannot pause") : 0;
}

static int fake_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    event("resume");
    return 0;
}

/* Only what the host and sandbox.c call: the rest stays NULL. */
static const struct crl_backend_ops fake_backend = {
    .name = "fake",
    .fds_held = 3,
    .init = fake_init,
    .reconcile = fake_reconcile,
    .shutdown = fake_shutdown,
    .create = fake_create,
    .destroy = fake_destroy,
    .stats = fake_stats,
    .spawn = fake_spawn,
    .kill = fake_kill,
    .pause = fake_pause,
    .resume = fake_resume,
};

/* The same fake, adoptable (lib/core/host.c's adoption), under the name of
 * a backend a record's spec may name: its record names the sandbox; a
 * check refuses the id in fake_refuse. */
static char fake_refuse[40];
static int fake_adopted, fake_left;

static json_t *fake_adopt_record(struct crl_sandbox *sb)
{
    char cg[16];
    snprintf(cg, sizeof(cg), "s%u", sb->slot);
    return json_pack("{s:s, s:s}", "cgroup", cg, "id", sb->id);
}

static int fake_adopt_check(struct crl_host *h, json_t *rec, const char **why, struct crl_err *err)
{
    if (strcmp(json_string_value(json_object_get(rec, "id")), fake_refuse) != 0)
        return 0;
    *why = "init_gone";
    return crl_err_set(err, CRL_E_CONFLICT, "the fake's PID 1 is gone");
}

static int fake_adopt(struct crl_sandbox *sb, json_t *rec, bool *paused, const char **why,
                      struct crl_err *err)
{
    if (!(sb->priv = calloc(1, sizeof(struct fake_sb))))
        return crl_err_sys(err, ENOMEM, "fake");
    fake_adopted++;
    return 0;
}

static void fake_leave(struct crl_sandbox *sb)
{
    free(sb->priv);
    sb->priv = NULL;
    fake_left++;
}

static const struct crl_backend_ops fake_adoptable = {
    .name = "container", /* a record's spec must name a backend the API knows */
    .fds_held = 3,
    .init = fake_init,
    .reconcile = fake_reconcile,
    .shutdown = fake_shutdown,
    .adopt_record = fake_adopt_record,
    .adopt_check = fake_adopt_check,
    .adopt = fake_adopt,
    .leave = fake_leave,
    .create = fake_create,
    .destroy = fake_destroy,
    .stats = fake_stats,
    .spawn = fake_spawn,
    .kill = fake_kill,
    .pause = fake_pause,
    .resume = fake_resume,
};

/* ---- a host over it ---- */

static char tmp[64];
static struct crl_loop *loop;
static struct crl_host_config last_cfg; /* host_open's, for a restart on its state */

/* The host every case starts from: 4096 MiB and 4 CPUs to give out (the
 * machine's own figures replaced by round ones), 8 slots, short tombstones. */
static struct crl_host *host_open(void (*tweak)(struct crl_host_config *c))
{
    memset(&fake, 0, sizeof(fake));
    fake.create_ms = 5;
    fake.destroy_ms = 5;
    fake.exit_ms = 2;
    events[0] = 0;
    snprintf(tmp, sizeof(tmp), "/tmp/corral-test-host-XXXXXX");
    if (!mkdtemp(tmp) || chmod(tmp, 0711) < 0) /* the host wants its state dir reachable */
        bail_out("mkdtemp");
    static char state[128], cgroot[128];
    snprintf(state, sizeof(state), "%s/state", tmp);
    snprintf(cgroot, sizeof(cgroot), "%s/cgroup", tmp);
    if (mkdir(cgroot, 0755) < 0)
        bail_out("mkdir cgroup root");
    static const struct crl_backend_ops *const backends[] = {&fake_backend};
    struct crl_host_config c;
    crl_host_config_defaults(&c);
    c.state_dir = state;
    c.lock_dir = tmp;
    c.backends = backends;
    c.n_backends = 1;
    c.no_images = true;
    c.cgroup_version = CRL_CGROUP_V2;
    c.cgroup_root = cgroot;
    c.cgroup_no_limits = true;
    c.cgroup_parent = "corral-test";
    snprintf(c.host_id, sizeof(c.host_id), "t");
    c.reserve_mb = 0;
    c.admission = CRL_ADMIT_RESERVED; /* test_admission_measured has the other */
    c.uid_slots = 8;
    c.tombstone_s = 0.2;
    if (tweak)
        tweak(&c);
    last_cfg = c;
    loop = crl_loop_new();
    struct crl_host *h = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (!loop || crl_host_open(&c, loop, &h, &e) < 0) {
        diag("crl_host_open: %s", e.msg);
        bail_out("cannot open a host over the fake backend");
    }
    h->mem_total_mb = 4096;
    h->ncpus = 4;
    return h;
}

static void host_close(struct crl_host *h)
{
    crl_host_close(h);
    crl_loop_free(loop);
    loop = NULL;
    crl_rm_rf_at(AT_FDCWD, tmp);
}

/* Run the loop until cond holds or ms have passed; is cond true? */
#define RUN_UNTIL(cond, ms)                               \
    ({                                                    \
        uint64_t end_ = crl_now_ns() + (uint64_t)(ms)*MS; \
        while (!(cond) && crl_now_ns() < end_)            \
            crl_loop_once(loop, 5);                       \
        (bool)(cond);                                     \
    })

/* Run the loop for ms, whatever happens. */
static void run_for(unsigned ms)
{
    uint64_t end = crl_now_ns() + (uint64_t)ms * MS;
    while (crl_now_ns() < end)
        crl_loop_once(loop, 5);
}

/* A callback's record: how often it ran, and with what. */
struct seen {
    int calls;
    enum crl_errc code;
    char msg[480];
    enum crl_sb_state state;
};

static void saw(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct seen *s = ctx;
    s->calls++;
    s->code = err ? err->code : CRL_OK;
    snprintf(s->msg, sizeof(s->msg), "%s", err ? err->msg : "");
    s->state = sb->state;
}

static struct crl_spec spec_of(unsigned memory_mb, double cpus)
{
    struct crl_spec s;
    crl_spec_init(&s);
    snprintf(s.backend, sizeof(s.backend), "fake");
    s.memory_mb = memory_mb;
    s.cpus = cpus;
    return s;
}

/* Create a sandbox and hold a reference to it (the caller drops it);
 * NULL if it is refused. */
static struct crl_sandbox *create(struct crl_host *h, struct crl_spec s, struct seen *seen,
                                  struct crl_err *e)
{
    *e = (struct crl_err)CRL_ERR_INIT;
    if (crl_host_create(h, &s, seen ? saw : NULL, seen, e) < 0) {
        crl_spec_free(&s);
        return NULL;
    }
    struct crl_sandbox *sb = h->sandboxes; /* the newest comes first */
    crl_sandbox_ref(sb);
    return sb;
}

static struct crl_sandbox *create_ready(struct crl_host *h, unsigned memory_mb, double cpus)
{
    struct seen seen = {0};
    struct crl_err e;
    struct crl_sandbox *sb = create(h, spec_of(memory_mb, cpus), &seen, &e);
    if (!sb || !RUN_UNTIL(seen.calls, 2000)) {
        diag("create: %s", sb ? "it never completed" : e.msg);
        bail_out("a create the case needs failed");
    }
    return sb;
}

static void destroy_wait(struct crl_host *h, struct crl_sandbox *sb)
{
    struct seen seen = {0};
    crl_host_destroy(h, sb, "destroyed", saw, &seen, NULL);
    RUN_UNTIL(seen.calls, 2000);
}

static const char *state_of(struct crl_sandbox *sb)
{
    return crl_sb_state_name(sb->state);
}

/* ---- cases ---- */

static void test_states(void)
{
    struct crl_host *h = host_open(NULL);
    is_int(fake.inits, 1, "the registered backend was started");
    struct seen created = {0};
    struct crl_err e;
    struct crl_sandbox *sb = create(h, spec_of(256, 1), &created, &e);
    if (!ok(sb != NULL, "a create is admitted")) {
        diag("%s", e.msg);
        host_close(h);
        return;
    }
    like(sb->id, "^sb-t-[0-9a-f]{12}$", "its id names the host");
    is_str(state_of(sb), "creating", "it starts creating");
    ok(crl_host_find(h, sb->id, NULL) == sb, "the host finds it by id");
    is_int(created.calls, 0, "its callback waits for the backend");
    ok(RUN_UNTIL(created.calls, 2000), "the backend's create completes on the loop");
    is_int(created.code, CRL_OK, "without an error");
    is_str(crl_sb_state_name(created.state), "ready", "the callback sees it ready");
    ok(sb->ready_at >= sb->created_at && sb->ready_at > 0, "ready_at is set");
    is_int(h->counters.created, 1, "created is counted");

    ok(crl_sandbox_pause(sb, &e) == 0, "pause");
    is_str(state_of(sb), "paused", "ready -> paused");
    ok(crl_sandbox_pause(sb, &e) == 0, "pausing again does nothing");
    ok(crl_sandbox_check_ready(sb, &e) == 0, "a call to a paused sandbox wakes it");
    is_str(state_of(sb), "ready", "paused -> ready");
    is_str(events, "create pause resume", "the backend paused and resumed once each");

    json_t *j = crl_sandbox_json(sb);
    is_str(json_string_value(json_object_get(j, "state")), "ready", "its JSON says ready");
    is_str(json_string_value(json_object_get(j, "backend")), "fake", "and its backend");
    ok(json_real_value(json_object_get(json_object_get(j, "usage"), "cpu_s")) == 1.5,
       "usage comes from the backend while it lives");
    is_int(json_integer_value(json_object_get(j, "sessions")), 0, "no sessions");
    json_decref(j);

    ok(crl_sandbox_pause(sb, &e) == 0, "paused again, to be destroyed so");
    struct seen destroyed = {0};
    ok(crl_host_destroy(h, sb, "destroyed", saw, &destroyed, &e) == 0, "destroy");
    is_str(state_of(sb), "destroying", "paused -> destroying");
    like(events, "pause resume destroy", "thawed before the backend's destroy");
    is_int(h->live, 1, "its reservation holds while the backend tears it down");
    ok(crl_host_destroy(h, sb, "destroyed", NULL, NULL, &e) == 0,
       "a second destroy while destroying is accepted");
    ok(RUN_UNTIL(destroyed.calls, 2000), "the backend's destroy completes on the loop");
    is_str(state_of(sb), "destroyed", "destroying -> destroyed");
    is_str(sb->end_reason, "destroyed", "its end reason");
    ok(sb->ended_at >= sb->ready_at, "ended_at is set");
    is_int(h->live, 0, "its reservation is given back");
    is_int((long long)h->reserved_mb, 0, "memory too");
    is_int(h->counters.destroyed, 1, "destroyed is counted");
    ok(sb->usage.cpu_s == 1.5, "its final usage was taken before the teardown");

    struct seen again = {0};
    ok(crl_host_destroy(h, sb, "destroyed", saw, &again, &e) == 0 && again.calls == 1,
       "destroying a destroyed sandbox answers at once");
    ok(crl_host_find(h, sb->id, NULL) == sb, "its tombstone stays findable");
    struct crl_err nf = CRL_ERR_INIT;
    ok(RUN_UNTIL(!crl_host_find(h, sb->id, &nf), 2000), "until its tombstone time passes");
    is_int(nf.code, CRL_E_NOT_FOUND, "then it is not found");
    is_int((long long)h->n_sandboxes, 0, "the table is empty");
    crl_sandbox_unref(sb);
    host_close(h);
}

static void few_slots(struct crl_host_config *c)
{
    c->uid_slots = 2;
    c->retry_after_s = 7;
}

static void max_two(struct crl_host_config *c)
{
    c->max_sandboxes = 2;
}

/* A host opened with `tweak` takes two small sandboxes (left in two[]) and
 * refuses a third for capacity, with a message matching `re`. */
static struct crl_host *full_at_two(void (*tweak)(struct crl_host_config *c),
                                    struct crl_sandbox *two[2], const char *re)
{
    struct crl_host *h = host_open(tweak);
    two[0] = create_ready(h, 1, 0.1);
    two[1] = create_ready(h, 1, 0.1);
    struct crl_err e = CRL_ERR_INIT;
    ok(!create(h, spec_of(1, 0.1), NULL, &e) && e.code == CRL_E_CAPACITY,
       "two sandboxes fit, a third is refused for capacity");
    like(e.msg, re, "saying why");
    return h;
}

static void test_admission(void)
{
    struct crl_host *h = host_open(NULL);
    struct crl_err e;
    /* memory: 4096 MiB to give out */
    struct crl_sandbox *a = create_ready(h, 2048, 1), *b = create_ready(h, 2048, 1);
    ok(a && b, "two sandboxes of 2048 MiB fit in 4096");
    ok(!create(h, spec_of(1, 1), NULL, &e), "a third of 1 MiB does not");
    is_int(e.code, CRL_E_CAPACITY, "refused for capacity");
    is_int(crl_errc_http_status(e.code), 503, "which the API answers 503");
    like(e.msg, "^host is full: 4096 of 4096 MiB of sandbox memory are reserved and 1 more",
         "naming the memory");
    is_int(h->counters.rejected_capacity, 1, "a refusal is counted");
    is_str(events, "create create", "the backend never heard of the refused one");
    destroy_wait(h, a);
    struct crl_sandbox *c = create_ready(h, 2048, 1);
    ok(c != NULL, "a destroyed sandbox's memory is given back");

    destroy_wait(h, b);
    destroy_wait(h, c);

    /* CPUs: 4, times a cpu_overcommit of 16 */
    struct crl_sandbox *d = create_ready(h, 1, 60);
    ok(d != NULL, "60 CPUs fit in 4 x 16");
    ok(!create(h, spec_of(1, 4.5), NULL, &e) && e.code == CRL_E_CAPACITY, "4.5 more do not");
    like(e.msg, "^host is full: 60.00 of 64.00 CPUs are reserved and 4.50 more", "naming the CPUs");
    destroy_wait(h, d);
    crl_sandbox_unref(d);

    json_t *info = crl_host_info_json(h);
    json_t *bk = json_object_get(info, "backends");
    ok(json_array_size(bk) == 1 && strcmp(json_string_value(json_array_get(bk, 0)), "fake") == 0,
       "info lists the registered backends");
    is_int(json_integer_value(json_object_get(json_object_get(info, "used"), "sandboxes")), 0,
           "and nothing in use");
    json_decref(info);

    /* backends: what is not registered is not available (501) */
    struct crl_spec s;
    crl_spec_init(&s);
    ok(crl_host_create(h, &s, NULL, NULL, &e) < 0 && e.code == CRL_E_UNSUPPORTED,
       "the container backend is refused when it is not registered");
    is_int(crl_errc_http_status(e.code), 501, "501");
    is_str(e.msg, "backend 'container' is not available on this host (available: fake)",
           "naming what is");
    crl_spec_free(&s);
    static const char body[] = "{\"backend\": \"microvm\"}";
    ok(crl_spec_parse(body, sizeof(body) - 1, &s, &e) == 0, "a microvm spec is valid");
    ok(crl_host_create(h, &s, NULL, NULL, &e) < 0 && e.code == CRL_E_UNSUPPORTED,
       "but refused on this host");
    is_str(e.msg, "backend 'microvm' is not available on this host (available: fake)",
           "with the same message");
    crl_spec_free(&s);
    crl_sandbox_unref(a);
    crl_sandbox_unref(b);
    crl_sandbox_unref(c);
    host_close(h);

    /* the count */
    struct crl_sandbox *two[2];
    h = full_at_two(max_two, two, "^host is full: 2 of 2 sandboxes are running");
    crl_sandbox_unref(two[0]);
    crl_sandbox_unref(two[1]);
    host_close(h);

    /* slots, and the Retry-After the API sends with a 503 */
    h = full_at_two(few_slots, two, "^host is full: all 2 sandbox slots are in use");
    a = two[0];
    b = two[1];
    ok(a->slot == 0 && b->slot == 1, "slots go lowest first");
    is_int(h->cfg.retry_after_s, 7, "the API's Retry-After comes from the host's configuration");
    is_int(h->live, 2, "a refusal reserves nothing");
    destroy_wait(h, a);
    c = create_ready(h, 1, 0.1);
    is_int(c->slot, 0, "a freed slot is taken again");
    crl_sandbox_unref(a);
    crl_sandbox_unref(b);
    crl_sandbox_unref(c);
    host_close(h);
}

static void test_ttls(void)
{
    struct crl_host *h = host_open(NULL);
    struct crl_err e;
    struct crl_spec s = spec_of(1, 0.1);
    s.ttl_s = 1;
    struct seen seen = {0};
    struct crl_sandbox *ttl = create(h, s, &seen, &e);
    s = spec_of(1, 0.1);
    s.ttl_s = 0;
    s.idle_ttl_s = 1;
    struct crl_sandbox *idle = create(h, s, &seen, &e);
    s = spec_of(1, 0.1);
    s.idle_ttl_s = 1;
    struct crl_sandbox *paused = create(h, s, &seen, &e);
    if (!ok(ttl && idle && paused && RUN_UNTIL(seen.calls == 3, 2000), "three sandboxes ready")) {
        host_close(h);
        return;
    }
    ok(crl_sandbox_pause(paused, &e) == 0, "one of them paused");
    uint64_t t0 = crl_now_ns();
    /* Keep `idle` busy past its idle time. */
    while (crl_now_ns() - t0 < 1500 * MS) {
        crl_sandbox_touch(idle);
        crl_loop_once(loop, 50);
    }
    is_str(state_of(ttl), "destroyed", "the ttl destroyed its sandbox");
    is_str(ttl->end_reason, "ttl", "by reason of its ttl");
    is_str(state_of(idle), "ready", "a sandbox in use outlives its idle ttl");
    is_str(state_of(paused), "paused", "a paused sandbox's idle time does not run");
    ok(RUN_UNTIL(idle->state == CRL_SB_DESTROYED, 3000), "left alone, it is destroyed");
    is_str(idle->end_reason, "idle_ttl", "by reason of its idle ttl");
    ok(crl_now_ns() - t0 >= 2400 * MS, "no sooner than its idle ttl after the last use");
    ok(crl_sandbox_resume(paused, &e) == 0, "resume");
    t0 = crl_now_ns();
    ok(RUN_UNTIL(paused->state == CRL_SB_DESTROYED, 3000) && crl_now_ns() - t0 >= 900 * MS,
       "its idle time starts afresh when it resumes");
    is_int(h->counters.destroyed, 3, "three destroyed");
    crl_sandbox_unref(ttl);
    crl_sandbox_unref(idle);
    crl_sandbox_unref(paused);
    host_close(h);
}

static void test_create_fails_now(void)
{
    struct crl_host *h = host_open(NULL);
    fake.create_fails_now = true;
    struct seen seen = {0};
    struct crl_err e = CRL_ERR_INIT;
    struct crl_spec s = spec_of(256, 1);
    ok(crl_host_create(h, &s, saw, &seen, &e) < 0, "a create the backend refuses fails at once");
    like(e.msg, "^creating sb-t-[0-9a-f]+: the fake refused$", "with the backend's message");
    is_int(e.code, CRL_E_INTERNAL, "and its code");
    run_for(20);
    is_int(seen.calls, 0, "its callback never runs");
    is_int((long long)h->n_sandboxes, 0, "nothing of it remains in the table");
    ok(h->live == 0 && h->reserved_mb == 0 && h->reserved_cpus == 0, "nor reserved");
    is_int(h->slots[0], 0, "its slot is free");
    is_int(h->counters.create_failed, 1, "the failure is counted");
    host_close(h);
}

static void test_create_fails_later(void)
{
    struct crl_host *h = host_open(NULL);
    fake.create_fails_later = true;
    struct seen created = {0}, destroyed = {0};
    struct crl_err e;
    struct crl_sandbox *sb = create(h, spec_of(256, 1), &created, &e);
    ok(sb != NULL, "the backend starts the create");
    ok(crl_host_destroy(h, sb, "client_gone", saw, &destroyed, &e) == 0,
       "a destroy waits on it meanwhile");
    ok(RUN_UNTIL(created.calls, 2000), "the create ends");
    is_int(created.code, CRL_E_INTERNAL, "in the backend's error");
    is_str(created.msg, "the fake failed later", "with its message");
    is_int(destroyed.calls, 1, "the destroy's waiter hears of it");
    is_int(destroyed.code, CRL_OK, "as done");
    is_str(state_of(sb), "destroyed", "the sandbox is destroyed");
    ok(!crl_host_find(h, sb->id, NULL), "and forgotten at once (no tombstone)");
    ok(h->live == 0 && h->reserved_mb == 0 && h->slots[0] == 0, "nothing stays reserved");
    is_int(h->counters.create_failed, 1, "the failure is counted");
    is_int(h->counters.destroyed, 0, "not as a destroy");
    is_str(events, "create", "the backend is not asked to destroy what it undid");
    crl_sandbox_unref(sb);
    host_close(h);
}

static void test_destroy_while_creating(void)
{
    struct crl_host *h = host_open(NULL);
    fake.create_ms = 30;
    struct seen created = {0}, destroyed = {0};
    struct crl_err e;
    struct crl_sandbox *sb = create(h, spec_of(256, 1), &created, &e);
    ok(crl_host_destroy(h, sb, "client_gone", saw, &destroyed, &e) == 0, "destroy while creating");
    is_str(state_of(sb), "creating", "it goes on being created");
    ok(RUN_UNTIL(destroyed.calls, 2000), "then it is destroyed");
    is_int(created.calls, 1, "its creator heard first");
    is_str(crl_sb_state_name(created.state), "ready", "that it was ready");
    /* the reason given while it was creating, not one the teardown made up */
    is_str(sb->end_reason, "client_gone", "the destroy's reason is kept");
    is_str(events, "create destroy destroyed", "the backend built it, then tore it down");
    is_int(h->live, 0, "nothing stays reserved");
    crl_sandbox_unref(sb);
    host_close(h);
}

static void test_failed(void)
{
    struct crl_host *h = host_open(NULL);
    struct crl_err e;
    struct crl_sandbox *sb = create_ready(h, 256, 1);
    events[0] = 0;
    crl_sandbox_failed(sb, "init_exited", "its init died (signal %d)", 9);
    is_str(state_of(sb), "failed", "ready -> failed");
    is_str(sb->end_reason, "init_exited", "with its reason");
    is_str(sb->message, "its init died (signal 9)", "and message");
    is_int(h->counters.failed, 1, "the failure is counted");
    is_str(events, "destroy", "the backend tears it down at once");
    ok(crl_sandbox_check_ready(sb, &e) < 0 && e.code == CRL_E_CONFLICT, "it takes no calls");
    like(e.msg, "has failed \\(init_exited\\): its init died", "saying why");
    crl_sandbox_failed(sb, "again", "twice");
    is_str(sb->end_reason, "init_exited", "a failed sandbox does not fail again");
    ok(RUN_UNTIL(!sb->tearing_down, 2000), "the teardown ends");
    is_str(state_of(sb), "failed", "it stays failed: visible to its user");
    is_int(h->live, 0, "its reservation is given back");
    ok(crl_host_find(h, sb->id, NULL) == sb, "a tombstone");
    struct seen destroyed = {0};
    ok(crl_host_destroy(h, sb, "destroyed", saw, &destroyed, &e) == 0 && destroyed.calls == 1,
       "destroying it answers at once");
    is_str(state_of(sb), "destroyed", "failed -> destroyed");
    is_int(h->counters.destroyed, 0, "a failed sandbox is not counted as destroyed");
    ok(RUN_UNTIL(!crl_host_find(h, sb->id, NULL), 2000), "its tombstone expires");
    crl_sandbox_unref(sb);
    host_close(h);
}

/* A process the test runs in a sandbox, as exec does. */
struct tproc {
    struct crl_proc p;
    char *argv[2];
    int exits;
};

static void tproc_started(struct crl_proc *p, const struct crl_err *err)
{
    if (err)
        crl_sandbox_proc_done(p->sb, p);
}

static void tproc_exited(struct crl_proc *p)
{
    struct tproc *t = p->owner;
    t->exits++;
    event("exit %llu", (unsigned long long)p->seq);
    crl_sandbox_proc_done(p->sb, p);
}

static int spawn(struct crl_sandbox *sb, struct tproc *t)
{
    memset(t, 0, sizeof(*t));
    t->argv[0] = "true";
    t->p.argv = t->argv;
    t->p.owner = t;
    t->p.on_start = tproc_started;
    t->p.on_exit = tproc_exited;
    struct crl_err e = CRL_ERR_INIT;
    return crl_sandbox_spawn(sb, &t->p, &e);
}

static void end_hook(struct crl_sandbox *sb)
{
    event("hook");
}

static void test_destroy_order(void)
{
    struct crl_host *h = host_open(NULL);
    struct crl_err e;
    struct crl_sandbox *sb = create_ready(h, 256, 1);
    struct tproc t1, t2;
    ok(spawn(sb, &t1) == 0 && spawn(sb, &t2) == 0, "two processes spawned");
    ok(RUN_UNTIL(t1.p.started && t2.p.started, 2000), "and started");
    unsigned refs = sb->refs;
    ok(crl_sandbox_on_end(sb, end_hook, &e) == 0 && crl_sandbox_on_end(sb, end_hook, &e) == 0,
       "an end hook registered (twice: once)");
    events[0] = 0;
    struct seen destroyed = {0};
    ok(crl_host_destroy(h, sb, "destroyed", saw, &destroyed, &e) == 0, "destroy");
    is_str(events, "hook kill 2 kill 1 destroy",
           "the hook runs, then every process is killed, before the backend's destroy");
    ok(RUN_UNTIL(destroyed.calls, 2000), "it is destroyed");
    is_int(t1.exits + t2.exits, 2, "both processes' ends were reported");
    ok(sb->procs == NULL && sb->refs == refs - 2, "and handed back, with their references");
    ok(crl_host_find(h, sb->id, NULL) == sb, "its tombstone is kept");
    crl_sandbox_unref(sb);
    host_close(h);
}

static void two_tombstones(struct crl_host_config *c)
{
    c->max_tombstones = 2;
    c->tombstone_s = 60;
}

static void test_tombstones(void)
{
    struct crl_host *h = host_open(two_tombstones);
    struct crl_sandbox *sb[3];
    for (int i = 0; i < 3; i++)
        sb[i] = create_ready(h, 1, 0.1);
    for (int i = 0; i < 3; i++)
        destroy_wait(h, sb[i]);
    ok(!crl_host_find(h, sb[0]->id, NULL), "beyond max_tombstones the oldest is forgotten");
    ok(crl_host_find(h, sb[1]->id, NULL) && crl_host_find(h, sb[2]->id, NULL),
       "the two newest are kept");
    is_int(h->n_tombs, 2, "two tombstones");
    json_t *l = crl_host_list_json(h);
    is_int(json_array_size(json_object_get(l, "sandboxes")), 2, "listed");
    json_decref(l);
    for (int i = 0; i < 3; i++)
        crl_sandbox_unref(sb[i]);
    host_close(h);
}

static void test_close(void)
{
    struct crl_host *h = host_open(NULL);
    fake.create_ms = 50;
    struct crl_sandbox *ready = create_ready(h, 1, 0.1);
    struct crl_err e;
    struct crl_sandbox *creating = create(h, spec_of(1, 0.1), NULL, &e);
    ok(ready && creating && creating->state == CRL_SB_CREATING, "one ready, one creating");
    crl_host_close(h);
    is_str(state_of(ready), "destroyed", "closing the host destroys what is ready");
    is_str(ready->end_reason, "shutdown", "for shutdown");
    is_str(state_of(creating), "destroyed", "and what is being created, once it is");
    is_int(fake.shutdowns, 1, "then the backend is shut down");
    crl_sandbox_unref(ready);
    crl_sandbox_unref(creating);
    crl_loop_free(loop);
    crl_rm_rf_at(AT_FDCWD, tmp);
}

/* ---- measured admission: from a meminfo file of the test's ---- */

static char meminfo[64];

static void write_meminfo(unsigned avail_mb)
{
    char text[128];
    snprintf(text, sizeof(text),
             "MemTotal:        4194304 kB\nMemFree: 1 kB\nMemAvailable: %u kB\n", avail_mb * 1024);
    FILE *f = fopen(meminfo, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        bail_out("cannot write the test's meminfo");
}

static void measured(struct crl_host_config *c)
{
    c->admission = CRL_ADMIT_MEASURED;
    c->meminfo_path = meminfo;
}

static void test_admission_measured(void)
{
    snprintf(meminfo, sizeof(meminfo), "/tmp/corral-test-meminfo-%d", (int)getpid());
    write_meminfo(2000);
    struct crl_host *h = host_open(measured);
    struct crl_err e;
    h->reserve_mb = 1000;
    h->mem_read_ns = 0;
    struct crl_sandbox *a = create_ready(h, 3000, 60), *b = create_ready(h, 3000, 60);
    ok(a && b, "two sandboxes limited to 3000 MiB and 60 CPUs each fit a host of 4096 MiB "
               "and 4 CPUs: limits are enforced, not reserved");
    is_int((long long)h->reserved_mb, 6000, "their limits are still counted");

    write_meminfo(1000);
    h->mem_read_ns = 0;
    ok(!create(h, spec_of(64, 1), NULL, &e) && e.code == CRL_E_CAPACITY,
       "with the host's available memory at the reserve, a create is refused");
    is_str(e.msg,
           "host is under memory pressure: 1000 MiB available, 1000 MiB kept for the host "
           "(--reserve-mb), and a new fake sandbox takes about 1 MiB",
           "saying what is available, what is kept and what a sandbox takes");
    is_int(crl_errc_http_status(e.code), 503, "a 503");

    write_meminfo(1001);
    h->mem_read_ns = 0;
    struct crl_sandbox *c = create_ready(h, 64, 1);
    ok(c != NULL, "1 MiB more and it is admitted");
    ok(!create(h, spec_of(64, 1), NULL, &e) && e.code == CRL_E_CAPACITY,
       "and what it is expected to take counts until the memory is read again");

    write_meminfo(3000);
    h->mem_read_ns = 0;
    ok(!create(h, spec_of(3097, 1), NULL, &e) && e.code == CRL_E_CAPACITY,
       "a limit above what the host has for sandboxes is refused");
    is_str(e.msg,
           "host is too small: the sandbox asks for 3097 MiB of memory and the host has 3096 "
           "MiB for sandboxes",
           "naming both");

    is_int((long long)h->fds_held, 9, "the live sandboxes hold the backend's descriptors each");
    h->nofile = 9 + 1024 + 3;
    struct crl_sandbox *d = create_ready(h, 64, 1);
    ok(d != NULL, "a sandbox is admitted while corrald's descriptors allow it");
    ok(!create(h, spec_of(64, 1), NULL, &e) && e.code == CRL_E_CAPACITY, "not beyond");
    like(e.msg,
         "^host is full: corrald may open 1036 files \\(RLIMIT_NOFILE\\) and its 4 sandboxes "
         "hold 12 of them",
         "naming the limit");

    json_t *info = crl_host_info_json(h);
    json_t *cap = json_object_get(info, "capacity");
    is_str(json_string_value(json_object_get(cap, "admission")), "measured",
           "the host says how it admits");
    is_int(json_integer_value(json_object_get(cap, "memory_available_mb")), 2999,
           "and the memory it sees, less what the newest sandbox is expected to take");
    is_int(json_integer_value(json_object_get(json_object_get(info, "used"), "files")), 12,
           "and the descriptors in use");
    json_decref(info);

    struct crl_sandbox *all[] = {a, b, c, d};
    for (size_t i = 0; i < 4; i++) {
        destroy_wait(h, all[i]);
        crl_sandbox_unref(all[i]);
    }
    is_int((long long)h->fds_held, 0, "destroyed sandboxes give their descriptors back");
    host_close(h);
    unlink(meminfo);
}

/* A handover (corrald exits leaving its sandboxes) and a start on the same
 * state: what its backend can adopt is adopted, with its id, labels and
 * TTL; what it cannot, or what fails the backend's check, is lost with a
 * reason, never a 404; the log then holds the adopted alone. */
static void with_adoptable(struct crl_host_config *c)
{
    static const struct crl_backend_ops *const backends[] = {&fake_backend, &fake_adoptable};
    c->backends = backends;
    c->n_backends = 2;
}

static void test_handover_and_adoption(void)
{
    struct crl_host *h = host_open(with_adoptable);
    struct crl_err e;
    struct crl_sandbox *sb[3];
    const char *backends[3] = {"container", "container", "fake"};
    for (int i = 0; i < 3; i++) {
        struct crl_spec s = spec_of(64, 0.1); /* a size the API takes: a record is parsed */
        snprintf(s.backend, sizeof(s.backend), "%s", backends[i]);
        s.ttl_s = 100;
        s.labels[0] = (struct crl_kv){.key = strdup("n"), .value = strdup(i ? "other" : "kept")};
        s.n_labels = 1;
        struct seen seen = {0};
        sb[i] = create(h, s, &seen, &e);
        if (!ok(sb[i] && RUN_UNTIL(seen.calls == 1, 2000), "sandbox %d ready", i)) {
            host_close(h);
            return;
        }
    }
    char ids[3][40];
    for (int i = 0; i < 3; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%s", sb[i]->id);
        crl_sandbox_unref(sb[i]);
    }
    double expires = sb[0]->expires_at;
    fake_adopted = fake_left = 0;
    h->handover = true;
    crl_host_close(h);
    is_int(fake_left, 2, "the handover leaves both adoptable sandboxes running");
    like(events, "destroy", "and destroys the one that is not");

    snprintf(fake_refuse, sizeof(fake_refuse), "%s", ids[1]);
    h = NULL;
    if (!ok(crl_host_open(&last_cfg, loop, &h, &e) == 0, "a corrald starts on the same state")) {
        diag("%s", e.msg);
        crl_loop_free(loop);
        crl_rm_rf_at(AT_FDCWD, tmp);
        return;
    }
    if (crl_records_lost(h, ids[0]))
        diag("lost: %s",
             json_string_value(json_object_get(crl_records_lost(h, ids[0]), "message")));
    is_int(fake_adopted, 1, "one adopted");
    is_int(h->counters.adopted, 1, "and counted");
    struct crl_sandbox *a = crl_host_find(h, ids[0], &e);
    ok(a && a->state == CRL_SB_READY, "it is ready under its id");
    ok(a && a->expires_at == expires && a->timeout_s == 100, "its ttl ends when it did before");
    ok(a && a->spec.n_labels == 1 && strcmp(a->spec.labels[0].value, "kept") == 0,
       "its labels are its own");
    json_t *lost = crl_records_lost(h, ids[1]);
    is_str(json_string_value(json_object_get(lost, "lost_reason")), "init_gone",
           "one that fails its backend's check is lost, saying why");
    like(json_string_value(json_object_get(lost, "message")), "PID 1 is gone", "in words");
    ok(!crl_records_lost(h, ids[2]) && !crl_host_find(h, ids[2], &e),
       "the destroyed one is gone, as at a shutdown");
    json_t *left = crl_records_read(h->records_dir);
    ok(json_object_size(left) == 1 && json_object_get(left, ids[0]),
       "the log holds the adopted one alone");
    json_decref(left);
    fake_refuse[0] = 0;
    host_close(h);
}

int main(void)
{
    crl_log_setup(CRL_LOG_ERROR, CRL_LOG_TEXT, "test_host");
    TAP_RUN(test_states, 20);
    TAP_RUN(test_handover_and_adoption, 20);
    TAP_RUN(test_admission, 20);
    TAP_RUN(test_admission_measured, 20);
    TAP_RUN(test_ttls, 30);
    TAP_RUN(test_create_fails_now, 20);
    TAP_RUN(test_create_fails_later, 20);
    TAP_RUN(test_destroy_while_creating, 20);
    TAP_RUN(test_failed, 20);
    TAP_RUN(test_destroy_order, 20);
    TAP_RUN(test_tombstones, 20);
    TAP_RUN(test_close, 20);
    return done_testing();
}

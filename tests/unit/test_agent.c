/* corral-agent (src/corral-agent) served over a socketpair: the binary run
 * with --serve-fd, no VM, driven by a host side over lib/agent's session
 * (host.c), as corrald will be: the handshake, execs (output, stdin, flow
 * control, signals, every end), files in and out, and what a broken host
 * gets.  The session checks every frame the agent sends. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/agent/host.h"
#include "../../lib/agent/msg.h"
#include "../../lib/agent/proto.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

static char agent_bin[PATH_MAX];

/* ---- a host ---- */

struct host {
    int fd;
    pid_t pid;
    struct crl_agent_host sess;
    struct crl_agent_frame f; /* the last frame, its payload copied */
    uint8_t *payload;
    char root[64];
};

static void host_start(struct host *h)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        bail_out("socketpair");
    snprintf(h->root, sizeof(h->root), "/tmp/test_agent.XXXXXX");
    if (!mkdtemp(h->root))
        bail_out("mkdtemp");
    h->pid = fork();
    if (h->pid == 0) {
        dup2(sv[1], 3);
        execl(agent_bin, agent_bin, "--serve-fd", "3", "--root", h->root, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    h->fd = sv[0];
    h->payload = malloc(CRL_AGENT_MAX_PAYLOAD + 1);
    struct crl_err e = CRL_ERR_INIT;
    if (h->pid < 0 || !h->payload || crl_agent_host_init(&h->sess, &e) < 0)
        bail_out("host_start");
}

/* The agent's exit status after the host closes its end. */
static int host_stop(struct host *h)
{
    close(h->fd);
    int st = -1;
    waitpid(h->pid, &st, 0);
    crl_agent_host_free(&h->sess);
    free(h->payload);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "%s", h->root);
    crl_rm_rf_at(AT_FDCWD, cmd);
    return st;
}

static void host_send(struct host *h, uint16_t type, uint32_t stream, const void *p, size_t len)
{
    static uint8_t buf[CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD];
    struct crl_err e = CRL_ERR_INIT;
    long n =
        crl_agent_encode(CRL_AGENT_SIDE_HOST, buf, sizeof(buf), type, stream, p, (uint32_t)len, &e);
    if (n < 0)
        bail_out(e.msg);
    if (crl_write_full(h->fd, buf, (size_t)n) < 0)
        diag("write to the agent: %s", strerror(errno));
}

/* The next frame within timeout_ms: 1, 0 on timeout or end of file, -1 on
 * a protocol error (diag'd). */
static int host_next(struct host *h, int timeout_ms)
{
    for (;;) {
        struct crl_err e = CRL_ERR_INIT;
        int r = crl_agent_host_next(&h->sess, &h->f, &e);
        if (r < 0)
            diag("host session: %s", e.msg);
        if (r == 1) {
            memcpy(h->payload, h->f.payload, h->f.len);
            h->payload[h->f.len] = 0;
            h->f.payload = h->payload;
        }
        if (r != 0)
            return r;
        struct pollfd p = {.fd = h->fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return 0;
        uint8_t buf[65536];
        ssize_t n = read(h->fd, buf, sizeof(buf));
        if (n <= 0)
            return 0;
        size_t off = 0;
        while (off < (size_t)n) {
            off += crl_agent_host_feed(&h->sess, buf + off, (size_t)n - off);
            if (off < (size_t)n)
                bail_out("the host's decoder filled up: frames are dropped");
        }
    }
}

static void host_json_(struct host *h, uint16_t type, uint32_t stream, int r, char *j, size_t n,
                       struct crl_err *e)
{
    if (r < 0)
        bail_out(e->msg);
    host_send(h, type, stream, j, n);
    free(j);
}
/* The builder runs first: the payload and its length are its outputs. */
#define host_json(h, type, stream, build, j, n, e)            \
    do {                                                      \
        int r_ = (build);                                     \
        host_json_((h), (type), (stream), r_, (j), (n), (e)); \
    } while (0)

/* HELLO, CONFIG, READY. */
static bool host_handshake(struct host *h)
{
    struct crl_agent_hello hello;
    struct crl_err e = CRL_ERR_INIT;
    if (host_next(h, 5000) != 1 || h->f.type != CRL_AGENT_HELLO ||
        crl_agent_parse_hello(h->f.payload, h->f.len, &hello, &e) < 0) {
        diag("no HELLO: %s", e.msg);
        return false;
    }
    struct crl_agent_config c = {.hostname = "sb-test", .realtime_ns = 1, .seed_len = 16};
    char *j;
    size_t n;
    crl_agent_host_config_sent(&h->sess);
    host_json(h, CRL_AGENT_CONFIG, 0, crl_agent_build_config(&c, &j, &n, &e), j, n, &e);
    struct crl_agent_ready ready;
    return host_next(h, 5000) == 1 && h->f.type == CRL_AGENT_READY &&
           crl_agent_parse_ready(h->f.payload, h->f.len, &ready, &e) == 0;
}

/* One exec as the host follows it. */
struct run {
    uint32_t id;
    struct crl_buf out, err;
    bool exited, errored;
    int pid; /* STARTED's */
    struct crl_agent_exit ex;
    char error[256];
    bool hold;         /* grant no CREDIT until told */
    uint32_t inflight; /* output received and not yet granted back */
    uint32_t max_inflight;
};

static void run_init(struct run *r, uint32_t id)
{
    memset(r, 0, sizeof(*r));
    r->id = id;
    crl_buf_init(&r->out, CRL_BUF_UNBOUNDED);
    crl_buf_init(&r->err, CRL_BUF_UNBOUNDED);
}

static void run_free(struct run *r)
{
    crl_buf_free(&r->out);
    crl_buf_free(&r->err);
}

/* An exec on a new stream, or on `reuse` if not 0 (a host that breaks the
 * protocol). */
static void host_exec(struct host *h, struct run *r, uint32_t reuse, bool with_stdin, char **argv)
{
    uint32_t id = reuse;
    struct crl_err oe = CRL_ERR_INIT;
    if (!id && crl_agent_host_open(&h->sess, CRL_AGENT_STREAM_EXEC, &id, &oe) < 0)
        bail_out(oe.msg);
    run_init(r, id);
    char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    /* as whoever runs the tests: root or not, the agent keeps them */
    struct crl_agent_exec m = {.argv = argv,
                               .env = env,
                               .envc = 1,
                               .cwd = "/",
                               .uid = getuid(),
                               .gid = getgid(),
                               .stdin_open = with_stdin};
    while (argv[m.argc])
        m.argc++;
    struct crl_err e = CRL_ERR_INIT;
    char *j;
    size_t n;
    host_json(h, CRL_AGENT_EXEC, id, crl_agent_build_exec(&m, &j, &n, &e), j, n, &e);
}

static void grant(struct host *h, struct run *r)
{
    struct crl_agent_host_stream *s = crl_agent_host_stream(&h->sess, r->id);
    if (!r->inflight || !s)
        return; /* nothing to grant, or the stream has ended */
    struct crl_err e = CRL_ERR_INIT;
    if (crl_agent_window_grant(&s->win, r->inflight, &e) < 0)
        bail_out(e.msg);
    uint8_t f[CRL_AGENT_CREDIT_FRAME_SIZE];
    crl_agent_encode_credit(f, r->id, r->inflight);
    crl_write_full(h->fd, f, sizeof(f));
    r->inflight = 0;
}

/* Route the frame just read to its run; false if it fits none or breaks
 * the protocol. */
static bool route(struct host *h, struct run *runs, size_t n)
{
    struct crl_err e = CRL_ERR_INIT;
    for (size_t i = 0; i < n; i++) {
        struct run *r = &runs[i];
        if (r->id != h->f.stream)
            continue;
        switch (h->f.type) {
        case CRL_AGENT_STARTED: {
            struct crl_agent_started st;
            if (r->pid || crl_agent_parse_started(h->f.payload, h->f.len, &st, &e) < 0) {
                diag("stream %u: STARTED: %s", r->id, r->pid ? "twice" : e.msg);
                return false;
            }
            r->pid = st.pid;
            return true;
        }
        case CRL_AGENT_STDOUT:
        case CRL_AGENT_STDERR:
            if (!r->pid) {
                diag("stream %u: output before STARTED", r->id);
                return false;
            }
            crl_buf_append(h->f.type == CRL_AGENT_STDOUT ? &r->out : &r->err, h->f.payload,
                           h->f.len);
            r->inflight += h->f.len;
            if (r->inflight > r->max_inflight)
                r->max_inflight = r->inflight;
            if (!r->hold)
                grant(h, r);
            return true;
        case CRL_AGENT_EXIT:
            r->exited = crl_agent_parse_exit(h->f.payload, h->f.len, &r->ex, &e) == 0;
            if (!r->exited)
                diag("EXIT: %s", e.msg);
            return r->exited;
        case CRL_AGENT_ERROR:
            r->errored = true;
            snprintf(r->error, sizeof(r->error), "%s", (const char *)h->f.payload);
            return true;
        case CRL_AGENT_CREDIT: return true; /* the session opened the window */
        default: diag("stream %u: unexpected type %u", r->id, h->f.type); return false;
        }
    }
    diag("a frame of type %u on stream %u, which is not open", h->f.type, h->f.stream);
    return false;
}

static bool all_done(struct run *runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!runs[i].exited && !runs[i].errored)
            return false;
    return true;
}

/* Follow runs until each has ended, or timeout_ms without a frame. */
static bool host_wait(struct host *h, struct run *runs, size_t n, int timeout_ms)
{
    while (!all_done(runs, n)) {
        if (host_next(h, timeout_ms) != 1 || !route(h, runs, n))
            return false;
    }
    return true;
}

static void send_stdin(struct host *h, struct run *r, const void *p, size_t len)
{
    const uint8_t *b = p;
    struct crl_err e = CRL_ERR_INIT;
    struct crl_agent_host_stream *s = crl_agent_host_stream(&h->sess, r->id);
    while (len > 0) {
        while (s->win.send == 0) {
            if (host_next(h, 5000) != 1 || !route(h, r, 1))
                bail_out("no CREDIT for STDIN");
        }
        uint32_t k = len < s->win.send ? (uint32_t)len : s->win.send;
        if (k > 65536)
            k = 65536;
        if (crl_agent_window_sending(&s->win, k, &e) < 0)
            bail_out(e.msg);
        host_send(h, CRL_AGENT_STDIN, r->id, b, k);
        b += k;
        len -= k;
    }
}

static bool exited_with(const struct run *r, int code)
{
    return r->exited && r->ex.reason == CRL_AGENT_EXITED && r->ex.code == code;
}

/* ---- cases ---- */

static void t_echo(void)
{
    struct host h;
    host_start(&h);
    ok(host_handshake(&h), "HELLO, CONFIG, READY");
    struct run r;
    host_exec(&h, &r, 0, false, (char *[]){"echo", "hi", NULL});
    ok(host_wait(&h, &r, 1, 5000), "echo hi ends");
    ok(r.pid > 1, "STARTED came first, with its pid (%d)", r.pid);
    is_str(r.out.data ? r.out.data : "", "hi\n", "STDOUT is hi");
    ok(exited_with(&r, 0), "EXIT exited 0");
    ok(r.ex.maxrss_kb > 0, "usage: max RSS %lld kB", (long long)r.ex.maxrss_kb);
    run_free(&r);
    host_exec(&h, &r, 0, false, (char *[]){"sh", "-c", "echo out; echo err >&2; exit 3", NULL});
    ok(host_wait(&h, &r, 1, 5000) && exited_with(&r, 3), "exit 3 is reported");
    is_str(r.err.data ? r.err.data : "", "err\n", "STDERR apart from STDOUT");
    run_free(&r);
    host_exec(&h, &r, 0, false, (char *[]){"/nonexistent/command", NULL});
    ok(host_wait(&h, &r, 1, 5000) && r.ex.reason == CRL_AGENT_START_FAILED &&
           r.ex.error_no == ENOENT && r.pid == 0,
       "a missing command: start_failed with ENOENT, never STARTED");
    run_free(&r);
    uint8_t ping[CRL_AGENT_PING_FRAME_SIZE];
    crl_agent_encode_ping(ping, CRL_AGENT_PING, 0x1122334455667788ull);
    crl_write_full(h.fd, ping, sizeof(ping));
    ok(host_next(&h, 5000) == 1 && h.f.type == CRL_AGENT_PONG &&
           crl_agent_frame_u64(&h.f) == 0x1122334455667788ull,
       "PING: PONG with its token");
    host_send(&h, CRL_AGENT_BYE, 0, NULL, 0);
    ok(host_next(&h, 5000) == 1 && h.f.type == CRL_AGENT_BYE, "BYE: BYE back");
    int st = host_stop(&h);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "and the agent exits 0");
}

static void t_stdin(void)
{
    struct host h;
    host_start(&h);
    host_handshake(&h);
    struct run r;
    host_exec(&h, &r, 0, true, (char *[]){"cat", NULL});
    send_stdin(&h, &r, "hello\n", 6);
    host_send(&h, CRL_AGENT_STDIN, r.id, NULL, 0);
    ok(host_wait(&h, &r, 1, 5000) && exited_with(&r, 0), "cat ends at STDIN's end");
    is_str(r.out.data ? r.out.data : "", "hello\n", "and echoes it");
    run_free(&r);
    /* 2 MiB through cat: both directions' windows turn over. */
    size_t big = 2u << 20;
    uint8_t *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)(i * 7 + (i >> 13));
    host_exec(&h, &r, 0, true, (char *[]){"cat", NULL});
    send_stdin(&h, &r, data, big);
    host_send(&h, CRL_AGENT_STDIN, r.id, NULL, 0);
    ok(host_wait(&h, &r, 1, 10000) && exited_with(&r, 0), "2 MiB through cat");
    ok(r.out.len == big && memcmp(r.out.data, data, big) == 0, "come back whole (%zu bytes)",
       r.out.len);
    run_free(&r);
    free(data);
    /* STDIN to an exec that did not ask for it: ERROR on that stream. */
    host_exec(&h, &r, 0, false, (char *[]){"sleep", "100", NULL});
    host_send(&h, CRL_AGENT_STDIN, r.id, "x", 1);
    ok(host_wait(&h, &r, 1, 5000) && r.errored, "STDIN without stdin: ERROR on the stream");
    like(r.error, "did not ask for stdin", "  saying why");
    run_free(&r);
    host_stop(&h);
}

static void t_flow(void)
{
    struct host h;
    host_start(&h);
    host_handshake(&h);
    struct run r;
    host_exec(&h, &r, 0, false, (char *[]){"head", "-c", "10485760", "/dev/zero", NULL});
    r.hold = true;
    while (r.inflight < CRL_AGENT_INITIAL_WINDOW) {
        if (host_next(&h, 5000) != 1 || !route(&h, &r, 1))
            break;
    }
    is_int(r.inflight, CRL_AGENT_INITIAL_WINDOW, "the first window arrives");
    ok(host_next(&h, 300) == 0, "then nothing while no CREDIT is granted");
    r.hold = false;
    grant(&h, &r);
    ok(host_wait(&h, &r, 1, 10000) && exited_with(&r, 0), "10 MiB: exit 0");
    is_int(r.out.len, 10u << 20, "and every byte");
    ok(r.max_inflight <= CRL_AGENT_INITIAL_WINDOW, "never more than the window in flight (%u)",
       r.max_inflight);
    run_free(&r);
    host_stop(&h);
}

static void t_signals(void)
{
    struct host h;
    host_start(&h);
    host_handshake(&h);
    struct run r;
    host_exec(&h, &r, 0, false, (char *[]){"sleep", "100", NULL});
    usleep(100000);
    char *j;
    size_t n;
    struct crl_err e = CRL_ERR_INIT;
    struct crl_agent_signal s = {.signal = SIGTERM};
    host_json(&h, CRL_AGENT_SIGNAL, r.id, crl_agent_build_signal(&s, &j, &n, &e), j, n, &e);
    ok(host_wait(&h, &r, 1, 5000) && r.ex.reason == CRL_AGENT_SIGNALED && r.ex.signal == SIGTERM,
       "SIGNAL 15 ends sleep 100, reported signaled 15");
    run_free(&r);
    host_exec(&h, &r, 0, false, (char *[]){"sh", "-c", "kill -SEGV $$", NULL});
    ok(host_wait(&h, &r, 1, 5000) && r.ex.reason == CRL_AGENT_SIGNALED && r.ex.signal == SIGSEGV,
       "a process killed by a signal: signaled 11");
    run_free(&r);
    /* The group: a shell's background child dies with it. */
    host_exec(&h, &r, 0, false, (char *[]){"sh", "-c", "sleep 100 & wait", NULL});
    usleep(200000);
    s.signal = SIGKILL;
    host_json(&h, CRL_AGENT_SIGNAL, r.id, crl_agent_build_signal(&s, &j, &n, &e), j, n, &e);
    ok(host_wait(&h, &r, 1, 5000) && r.ex.signal == SIGKILL,
       "SIGNAL reaches the process group: the EXIT comes (no child holds the pipes)");
    run_free(&r);
    host_stop(&h);
}

/* A transfer's frames until its RESULT: the DATA's bytes into got. */
static bool transfer_result(struct host *h, uint32_t id, struct crl_buf *got,
                            struct crl_agent_result *res)
{
    struct crl_err e = CRL_ERR_INIT;
    for (;;) {
        if (host_next(h, 5000) != 1 || h->f.stream != id) {
            diag("no RESULT on stream %u", id);
            return false;
        }
        if (h->f.type == CRL_AGENT_DATA && h->f.len > 0) {
            crl_buf_append(got, h->f.payload, h->f.len);
            uint8_t f[CRL_AGENT_CREDIT_FRAME_SIZE];
            crl_agent_window_grant(&crl_agent_host_stream(&h->sess, id)->win, h->f.len, &e);
            crl_agent_encode_credit(f, id, h->f.len);
            crl_write_full(h->fd, f, sizeof(f));
        } else if (h->f.type == CRL_AGENT_RESULT) {
            return crl_agent_parse_result(h->f.payload, h->f.len, res, &e) == 0;
        } else if (h->f.type != CRL_AGENT_DATA && h->f.type != CRL_AGENT_CREDIT) {
            diag("type %u in a transfer", h->f.type);
            return false;
        }
    }
}

/* A FILE_GET or FILE_PUT on a new stream: its id. */
static uint32_t file_req(struct host *h, uint16_t type, const char *path, int mode)
{
    uint32_t id;
    struct crl_err oe = CRL_ERR_INIT;
    if (crl_agent_host_open(
            &h->sess, type == CRL_AGENT_FILE_GET ? CRL_AGENT_STREAM_GET : CRL_AGENT_STREAM_PUT, &id,
            &oe) < 0)
        bail_out(oe.msg);
    struct crl_agent_file m = {.mode = mode};
    snprintf(m.path, sizeof(m.path), "%s", path);
    struct crl_err e = CRL_ERR_INIT;
    char *j;
    size_t n;
    host_json(h, type, id, crl_agent_build_file(type, &m, &j, &n, &e), j, n, &e);
    return id;
}

static void t_files(void)
{
    struct host h;
    host_start(&h);
    host_handshake(&h);
    size_t size = 3u << 20;
    uint8_t *data = malloc(size);
    for (size_t i = 0; i < size; i++)
        data[i] = (uint8_t)(i * 131 + (i >> 9));
    uint32_t id20 = file_req(&h, CRL_AGENT_FILE_PUT, "/data.bin", 0640);
    /* DATA within the agent's window, as its CREDITs open it. */
    struct crl_agent_window *w = &crl_agent_host_stream(&h.sess, id20)->win;
    struct crl_err e = CRL_ERR_INIT;
    for (size_t off = 0; off < size;) {
        while (w->send == 0)
            if (host_next(&h, 5000) != 1 || h.f.type != CRL_AGENT_CREDIT)
                bail_out("no CREDIT for DATA");
        uint32_t k = w->send < 65536 ? w->send : 65536;
        if (k > size - off)
            k = (uint32_t)(size - off);
        crl_agent_window_sending(w, k, &e);
        host_send(&h, CRL_AGENT_DATA, id20, data + off, k);
        off += k;
    }
    host_send(&h, CRL_AGENT_DATA, id20, NULL, 0);
    struct crl_agent_result res;
    struct crl_buf got;
    crl_buf_init(&got, CRL_BUF_UNBOUNDED);
    ok(transfer_result(&h, id20, &got, &res) && res.ok, "FILE_PUT of 3 MiB: RESULT ok");
    char path[128];
    snprintf(path, sizeof(path), "%s/data.bin", h.root);
    struct stat st;
    ok(stat(path, &st) == 0 && (st.st_mode & 07777) == 0640, "the file is there, mode 0640");
    uint32_t id21 = file_req(&h, CRL_AGENT_FILE_GET, "/data.bin", 0);
    ok(transfer_result(&h, id21, &got, &res) && res.ok, "FILE_GET: RESULT ok");
    ok(got.len == size && memcmp(got.data, data, size) == 0, "the same bytes come back (%zu)",
       got.len);
    crl_buf_consume(&got, got.len);
    uint32_t id22 = file_req(&h, CRL_AGENT_FILE_GET, "/missing", 0);
    ok(transfer_result(&h, id22, &got, &res) && !res.ok && res.error_no == ENOENT,
       "a missing file: RESULT with ENOENT");
    uint32_t id23 = file_req(&h, CRL_AGENT_FILE_GET, "/a/../data.bin", 0);
    ok(transfer_result(&h, id23, &got, &res) && !res.ok && res.error_no == EINVAL,
       "a path with '..': refused");
    like(res.error, "\\.\\.", "  saying why: %s", res.error);
    /* A symlink planted to lead out resolves inside the root. */
    snprintf(path, sizeof(path), "%s/escape", h.root);
    if (symlink("/etc/hostname", path) < 0)
        bail_out("symlink");
    uint32_t id24 = file_req(&h, CRL_AGENT_FILE_GET, "/escape", 0);
    ok(transfer_result(&h, id24, &got, &res) && !res.ok && res.error_no == ENOENT,
       "a symlink to /etc/hostname resolves inside the root: ENOENT");
    uint32_t id25 = file_req(&h, CRL_AGENT_FILE_GET, "/", 0);
    ok(transfer_result(&h, id25, &got, &res) && !res.ok, "a directory without tar: refused");
    crl_buf_free(&got);
    free(data);
    host_stop(&h);
}

static void t_malformed(void)
{
    struct host h;
    host_start(&h);
    host_handshake(&h);
    const char *bad = "{\"argv\": 5}";
    uint32_t id;
    struct crl_err e = CRL_ERR_INIT;
    crl_agent_host_open(&h.sess, CRL_AGENT_STREAM_EXEC, &id, &e);
    host_send(&h, CRL_AGENT_EXEC, id, bad, strlen(bad));
    ok(host_next(&h, 5000) == 1 && h.f.type == CRL_AGENT_ERROR && h.f.stream == id,
       "an EXEC that does not parse: ERROR on its stream");
    like((const char *)h.f.payload, "argv", "  naming the field: %s", (const char *)h.f.payload);
    struct run r;
    host_exec(&h, &r, 0, false, (char *[]){"true", NULL});
    ok(host_wait(&h, &r, 1, 5000) && exited_with(&r, 0), "and the agent keeps serving");
    run_free(&r);
    host_exec(&h, &r, 0, false, (char *[]){"sleep", "100", NULL});
    host_exec(&h, &r, r.id, false, (char *[]){"true", NULL});
    ok(host_wait(&h, &r, 1, 5000) && r.errored, "an EXEC on an open stream: ERROR on it");
    run_free(&r);
    /* A header the decoder refuses: no resynchronising after that. */
    uint8_t f[CRL_AGENT_HEADER_SIZE];
    crl_agent_put_header(f, CRL_AGENT_PING, 0, 8);
    f[6] = 1; /* flags */
    crl_write_full(h.fd, f, sizeof(f));
    ok(host_next(&h, 5000) == 1 && h.f.type == CRL_AGENT_ERROR && h.f.stream == 0,
       "a frame with flags set: ERROR on stream 0");
    like((const char *)h.f.payload, "flags", "  naming it: %s", (const char *)h.f.payload);
    ok(host_next(&h, 5000) == 0, "then the agent hangs up");
    int st = host_stop(&h);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 1, "exiting 1");
}

static void t_before_config(void)
{
    struct host h;
    host_start(&h);
    ok(host_next(&h, 5000) == 1 && h.f.type == CRL_AGENT_HELLO, "HELLO first");
    struct run r;
    host_exec(&h, &r, 0, false, (char *[]){"true", NULL});
    ok(host_wait(&h, &r, 1, 5000) && r.errored, "an EXEC before CONFIG: ERROR");
    like(r.error, "CONFIG", "  saying so");
    run_free(&r);
    host_stop(&h);
}

static void t_many(void)
{
    enum { N = 64 };
    struct host h;
    host_start(&h);
    host_handshake(&h);
    static struct run runs[N];
    for (int i = 0; i < N; i++) {
        char arg[16];
        snprintf(arg, sizeof(arg), "%d", i);
        host_exec(
            &h, &runs[i], 0, false,
            (char *[]){"sh", "-c", "sleep 0.2; head -c 100000 /dev/zero; echo \"$0\"", arg, NULL});
    }
    ok(host_wait(&h, runs, N, 10000), "%d concurrent execs end", N);
    int good = 0;
    for (int i = 0; i < N; i++) {
        char want[16];
        int k = snprintf(want, sizeof(want), "%d\n", i);
        if (exited_with(&runs[i], 0) && runs[i].out.len == 100000u + (size_t)k &&
            memcmp(runs[i].out.data + 100000, want, (size_t)k) == 0)
            good++;
        run_free(&runs[i]);
    }
    is_int(good, N, "each with its own output and exit 0");
    host_stop(&h);
}

/* ---- the host's session alone: a guest that breaks its rules ---- */

/* Feed one frame the guest sends to a session; the session's verdict. */
static int sess_frame(struct crl_agent_host *h, uint16_t type, uint32_t stream, const char *p,
                      size_t len, struct crl_err *e)
{
    static uint8_t buf[CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD];
    struct crl_err ee = CRL_ERR_INIT;
    long n = crl_agent_encode(CRL_AGENT_SIDE_GUEST, buf, sizeof(buf), type, stream, p,
                              (uint32_t)len, &ee);
    if (n < 0)
        bail_out(ee.msg);
    crl_agent_host_feed(h, buf, (size_t)n);
    struct crl_agent_frame f;
    return crl_agent_host_next(h, &f, e);
}

#define HELLO "{\"proto\":2,\"agent\":\"a\",\"kernel\":\"k\"}"

static void sess_new(struct crl_agent_host *h, bool hello)
{
    struct crl_err e = CRL_ERR_INIT;
    if (crl_agent_host_init(h, &e) < 0 ||
        (hello && sess_frame(h, CRL_AGENT_HELLO, 0, HELLO, strlen(HELLO), &e) != 1))
        bail_out(e.msg);
}

/* A fresh session (after HELLO, with one stream of `kind` open as 1) that
 * must refuse this frame, saying re. */
static void sess_refuses(enum crl_agent_stream_kind kind, uint16_t type, uint32_t stream,
                         const char *p, size_t len, const char *re, const char *what)
{
    struct crl_agent_host h;
    sess_new(&h, true);
    uint32_t id;
    struct crl_err e = CRL_ERR_INIT;
    crl_agent_host_open(&h, kind, &id, &e);
    ok(sess_frame(&h, type, stream, p, len, &e) == -1, "refused: %s", what);
    like(e.msg, re, "  saying: %s", e.msg);
    crl_agent_host_free(&h);
}

static void t_session(void)
{
    struct crl_agent_host h;
    struct crl_err e = CRL_ERR_INIT;
    sess_new(&h, false);
    ok(sess_frame(&h, CRL_AGENT_READY, 0, "{\"uptime_ms\":1}", 15, &e) == -1,
       "anything before HELLO is refused");
    like(e.msg, "before HELLO", "  saying so");
    struct crl_agent_frame f;
    ok(crl_agent_host_next(&h, &f, &e) == -1, "and the session stays failed");
    crl_agent_host_free(&h);

    sess_new(&h, true);
    is_str(h.hello.kernel, "k", "HELLO is parsed and kept");
    ok(sess_frame(&h, CRL_AGENT_READY, 0, "{\"uptime_ms\":1}", 15, &e) == -1,
       "READY without a CONFIG is refused");
    crl_agent_host_free(&h);
    sess_new(&h, true);
    crl_agent_host_config_sent(&h);
    ok(sess_frame(&h, CRL_AGENT_READY, 0, "{\"uptime_ms\":1}", 15, &e) == 1,
       "READY after a CONFIG is taken");
    ok(sess_frame(&h, CRL_AGENT_READY, 0, "{\"uptime_ms\":1}", 15, &e) == -1,
       "a second READY for one CONFIG is refused");
    crl_agent_host_free(&h);

    sess_refuses(CRL_AGENT_STREAM_EXEC, CRL_AGENT_HELLO, 0, HELLO, strlen(HELLO), "second HELLO",
                 "a second HELLO");
    sess_refuses(CRL_AGENT_STREAM_EXEC, CRL_AGENT_STDOUT, 2, "x", 1, "never opened",
                 "STDOUT on a stream the host never opened");
    sess_refuses(CRL_AGENT_STREAM_GET, CRL_AGENT_STDOUT, 1, "x", 1, "FILE_GET's stream",
                 "STDOUT on a FILE_GET's stream");
    sess_refuses(CRL_AGENT_STREAM_EXEC, CRL_AGENT_DATA, 1, "x", 1, "exec's stream",
                 "DATA on an exec's stream");
    sess_refuses(CRL_AGENT_STREAM_EXEC, CRL_AGENT_RESULT, 1, "{\"ok\":true}", 11, "exec's stream",
                 "RESULT on an exec's stream");

    /* A takeover: no HELLO awaited, one allowed (before or after READY). */
    struct crl_agent_hello known = {
        .proto = CRL_AGENT_PROTO_VERSION, .agent = "a", .kernel = "old"};
    crl_agent_host_init(&h, &e);
    crl_agent_host_takeover(&h, &known);
    crl_agent_host_config_sent(&h);
    ok(sess_frame(&h, CRL_AGENT_READY, 0, "{\"uptime_ms\":1}", 15, &e) == 1,
       "a takeover: READY without a HELLO");
    ok(sess_frame(&h, CRL_AGENT_HELLO, 0, HELLO, strlen(HELLO), &e) == 1 &&
           strcmp(h.hello.kernel, "k") == 0,
       "  then a HELLO is taken and kept");
    ok(sess_frame(&h, CRL_AGENT_HELLO, 0, HELLO, strlen(HELLO), &e) == -1,
       "  but not a second one");
    crl_agent_host_free(&h);

    /* Past the window: 256 KiB and one byte of STDOUT without a CREDIT. */
    sess_new(&h, true);
    uint32_t id;
    crl_agent_host_open(&h, CRL_AGENT_STREAM_EXEC, &id, &e);
    static char big[CRL_AGENT_INITIAL_WINDOW];
    ok(sess_frame(&h, CRL_AGENT_STDOUT, id, big, sizeof(big), &e) == 1,
       "a whole window of STDOUT is taken");
    ok(sess_frame(&h, CRL_AGENT_STDOUT, id, "x", 1, &e) == -1, "one byte more is refused");
    like(e.msg, "window", "  saying: %s", e.msg);
    crl_agent_host_free(&h);

    /* A stream ends with its EXIT; one the host closed drops what was in flight. */
    sess_new(&h, true);
    crl_agent_host_open(&h, CRL_AGENT_STREAM_EXEC, &id, &e);
    const char *ex = "{\"reason\":\"exited\",\"code\":0,\"usage\":{\"utime_us\":0,\"stime_us\":0,"
                     "\"maxrss_kb\":0}}";
    ok(sess_frame(&h, CRL_AGENT_EXIT, id, ex, strlen(ex), &e) == 1 &&
           !crl_agent_host_stream(&h, id),
       "EXIT closes the stream");
    uint32_t id2;
    crl_agent_host_open(&h, CRL_AGENT_STREAM_EXEC, &id2, &e);
    crl_agent_host_close(&h, id2);
    ok(sess_frame(&h, CRL_AGENT_STDOUT, id2, "late", 4, &e) == 0,
       "output for a stream the host closed is dropped, not an error");
    ok(sess_frame(&h, CRL_AGENT_STDOUT, id, "late", 4, &e) == 0, "and for one that ended");
    crl_agent_host_free(&h);

    /* A FILE_GET: DATA, its end, then only RESULT. */
    sess_new(&h, true);
    crl_agent_host_open(&h, CRL_AGENT_STREAM_GET, &id, &e);
    ok(sess_frame(&h, CRL_AGENT_DATA, id, "abc", 3, &e) == 1 &&
           sess_frame(&h, CRL_AGENT_DATA, id, NULL, 0, &e) == 1,
       "DATA and its end");
    ok(sess_frame(&h, CRL_AGENT_DATA, id, "more", 4, &e) == -1, "DATA after the end is refused");
    crl_agent_host_free(&h);
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", agent_bin, sizeof(agent_bin) - 32);
    if (n <= 0)
        skip_all("no /proc/self/exe");
    agent_bin[n] = 0;
    char *slash = strrchr(agent_bin, '/');
    snprintf(slash, sizeof(agent_bin) - (size_t)(slash - agent_bin), "/../corral-agent");
    if (access(agent_bin, X_OK) < 0)
        skip_all("corral-agent is not built (make)");
    TAP_RUN(t_session, 30);
    TAP_RUN(t_echo, 30);
    TAP_RUN(t_stdin, 30);
    TAP_RUN(t_flow, 30);
    TAP_RUN(t_signals, 30);
    TAP_RUN(t_files, 30);
    TAP_RUN(t_malformed, 30);
    TAP_RUN(t_before_config, 30);
    TAP_RUN(t_many, 60);
    return done_testing();
}

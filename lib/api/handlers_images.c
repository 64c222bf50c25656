/* The image endpoints: list, inspect, remove, tag, gc, import, and the
 * blobs another host pulls an image by; and the pulls of this host.
 *
 * An import streams the archive into corral-import, a process of its own:
 * it decompresses, hashes and checks gigabytes and runs mkfs.erofs, none of
 * which may hold up corrald's one thread, and a flaw in the archive reader
 * costs one import, not the daemon.  corrald only moves bytes: the body
 * into the importer's stdin through a nonblocking pipe (the request is
 * suspended while the pipe is full, as a file upload is), its stdout (one
 * JSON object) into the answer and its stderr into the log; it reaps it
 * through a pidfd watched on the loop.
 *
 * An import may outlive its request: a client that hangs up mid-upload
 * leaves an importer reading a truncated archive, which it refuses and
 * cleans up (SIGKILL if it has not exited 10 s later); one that hangs up
 * after the whole body was sent does not cancel the import.
 *
 * A pull (a create of an image this host lacks, in a cluster) is the same
 * process run with --pull: its stdin gets which hosts to ask, its answer
 * goes to every create that waits for that image; one pull per image at a
 * time, whoever asks. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/pool.h"
#include "../core/spec.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/run.h"
#include "handlers_images.h"
#include "request.h"

#define MAX_IMPORTS 2
#define MAX_PULLS 4
#define KILL_AFTER_NS (10ull * 1000000000ull)
#define OUT_MAX (1u << 20)   /* the importer's answer */
#define PIPE_SIZE (1u << 20) /* stdin: fewer wake-ups for a big archive */

struct crl_import {
    struct crl_api *api;
    struct crl_req *r; /* holds a pending count on it until reaped */
    pid_t pid;
    int pidfd, in_fd, out_fd, err_fd;
    struct crl_watch w_pid, w_out, w_err;
    struct crl_watch w_in; /* room in the pipe to stdin, for the request's body */
    struct crl_timer kill_timer;
    struct crl_buf out;
    char line[1024]; /* stderr, up to a newline */
    size_t line_len;
    bool exited, body_done;
    int status;
    /* a pull: of which image, and the creates that wait for it */
    char pull[CRL_IMAGE_NAME_MAX + 1];
    struct crl_pull_waiter *waiters;
    struct crl_import *next;
};

struct crl_pull_waiter {
    struct crl_req *r; /* holds a pending count on it */
    crl_pull_done_fn done;
    struct crl_pull_waiter *next;
};

static void close_watched(struct crl_import *im, struct crl_watch *w, int *fd)
{
    if (w->active)
        crl_watch_stop(im->api->host->loop, w);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* The end of the importer's stdin: at the end of the body, or cut short. */
static void close_stdin(struct crl_import *im)
{
    if (im->in_fd < 0)
        return;
    if (im->w_in.active)
        crl_watch_stop(im->api->host->loop, &im->w_in);
    close(im->in_fd);
    im->in_fd = -1;
}

static void import_free(struct crl_import *im)
{
    struct crl_loop *loop = im->api->host->loop;
    close_stdin(im);
    close_watched(im, &im->w_out, &im->out_fd);
    close_watched(im, &im->w_err, &im->err_fd);
    close_watched(im, &im->w_pid, &im->pidfd);
    crl_timer_stop(loop, &im->kill_timer);
    for (struct crl_import **pp = &im->api->imports; *pp; pp = &(*pp)->next)
        if (*pp == im) {
            *pp = im->next;
            break;
        }
    crl_buf_free(&im->out);
    struct crl_req *r = im->r;
    if (r) {
        r->state = NULL;
        crl_req_pending_done(r);
    }
    free(im);
}

/* ---- the importer's output ---- */

static void log_line(struct crl_import *im)
{
    im->line[im->line_len] = 0;
    crl_utf8_sanitize(im->line);
    if (im->line_len)
        crl_info(NULL, "corral-import[%d]: %s", (int)im->pid, im->line);
    im->line_len = 0;
}

/* Read what is there; false at the end of the stream. */
static bool drain_err(struct crl_import *im)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(im->err_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0) {
            log_line(im);
            return false;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n' || im->line_len == sizeof(im->line) - 1)
                log_line(im);
            if (buf[i] != '\n')
                im->line[im->line_len++] = buf[i];
        }
    }
}

static bool drain_out(struct crl_import *im)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(im->out_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        crl_buf_append(&im->out, buf, (size_t)n); /* past OUT_MAX: counted, dropped */
    }
}

static void on_err(struct crl_watch *w, uint32_t ev)
{
    struct crl_import *im = w->data;
    if (!drain_err(im))
        close_watched(im, &im->w_err, &im->err_fd);
}

static void on_out(struct crl_watch *w, uint32_t ev)
{
    struct crl_import *im = w->data;
    if (!drain_out(im))
        close_watched(im, &im->w_out, &im->out_fd);
}

/* ---- the answer ---- */

/* What the importer said: the image (0, *out), or why not. */
static int outcome(struct crl_import *im, json_t **out, struct crl_err *err)
{
    json_auto_t *j = NULL;
    if (im->out.len && !crl_buf_truncated(&im->out))
        j = json_loadb(im->out.data, im->out.len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    bool ok = WIFEXITED(im->status) && WEXITSTATUS(im->status) == 0;
    if (ok && json_is_object(j) && !e) {
        *out = steal_pointer(&j);
        return 0;
    }
    if (json_is_object(e) && json_is_string(json_object_get(e, "message"))) {
        const char *code = json_string_value(json_object_get(e, "code"));
        return crl_err_set(err, code ? crl_errc_from_name(code) : CRL_E_INTERNAL, "%s",
                           json_string_value(json_object_get(e, "message")));
    }
    if (WIFSIGNALED(im->status))
        return crl_err_set(err, CRL_E_INTERNAL, "the importer was killed by signal %d (%s)",
                           WTERMSIG(im->status), strsignal(WTERMSIG(im->status)));
    return crl_err_set(err, CRL_E_INTERNAL,
                       "the importer failed (exit status %d) without saying why",
                       WEXITSTATUS(im->status));
}

static void answer(struct crl_import *im)
{
    struct crl_req *r = im->r;
    struct crl_host *h = im->api->host;
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *j = NULL;
    if (outcome(im, &j, &err) == 0) {
        /* The daemon's own view of it (names, origin, sandboxes), by the
         * name it was given, else by its id. */
        const char *name = crl_req_query(r, "name");
        json_t *names = json_object_get(j, "names");
        if (!name)
            name = json_string_value(json_object_get(j, "name"));
        if (!name && json_array_size(names))
            name = json_string_value(json_array_get(names, 0));
        if (!name)
            name = json_string_value(json_object_get(j, "id"));
        json_t *img = name ? crl_image_inspect_json(h->images, name, &err) : NULL;
        crl_req_json(r, 201, img ? img : json_incref(j));
        return;
    }
    crl_req_error(r, &err);
}

/* A pull ended: every create that waited goes on (or fails with why). */
static void pull_answer(struct crl_import *im)
{
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *j = NULL;
    bool ok = outcome(im, &j, &err) == 0;
    if (ok)
        crl_info(NULL, "image %s pulled from another host", im->pull);
    else
        crl_warn(NULL, "pulling image %s: %s", im->pull, err.msg);
    while (im->waiters) {
        struct crl_pull_waiter *w = im->waiters;
        im->waiters = w->next;
        if (!w->r->gone && !w->r->client_gone)
            w->done(w->r, ok ? NULL : &err);
        crl_req_pending_done(w->r);
        free(w);
    }
}

/* The importer exited: collect its last words, answer if the body is all
 * in (else at its end), and reap.  An import that succeeded changed the
 * store behind the daemon's cached lookups. */
static void on_exit_(struct crl_watch *w, uint32_t ev)
{
    struct crl_import *im = w->data;
    siginfo_t si = {0};
    if (waitid((idtype_t)P_PIDFD, (id_t)im->pidfd, &si, WEXITED | WNOHANG) < 0) {
        crl_log_syscall(NULL, errno, "waitid(P_PIDFD, corral-import %d)", (int)im->pid);
        si.si_code = CLD_KILLED;
        si.si_status = SIGKILL;
    } else if (si.si_pid == 0) {
        return; /* not yet */
    }
    im->status = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0) : si.si_status & 0x7f;
    im->exited = true;
    close_watched(im, &im->w_pid, &im->pidfd);
    crl_timer_stop(im->api->host->loop, &im->kill_timer);
    if (!im->pull[0])
        im->api->n_imports--;
    /* What it wrote is in the pipes; anything that still holds them open
     * (a stray grandchild) is not waited for. */
    if (im->out_fd >= 0)
        drain_out(im);
    if (im->err_fd >= 0)
        drain_err(im);
    log_line(im);
    close_watched(im, &im->w_out, &im->out_fd);
    close_watched(im, &im->w_err, &im->err_fd);
    if (WIFEXITED(im->status) && WEXITSTATUS(im->status) == 0)
        crl_image_store_changed(im->api->host->images);
    else
        crl_info(NULL, "corral-import[%d] failed (status 0x%x)", (int)im->pid, im->status);
    if (im->pull[0]) {
        pull_answer(im);
        import_free(im);
        return;
    }
    struct crl_req *r = im->r;
    if (r && !r->gone && !r->client_gone && !im->body_done)
        return; /* answered at the end of the body */
    if (r && !r->gone && !r->client_gone)
        answer(im);
    import_free(im);
}

static void kill_overdue(struct crl_timer *t)
{
    struct crl_import *im = t->data;
    crl_warn(NULL, "corral-import[%d] still runs 10 s after its upload was cut short; killing it",
             (int)im->pid);
    if (syscall(SYS_pidfd_send_signal, im->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(NULL, errno, "pidfd_send_signal(corral-import %d, SIGKILL)", (int)im->pid);
}

/* ---- starting it ---- */

static int spawn_importer(struct crl_import *im, const char *name, const char *ref,
                          struct crl_err *err)
{
    struct crl_api *a = im->api;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "pipe2");
        goto fail;
    }
    fcntl(in[1], F_SETPIPE_SZ, (int)PIPE_SIZE); /* best effort */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
    /* Nothing of corrald's beyond these (its sockets are close-on-exec
     * already; this holds for any that are not). */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawnattr_t attr;
    crl_spawnattr_init_clean(&attr);
    const char *dir = crl_image_store_dir(a->host->images);
    const struct crl_import_limits *lim = &a->host->cfg.image_limits;
    char layer_max[32], total_max[32];
    char *argv[13] = {(char *)"corral-import", (char *)"--store", (char *)dir};
    size_t k = 3;
    if (im->pull[0]) {
        argv[k++] = (char *)"--pull";
        argv[k++] = im->pull;
    } else if (name) {
        argv[k++] = (char *)"--name";
        argv[k++] = (char *)name;
    }
    if (ref) {
        argv[k++] = (char *)"--ref";
        argv[k++] = (char *)ref;
    }
    if (lim->max_layer_bytes) {
        snprintf(layer_max, sizeof(layer_max), "%" PRIu64, lim->max_layer_bytes);
        argv[k++] = (char *)"--max-layer-bytes";
        argv[k++] = layer_max;
    }
    if (lim->max_total_bytes) {
        snprintf(total_max, sizeof(total_max), "%" PRIu64, lim->max_total_bytes);
        argv[k++] = (char *)"--max-total-bytes";
        argv[k++] = total_max;
    }
    /* A clean environment: PATH for mkfs.erofs and the decompressors. */
    char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    int rc = posix_spawn(&im->pid, a->importer_path, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        crl_err_sys(err, rc, "starting %s", a->importer_path);
        goto fail;
    }
    im->pidfd = (int)syscall(SYS_pidfd_open, im->pid, 0);
    if (im->pidfd < 0) {
        crl_err_sys(err, errno, "pidfd_open(corral-import %d)", (int)im->pid);
        kill(im->pid, SIGKILL);
        waitpid(im->pid, NULL, 0);
        goto fail;
    }
    close(in[0]);
    close(out[1]);
    close(errp[1]);
    im->in_fd = in[1];
    im->out_fd = out[0];
    im->err_fd = errp[0];
    crl_set_nonblock(im->in_fd, 1);
    crl_set_nonblock(im->out_fd, 1);
    crl_set_nonblock(im->err_fd, 1);
    struct crl_loop *loop = a->host->loop;
    if (crl_watch_start(loop, &im->w_pid, im->pidfd, EPOLLIN, on_exit_, im) < 0 ||
        crl_watch_start(loop, &im->w_out, im->out_fd, EPOLLIN, on_out, im) < 0 ||
        crl_watch_start(loop, &im->w_err, im->err_fd, EPOLLIN, on_err, im) < 0) {
        syscall(SYS_pidfd_send_signal, im->pidfd, SIGKILL, NULL, 0);
        waitpid(im->pid, NULL, 0);
        close_watched(im, &im->w_pid, &im->pidfd);
        close_watched(im, &im->w_out, &im->out_fd);
        close_watched(im, &im->w_err, &im->err_fd);
        close(steal_fd(&im->in_fd));
        return crl_err_set(err, CRL_E_INTERNAL, "watching corral-import");
    }
    crl_debug(NULL, "corral-import[%d] started for %s", (int)im->pid,
              name ? name : "(its own tag)");
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    return -1;
}

static bool media_ok(const char *ct)
{
    if (!ct)
        return true;
    static const char *const ok[] = {"application/x-tar", "application/octet-stream"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(ok); i++) {
        size_t n = strlen(ok[i]);
        if (strncasecmp(ct, ok[i], n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' '))
            return true;
    }
    return false;
}

bool crl_h_images_import_begin(struct crl_req *r)
{
    struct crl_api *a = r->api;
    struct crl_err err = CRL_ERR_INIT;
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    const char *name = crl_req_query(r, "name");
    const char *ref = crl_req_query(r, "ref");
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (!media_ok(ct)) {
        crl_err_set(&err, CRL_E_MEDIA,
                    "an image is uploaded as application/x-tar or application/octet-stream, not %s",
                    ct);
    } else if (name && crl_store_name_canon(name, canon, &err) < 0) {
        crl_err_prefix(&err, "name");
    } else if (ref && crl_store_ref_check(ref, &err) < 0) {
        crl_err_prefix(&err, "ref");
    } else if (a->host->shutting_down) {
        crl_err_set(&err, CRL_E_UNAVAILABLE, "corrald is shutting down");
    } else if (a->n_imports >= MAX_IMPORTS) {
        crl_err_set(&err, CRL_E_CAPACITY, "%u imports are running already; retry later",
                    a->n_imports);
    } else if (access(a->importer_path, X_OK) < 0) {
        crl_err_set(&err, CRL_E_UNSUPPORTED, "importing needs %s: %s", a->importer_path,
                    strerror(errno));
    }
    if (err.code != CRL_OK) {
        crl_req_error(r, &err);
        return true;
    }
    struct crl_import *im = calloc(1, sizeof(*im));
    if (!im) {
        crl_err_sys(&err, ENOMEM, "import");
        crl_req_error(r, &err);
        return true;
    }
    im->api = a;
    im->pidfd = im->in_fd = im->out_fd = im->err_fd = -1;
    crl_buf_init(&im->out, OUT_MAX);
    if (spawn_importer(im, name ? canon : NULL, ref, &err) < 0) {
        crl_buf_free(&im->out);
        free(im);
        crl_req_error(r, &err);
        return true;
    }
    im->r = r;
    r->state = im;
    r->pending++;
    im->next = a->imports;
    a->imports = im;
    a->n_imports++;
    return true;
}

int crl_h_images_import_body(struct crl_req *r, const char *data, size_t *len)
{
    struct crl_import *im = r->state;
    if (!im || im->in_fd < 0) {
        *len = 0; /* the importer stopped reading: its answer comes at the end */
        return 0;
    }
    int rc = crl_req_pipe_body(r, im->in_fd, &im->w_in, NULL, data, len);
    if (rc < 0) {
        if (errno != EPIPE)
            crl_log_syscall(NULL, errno, "write(corral-import %d stdin)", (int)im->pid);
        close_stdin(im);
        *len = 0;
        return 0;
    }
    return rc > 0 ? -1 : 0;
}

void crl_h_images_import_end(struct crl_req *r)
{
    struct crl_import *im = r->state;
    if (!im)
        return; /* refused at the headers, answered already */
    im->body_done = true;
    close_stdin(im);
    if (im->exited) {
        answer(im);
        import_free(im);
    }
}

void crl_h_images_import_cancel(struct crl_req *r)
{
    struct crl_import *im = r->state;
    if (!im || im->exited)
        return;
    if (!im->body_done && im->in_fd >= 0) {
        close_stdin(im); /* a truncated archive: the importer refuses it and cleans up */
        crl_timer_start(im->api->host->loop, &im->kill_timer, KILL_AFTER_NS, kill_overdue, im);
    }
}

void crl_h_images_stop(struct crl_api *a)
{
    while (a->imports) {
        struct crl_import *im = a->imports;
        if (!im->exited) {
            syscall(SYS_pidfd_send_signal, im->pidfd, SIGKILL, NULL, 0);
            while (waitpid(im->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            if (!im->pull[0])
                a->n_imports--;
        }
        while (im->waiters) { /* shutting down: as an import's request, unanswered */
            struct crl_pull_waiter *w = im->waiters;
            im->waiters = w->next;
            crl_req_pending_done(w->r);
            free(w);
        }
        import_free(im);
    }
}

/* ---- pulls ---- */

int crl_h_images_pull(struct crl_req *r, const char *image, const char *hosts,
                      crl_pull_done_fn done, struct crl_err *err)
{
    struct crl_api *a = r->api;
    struct crl_import *im = NULL;
    unsigned n = 0;
    for (struct crl_import *p = a->imports; p; p = p->next)
        if (p->pull[0] && !p->exited) {
            n++;
            if (strcmp(p->pull, image) == 0)
                im = p; /* under way: wait for it too */
        }
    struct crl_pull_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return crl_err_sys(err, ENOMEM, "pull");
    if (!im) {
        if (n >= MAX_PULLS) {
            free(w);
            return crl_err_set(err, CRL_E_CAPACITY,
                               "image %s is not here, and %u pulls of others are under way; "
                               "retry later",
                               image, n);
        }
        if (!(im = calloc(1, sizeof(*im)))) {
            free(w);
            return crl_err_sys(err, ENOMEM, "pull");
        }
        im->api = a;
        im->pidfd = im->in_fd = im->out_fd = im->err_fd = -1;
        crl_buf_init(&im->out, OUT_MAX);
        snprintf(im->pull, sizeof(im->pull), "%s", image);
        if (spawn_importer(im, NULL, NULL, err) < 0) {
            crl_buf_free(&im->out);
            free(im);
            free(w);
            return -1;
        }
        /* A few hundred bytes: the pipe takes them at once.  Short, the
         * importer reads a cut request and says so. */
        if (crl_write_full(im->in_fd, hosts, strlen(hosts)) < 0)
            crl_log_syscall(NULL, errno, "write(corral-import %d stdin)", (int)im->pid);
        close_stdin(im);
        im->body_done = true;
        im->next = a->imports;
        a->imports = im;
        crl_info(NULL, "image %s is not here: pulling it from another host (corral-import[%d])",
                 image, (int)im->pid);
    }
    w->r = r;
    w->done = done;
    w->next = im->waiters;
    im->waiters = w;
    r->pending++;
    return 0;
}

/* ---- the others ---- */

/* A blob of the store to a host that pulls an image (crl_store_pull()). */
void crl_h_blob_get(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    char digest[CRL_DIGEST_LEN + 8];
    uint64_t size = 0;
    snprintf(digest, sizeof(digest), "sha256:%s", r->route.name);
    int fd = crl_digest_valid(digest)
                 ? crl_image_blob_open(r->api->host->images, digest, &size, &err)
                 : crl_err_set(&err, CRL_E_INVALID, "blobs are named sha256/<64 hex digits>");
    if (fd < 0) {
        crl_req_error(r, &err);
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_fd64(size, fd);
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    crl_req_respond(r, 200, resp);
}

void crl_h_images_list(struct crl_req *r)
{
    static const struct crl_list_spec list = {
        .items = "images", .order = "name", .key = "id", .no_labels = true};
    crl_req_list(r, crl_image_list_json(r->api->host->images), &list);
}

void crl_h_images_tag(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = NULL;
    if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "source") != 0 && strcmp(key, "target") != 0) {
            crl_err_set(&err, CRL_E_INVALID, "unknown field '%s' (source and target are)", key);
            crl_req_error(r, &err);
            return;
        }
    }
    const char *src = json_string_value(json_object_get(body, "source"));
    const char *dst = json_string_value(json_object_get(body, "target"));
    if (!src || !dst) {
        crl_err_set(&err, CRL_E_INVALID, "%s is required, as a string", src ? "target" : "source");
        crl_req_error(r, &err);
        return;
    }
    json_t *out = NULL;
    if (crl_image_tag(r->api->host->images, src, dst, &out, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 201, out);
}

void crl_h_images_gc(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    crl_req_json_or_error(r, 200, crl_image_gc(r->api->host->images, &err), &err);
}

void crl_h_image_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    crl_req_json_or_error(r, 200, crl_image_inspect_json(r->api->host->images, r->route.name, &err),
                          &err);
}

void crl_h_image_remove(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT, ignored = CRL_ERR_INIT;
    struct crl_host *h = r->api->host;
    /* A pool's ready sandboxes do not keep an image: they go with it. */
    struct crl_image *img = crl_image_get(h->images, r->route.name, &ignored);
    unsigned spare = img ? 1 + crl_pools_image_users(h, img) : 0;
    json_auto_t *was = crl_image_inspect_json(h->images, r->route.name, &ignored);
    int rc = crl_image_remove(h->images, r->route.name, spare, &err);
    if (rc == 0 && img)
        crl_pools_drain_image(h, img);
    crl_image_put(img);
    if (rc < 0) {
        crl_req_error(r, &err);
        return;
    }
    /* as every DELETE answers: what was removed, as it was */
    crl_req_json(r, 200, was ? json_incref(was) : json_pack("{s:s}", "name", r->route.name));
}

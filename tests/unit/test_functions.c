/* lib/functions/functions: definitions (good, malformed, each refusal naming its
 * field), the registry over a directory (lazy, reloaded on change, a broken
 * file listed beside working ones), a call's arguments, spec and exec
 * request, the Python runner (run here with the host's python3), and the
 * answer made from an exec's result. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/functions/functions.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

static char dir[] = "/tmp/corral-test-functions-XXXXXX";

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    /* Beside, then renamed: how an operator (or an editor) drops a file in. */
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || crl_write_full(fd, text, strlen(text)) < 0 || close(fd) < 0 ||
        rename(tmp, path) < 0)
        bail_out("writing a test file");
}

static json_t *def_of(const char *json)
{
    json_t *j = json_loads(json, 0, NULL);
    if (!j)
        bail_out("a test definition is not JSON");
    return j;
}

/* The definition `json` of `name` is refused with a message matching `re`. */
static void def_bad(const char *name, const char *json, const char *re)
{
    json_t *def = def_of(json);
    struct crl_err e = CRL_ERR_INIT;
    struct crl_function *fn = crl_function_parse(name, def, dir, &e);
    ok(fn && fn->error, "%s %.100s: refused", name, json);
    if (fn && fn->error)
        like(fn->error, re, "%s: the message matches /%s/", name, re);
    else
        fail("%s: no message", name);
    json_t *j = fn ? crl_function_json(fn, false) : NULL;
    ok(j && json_object_size(j) == 2 && json_is_string(json_object_get(j, "error")),
       "%s: listed as {name, error}", name);
    json_decref(j);
    crl_function_unref(fn);
    json_decref(def);
}

static struct crl_function *def_good(const char *name, const char *json)
{
    json_t *def = def_of(json);
    struct crl_err e = CRL_ERR_INIT;
    struct crl_function *fn = crl_function_parse(name, def, dir, &e);
    json_decref(def);
    if (!ok(fn && !fn->error, "%s %.100s: accepted", name, json))
        diag("refused: %s", fn && fn->error ? fn->error : e.msg);
    return fn;
}

static void test_definitions(void)
{
    put("add.py", "def add(a, b):\n    return a + b\n");
    struct crl_function *fn =
        def_good("add", "{\"name\": \"add\", \"runtime\": \"python\", \"entry\": \"add.py:add\","
                        " \"description\": \"adds\", \"limits\": {\"timeout_s\": 2, \"memory_mb\": "
                        "64, \"cpus\": 0.5, \"pids\": 16, \"max_output_bytes\": 1000},"
                        " \"schema\": {\"type\": \"object\"}}");
    if (fn && !fn->error) {
        is_int(fn->kind, CRL_FN_PYTHON, "add: a Python entry");
        is_str(fn->file, "add.py", "add: its file");
        is_str(fn->callable, "add", "add: its callable");
        ok(fn->source && strstr(fn->source, "return a + b"), "add: its source is read");
        ok(fn->limits.timeout_s == 2 && fn->limits.memory_mb == 64 && fn->limits.cpus == 0.5 &&
               fn->limits.pids == 16 && fn->limits.max_output == 1000,
           "add: its limits");
        json_t *j = crl_function_json(fn, false);
        is_str(json_string_value(json_object_get(j, "runtime")), "python", "add: listed runtime");
        is_str(json_string_value(json_object_get(j, "description")), "adds", "add: description");
        ok(json_is_object(json_object_get(j, "schema")), "add: its schema");
        ok(!json_object_get(j, "limits"), "add: the list leaves out the limits");
        json_decref(j);
        j = crl_function_json(fn, true);
        ok(json_is_object(json_object_get(j, "limits")) && json_object_get(j, "entry"),
           "add: GET shows its limits and entry");
        json_decref(j);
    }
    crl_function_unref(fn);

    fn = def_good("cat", "{\"entry\": {\"exec\": [\"/bin/cat\"]}}");
    if (fn && !fn->error) {
        is_str(fn->runtime, "shell", "cat: the runtime follows from an exec entry");
        ok(fn->limits.timeout_s == CRL_EXEC_DEFAULT_TIMEOUT_S &&
               fn->limits.max_output == CRL_EXEC_DEFAULT_OUTPUT,
           "cat: exec's default limits");
    }
    crl_function_unref(fn);

    def_bad("x", "[]", "must be a JSON object");
    def_bad("x", "{}", "^entry is required");
    def_bad("x", "{\"name\": \"y\", \"entry\": \"add.py:add\"}", "^name must be \"x\"");
    def_bad("Bad", "{\"entry\": \"add.py:add\"}", "a function's name is 1-64 of");
    def_bad("x", "{\"entry\": \"add.py:add\", \"colour\": 1}", "^unknown field 'colour'");
    def_bad("x", "{\"entry\": \"add.py\"}", "is not FILE.py:CALLABLE");
    def_bad("x", "{\"entry\": \"add.txt:add\"}", "is not FILE.py:CALLABLE");
    def_bad("x", "{\"entry\": \"../add.py:add\"}", "must be a file name in the functions");
    def_bad("x", "{\"entry\": \"sub/add.py:add\"}", "must be a file name in the functions");
    def_bad("x", "{\"entry\": \"add.py:2add\"}", "is not a Python identifier");
    def_bad("x", "{\"entry\": \"missing.py:f\"}", "missing.py: No such file");
    def_bad("x", "{\"entry\": {\"exec\": []}}", "^entry.exec must be a non-empty array");
    def_bad("x", "{\"entry\": {\"exec\": [1]}}", "^entry.exec\\[0\\] must be a string");
    def_bad("x", "{\"entry\": {\"exec\": [\"/bin/cat\"], \"x\": 1}}", "^entry must be");
    def_bad("x", "{\"entry\": 3}", "^entry must be");
    def_bad("x", "{\"entry\": \"add.py:add\", \"runtime\": \"shell\"}", "does not fit the entry");
    def_bad("x", "{\"entry\": \"add.py:add\", \"runtime\": \"ruby\"}", "^runtime must be");
    def_bad("x", "{\"entry\": \"add.py:add\", \"limits\": {\"timeout_s\": -1}}",
            "^limits.timeout_s must be between 0 and 86400");
    def_bad("x", "{\"entry\": \"add.py:add\", \"limits\": {\"memory_mb\": 1.5}}",
            "^limits.memory_mb must be an integer");
    def_bad("x", "{\"entry\": \"add.py:add\", \"limits\": {\"memory_mb\": 8}}",
            "^limits.memory_mb must be between 16");
    def_bad("x", "{\"entry\": \"add.py:add\", \"limits\": {\"disk_mb\": 8}}",
            "^unknown field 'limits.disk_mb'");
    def_bad("x", "{\"entry\": \"add.py:add\", \"schema\": {\"type\": \"integr\"}}", "^schema");
}

static void test_registry(void)
{
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/reg", dir);
    struct crl_functions *fs = crl_functions_new(sub);
    struct crl_err e = CRL_ERR_INIT;
    json_t *l = crl_functions_list_json(fs);
    is_int(json_array_size(json_object_get(l, "functions")), 0, "no directory: no functions");
    json_decref(l);
    ok(!crl_functions_get(fs, "echo", &e) && e.code == CRL_E_NOT_FOUND, "unknown: not found");
    like(e.msg, "no function 'echo' \\(known: none\\)", "the message says none are known");

    mkdir(sub, 0755);
    char path[256];
    snprintf(path, sizeof(path), "%s/echo.json", sub);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *echo = "{\"entry\": {\"exec\": [\"/bin/cat\"]}}";
    crl_write_full(fd, echo, strlen(echo));
    close(fd);
    snprintf(path, sizeof(path), "%s/broken.json", sub);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    crl_write_full(fd, "{oops", 5);
    close(fd);

    struct crl_function *fn = crl_functions_get(fs, "echo", &e);
    ok(fn && !fn->error, "a file added later is found");
    crl_function_unref(fn);
    l = crl_functions_list_json(fs);
    json_t *fns = json_object_get(l, "functions");
    is_int(json_array_size(fns), 2, "two definitions listed");
    is_str(json_string_value(json_object_get(json_array_get(fns, 0), "name")), "broken",
           "sorted: broken first");
    like(json_string_value(json_object_get(json_array_get(fns, 0), "error")), "not valid JSON",
         "broken is listed with its error");
    is_str(json_string_value(json_object_get(json_array_get(fns, 1), "runtime")), "shell",
           "echo is listed whole");
    json_decref(l);

    /* Written over in place: the directory does not change, the file does. */
    fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    crl_write_full(fd, echo, strlen(echo));
    close(fd);
    fn = crl_functions_get(fs, "broken", &e);
    ok(fn && !fn->error, "a definition fixed in place is reloaded");
    crl_function_unref(fn);
    unlink(path);
    fn = crl_functions_get(fs, "broken", &e);
    ok(!fn && e.code == CRL_E_NOT_FOUND, "a removed definition is gone");
    like(e.msg, "known: echo\\)", "the message names the known ones");
    crl_functions_free(fs);
}

static void test_args_spec_req(void)
{
    put("add.py", "def add(a, b):\n    return a + b\n");
    struct crl_function *fn = def_good(
        "add", "{\"entry\": \"add.py:add\", \"limits\": {\"timeout_s\": 3, \"memory_mb\": 64,"
               " \"max_output_bytes\": 100}, \"schema\": {\"type\": \"object\", \"properties\": "
               "{\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}}");
    if (!fn || fn->error)
        return;
    struct crl_err e = CRL_ERR_INIT;
    json_t *args = NULL;
    ok(crl_function_args(fn, "{\"a\": 1, \"b\": 2}", 16, &args, &e) == 0, "good arguments");
    json_decref(args);
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_function_args(fn, "{\"a\": \"1\"}", 10, &args, &e) < 0 && e.code == CRL_E_INVALID,
       "arguments against the schema: invalid");
    like(e.msg, "args\\.a", "the message names the path (%s)", e.msg);
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_function_args(fn, "{\"a\": ", 6, &args, &e) < 0 && e.code == CRL_E_JSON,
       "not JSON: invalid_json");
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_function_args(fn, "", 0, &args, &e) < 0 && e.code == CRL_E_INVALID,
       "no body is {}: here the schema wants a");

    struct crl_spec spec;
    e = (struct crl_err)CRL_ERR_INIT;
    if (ok(crl_function_spec(fn, &spec, &e) == 0, "the call's spec parses")) {
        is_str(spec.backend, "function", "spec: backend function");
        is_str(spec.runtime, "python", "spec: the runtime");
        is_int(spec.memory_mb, 64, "spec: memory_mb");
        ok(spec.n_labels == 1 && strcmp(spec.labels[0].key, CRL_FUNCTION_LABEL) == 0 &&
               strcmp(spec.labels[0].value, "add") == 0,
           "spec: labelled with the function");
        crl_spec_free(&spec);
    } else {
        diag("%s", e.msg);
    }

    struct crl_exec_req req;
    args = json_pack("{s:i}", "a", 1);
    e = (struct crl_err)CRL_ERR_INIT;
    if (ok(crl_function_exec_req(fn, args, &req, &e) == 0, "the exec request")) {
        ok(req.shell && req.argv && req.argv[2] && strstr(req.argv[2], "_corral_call"),
           "a Python entry runs the runner as source");
        is_str(req.stdin_data, "{\"a\":1}\n", "stdin: the arguments");
        ok(req.timeout_s == 3 && req.max_output == 101 && req.stream,
           "timeout, one byte over the output limit, streamed");
        crl_exec_req_free(&req);
    }
    json_decref(args);
    crl_function_unref(fn);
}

/* Run the runner of `file`:`callable` with python3, args on stdin. */
static int run_runner(const char *file, const char *callable, const char *args, struct crl_buf *out,
                      struct crl_buf *err)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    char *src = NULL;
    size_t len = 0;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_read_file_alloc(path, 1 << 20, &src, &len, &e) < 0)
        bail_out(e.msg);
    char *prog = crl_function_runner(file, callable, src, len);
    free(src);
    int in[2], o[2], er[2];
    if (!prog || pipe2(in, O_CLOEXEC) < 0 || pipe2(o, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0)
        bail_out("runner setup");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(o[1], 1);
        dup2(er[1], 2);
        /* from elsewhere than the functions dir: the source is in the program */
        if (chdir("/") < 0)
            _exit(126);
        execlp("python3", "python3", "-c", prog, (char *)NULL);
        _exit(127);
    }
    free(prog);
    close(in[0]);
    close(o[1]);
    close(er[1]);
    crl_write_full(in[1], args, strlen(args));
    close(in[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(o[0], buf, sizeof(buf))) > 0)
        crl_buf_append(out, buf, (size_t)n);
    while ((n = read(er[0], buf, sizeof(buf))) > 0)
        crl_buf_append(err, buf, (size_t)n);
    close(o[0]);
    close(er[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_runner(void)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        skip(12, "no python3 on this host");
        return;
    }
    put("tool.py", "import subprocess\n"
                   "def add(a, b):\n"
                   "    print('adding', a, b)\n"
                   "    subprocess.run(['echo', 'from a child'])\n"
                   "    return {'sum': a + b, 'module': __name__}\n"
                   "def one(x):\n"
                   "    return [x, x]\n"
                   "def boom():\n"
                   "    return 1 / 0\n"
                   "def nan():\n"
                   "    return float('nan')\n"
                   "def bye():\n"
                   "    raise SystemExit(7)\n"
                   "value = 3\n");
    struct crl_buf out, err;
    crl_buf_init(&out, CRL_BUF_UNBOUNDED);
    crl_buf_init(&err, CRL_BUF_UNBOUNDED);
    int rc = run_runner("tool.py", "add", "{\"a\": 2, \"b\": 3}\n", &out, &err);
    is_int(rc, 0, "add: exits 0");
    is_str(out.data, "{\"sum\": 5, \"module\": \"tool\"}\n", "add: only the result on stdout");
    like(err.data ? err.data : "", "adding 2 3", "add: its print went to stderr");
    like(err.data ? err.data : "", "from a child", "add: a child's stdout went to stderr");

    out.len = err.len = 0;
    rc = run_runner("tool.py", "one", "[1, 2]", &out, &err);
    ok(rc == 0 && out.data && strcmp(out.data, "[[1, 2], [1, 2]]\n") == 0,
       "an argument that is not an object is passed as one");

    out.len = err.len = 0;
    rc = run_runner("tool.py", "boom", "{}", &out, &err);
    is_int(rc, 1, "boom: an exception exits 1");
    is_int(out.len, 0, "boom: nothing on stdout");
    like(err.data ? err.data : "", "Traceback[^\n]*\n(.|\n)*ZeroDivisionError",
         "boom: the traceback on stderr");
    ok(err.data && !strstr(err.data, "_corral_call"), "boom: without the runner's own frame");

    out.len = err.len = 0;
    rc = run_runner("tool.py", "nan", "{}", &out, &err);
    is_int(rc, 1, "nan: a result that is not JSON fails");

    out.len = err.len = 0;
    rc = run_runner("tool.py", "bye", "{}", &out, &err);
    is_int(rc, 7, "SystemExit keeps its status");

    out.len = err.len = 0;
    rc = run_runner("tool.py", "value", "{}", &out, &err);
    ok(rc == 1 && err.data && strstr(err.data, "defines no callable 'value'"),
       "a name that is not callable");
    crl_buf_free(&out);
    crl_buf_free(&err);
}

static void test_answer(void)
{
    struct crl_exec_result r = {.exit_code = 0, .reason = "exited", .duration_s = 0.5};
    json_t *a = crl_function_answer(&r, "{\"x\": 1}\n", 9, "log\n", 4, false);
    ok(json_is_true(json_object_get(a, "ok")), "exit 0 and JSON: ok");
    ok(json_integer_value(json_object_get(json_object_get(a, "result"), "x")) == 1, "the result");
    is_str(json_string_value(json_object_get(a, "stderr")), "log\n", "stderr comes along");
    json_decref(a);

    a = crl_function_answer(&r, "42", 2, "", 0, false);
    ok(json_integer_value(json_object_get(a, "result")) == 42, "a scalar result");
    json_decref(a);

    a = crl_function_answer(&r, "hello", 5, "", 0, false);
    ok(json_is_false(json_object_get(a, "ok")), "output that is not JSON: not ok");
    is_str(json_string_value(json_object_get(a, "reason")), "exited", "reason exited");
    like(json_string_value(json_object_get(a, "error")), "not one JSON value", "says so");
    is_str(json_string_value(json_object_get(a, "stdout")), "hello", "and shows it");
    json_decref(a);

    a = crl_function_answer(&r, "", 0, "", 0, false);
    like(json_string_value(json_object_get(a, "error")), "wrote no result", "empty stdout");
    json_decref(a);

    r.exit_code = 1;
    const char *tb = "Traceback (most recent call last):\n  ...\nZeroDivisionError: division by "
                     "zero\n";
    a = crl_function_answer(&r, "", 0, tb, strlen(tb), false);
    is_int(json_integer_value(json_object_get(a, "exit_code")), 1, "exit_code");
    ok(json_is_null(json_object_get(a, "signal")), "no signal");
    like(json_string_value(json_object_get(a, "error")),
         "exited with status 1: ZeroDivisionError: division by zero$",
         "the error ends with the exception");
    json_decref(a);

    r = (struct crl_exec_result){.exit_code = -1, .signal = SIGKILL, .reason = "timeout"};
    a = crl_function_answer(&r, "", 0, "", 0, false);
    is_str(json_string_value(json_object_get(a, "reason")), "timeout", "timeout");
    ok(json_is_null(json_object_get(a, "exit_code")) &&
           json_integer_value(json_object_get(a, "signal")) == SIGKILL,
       "timeout: killed");
    json_decref(a);

    static char big[10000];
    memset(big, 'x', sizeof(big));
    a = crl_function_answer(&r, big, sizeof(big), "\xff\x00z", 3, true);
    is_str(json_string_value(json_object_get(a, "reason")), "output_limit", "overflow");
    is_int(json_string_length(json_object_get(a, "stdout")), CRL_FUNCTION_STDOUT_SHOWN,
           "stdout shown: 4 KiB of it");
    is_str(json_string_value(json_object_get(a, "stderr")), "??z", "bytes that are not text: '?'");
    json_decref(a);
}

static void cleanup(void)
{
    int d = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    crl_rm_rf_at(d, dir + 5);
    close(d);
}

int main(void)
{
    if (!mkdtemp(dir))
        bail_out("mkdtemp");
    TAP_RUN(test_definitions, 10);
    TAP_RUN(test_registry, 10);
    TAP_RUN(test_args_spec_req, 10);
    TAP_RUN(test_runner, 30);
    TAP_RUN(test_answer, 10);
    cleanup();
    return done_testing();
}

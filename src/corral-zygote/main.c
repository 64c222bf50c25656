/* corral-zygote --runtime shell|python --root-dir DIR: the function
 * backend's zygote for one runtime (lib/backend/function/zygote.h).
 * corrald starts it with its socket at fd 3; DIR is where each keeper
 * mounts its sandbox's root, in its own mount namespace.  The python runtime embeds the
 * interpreter: it is initialised once here, with the common standard library imported, and every
 * call is a fork of it (through its sandbox's keeper) that compiles and runs the call's source in a
 * fresh __main__.  The shell runtime's calls execute their argv (a string
 * cmd is /bin/sh -c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/backend/function/zygote.h"
#include "../../lib/util/log.h"

/* ---- shell ---- */

static int shell_prepare(void)
{
    return 0;
}

static void shell_run(enum crl_zyg_kind kind, char **s, uint32_t n, char **envp)
{
    if (kind == CRL_ZYG_SOURCE) {
        char *argv[] = {(char *)"/bin/sh", (char *)"-c", s[0], NULL};
        execve(argv[0], argv, envp);
    } else {
        /* PATH of the call's environment, as execvpe does */
        for (char **e = envp; *e; e++)
            if (strncmp(*e, "PATH=", 5) == 0)
                setenv("PATH", *e + 5, 1);
        execvpe(s[0], s, envp);
    }
    /* corrald answers for it: the call did not start */
    dprintf(CRL_ZYG_STATUS_FD, "%d exec\n", errno);
    _exit(127);
}

/* ---- python ---- */

/* What most snippets and tools import, paid for once in the zygote. */
static const char preload[] =
    "import sys, os, io, re, json, math, random, time, datetime, collections, itertools,"
    " functools, operator, string, textwrap, typing, dataclasses, decimal, fractions,"
    " statistics, hashlib, base64, pathlib, copy, heapq, bisect, contextlib, traceback,"
    " enum, uuid, csv, struct, shlex, tempfile, glob, fnmatch\n";

static int python_prepare(void)
{
    PyPreConfig pre;
    PyPreConfig_InitIsolatedConfig(&pre);
    pre.utf8_mode = 1;
    PyStatus ps = Py_PreInitialize(&pre);
    if (PyStatus_Exception(ps)) {
        crl_error(NULL, "zygote python: %s", ps.err_msg ? ps.err_msg : "pre-initialisation failed");
        return -1;
    }
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.buffered_stdio = 1;
    config.write_bytecode = 0;
    config.install_signal_handlers = 1;
    PyStatus st = PyConfig_SetString(&config, &config.program_name, L"python3");
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
        crl_error(NULL, "zygote python: %s", st.err_msg ? st.err_msg : "initialisation failed");
        return -1;
    }
    if (PyRun_SimpleString(preload) != 0)
        return -1;
    /* Everything allocated so far moves to a generation the collector never
     * scans: a child's collections then do not write to (and so copy) the
     * pages of the objects it shares with the zygote. */
    if (PyRun_SimpleString("import gc\ngc.collect()\ngc.freeze()\n") != 0)
        return -1;
    return 0;
}

static void python_after_fork(void)
{
    PyOS_AfterFork_Child();
}

/* Exit with what the code's end means: 0, its SystemExit code, or 1 with
 * the traceback on stderr. */
static void python_run(enum crl_zyg_kind kind, char **s, uint32_t n, char **envp)
{
    (void)n;
    if (kind != CRL_ZYG_SOURCE) {
        dprintf(CRL_ZYG_STATUS_FD, "%d python-argv\n", EINVAL);
        _exit(2);
    }
    /* os.environ is the zygote's (isolated: none of corrald's); the call's
     * environment replaces it. */
    PyObject *os = PyImport_ImportModule("os");
    PyObject *environ = os ? PyObject_GetAttrString(os, "environ") : NULL;
    if (environ) {
        PyObject_CallMethod(environ, "clear", NULL);
        for (char **e = envp; *e; e++) {
            char *eq = strchr(*e, '=');
            if (!eq)
                continue;
            PyObject *k = PyUnicode_DecodeFSDefaultAndSize(*e, eq - *e);
            PyObject *v = PyUnicode_DecodeFSDefault(eq + 1);
            if (k && v)
                PyObject_SetItem(environ, k, v);
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        Py_DECREF(environ);
    }
    Py_XDECREF(os);
    PyErr_Clear();
    /* as `python3 -c`: modules in the working directory (the scratch dir)
     * can be imported */
    PyObject *path = PySys_GetObject("path");
    PyObject *cwd = PyUnicode_FromString("");
    if (path && cwd)
        PyList_Insert(path, 0, cwd);
    Py_XDECREF(cwd);
    PyErr_Clear();
    close(CRL_ZYG_STATUS_FD); /* started */
    int code = 0;
    PyObject *main = PyImport_AddModule("__main__");
    PyObject *globals = main ? PyModule_GetDict(main) : NULL;
    PyObject *compiled = globals ? Py_CompileString(s[0], "<exec>", Py_file_input) : NULL;
    PyObject *r = compiled ? PyEval_EvalCode(compiled, globals, globals) : NULL;
    if (!r) {
        if (PyErr_ExceptionMatches(PyExc_SystemExit)) {
            /* exit(n), sys.exit("message"), exit(): as the interpreter does */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            PyObject *c = value ? PyObject_GetAttrString(value, "code") : NULL;
            if (!c || c == Py_None)
                code = 0;
            else if (PyLong_Check(c))
                code = (int)PyLong_AsLong(c);
            else {
                PyObject *str = PyObject_Str(c);
                const char *t = str ? PyUnicode_AsUTF8(str) : NULL;
                if (t)
                    dprintf(2, "%s\n", t);
                Py_XDECREF(str);
                code = 1;
            }
            Py_XDECREF(c);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        } else {
            PyErr_Print();
            code = 1;
        }
    }
    Py_XDECREF(r);
    Py_XDECREF(compiled);
    /* what print() buffered */
    if (PyRun_SimpleString("import sys\nfor f in (sys.stdout, sys.stderr):\n"
                           "    try:\n        f.flush()\n    except Exception:\n        pass\n") !=
        0)
        code = code ? code : 1;
    _exit(code & 0xff);
}

int main(int argc, char **argv)
{
    static const struct crl_zygote_runtime runtimes[] = {
        {"shell", shell_prepare, shell_run, NULL},
        {"python", python_prepare, python_run, python_after_fork},
    };
    if (argc != 5 || strcmp(argv[1], "--runtime") != 0 || strcmp(argv[3], "--root-dir") != 0) {
        fprintf(stderr, "usage: corral-zygote --runtime shell|python --root-dir DIR"
                        " (corrald starts it)\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
        if (strcmp(argv[2], runtimes[i].name) == 0)
            return crl_zygote_main(&runtimes[i], argv[4]);
    fprintf(stderr, "corral-zygote: unknown runtime '%s' (shell, python)\n", argv[2]);
    return 2;
}

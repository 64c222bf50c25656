/* libFuzzer driver for a code-context kernel's lines as corrald reads them
 * (lib/core/code_answer.c): what a sandbox's python writes, so hostile.
 * The input's first byte picks the cell awaited (none, or id 0..6); the
 * rest is the line.  Checked, besides memory safety and leaks:
 *
 *   - a line without the nonce in front is never an answer, nor is one
 *     when no cell is awaited;
 *   - an answer has exactly the fields docs/api.md names, of their types:
 *     execution_count (the one given), stdout and stderr (strings), their
 *     _truncated flags (booleans), results (at most 256 objects of `main`
 *     and known string fields, `json` an object or array) and error (null
 *     or an object of three strings);
 *   - only an answer sets *out.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/code_answer */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/code.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what, int line)
{
    if (ok)
        return;
    fprintf(stderr, "fuzz_code_answer: line %d: check failed: %s\n", line, what);
    abort();
}
#define CHECK(cond) check((cond), #cond, __LINE__)

#define NONCE "0123abcd:"

static bool known(const char *key, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

static void check_result(json_t *r)
{
    static const char *const keys[] = {"main", "text", "html", "markdown", "latex",
                                       "svg",  "png",  "jpeg", "json"};
    CHECK(json_is_object(r));
    CHECK(json_is_boolean(json_object_get(r, "main")));
    const char *k;
    json_t *v;
    json_object_foreach(r, k, v)
    {
        CHECK(known(k, keys, sizeof(keys) / sizeof(keys[0])));
        if (strcmp(k, "json") == 0)
            CHECK(json_is_object(v) || json_is_array(v));
        else if (strcmp(k, "main") != 0)
            CHECK(json_is_string(v));
    }
}

static void check_answer(json_t *a, unsigned long count)
{
    static const char *const keys[] = {"execution_count",  "stdout",  "stderr", "stdout_truncated",
                                       "stderr_truncated", "results", "error"};
    CHECK(json_is_object(a));
    CHECK(json_object_size(a) == sizeof(keys) / sizeof(keys[0]));
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v) CHECK(known(k, keys, sizeof(keys) / sizeof(keys[0])));
    CHECK(json_integer_value(json_object_get(a, "execution_count")) == (json_int_t)count);
    CHECK(json_is_string(json_object_get(a, "stdout")));
    CHECK(json_is_string(json_object_get(a, "stderr")));
    CHECK(json_is_boolean(json_object_get(a, "stdout_truncated")));
    CHECK(json_is_boolean(json_object_get(a, "stderr_truncated")));
    json_t *results = json_object_get(a, "results");
    CHECK(json_is_array(results) && json_array_size(results) <= 256);
    size_t i;
    json_array_foreach(results, i, v) check_result(v);
    json_t *e = json_object_get(a, "error");
    CHECK(json_is_null(e) || (json_is_object(e) && json_object_size(e) == 3));
    if (json_is_object(e))
        json_object_foreach(e, k, v)
        {
            static const char *const ek[] = {"name", "value", "traceback"};
            CHECK(known(k, ek, 3) && json_is_string(v));
        }
    char *dumped = json_dumps(a, JSON_COMPACT);
    CHECK(dumped != NULL);
    free(dumped);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    long long want = data[0] % 8 == 7 ? -1 : data[0] % 8;
    const char *line = (const char *)data + 1;
    size_t n = size - 1;
    unsigned long count = 1 + data[0] / 8;
    json_t *out = (json_t *)1;
    enum crl_code_line kind = crl_code_answer(line, n, NONCE, want, count, &out);
    bool fronted = n >= strlen(NONCE) && memcmp(line, NONCE, strlen(NONCE)) == 0;
    if (!fronted)
        CHECK(kind == CRL_CODE_LINE_OTHER);
    if (want < 0)
        CHECK(kind != CRL_CODE_LINE_ANSWER);
    CHECK((kind == CRL_CODE_LINE_ANSWER) == (out != NULL));
    if (out) {
        check_answer(out, count);
        json_decref(out);
    }
    return 0;
}

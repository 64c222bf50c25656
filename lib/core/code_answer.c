/* A code-context kernel's lines (lib/core/code_kernel.py), read as the
 * hostile input they are: a line is an answer only behind the context's
 * nonce, parses as one JSON object, and names the cell corrald is waiting
 * for; the answer handed on is built again from the fields below, of
 * their types (anything else in the line is dropped).  Kept apart from
 * lib/core/code.c, which runs the kernels, so that tests/fuzz drives it
 * alone. */
#include <stdio.h>
#include <string.h>

#include "../util/cleanup.h"
#include "code.h"

#define MAX_RESULTS 256 /* of a cell: more are dropped */

static json_t *string_or_empty(json_t *v)
{
    return json_string(json_is_string(v) ? json_string_value(v) : "");
}

static json_t *result_of(json_t *r)
{
    static const char *const texts[] = {"text", "html", "markdown", "latex", "svg", "png", "jpeg"};
    json_t *o = json_pack("{s:b}", "main", json_is_true(json_object_get(r, "main")));
    if (!o)
        return NULL;
    for (size_t k = 0; k < CRL_ARRAY_SIZE(texts); k++) {
        json_t *v = json_object_get(r, texts[k]);
        if (json_is_string(v))
            json_object_set_new(o, texts[k], json_string(json_string_value(v)));
    }
    json_t *js = json_object_get(r, "json");
    if (json_is_object(js) || json_is_array(js))
        json_object_set_new(o, "json", json_deep_copy(js));
    return o;
}

static json_t *answer_of(json_t *in, unsigned long count)
{
    json_t *out = json_pack("{s:I}", "execution_count", (json_int_t)count);
    if (!out)
        return NULL;
    static const char *const streams[] = {"stdout", "stderr"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(streams); i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s_truncated", streams[i]);
        json_object_set_new(out, streams[i], string_or_empty(json_object_get(in, streams[i])));
        json_object_set_new(out, key, json_boolean(json_is_true(json_object_get(in, key))));
    }
    json_t *results = json_array(), *r;
    size_t i;
    json_array_foreach(json_object_get(in, "results"), i, r)
    {
        if (i >= MAX_RESULTS)
            break;
        if (json_is_object(r))
            json_array_append_new(results, result_of(r));
    }
    json_object_set_new(out, "results", results);
    json_t *e = json_object_get(in, "error");
    if (json_is_object(e))
        json_object_set_new(out, "error",
                            json_pack("{s:o,s:o,s:o}", "name",
                                      string_or_empty(json_object_get(e, "name")), "value",
                                      string_or_empty(json_object_get(e, "value")), "traceback",
                                      string_or_empty(json_object_get(e, "traceback"))));
    else
        json_object_set_new(out, "error", json_null());
    return out;
}

enum crl_code_line crl_code_answer(const char *s, size_t n, const char *nonce, long long want,
                                   unsigned long count, json_t **out)
{
    size_t nl = strlen(nonce);
    *out = NULL;
    if (n < nl || memcmp(s, nonce, nl) != 0)
        return CRL_CODE_LINE_OTHER; /* not an answer: what a cell printed, say */
    json_error_t je;
    json_auto_t *j = json_loadb(s + nl, n - nl, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j))
        return CRL_CODE_LINE_MALFORMED;
    if (json_is_true(json_object_get(j, "ready")))
        return CRL_CODE_LINE_READY;
    json_t *id = json_object_get(j, "id");
    if (want < 0 || !json_is_integer(id) || json_integer_value(id) != want)
        return CRL_CODE_LINE_OTHER; /* nobody asked, or not for this cell */
    *out = answer_of(j, count);
    return *out ? CRL_CODE_LINE_ANSWER : CRL_CODE_LINE_MALFORMED;
}

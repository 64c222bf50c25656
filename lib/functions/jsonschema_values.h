/* Private to the JSON Schema validator (jsonschema.h): what checking a schema
 * and validating an instance both need of JSON values.
 *
 *   paths and messages   where in the schema or the instance a value is
 *                        (struct loc, rendered only for a message) and how a
 *                        key, a number or a value is shown in one
 *   numbers and equality JSON Schema's comparisons (1 equals 1.0, objects
 *                        ignore key order), uniqueness, nesting depth
 *   patterns             POSIX ERE in C.UTF-8, and what ECMA-262 would read
 *                        differently
 *
 * Every message names a path and fits struct crl_err: keys, values and paths
 * are cut at the lengths below. */
#ifndef CRL_FUNCTIONS_JSONSCHEMA_VALUES_H
#define CRL_FUNCTIONS_JSONSCHEMA_VALUES_H

#include <jansson.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

#include "../util/err.h"
#include "jsonschema.h"

#define MAX_DEPTH CRL_JSONSCHEMA_MAX_DEPTH
#define NAME_SHOWN 64   /* longest key, keyword or pattern quoted in a message */
#define VALUE_SHOWN 100 /* longest JSON value (enum, const) put in a message */

/* A JSON path as a chain of stack frames, rendered only when a message needs
 * it, so that a valid instance costs no string work. */
struct loc {
    const struct loc *up; /* NULL for the root, whose key is its name */
    const char *key;      /* NULL for an array index */
    size_t idx;
};

struct quoted {
    char s[4 * NAME_SHOWN + 8];
};

struct shown {
    char s[VALUE_SHOWN + 8];
};

struct numtext {
    char s[40];
};

/* Append s[0..n) to buf (length *len, capacity cap), as much as fits. */
void crl_js_put(char *buf, size_t cap, size_t *len, const char *s, size_t n);
/* `name` in quotes, escaped and cut, in q's buffer. */
const char *crl_js_quote(struct quoted *q, const char *name);
/* "<path of at>: <message>" into *err (if not NULL) with `code`; returns -1. */
int crl_js_fail_at(struct crl_err *err, enum crl_errc code, const struct loc *at, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));
/* `msg` without a leading "<path of at>: ". */
const char *crl_js_after_path(const char *msg, const struct loc *at);
/* The JSON Schema type name of a value ("integer" for a JSON integer). */
const char *crl_js_type_name(const json_t *v);
/* A value in compact JSON, cut, in b's buffer. */
const char *crl_js_show_value(struct shown *b, const json_t *v);

/* Whether v is integral (an integer, or a real without a fraction that fits
 * a long long), and then its value in *out. */
bool crl_js_integral(const json_t *v, long long *out);
/* -1, 0 or 1 as number a is less than, equal to or greater than b. */
int crl_js_num_cmp(const json_t *a, const json_t *b);
/* A number as it was written, shortest form that reads back the same. */
const char *crl_js_show_num(struct numtext *b, const json_t *v);
/* Whether number x is a multiple of m (m > 0), within a few ulps for reals. */
bool crl_js_is_multiple(const json_t *x, const json_t *m);
/* JSON Schema equality of two values. */
bool crl_js_eq(const json_t *a, const json_t *b);
/* 1 if the items of arr are pairwise distinct; 0 with an equal pair in
 * *da < *db; -1 without memory. */
int crl_js_all_distinct(const json_t *arr, size_t *da, size_t *db);
/* 0, or -1 with CRL_E_INVALID at the first container nested deeper than
 * MAX_DEPTH levels below `at` (`level` is at's own). */
int crl_js_scan_depth(const json_t *v, const struct loc *at, int level, struct crl_err *err);

/* Compile a pattern as POSIX ERE in C.UTF-8 (REG_NOSUB); -1 with why. */
int crl_js_rx_compile(regex_t *re, const char *pattern, char *why, size_t whysz);
/* 0 if `re` matches anywhere in s[0..len), else regexec's error. */
int crl_js_rx_search(const regex_t *re, const char *s, size_t len);
/* Why pattern p would mean something else in ECMA-262, or NULL. */
const char *crl_js_pattern_divergence(const char *p);

#endif

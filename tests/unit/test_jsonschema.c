/* lib/functions/jsonschema: the validator of registered functions' arguments.
 * Every keyword accepts and refuses; refusals are CRL_E_INVALID with a
 * message naming the path (in the schema for crl_jsonschema_check, in the
 * instance for crl_jsonschema_validate). */
#include <stdlib.h>
#include <string.h>

#include "../../lib/functions/jsonschema.h"
#include "tap.h"

/* ---- helpers ---- */

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!v) {
        diag("test JSON %.200s: %s", text, je.text);
        bail_out("bad JSON in a test");
    }
    return v;
}

static void schema_ok(const char *schema)
{
    json_t *s = J(schema);
    struct crl_err e = CRL_ERR_INIT;
    if (!ok(crl_jsonschema_check(s, &e) == 0, "schema %.120s: accepted", schema))
        diag("refused: %s", e.msg);
    json_decref(s);
}

/* The check refuses `schema` with CRL_E_INVALID and a message matching `re`. */
static void schema_bad(const char *schema, const char *re)
{
    json_t *s = J(schema);
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_jsonschema_check(s, &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID, "schema %.120s: refused as invalid_argument", schema))
        diag("returned %d, code %s, message '%s'", r, crl_errc_name(e.code), e.msg);
    like(e.msg, re, "schema %.120s: the message matches /%s/", schema, re);
    json_decref(s);
}

static int run(const char *schema, const char *inst, struct crl_err *e)
{
    json_t *s = J(schema), *i = J(inst);
    int r = crl_jsonschema_check(s, e);
    if (r < 0)
        diag("the schema was refused: %s", e->msg);
    else
        r = crl_jsonschema_validate(s, i, "args", e);
    json_decref(s);
    json_decref(i);
    return r;
}

static void valid(const char *schema, const char *inst)
{
    struct crl_err e = CRL_ERR_INIT;
    if (!ok(run(schema, inst, &e) == 0, "%.100s against %.100s: valid", inst, schema))
        diag("refused: %s", e.msg);
}

/* `inst` is refused with CRL_E_INVALID and a message matching `re`. */
static void invalid(const char *schema, const char *inst, const char *re)
{
    struct crl_err e = CRL_ERR_INIT;
    json_t *s = J(schema), *i = J(inst);
    if (crl_jsonschema_check(s, &e) < 0)
        diag("the schema was refused: %s", e.msg);
    int r = crl_jsonschema_validate(s, i, "args", &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID, "%.100s against %.100s: refused as invalid_argument",
            inst, schema))
        diag("returned %d, code %s, message '%s'", r, crl_errc_name(e.code), e.msg);
    like(e.msg, re, "%.100s against %.100s: the message matches /%s/", inst, schema, re);
    json_decref(s);
    json_decref(i);
}

/* The exact message of a refusal. */
static void invalid_msg(const char *schema, const char *inst, const char *msg)
{
    struct crl_err e = CRL_ERR_INIT;
    int r = run(schema, inst, &e);
    ok(r < 0 && e.code == CRL_E_INVALID, "%.100s against %.100s: refused", inst, schema);
    is_str(e.msg, msg, "%.100s against %.100s: the message", inst, schema);
}

/* `open` n times, `middle`, `close` n times. */
static char *nest(const char *open, const char *middle, const char *close, int n)
{
    size_t len = strlen(middle) + (size_t)n * (strlen(open) + strlen(close)) + 1;
    char *s = malloc(len), *p = s;
    if (!s)
        bail_out("malloc");
    for (int i = 0; i < n; i++)
        p = stpcpy(p, open);
    p = stpcpy(p, middle);
    for (int i = 0; i < n; i++)
        p = stpcpy(p, close);
    return s;
}

/* ---- type ---- */

static void test_type(void)
{
    static const char *const values[] = {"null", "true", "{}", "[]", "1.5", "\"s\"", "7"};
    static const char *const types[] = {"null",   "boolean", "object", "array",
                                        "number", "string",  "integer"};
    for (size_t t = 0; t < 7; t++) {
        char schema[64];
        snprintf(schema, sizeof(schema), "{\"type\": \"%s\"}", types[t]);
        for (size_t v = 0; v < 7; v++) {
            bool match = v == t || (t == 4 && v == 6); /* an integer is a number */
            if (match)
                valid(schema, values[v]);
            else
                invalid(schema, values[v], "^args: expected ");
        }
    }
    invalid_msg("{\"properties\": {\"count\": {\"type\": \"integer\"}}}", "{\"count\": \"3\"}",
                "args.count: expected integer, got string");
    valid("{\"type\": [\"string\", \"null\"]}", "null");
    valid("{\"type\": [\"string\", \"null\"]}", "\"x\"");
    invalid_msg("{\"type\": [\"string\", \"null\"]}", "4",
                "args: expected string or null, got integer");
    valid("{\"type\": \"boolean\"}", "false");
}

static void test_integer_vs_number(void)
{
    valid("{\"type\": \"integer\"}", "1.0");
    valid("{\"type\": \"integer\"}", "-0.0");
    valid("{\"type\": \"integer\"}", "1e300");
    valid("{\"type\": \"integer\"}", "-9223372036854775808");
    invalid_msg("{\"type\": \"integer\"}", "1.5", "args: expected integer, got number");
    invalid("{\"type\": \"integer\"}", "1e-300", "expected integer, got number");
    valid("{\"type\": \"number\"}", "9223372036854775807");
    valid("{\"type\": \"number\"}", "2.5e-3");
    invalid_msg("{\"type\": \"number\"}", "\"1\"", "args: expected number, got string");
    invalid_msg("{\"type\": \"number\"}", "true", "args: expected number, got boolean");
}

/* ---- enum and const ---- */

static void test_enum_const(void)
{
    const char *colors = "{\"enum\": [\"red\", \"green\", null, 1]}";
    valid(colors, "\"red\"");
    valid(colors, "null");
    valid(colors, "1.0");
    invalid_msg(colors, "\"blue\"", "args: must be one of [\"red\",\"green\",null,1]");
    invalid(colors, "\"Red\"", "must be one of");
    invalid(colors, "[\"red\"]", "must be one of");
    valid("{\"enum\": [{\"a\": [1, 2], \"b\": true}]}", "{\"b\": true, \"a\": [1.0, 2]}");
    invalid("{\"enum\": [{\"a\": [1, 2]}]}", "{\"a\": [2, 1]}", "must be one of");
    invalid("{\"enum\": [{\"a\": 1}]}", "{\"a\": 1, \"b\": 2}", "must be one of");

    valid("{\"const\": {\"k\": [1, \"x\"]}}", "{\"k\": [1, \"x\"]}");
    invalid_msg("{\"const\": {\"k\": 1}}", "{\"k\": 2}", "args: must be {\"k\":1}");
    valid("{\"const\": 0}", "-0.0");
    invalid("{\"const\": false}", "0", "^args: must be false$");
    invalid("{\"const\": null}", "false", "must be null");
    invalid("{\"const\": \"a\"}", "\"a\\u0000b\"", "must be \"a\"");
    /* a long enum is cut in the message, not the message overflowed */
    json_t *s = json_object(), *e = json_array();
    for (int i = 0; i < 1000; i++)
        json_array_append_new(e, json_sprintf("value-number-%d", i));
    json_object_set_new(s, "enum", e);
    json_t *inst = json_string("nope");
    struct crl_err err = CRL_ERR_INIT;
    ok(crl_jsonschema_check(s, &err) == 0, "an enum of 1000 strings is accepted");
    ok(crl_jsonschema_validate(s, inst, "args", &err) < 0, "a value not in it is refused");
    like(err.msg, "^args: must be one of \\[\"value-number-0\",.*\\.\\.\\.$",
         "the enum is shown cut: %s", err.msg);
    ok(strlen(err.msg) < 200, "the message stays short (%zu bytes)", strlen(err.msg));
    json_decref(s);
    json_decref(inst);
}

/* ---- objects ---- */

static void test_object(void)
{
    const char *person = "{\"type\": \"object\", \"required\": [\"name\"],"
                         " \"properties\": {\"name\": {\"type\": \"string\"},"
                         "                  \"age\": {\"type\": \"integer\", \"minimum\": 0}},"
                         " \"additionalProperties\": false}";
    valid(person, "{\"name\": \"Ann\"}");
    valid(person, "{\"name\": \"Ann\", \"age\": 3}");
    invalid_msg(person, "{\"age\": 3}", "args: missing required property 'name'");
    invalid_msg(person, "{\"name\": \"Ann\", \"age\": -1}", "args.age: must be >= 0, got -1");
    invalid_msg(person, "{\"name\": \"Ann\", \"email\": \"a@b\"}",
                "args: unexpected property 'email'");
    invalid_msg(person, "{\"name\": 5}", "args.name: expected string, got integer");
    /* keywords about objects ignore other types */
    valid(
        "{\"required\": [\"a\"], \"properties\": {\"a\": false}, \"additionalProperties\": false}",
        "[1]");
    /* additionalProperties as a schema */
    const char *strmap = "{\"properties\": {\"n\": {\"type\": \"integer\"}},"
                         " \"additionalProperties\": {\"type\": \"string\"}}";
    valid(strmap, "{\"n\": 1, \"x\": \"y\", \"z\": \"w\"}");
    invalid_msg(strmap, "{\"n\": 1, \"x\": \"y\", \"z\": 2}",
                "args.z: expected string, got integer");
    valid("{\"additionalProperties\": true}", "{\"anything\": [1]}");
    /* nested objects and arrays name the whole path */
    const char *deep = "{\"properties\": {\"a\": {\"properties\": {\"b\": {\"items\":"
                       " {\"properties\": {\"c d\": {\"type\": \"null\"}}}}}}}}";
    valid(deep, "{\"a\": {\"b\": [{\"c d\": null}, {}]}}");
    invalid_msg(deep, "{\"a\": {\"b\": [{}, {\"c d\": 0}]}}",
                "args.a.b[1]['c d']: expected null, got integer");
    invalid_msg("{\"properties\": {\"it's\": {\"type\": \"null\"}}}", "{\"it's\": 1}",
                "args['it\\'s']: expected null, got integer");
    invalid_msg("{\"additionalProperties\": false}", "{\"a\\u0001\": 1}",
                "args: unexpected property 'a\\x01'");
    invalid("{\"required\": [\"a\", \"b\"]}", "{\"b\": 1}", "missing required property 'a'$");
}

/* ---- arrays ---- */

static void test_array(void)
{
    const char *tags = "{\"type\": \"array\", \"items\": {\"type\": \"string\"},"
                       " \"minItems\": 1, \"maxItems\": 3}";
    valid(tags, "[\"a\"]");
    valid(tags, "[\"a\", \"b\", \"c\"]");
    invalid_msg(tags, "[\"a\", \"b\", 3]", "args[2]: expected string, got integer");
    invalid_msg(tags, "[]", "args: expected at least 1 items, got 0");
    invalid_msg(tags, "[\"a\", \"b\", \"c\", \"d\"]", "args: expected at most 3 items, got 4");
    invalid_msg("{\"properties\": {\"tags\": {\"items\": {\"type\": \"string\"}}}}",
                "{\"tags\": [\"x\", \"y\", null]}", "args.tags[2]: expected string, got null");
    valid("{\"minItems\": 2.0}", "[1, 2]");
    valid("{\"items\": false}", "[]");
    invalid_msg("{\"items\": false}", "[0]", "args[0]: not allowed (the schema here is false)");
    valid("{\"items\": {\"items\": {\"type\": \"integer\"}}}", "[[1], [], [2, 3]]");
    invalid_msg("{\"items\": {\"items\": {\"type\": \"integer\"}}}", "[[1], [], [2, \"3\"]]",
                "args[2][1]: expected integer, got string");
}

static void test_unique_items(void)
{
    const char *u = "{\"uniqueItems\": true}";
    valid(u, "[1, 2, \"1\", [1], {\"a\": 1}, {\"a\": 2}, null, false, true]");
    valid("{\"uniqueItems\": false}", "[1, 1]");
    invalid_msg(u, "[1, 2, 1]", "args: items [0] and [2] are equal, but uniqueItems is set");
    invalid(u, "[1, 1.0]", "items \\[0\\] and \\[1\\] are equal");
    invalid(u, "[{\"a\": 1, \"b\": [2]}, 3, {\"b\": [2.0], \"a\": 1}]",
            "items \\[0\\] and \\[2\\] are equal");
    invalid(u, "[\"x\", \"y\", \"y\", \"x\"]", "items \\[1\\] and \\[2\\] are equal");
    valid(u, "[9223372036854775807, 9223372036854775806]");
    valid(u, "[[1, 2], [2, 1]]");

    /* 100000 distinct items: sorted by hash, not compared pairwise */
    json_t *arr = json_array();
    for (int i = 0; i < 100000; i++)
        json_array_append_new(arr, json_integer(i));
    json_t *s = J(u);
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_jsonschema_validate(s, arr, "args", &e) == 0, "100000 distinct items are unique");
    json_array_append_new(arr, json_real(99999.0));
    ok(crl_jsonschema_validate(s, arr, "args", &e) < 0, "and one repeated as a real is not");
    is_str(e.msg, "args: items [99999] and [100000] are equal, but uniqueItems is set",
           "the message names both");
    json_decref(arr);
    json_decref(s);
}

/* ---- strings ---- */

static void test_string_length(void)
{
    valid("{\"minLength\": 2, \"maxLength\": 5}", "\"ab\"");
    invalid_msg("{\"minLength\": 2}", "\"a\"", "args: expected at least 2 characters, got 1");
    invalid_msg("{\"maxLength\": 3}", "\"abcd\"", "args: expected at most 3 characters, got 4");
    /* code points, not bytes: é is 2 bytes, 日本 6, an emoji 4 */
    valid("{\"maxLength\": 5}", "\"h\\u00e9llo\"");
    valid("{\"maxLength\": 2, \"minLength\": 2}", "\"\\u65e5\\u672c\"");
    invalid_msg("{\"minLength\": 3}", "\"\\u65e5\\u672c\"",
                "args: expected at least 3 characters, got 2");
    valid("{\"maxLength\": 1}", "\"\\ud83d\\ude00\"");
    valid("{\"maxLength\": 0}", "\"\"");
    valid("{\"minLength\": 3}", "\"a\\u0000b\"");
    valid("{\"minLength\": 10}", "12"); /* ignored for other types */
}

static void test_pattern(void)
{
    const char *id = "{\"pattern\": \"^[a-z][a-z0-9_-]*$\"}";
    valid(id, "\"tool_1\"");
    invalid_msg(id, "\"Tool\"", "args: does not match the pattern '^[a-z][a-z0-9_-]*$'");
    invalid(id, "\"\"", "does not match");
    /* unanchored search, as JSON Schema does */
    valid("{\"pattern\": \"b+\"}", "\"abbbc\"");
    invalid("{\"pattern\": \"b+\"}", "\"ac\"", "does not match");
    /* code points: `.` is one character, in any locale of the process */
    valid("{\"pattern\": \"^.$\"}", "\"\\u00e9\"");
    valid("{\"pattern\": \"^[\\u00e9\\u00e8]{2}$\"}", "\"\\u00e8\\u00e9\"");
    /* NUL characters are part of the string */
    valid("{\"pattern\": \"b$\"}", "\"a\\u0000b\"");
    invalid("{\"pattern\": \"^a$\"}", "\"a\\u0000b\"", "does not match");
    valid("{\"pattern\": \"^[[:digit:]]{3}$\"}", "\"123\"");
    valid("{\"pattern\": \"^a\\\\.b$\"}", "\"a.b\"");
    invalid("{\"pattern\": \"^a\\\\.b$\"}", "\"axb\"", "does not match");
    valid("{\"pattern\": \"^(x|y)+$\"}", "\"xyyx\"");
    valid("{\"pattern\": \"x\"}", "3"); /* ignored for other types */

    /* more patterns than the per-call cache holds */
    char schema[4096];
    size_t len = (size_t)snprintf(schema, sizeof(schema), "{\"items\": {\"allOf\": [");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(schema + len, sizeof(schema) - len, "%s{\"pattern\": \"%c\"}",
                                i ? ", " : "", 'A' + i % 26);
    snprintf(schema + len, sizeof(schema) - len, "]}}");
    valid(schema, "[\"ABCDEFGHIJKLMNOPQRSTUVWXYZ\", \"ZYXWVUTSRQPONMLKJIHGFEDCBA\"]");
    invalid(schema, "[\"ABCDEFGHIJKLMNOPQRSTUVWXYZ\", \"ABCDEFGHIJKLMNOPQRSTUVWXY\"]",
            "^args\\[1\\]: does not match the pattern 'Z'$");
}

static void test_pattern_refused(void)
{
    schema_bad("{\"pattern\": \"(\"}",
               "^schema.pattern: '\\(' is not a POSIX extended regular expression");
    schema_bad("{\"pattern\": \"^\\\\d+$\"}",
               "^schema.pattern: '\\^\\\\\\\\d\\+\\$' uses an escape");
    schema_bad("{\"pattern\": \"\\\\w\"}", "uses an escape");
    schema_bad("{\"pattern\": \"(a)\\\\1\"}", "back-reference");
    schema_bad("{\"pattern\": \"[\\\\.]\"}", "backslash inside \\[...\\]");
    schema_bad("{\"pattern\": \"(?:ab)\"}", "not a POSIX extended regular expression");
    schema_bad("{\"pattern\": \"a\\u0000b\"}", "must not contain a NUL");
    schema_bad("{\"pattern\": 5}", "^schema.pattern: must be a regular expression, got integer");
    schema_ok("{\"pattern\": \"[]a]\"}");
    schema_ok("{\"pattern\": \"[^]a-]\"}");
    schema_ok("{\"pattern\": \"[[:alpha:]]\\\\[\"}");
}

/* ---- numbers ---- */

static void test_numbers(void)
{
    const char *range = "{\"minimum\": 1, \"maximum\": 10}";
    valid(range, "1");
    valid(range, "10");
    valid(range, "5.5");
    invalid_msg(range, "0", "args: must be >= 1, got 0");
    invalid_msg(range, "10.5", "args: must be <= 10, got 10.5");
    const char *open = "{\"exclusiveMinimum\": 0, \"exclusiveMaximum\": 1.5}";
    valid(open, "0.1");
    valid(open, "1");
    invalid_msg(open, "0", "args: must be > 0, got 0");
    invalid_msg(open, "1.5", "args: must be < 1.5, got 1.5");
    invalid(open, "-0.0", "must be > 0");
    /* exact beyond 2^53, where doubles would call these equal */
    valid("{\"maximum\": 9007199254740992}", "9007199254740992");
    invalid_msg("{\"maximum\": 9007199254740992}", "9007199254740993",
                "args: must be <= 9007199254740992, got 9007199254740993");
    invalid("{\"minimum\": 9223372036854775807}", "9223372036854775806", "must be >=");
    valid("{\"minimum\": 0.1}", "0.10000000000000001");
    valid("{\"minimum\": 3}", "\"2\""); /* ignored for other types */

    valid("{\"multipleOf\": 3}", "9");
    valid("{\"multipleOf\": 3}", "-9");
    valid("{\"multipleOf\": 3}", "9.0");
    invalid_msg("{\"multipleOf\": 3}", "10", "args: must be a multiple of 3, got 10");
    valid("{\"multipleOf\": 0.1}", "0.3");
    valid("{\"multipleOf\": 0.01}", "19.99");
    invalid_msg("{\"multipleOf\": 0.1}", "0.35", "args: must be a multiple of 0.1, got 0.35");
    valid("{\"multipleOf\": 2.5}", "10");
    invalid("{\"multipleOf\": 1}", "1.0000000001", "must be a multiple of 1");
    invalid("{\"multipleOf\": 1e-308}", "1e308", "must be a multiple");

    schema_bad("{\"multipleOf\": 0}", "^schema.multipleOf: must be greater than 0, not 0$");
    schema_bad("{\"multipleOf\": -2}", "must be greater than 0");
    schema_bad("{\"minimum\": \"1\"}", "^schema.minimum: must be a number, got string$");
    schema_bad("{\"exclusiveMinimum\": true}", "^schema.exclusiveMinimum: .*draft 4");
}

/* ---- applicators ---- */

static void test_combinators(void)
{
    const char *all = "{\"allOf\": [{\"type\": \"integer\"}, {\"minimum\": 3}]}";
    valid(all, "4");
    invalid_msg(all, "2", "args: must be >= 3, got 2");
    invalid_msg(all, "\"4\"", "args: expected integer, got string");

    const char *any =
        "{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", \"maxLength\": 2}]}";
    valid(any, "4");
    valid(any, "\"ab\"");
    invalid_msg(any, "\"abc\"",
                "args: matches none of the 2 schemas of anyOf (anyOf[0]: expected integer, got "
                "string)");
    invalid("{\"properties\": {\"x\": {\"anyOf\": [{\"properties\": {\"y\": false}}]}}}",
            "{\"x\": {\"y\": 1}}",
            "^args.x: matches none of the 1 schemas of anyOf \\(anyOf\\[0\\]: args.x.y: not "
            "allowed");

    /* oneOf: exactly one */
    const char *one =
        "{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\", \"minimum\": 10},"
        " {\"type\": \"null\"}]}";
    valid(one, "5");
    valid(one, "10.5");
    valid(one, "null");
    invalid_msg(one, "12",
                "args: matches both oneOf[0] and oneOf[1], but must match exactly one of its 3 "
                "schemas");
    invalid_msg(one, "\"s\"",
                "args: matches none of the 3 schemas of oneOf (oneOf[0]: expected integer, got "
                "string)");

    const char *neg = "{\"not\": {\"type\": \"string\"}}";
    valid(neg, "1");
    invalid_msg(neg, "\"s\"", "args: must not match the schema of 'not'");
    valid("{\"not\": {\"not\": {\"const\": 1}}}", "1");
    invalid("{\"not\": {\"not\": {\"const\": 1}}}", "2", "must not match");
    invalid("{\"not\": true}", "null", "must not match");
    valid("{\"not\": false}", "null");

    /* the first failure is reported, in keyword order: type, then the rest */
    invalid("{\"type\": \"string\", \"anyOf\": [{\"const\": 1}]}", "1", "expected string");
}

/* ---- boolean schemas and annotations ---- */

static void test_boolean_schemas(void)
{
    schema_ok("true");
    schema_ok("false");
    valid("true", "{\"a\": [1, {\"b\": null}]}");
    invalid_msg("false", "1", "args: not allowed (the schema here is false)");
    invalid_msg("{\"properties\": {\"x\": false}}", "{\"x\": 1}",
                "args.x: not allowed (the schema here is false)");
    valid("{\"properties\": {\"x\": false}}", "{\"y\": 1}");
    valid("{}", "\"anything\"");
}

static void test_annotations(void)
{
    const char *s = "{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\","
                    " \"$id\": \"https://example.com/tool\", \"$comment\": \"c\","
                    " \"title\": \"T\", \"description\": \"D\", \"default\": [1],"
                    " \"examples\": [1, \"x\"], \"deprecated\": false, \"readOnly\": true,"
                    " \"writeOnly\": false, \"type\": \"integer\"}";
    schema_ok(s);
    valid(s, "3");
    invalid(s, "\"3\"", "expected integer"); /* default and examples do not validate */
    schema_bad("{\"title\": 3}", "^schema.title: must be a string, got integer$");
    schema_bad("{\"readOnly\": \"yes\"}", "^schema.readOnly: must be true or false, got string$");
    schema_bad("{\"examples\": 3}", "^schema.examples: must be an array");
    schema_bad("{\"$schema\": \"http://json-schema.org/draft-07/schema#\"}",
               "^schema.\\$schema: only draft 2020-12 .* is supported, not "
               "'http://json-schema.org/draft-07/schema#'");
}

/* ---- what the check refuses ---- */

static void test_check_refusals(void)
{
    struct crl_err e = CRL_ERR_INIT;
    json_t *s = J("{\"properties\": {\"x\": {\"type\": \"integr\"}}}");
    ok(crl_jsonschema_check(s, &e) < 0 && e.code == CRL_E_INVALID, "a misspelt type is refused");
    is_str(e.msg,
           "schema.properties.x.type: 'integr' is not a JSON type (null, boolean, object, array, "
           "number, string, integer)",
           "the message names its path");
    json_decref(s);

    schema_bad("{\"properties\": {\"x\": {\"typ\": \"string\"}}}",
               "^schema.properties.x: unknown keyword 'typ'$");
    schema_bad("{\"$ref\": \"#/$defs/a\"}", "^schema: '\\$ref' is not supported .*inline");
    schema_bad("{\"items\": {\"$ref\": \"#\"}}", "^schema.items: '\\$ref' is not supported");
    schema_bad("{\"$defs\": {}}", "^schema: '\\$defs' is not supported");
    schema_bad("{\"patternProperties\": {\"^a\": {}}}",
               "^schema: 'patternProperties' is not supported");
    schema_bad("{\"prefixItems\": [{}]}", "^schema: 'prefixItems' is not supported");
    schema_bad("{\"items\": [{}]}",
               "^schema.items: must be a schema; the array form is prefixItems");
    schema_bad("{\"format\": \"email\"}", "^schema: 'format' is not supported \\(it would not");
    schema_bad("{\"if\": {}, \"then\": {}}", "'if' is not supported");
    schema_bad("{\"allOf\": [{}, {\"properties\": {\"a b\": {\"type\": 1}}}]}",
               "^schema.allOf\\[1\\].properties\\['a b'\\].type: must be a type name or an array "
               "of them, got integer$");
    schema_bad("{\"type\": []}", "^schema.type: must not be an empty array$");
    schema_bad("{\"type\": [\"string\", \"strng\"]}",
               "^schema.type\\[1\\]: 'strng' is not a JSON type");
    schema_bad("{\"type\": [\"string\", \"string\"]}",
               "^schema.type\\[1\\]: 'string' is listed twice$");
    schema_bad("{\"type\": [\"string\", 3]}",
               "^schema.type\\[1\\]: must be a type name, got integer$");
    schema_bad("\"string\"", "^schema: a schema must be an object or a boolean, got string$");
    schema_bad("{\"properties\": {\"x\": 3}}",
               "^schema.properties.x: a schema must be an object or a boolean, got integer$");
    schema_bad("{\"properties\": []}",
               "^schema.properties: must be an object of schemas, got array$");
    schema_bad("{\"required\": \"a\"}", "^schema.required: must be an array of property names");
    schema_bad("{\"required\": [\"a\", 1]}",
               "^schema.required\\[1\\]: must be a property name, got integer$");
    schema_bad("{\"required\": [\"a\", \"a\"]}", "^schema.required\\[1\\]: 'a' is listed twice$");
    schema_bad("{\"enum\": []}",
               "^schema.enum: must be a non-empty array of values, got an empty one$");
    schema_bad("{\"enum\": 1}", "^schema.enum: must be a non-empty array of values, got integer$");
    schema_bad("{\"anyOf\": []}", "^schema.anyOf: must be a non-empty array of schemas");
    schema_bad("{\"oneOf\": {}}",
               "^schema.oneOf: must be a non-empty array of schemas, got object$");
    schema_bad("{\"not\": []}", "^schema.not: a schema must be an object or a boolean, got array$");
    schema_bad("{\"additionalProperties\": \"no\"}",
               "^schema.additionalProperties: a schema must be");
    schema_bad("{\"minLength\": -1}", "^schema.minLength: must be a non-negative integer, not -1$");
    schema_bad("{\"maxItems\": 1.5}", "^schema.maxItems: must be a non-negative integer, not 1.5$");
    schema_bad("{\"minItems\": \"1\"}",
               "^schema.minItems: must be a non-negative integer, got string$");
    schema_bad("{\"uniqueItems\": 1}", "^schema.uniqueItems: must be true or false, got integer$");
    schema_bad("{\"\\u0007\": 1}", "^schema: unknown keyword '\\\\x07'$");
    ok(crl_jsonschema_check(NULL, &e) < 0, "no schema at all is refused");
}

/* ---- depth and size bounds ---- */

static void test_depth(void)
{
    struct crl_err e = CRL_ERR_INIT;
    /* subschemas nested 64 deep below the root are fine, 65 are not */
    char *ok64 = nest("{\"items\": ", "true", "}", 64);
    char *bad65 = nest("{\"items\": ", "true", "}", 65);
    schema_ok(ok64);
    schema_bad(bad65, "subschemas nested deeper than 64 levels$");
    char *props = nest("{\"properties\": {\"p\": ", "true", "}}", 70);
    schema_bad(props, "^schema.properties.p.properties.p.*\\.\\.\\..*: subschemas nested deeper");

    /* instances: 64 levels of arrays pass, 65 are refused whatever the schema */
    char *i64 = nest("[", "1", "]", 64);
    char *i65 = nest("[", "1", "]", 65);
    valid("true", i64);
    invalid("true", i65, "^args\\[0\\]\\[0\\].*: nested deeper than 64 levels$");
    invalid("{}", i65, "nested deeper than 64 levels");
    char *o65 = nest("{\"k\": ", "null", "}", 65);
    invalid("{\"type\": \"object\"}", o65, "^args.k.k.*: nested deeper than 64 levels$");
    /* deep values in the schema itself */
    char *c65 = nest("[", "1", "]", 65);
    char buf[2048];
    snprintf(buf, sizeof(buf), "{\"const\": %s}", c65);
    schema_bad(buf, "^schema.const\\[0\\].*: nested deeper than 64 levels$");
    snprintf(buf, sizeof(buf), "{\"enum\": [%s]}", i64);
    schema_bad(buf, "^schema.enum\\[0\\].*: nested deeper than 64 levels$");

    /* a deep instance against a deep schema: recursion of both bounded */
    json_t *s = J(ok64), *inst = J(i64);
    ok(crl_jsonschema_validate(s, inst, "args", &e) == 0, "64 levels against 64 levels");
    json_decref(s);
    json_decref(inst);

    free(ok64);
    free(bad65);
    free(props);
    free(i64);
    free(i65);
    free(o65);
    free(c65);
}

/* ---- messages ---- */

static void test_messages(void)
{
    struct crl_err e = CRL_ERR_INIT;
    json_t *s = J("{\"type\": \"string\"}"), *inst = J("1");
    ok(crl_jsonschema_validate(s, inst, NULL, &e) < 0, "refused without a name");
    is_str(e.msg, "instance: expected string, got integer", "the root is called 'instance'");
    ok(crl_jsonschema_validate(s, inst, "args", NULL) < 0, "refused with no error to fill");
    json_decref(inst);

    /* a long key is cut, the message stays within its buffer */
    char key[600];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = 0;
    inst = json_object();
    json_object_set_new(inst, key, json_integer(1));
    json_t *outer = json_pack("{s:{s:s}}", "additionalProperties", "type", "string");
    ok(crl_jsonschema_check(outer, &e) == 0, "additionalProperties schema accepted");
    ok(crl_jsonschema_validate(outer, inst, "args", &e) < 0, "a long key's value is refused");
    like(e.msg, "^args\\['k{64}\\.\\.\\.'\\]: expected string, got integer$",
         "the key is cut after 64 bytes: %.100s...", e.msg);
    json_decref(inst);
    json_decref(outer);

    /* a deep path keeps its head and tail */
    char *schema = nest("{\"properties\": {\"abcdefghij\": ", "{\"type\": \"null\"}", "}}", 40);
    char *value = nest("{\"abcdefghij\": ", "0", "}", 40);
    invalid(schema, value,
            "^args.abcdefghij.abcdefghij.*\\.\\.\\..*abcdefghij.abcdefghij: expected null, got "
            "integer$");
    free(schema);
    free(value);

    /* a malformed schema that skipped the check is an internal error, not a crash */
    json_t *bad = J("{\"type\": 5, \"minimum\": \"x\"}");
    inst = J("1");
    ok(crl_jsonschema_validate(bad, inst, "args", &e) < 0 && e.code == CRL_E_INTERNAL,
       "an unchecked malformed schema: internal error");
    like(e.msg, "^args: the schema's 'type' is malformed", "and it says so: %s", e.msg);
    json_decref(bad);
    json_decref(inst);
    json_decref(s);
}

int main(void)
{
    TAP_RUN(test_type, 10);
    TAP_RUN(test_integer_vs_number, 10);
    TAP_RUN(test_enum_const, 10);
    TAP_RUN(test_object, 10);
    TAP_RUN(test_array, 10);
    TAP_RUN(test_unique_items, 20);
    TAP_RUN(test_string_length, 10);
    TAP_RUN(test_pattern, 10);
    TAP_RUN(test_pattern_refused, 10);
    TAP_RUN(test_numbers, 10);
    TAP_RUN(test_combinators, 10);
    TAP_RUN(test_boolean_schemas, 10);
    TAP_RUN(test_annotations, 10);
    TAP_RUN(test_check_refusals, 10);
    TAP_RUN(test_depth, 10);
    TAP_RUN(test_messages, 10);
    return done_testing();
}

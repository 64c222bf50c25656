/* A small, strict JSON Schema validator over jansson, for the arguments of
 * registered functions (issue 4).  Debian has no well-kept C library for it.
 *
 * Draft 2020-12 semantics for this subset of keywords:
 *   type (a name or an array of names: null boolean object array number
 *   string integer), enum, const, properties, required, additionalProperties,
 *   items (a schema), minItems, maxItems, uniqueItems, minLength, maxLength,
 *   pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf,
 *   allOf, anyOf, oneOf, not, and the boolean schemas true and false.
 * Annotations are accepted and ignored: title, description, default,
 * examples, $schema (2020-12 only), $id, $comment, deprecated, readOnly,
 * writeOnly.  Anything else, $ref included, is refused by
 * crl_jsonschema_check(): a keyword that would be silently skipped is a hole
 * in the validation, not a convenience.
 *
 * Where this differs from the letter of the standard, it says so here:
 *   - pattern is a POSIX extended regular expression (regcomp), searched
 *     unanchored as JSON Schema does, in the C.UTF-8 locale so that `.` is
 *     one code point (and, unlike ECMA-262, also matches a newline).  Escapes
 *     that mean something else in ECMA-262 (\d, \w, \s, \b, back-references,
 *     a backslash inside [...]) are refused.
 *   - numbers are compared exactly between integers and as long double
 *     otherwise; multipleOf on non-integers allows a relative error of a few
 *     ulps (0.3 is a multiple of 0.1).
 *   - schemas may nest CRL_JSONSCHEMA_MAX_DEPTH levels of subschemas, and
 *     instances CRL_JSONSCHEMA_MAX_DEPTH levels of arrays and objects. */
#ifndef CRL_FUNCTIONS_JSONSCHEMA_H
#define CRL_FUNCTIONS_JSONSCHEMA_H

#include <jansson.h>

#include "../util/err.h"

#define CRL_JSONSCHEMA_MAX_DEPTH 64

/* Check that `schema` is a schema this validator fully understands.  Returns
 * 0, or -1 with CRL_E_INVALID and a message naming the JSON path of the
 * offending keyword, e.g. "schema.properties.x.type: 'integr' is not a JSON
 * type" or "schema.items: '$ref' is not supported (...)". */
int crl_jsonschema_check(const json_t *schema, struct crl_err *err);

/* Validate `instance` against a schema that passed crl_jsonschema_check().
 * Returns 0, or -1 with CRL_E_INVALID and a message naming the path in the
 * instance, rooted at `what` ("args"): "args.count: expected integer, got
 * string", "args: missing required property 'name'", "args.tags[2]: ...".
 * Only the first failure is reported.  Instances nested deeper than
 * CRL_JSONSCHEMA_MAX_DEPTH are refused whatever the schema.  A schema that
 * was not checked and turns out malformed gives CRL_E_INTERNAL. */
int crl_jsonschema_validate(const json_t *schema, const json_t *instance, const char *what,
                            struct crl_err *err);

#endif

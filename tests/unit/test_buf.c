/* lib/util/buf: capped buffers (how exec output is truncated), UTF-8 checks
 * (whether output goes out as a JSON string or base64) and base64. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/util/buf.h"
#include "tap.h"

static void test_append_within_cap(void)
{
    struct crl_buf b;
    crl_buf_init(&b, 16);
    is_int(b.len, 0, "a new buffer is empty");
    ok(!crl_buf_truncated(&b), "a new buffer is not truncated");
    is_int(crl_buf_append(&b, "hello", 5), 0, "append 5 bytes");
    is_int(crl_buf_append(&b, " world", 6), 0, "append 6 more");
    is_int(b.len, 11, "len counts both appends");
    is_str(b.data, "hello world", "data is NUL-terminated after the bytes");
    is_int(b.dropped, 0, "nothing dropped under the cap");
    is_int(crl_buf_append(&b, "", 0), 0, "an empty append succeeds");
    is_int(b.len, 11, "an empty append changes nothing");
    crl_buf_free(&b);
    ok(b.data == NULL && b.len == 0, "free resets the buffer");
}

static void test_append_over_cap(void)
{
    struct crl_buf b;
    crl_buf_init(&b, 10);
    crl_buf_append(&b, "12345678", 8);
    is_int(crl_buf_append(&b, "abcdef", 6), 0, "an append over the cap still succeeds");
    is_int(b.len, 10, "the buffer holds exactly cap bytes");
    ok(b.len == 10 && memcmp(b.data, "12345678ab", 10) == 0, "it kept the first bytes that fit");
    is_int(b.data[10], 0, "and is NUL-terminated");
    is_int(b.dropped, 4, "the 4 bytes past the cap are counted as dropped");
    ok(crl_buf_truncated(&b), "the buffer reports truncation");
    crl_buf_append(&b, "xyz", 3);
    is_int(b.len, 10, "a full buffer takes nothing more");
    is_int(b.dropped, 7, "and counts every further byte as dropped");
    crl_buf_free(&b);

    crl_buf_init(&b, 0);
    is_int(crl_buf_append(&b, "abc", 3), 0, "a zero cap buffer accepts an append");
    is_int(b.len, 0, "but keeps nothing");
    is_int(b.dropped, 3, "and counts it all as dropped");
    crl_buf_free(&b);

    crl_buf_init(&b, 5);
    crl_buf_append(&b, "12345", 5);
    ok(!crl_buf_truncated(&b), "filling to exactly the cap is not truncation");
    crl_buf_free(&b);
}

static void test_unbounded_growth(void)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    char chunk[1000];
    size_t total = 0;
    bool content_ok = true;
    for (int i = 0; i < 3000; i++) {
        memset(chunk, 'a' + i % 26, sizeof(chunk));
        if (crl_buf_append(&b, chunk, sizeof(chunk)) < 0)
            break;
        total += sizeof(chunk);
    }
    is_int(b.len, 3000 * 1000, "an unbounded buffer grows to 3 MB");
    is_int(total, b.len, "every append succeeded");
    for (size_t i = 0; i < b.len && content_ok; i += 997)
        content_ok = b.data[i] == 'a' + (char)((i / 1000) % 26);
    ok(content_ok, "growth kept the content in order");
    ok(b.alloc > b.len, "the allocation leaves room for the NUL");
    is_int(b.dropped, 0, "an unbounded buffer drops nothing");
    crl_buf_free(&b);
}

static void test_consume(void)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    crl_buf_consume(&b, 5);
    is_int(b.len, 0, "consume on an empty buffer is harmless");
    crl_buf_append(&b, "abcdefgh", 8);
    crl_buf_consume(&b, 3);
    is_int(b.len, 5, "consume 3 of 8 leaves 5");
    is_str(b.data, "defgh", "the remaining bytes move to the front, NUL-terminated");
    crl_buf_consume(&b, 0);
    is_str(b.data, "defgh", "consume 0 changes nothing");
    crl_buf_consume(&b, 100);
    is_int(b.len, 0, "consuming more than len empties the buffer");
    is_str(b.data, "", "an emptied buffer is an empty string");
    crl_buf_append(&b, "xy", 2);
    is_str(b.data, "xy", "the buffer is usable after being emptied");
    crl_buf_free(&b);
}

static void test_printf(void)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    is_int(crl_buf_printf(&b, "%s=%d", "n", 42), 0, "printf into an empty buffer");
    is_str(b.data, "n=42", "printf formats");
    crl_buf_printf(&b, ";%s", "");
    crl_buf_append(&b, "|", 1);
    is_str(b.data, "n=42;|", "printf appends and mixes with append");
    char big[5000];
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    is_int(crl_buf_printf(&b, "<%s>", big), 0, "printf of 5000 bytes grows the buffer");
    is_int(b.len, 6 + 5001, "len counts the formatted bytes without the NUL");
    ok(b.data[6] == '<' && b.data[b.len - 1] == '>' && b.data[b.len] == 0,
       "the long output is whole and NUL-terminated");
    crl_buf_free(&b);

    /* The cap is the buffer's invariant ("bytes past the cap are counted but
     * dropped"); printf skips it.  Today only unbounded buffers are printed to. */
    crl_buf_init(&b, 4);
    crl_buf_printf(&b, "%s", "123456");
    ok(b.len <= 4 && b.dropped == 2, "printf into a capped buffer keeps cap bytes and counts "
                                     "the rest as dropped");
    crl_buf_free(&b);
}

static bool valid(const char *s, size_t n)
{
    return crl_utf8_valid(s, n);
}
#define V(lit) valid(lit, sizeof(lit) - 1)

static void test_utf8_valid(void)
{
    ok(V(""), "empty input is valid");
    ok(V("plain ASCII\n\t~"), "ASCII is valid");
    ok(V("\xc3\xa9"), "U+00E9 (2 bytes) is valid");
    ok(V("\xe2\x82\xac"), "U+20AC (3 bytes) is valid");
    ok(V("\xf0\x9f\x98\x80"), "U+1F600 (4 bytes) is valid");
    ok(V("\xc2\x80"), "U+0080, the smallest 2-byte sequence, is valid");
    ok(V("\xdf\xbf"), "U+07FF, the largest 2-byte sequence, is valid");
    ok(V("\xe0\xa0\x80"), "U+0800, the smallest 3-byte sequence, is valid");
    ok(V("\xef\xbf\xbf"), "U+FFFF is valid");
    ok(V("\xf0\x90\x80\x80"), "U+10000, the smallest 4-byte sequence, is valid");
    ok(V("\xf4\x8f\xbf\xbf"), "U+10FFFF, the largest code point, is valid");
    ok(V("\xed\x9f\xbf"), "U+D7FF, just below the surrogates, is valid");
    ok(V("\xee\x80\x80"), "U+E000, just above the surrogates, is valid");

    ok(!V("\xc0\x80"), "overlong NUL (C0 80) is invalid");
    ok(!V("\xc1\xbf"), "overlong C1 BF is invalid");
    ok(!V("\xe0\x80\x80"), "overlong 3-byte E0 80 80 is invalid");
    ok(!V("\xe0\x9f\xbf"), "overlong 3-byte U+07FF is invalid");
    ok(!V("\xf0\x80\x80\x80"), "overlong 4-byte F0 80 80 80 is invalid");
    ok(!V("\xf0\x8f\xbf\xbf"), "overlong 4-byte U+FFFF is invalid");
    ok(!V("\xed\xa0\x80"), "high surrogate U+D800 is invalid");
    ok(!V("\xed\xbf\xbf"), "low surrogate U+DFFF is invalid");
    ok(!V("\xf4\x90\x80\x80"), "U+110000, above the last code point, is invalid");
    ok(!V("\xf5\x80\x80\x80"), "lead byte F5 is invalid");
    ok(!V("\xff"), "byte FF is invalid");
    ok(!V("\xfe"), "byte FE is invalid");
    ok(!V("\x80"), "a lone continuation byte is invalid");
    ok(!V("a\xbf"), "a continuation byte after ASCII is invalid");
    ok(!V("\xc3"), "a 2-byte sequence cut short at the end is invalid");
    ok(!V("\xe2\x82"), "a 3-byte sequence cut short at the end is invalid");
    ok(!V("\xf0\x9f\x98"), "a 4-byte sequence cut short at the end is invalid");
    ok(!V("\xc3\x41"), "a lead byte followed by ASCII is invalid");
    ok(!V("\xe2\x82\x41"), "a 3-byte sequence with a bad last byte is invalid");
    ok(!V("a\0b"), "an embedded NUL is refused (it is sent as base64)");
    ok(!valid("\xc3\xa9", 1), "len bounds the check: half of U+00E9 is invalid");
    ok(valid("ab\xff", 2), "bytes past len are not looked at");
}

static size_t prefix(const char *s, size_t n)
{
    return crl_utf8_complete_prefix(s, n);
}
#define P(lit) prefix(lit, sizeof(lit) - 1)

static void test_utf8_prefix(void)
{
    is_int(P(""), 0, "empty input: empty prefix");
    is_int(P("abc"), 3, "ASCII is complete");
    is_int(P("ab\xc3"), 2, "a dangling 2-byte lead is held back");
    is_int(P("ab\xe2"), 2, "a dangling 3-byte lead is held back");
    is_int(P("ab\xe2\x82"), 2, "a 3-byte sequence missing 1 byte is held back");
    is_int(P("ab\xf0\x9f\x98"), 2, "a 4-byte sequence missing 1 byte is held back");
    is_int(P("ab\xf0\x9f"), 2, "a 4-byte sequence missing 2 bytes is held back");
    is_int(P("ab\xc3\xa9"), 4, "a complete 2-byte sequence is kept");
    is_int(P("\xe2\x82\xac"), 3, "a complete 3-byte sequence is kept");
    is_int(P("\xf0\x9f\x98\x80"), 4, "a complete 4-byte sequence is kept");
    is_int(P("a\x80"), 2, "a stray continuation byte is not held back");
    is_int(P("\x80\x80\x80\x80\x80"), 5, "a run of continuation bytes is not held back");
    is_int(P("a\xff"), 2, "an invalid byte is not held back");
    is_int(P("a\xc0"), 2, "a lead byte that can never start a sequence is not held back");

    /* Streaming: every cut of a valid text yields a valid prefix, and never
     * holds back more than a sequence's 3 bytes. */
    const char text[] = "x\xc3\xa9y\xe2\x82\xac\xf0\x9f\x98\x80z";
    bool all_ok = true;
    for (size_t k = 0; k <= sizeof(text) - 1; k++) {
        size_t p = prefix(text, k);
        if (p > k || k - p > 3 || !valid(text, p)) {
            diag("cut at %zu: prefix %zu", k, p);
            all_ok = false;
        }
    }
    ok(all_ok, "every cut of a valid text gives a valid prefix within 3 bytes of the cut");
}

static void test_base64_vectors(void)
{
    /* RFC 4648 section 10 */
    static const char *const vec[][2] = {{"", ""},
                                         {"f", "Zg=="},
                                         {"fo", "Zm8="},
                                         {"foo", "Zm9v"},
                                         {"foob", "Zm9vYg=="},
                                         {"fooba", "Zm9vYmE="},
                                         {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
        size_t olen = 99;
        char *enc = crl_base64_encode(vec[i][0], strlen(vec[i][0]), &olen);
        is_str(enc, vec[i][1], "encode '%s'", vec[i][0]);
        is_int(olen, strlen(vec[i][1]), "encode '%s': out_len", vec[i][0]);
        free(enc);
        char *dec = NULL;
        size_t dlen = 99;
        int r = crl_base64_decode(vec[i][1], strlen(vec[i][1]), &dec, &dlen);
        ok(r == 0 && dlen == strlen(vec[i][0]) && memcmp(dec, vec[i][0], dlen) == 0, "decode '%s'",
           vec[i][1]);
        free(dec);
    }
    char *enc = crl_base64_encode("\xfb\xff", 2, NULL);
    is_str(enc, "+/8=", "the alphabet's last two characters are + and /; out_len may be NULL");
    free(enc);
}

static void test_base64_round_trip(void)
{
    unsigned char data[600];
    uint32_t seed = 12345;
    for (size_t i = 0; i < sizeof(data); i++) {
        seed = seed * 1103515245u + 12345u;
        data[i] = i < 256 ? (unsigned char)i : (unsigned char)(seed >> 16);
    }
    bool all_ok = true;
    for (size_t len = 0; len <= sizeof(data); len++) {
        size_t elen, dlen;
        char *enc = crl_base64_encode(data, len, &elen);
        char *dec = NULL;
        if (!enc || elen != 4 * ((len + 2) / 3) || strlen(enc) != elen ||
            crl_base64_decode(enc, elen, &dec, &dlen) < 0 || dlen != len ||
            memcmp(dec, data, len) != 0) {
            diag("round trip failed at length %zu", len);
            all_ok = false;
        }
        free(enc);
        free(dec);
    }
    ok(all_ok, "encode/decode round trip of every length 0..600, all byte values");
}

static void test_base64_invalid(void)
{
    static const char *const bad[] = {
        "Zg=",                                        /* not a multiple of 4 */
        "Zg",                                         /* unpadded */
        "Z",        "Z===",                           /* padding in the second place */
        "====",     "Zg==Zg==",                       /* padding before the end */
        "Zm=v",                                       /* data after padding */
        "Zm9v!abc", "Zm9 v===", "Zm9v\nZm9v", "Zm-_", /* base64url is not base64 */
        "Zm9\x80",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = (char *)"untouched";
        size_t olen = 7;
        int r = crl_base64_decode(bad[i], strlen(bad[i]), &out, &olen);
        ok(r < 0 && strcmp(out, "untouched") == 0, "decode rejects '%s' (and leaves *out alone)",
           bad[i]);
        if (r == 0)
            free(out);
    }
    char *out;
    size_t olen;
    ok(crl_base64_decode("Zm9v\0AAA", 8, &out, &olen) < 0, "decode rejects an embedded NUL");
    ok(crl_base64_decode("", 0, &out, &olen) == 0 && olen == 0, "decode of empty input is empty");
    free(out);
}

int main(void)
{
    TAP_RUN(test_append_within_cap, 10);
    TAP_RUN(test_append_over_cap, 10);
    TAP_RUN(test_unbounded_growth, 30);
    TAP_RUN(test_consume, 10);
    TAP_RUN(test_printf, 10);
    TAP_RUN(test_utf8_valid, 10);
    TAP_RUN(test_utf8_prefix, 10);
    TAP_RUN(test_base64_vectors, 10);
    TAP_RUN(test_base64_round_trip, 30);
    TAP_RUN(test_base64_invalid, 10);
    return done_testing();
}

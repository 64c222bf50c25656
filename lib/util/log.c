#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum crl_log_level crl_log_max_level = CRL_LOG_INFO;
static enum crl_log_format log_format = CRL_LOG_TEXT;
static const char *log_component = "corral";

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void crl_log_setup(enum crl_log_level level, enum crl_log_format format, const char *component)
{
    crl_log_max_level = level;
    log_format = format;
    if (component)
        log_component = component;
}

int crl_log_parse_level(const char *s, enum crl_log_level *out)
{
    for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum crl_log_level)i;
            return 0;
        }
    return -1;
}

int crl_log_parse_format(const char *s, enum crl_log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = CRL_LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = CRL_LOG_JSON;
    else
        return -1;
    return 0;
}

/* Escape for a JSON string; the message is ours, but may quote user input. */
static size_t json_escape(char *out, size_t cap, const char *in)
{
    size_t o = 0;
    for (; *in && o + 7 < cap; in++) {
        unsigned char c = (unsigned char)*in;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = 0;
    return o;
}

static void log_emit(enum crl_log_level level, const char *sandbox, const char *msg)
{
    struct timeval tv;
    struct tm tm;
    char ts[40];
    char line[4096];
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)(tv.tv_usec / 1000));

    int len;
    if (log_format == CRL_LOG_JSON) {
        char emsg[3000];
        json_escape(emsg, sizeof(emsg), msg);
        if (sandbox)
            len = snprintf(line, sizeof(line),
                           "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"%s\","
                           "\"sandbox\":\"%s\",\"msg\":\"%s\"}\n",
                           ts, level_names[level], log_component, sandbox, emsg);
        else
            len = snprintf(line, sizeof(line),
                           "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"%s\",\"msg\":\"%s\"}\n",
                           ts, level_names[level], log_component, emsg);
    } else {
        len = snprintf(line, sizeof(line), "%s %-5s %s%s%s\n", ts, level_names[level],
                       sandbox ? sandbox : "", sandbox ? " " : "", msg);
    }
    if (len < 0)
        return;
    if ((size_t)len >= sizeof(line))
        len = sizeof(line) - 1, line[len - 1] = '\n';
    /* One write per line, so concurrent writers never interleave within a line. */
    ssize_t r;
    do
        r = write(STDERR_FILENO, line, (size_t)len);
    while (r < 0 && errno == EINTR);
}

void crl_log_write(enum crl_log_level level, const char *sandbox, const char *fmt, ...)
{
    int saved = errno;
    char msg[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_emit(level, sandbox, msg);
    errno = saved;
}

void crl_log_syscall_write(const char *sandbox, int errnum, const char *fmt, ...)
{
    int saved = errno;
    char call[2000];
    char msg[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call, sizeof(call), fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof(msg), "syscall failed: %s: %s", call, strerror(errnum));
    log_emit(CRL_LOG_WARN, sandbox, msg);
    errno = saved;
}

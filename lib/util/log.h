/* One log function for the daemon and its helpers.  A line per event, to
 * stderr: text by default, JSON (`--log-format json`) for machines.  The level
 * is checked before anything is formatted. */
#ifndef CRL_UTIL_LOG_H
#define CRL_UTIL_LOG_H

enum crl_log_level { CRL_LOG_ERROR, CRL_LOG_WARN, CRL_LOG_INFO, CRL_LOG_DEBUG };
enum crl_log_format { CRL_LOG_TEXT, CRL_LOG_JSON };

extern enum crl_log_level crl_log_max_level;

void crl_log_setup(enum crl_log_level level, enum crl_log_format format, const char *component);
int crl_log_parse_level(const char *s, enum crl_log_level *out);
int crl_log_parse_format(const char *s, enum crl_log_format *out);

/* `sandbox` may be NULL.  Prefer the macros, which skip formatting when the
 * level is off. */
void crl_log_write(enum crl_log_level level, const char *sandbox, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define crl_log(level, sandbox, ...)                        \
    do {                                                    \
        if ((level) <= crl_log_max_level)                   \
            crl_log_write((level), (sandbox), __VA_ARGS__); \
    } while (0)

#define crl_error(sb, ...) crl_log(CRL_LOG_ERROR, sb, __VA_ARGS__)
#define crl_warn(sb, ...) crl_log(CRL_LOG_WARN, sb, __VA_ARGS__)
#define crl_info(sb, ...) crl_log(CRL_LOG_INFO, sb, __VA_ARGS__)
#define crl_debug(sb, ...) crl_log(CRL_LOG_DEBUG, sb, __VA_ARGS__)

/* A failed syscall: names the call and its arguments, then strerror(errnum). */
#define crl_log_syscall(sb, errnum, ...)                        \
    do {                                                        \
        if (CRL_LOG_WARN <= crl_log_max_level)                  \
            crl_log_syscall_write((sb), (errnum), __VA_ARGS__); \
    } while (0)
void crl_log_syscall_write(const char *sandbox, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

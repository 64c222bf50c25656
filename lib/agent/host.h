/* The host's end of an agent session: what the codec cannot know, checked
 * here for corrald and the tests (proto.h leaves it to the caller).  Over
 * the decoder, every frame the guest sends is held to the session's state:
 *
 *   - stream 0: HELLO first and once (its message parsed and kept; see
 *     crl_agent_host_takeover for a guest greeted before); READY
 *     only after a CONFIG went out, once per CONFIG; PING, PONG, ERROR and
 *     BYE after HELLO;
 *   - any other stream must be one the host opened, and the frame of its
 *     kind: STDOUT, STDERR, CREDIT and EXIT on an exec's; DATA (then an
 *     empty DATA) and RESULT on a FILE_GET's; CREDIT and RESULT on a
 *     FILE_PUT's; ERROR on any.  EXIT, RESULT and ERROR close the stream;
 *   - the bytes of STDOUT, STDERR and DATA within the window the host
 *     granted (struct crl_agent_window).
 *
 * A frame on a stream the host has closed itself (crl_agent_host_close)
 * was in flight: it is dropped, not an error.  Anything else that breaks
 * a rule fails the session for good, like the decoder: the host kills the
 * guest with the message as its reason.  No I/O here: the caller reads and
 * writes the bytes (an event loop, or a test's blocking socket). */
#ifndef CRL_AGENT_HOST_H
#define CRL_AGENT_HOST_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/err.h"
#include "msg.h"
#include "proto.h"

enum crl_agent_stream_kind {
    CRL_AGENT_STREAM_EXEC = 1,
    CRL_AGENT_STREAM_GET,
    CRL_AGENT_STREAM_PUT,
};

struct crl_agent_host_stream {
    uint32_t id;
    enum crl_agent_stream_kind kind;
    struct crl_agent_window win;
    bool data_ended; /* a FILE_GET's empty DATA came: only its RESULT may follow */
};

/* The caller owns the struct; its fields are the session's own but for
 * hello, which is the guest's HELLO once crl_agent_host_hello_seen(). */
struct crl_agent_host {
    struct crl_agent_dec dec;
    struct crl_agent_hello hello;
    bool hello_seen;
    bool hello_optional;         /* a takeover: one HELLO may still come */
    unsigned configs_unanswered; /* CONFIGs sent and not yet answered by READY */
    struct crl_agent_host_stream *streams;
    size_t n_streams, cap_streams;
    uint32_t next_id; /* the next stream id crl_agent_host_open gives */
    bool failed;
    char msg[256];
};

int crl_agent_host_init(struct crl_agent_host *h, struct crl_err *err);
void crl_agent_host_free(struct crl_agent_host *h);

/* A host that takes over a guest already greeted (restored from a template
 * whose HELLO was `known`, or found running by a restarted corrald): no
 * HELLO is awaited, since virtio-serial may not tell the guest its host
 * changed; it sends CONFIG at once.  One HELLO may still come, if the
 * guest did notice (it is parsed and kept); call right after init. */
void crl_agent_host_takeover(struct crl_agent_host *h, const struct crl_agent_hello *known);

/* Bytes from the guest, as crl_agent_dec_feed. */
size_t crl_agent_host_feed(struct crl_agent_host *h, const void *data, size_t len);

/* The next frame that passed every rule above: 1 with *f (valid until the
 * next call), 0 when more bytes are needed, -1 with CRL_E_INVALID naming
 * what the guest did wrong; once -1, always -1.  A frame for a stream the
 * host closed is skipped.  After a stream's closing frame (EXIT, RESULT,
 * ERROR) the stream is gone. */
int crl_agent_host_next(struct crl_agent_host *h, struct crl_agent_frame *f, struct crl_err *err);

/* The host sends a CONFIG: a READY may now come. */
void crl_agent_host_config_sent(struct crl_agent_host *h);

/* Open a stream of a kind (the host then sends its EXEC, FILE_GET or
 * FILE_PUT on *id); -1 if out of memory. */
int crl_agent_host_open(struct crl_agent_host *h, enum crl_agent_stream_kind kind, uint32_t *id,
                        struct crl_err *err);
/* The open stream id, or NULL. */
struct crl_agent_host_stream *crl_agent_host_stream(struct crl_agent_host *h, uint32_t id);
/* The host gives up a stream (it sent ERROR on it, say); the guest's
 * frames still in flight for it are dropped. */
void crl_agent_host_close(struct crl_agent_host *h, uint32_t id);

#endif

/* The wire protocol between corrald and corral-agent, the guest's PID 1 in
 * a microVM (issue 13): frames over a byte stream (a virtio-serial port;
 * vsock later).  Both ends link this file; it depends on libc and on
 * lib/util/err.c (itself libc only), so the static agent stays small.  The
 * JSON payloads are parsed in msg.c (jansson).
 *
 * A frame is a 12-byte header, little-endian, then `len` bytes of payload:
 *
 *   u32 len     0 .. the type's maximum (never over CRL_AGENT_MAX_PAYLOAD)
 *   u16 type    enum crl_agent_type
 *   u16 flags   0 in version 1; anything else is a protocol error
 *   u32 stream  0 = control; other ids are opened by the host (an EXEC,
 *               FILE_GET or FILE_PUT on an unused id opens it)
 *
 * No checksum: the transport is reliable.  Each type has a sender (host,
 * guest or either), a payload shape (bytes, a JSON object of at most
 * CRL_AGENT_MAX_JSON, a u32, a u64, or nothing), a maximum length, and a
 * stream rule (stream 0, a non-zero stream, or either); a frame that breaks
 * any of them is a protocol error and the connection is over: the host
 * kills a guest that sends one.
 *
 * What this file does not check, and the caller must: that a frame's
 * stream is open (the guest may only use ids the host opened, and only
 * with the frames that stream's kind carries), and what a JSON payload
 * says (msg.c).
 *
 * Flow control: the bytes of STDIN, STDOUT, STDERR and DATA frames count
 * against a per-stream window that starts at CRL_AGENT_INITIAL_WINDOW in
 * each direction when the stream opens; the receiver grants more with
 * CREDIT frames (u32 bytes) as it consumes them.  A sender may have at most
 * the granted bytes in flight; a peer that sends more is in error (struct
 * crl_agent_window).  Zero-length frames (EOF, end of a transfer) cost
 * nothing and are always allowed.
 *
 * ERROR on stream 0 says why the sender is about to hang up; on another
 * stream, that the stream failed and is closed.  BYE (stream 0, empty)
 * announces an orderly close.  PING carries a u64 token that PONG echoes. */
#ifndef CRL_AGENT_PROTO_H
#define CRL_AGENT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

#define CRL_AGENT_PROTO_VERSION 2 /* 2: STARTED, RESIZE, terminals */
#define CRL_AGENT_HEADER_SIZE 12
#define CRL_AGENT_MAX_PAYLOAD (1024u * 1024u) /* 1 MiB: any frame */
#define CRL_AGENT_MAX_JSON (64u * 1024u)      /* a JSON payload */
#define CRL_AGENT_INITIAL_WINDOW (256u * 1024u)
/* A window may not be granted past this: a peer's CREDIT that would open
 * more is an error (it cannot overflow the counter, and nobody needs it). */
#define CRL_AGENT_MAX_WINDOW (16u * 1024u * 1024u)

enum crl_agent_type {
    CRL_AGENT_HELLO = 1,     /* guest: JSON {"proto","agent","kernel"}; stream 0 */
    CRL_AGENT_CONFIG = 2,    /* host: JSON (hostname, clock, seed, layers); stream 0 */
    CRL_AGENT_READY = 3,     /* guest: JSON; stream 0 */
    CRL_AGENT_EXEC = 4,      /* host: JSON (argv, env, cwd, ...); opens its stream */
    CRL_AGENT_STDIN = 5,     /* host: bytes; len 0 = EOF */
    CRL_AGENT_STDOUT = 6,    /* guest: bytes */
    CRL_AGENT_STDERR = 7,    /* guest: bytes */
    CRL_AGENT_EXIT = 8,      /* guest: JSON (code or signal, reason, usage) */
    CRL_AGENT_SIGNAL = 9,    /* host: JSON {"signal"} */
    CRL_AGENT_FILE_GET = 10, /* host: JSON {"path",...}; opens its stream */
    CRL_AGENT_FILE_PUT = 11, /* host: JSON {"path",...}; opens its stream */
    CRL_AGENT_DATA = 12,     /* either: bytes of a transfer; len 0 = end */
    CRL_AGENT_RESULT = 13,   /* guest: JSON {"ok","error"} ends a transfer */
    CRL_AGENT_CREDIT = 14,   /* either: u32 bytes granted on that stream */
    CRL_AGENT_PING = 15,     /* either: u64 token; stream 0 */
    CRL_AGENT_PONG = 16,     /* either: the PING's token; stream 0 */
    CRL_AGENT_ERROR = 17,    /* either: JSON {"message"}; any stream */
    CRL_AGENT_BYE = 18,      /* either: empty; stream 0 */
    CRL_AGENT_STARTED = 19,  /* guest: JSON {"pid"}: an EXEC's process runs */
    CRL_AGENT_RESIZE = 20,   /* host: JSON {"rows", "cols"}: an EXEC's terminal's size */
    CRL_AGENT__TYPE_MAX = CRL_AGENT_RESIZE
};

/* The two ends.  A decoder is told which end it runs on; an encoder which
 * end sends. */
enum crl_agent_side { CRL_AGENT_SIDE_HOST = 1, CRL_AGENT_SIDE_GUEST = 2 };

enum crl_agent_payload {
    CRL_AGENT_P_EMPTY, /* exactly 0 bytes */
    CRL_AGENT_P_BYTES, /* any bytes, counted against the stream's window */
    CRL_AGENT_P_JSON,  /* a JSON object: 2.. CRL_AGENT_MAX_JSON bytes of UTF-8, no NUL */
    CRL_AGENT_P_U32,   /* exactly 4 bytes, little-endian, not 0 */
    CRL_AGENT_P_U64,   /* exactly 8 bytes, little-endian */
};

enum crl_agent_stream_rule {
    CRL_AGENT_S_ZERO,    /* only on stream 0 */
    CRL_AGENT_S_NONZERO, /* only on an exec's, a session's or a transfer's stream */
    CRL_AGENT_S_ANY,
};

struct crl_agent_type_info {
    const char *name; /* "STDOUT" */
    unsigned senders; /* bit mask of enum crl_agent_side */
    enum crl_agent_payload payload;
    uint32_t max_len; /* most payload bytes */
    enum crl_agent_stream_rule stream;
};

/* The rules of a type; NULL for a type that is not in version 1. */
const struct crl_agent_type_info *crl_agent_type_info(uint32_t type);
/* Its name, or "type N" (in buf, of at least 16 bytes) for an unknown one. */
const char *crl_agent_type_name(uint32_t type, char *buf, size_t bufsize);

struct crl_agent_frame {
    uint16_t type;
    uint16_t flags;
    uint32_t stream;
    uint32_t len;
    const uint8_t *payload; /* len bytes; a decoded frame's: valid until the next call */
};

/* Would `from` be allowed to send this frame?  Checks everything the
 * decoder checks: the type, flags, sender, stream rule, length and payload
 * shape (for JSON: UTF-8 without NUL, starting with '{').  CRL_E_INVALID
 * naming what is wrong. */
int crl_agent_frame_check(enum crl_agent_side from, const struct crl_agent_frame *f,
                          struct crl_err *err);

/* ---- encoding ---- */

/* Write a header into out. */
void crl_agent_put_header(uint8_t out[CRL_AGENT_HEADER_SIZE], uint16_t type, uint32_t stream,
                          uint32_t len);

/* Header and payload of a frame `from` may send, into out (cap bytes);
 * returns the frame's size, or -1 (CRL_E_INVALID) if the frame breaks a
 * rule (crl_agent_frame_check) or does not fit in cap. */
long crl_agent_encode(enum crl_agent_side from, uint8_t *out, size_t cap, uint16_t type,
                      uint32_t stream, const void *payload, uint32_t len, struct crl_err *err);

/* Fixed-size frames: header and payload into out, whose size they need. */
#define CRL_AGENT_CREDIT_FRAME_SIZE (CRL_AGENT_HEADER_SIZE + 4)
#define CRL_AGENT_PING_FRAME_SIZE (CRL_AGENT_HEADER_SIZE + 8)
void crl_agent_encode_credit(uint8_t out[CRL_AGENT_CREDIT_FRAME_SIZE], uint32_t stream,
                             uint32_t bytes);
/* type: CRL_AGENT_PING or CRL_AGENT_PONG */
void crl_agent_encode_ping(uint8_t out[CRL_AGENT_PING_FRAME_SIZE], uint16_t type, uint64_t token);
/* BYE, or an empty STDIN (EOF) or DATA (end of a transfer) */
void crl_agent_encode_empty(uint8_t out[CRL_AGENT_HEADER_SIZE], uint16_t type, uint32_t stream);

/* The value of a CREDIT, PING or PONG frame the decoder returned. */
uint32_t crl_agent_frame_u32(const struct crl_agent_frame *f);
uint64_t crl_agent_frame_u64(const struct crl_agent_frame *f);

/* ---- decoding ---- */

/* An incremental decoder for a hostile peer.  It buffers at most one frame
 * of the largest size plus its header (1 MiB + 12 bytes, allocated at init)
 * and checks each header as soon as it is complete, so an oversized or
 * forbidden frame is refused before its payload arrives.  The caller owns
 * the struct; its fields are the decoder's own. */
struct crl_agent_dec {
    enum crl_agent_side side; /* the end that decodes */
    uint8_t *buf;
    size_t cap;
    size_t start, end; /* buffered bytes: buf[start, end) */
    size_t consumed;   /* the last frame returned, dropped at the next call */
    bool failed;
    char msg[256]; /* the error, repeated by every call once failed */
};

/* side: the end this decoder runs on (the host decodes what the guest
 * sends, and refuses what only the host may send).  -1 if out of memory. */
int crl_agent_dec_init(struct crl_agent_dec *d, enum crl_agent_side side, struct crl_err *err);
void crl_agent_dec_free(struct crl_agent_dec *d);

/* Copy up to len bytes of data into the decoder; returns how many it took
 * (0 when its buffer is full: take frames out with crl_agent_dec_next
 * first, then feed the rest).  A failed decoder takes everything and keeps
 * nothing. */
size_t crl_agent_dec_feed(struct crl_agent_dec *d, const void *data, size_t len);

/* The next frame: 1 with *f filled (its payload points into the decoder,
 * valid until the next call of crl_agent_dec_next or _feed), 0 when more bytes are needed, -1 on a
 * protocol error (CRL_E_INVALID naming what is wrong).  After -1 the
 * decoder stays failed: every later call returns -1 with the same error. */
int crl_agent_dec_next(struct crl_agent_dec *d, struct crl_agent_frame *f, struct crl_err *err);

/* Bytes buffered and not yet returned as frames. */
size_t crl_agent_dec_pending(const struct crl_agent_dec *d);

/* ---- flow control ---- */

/* The windows of one stream, as one end keeps them.  Start with
 * crl_agent_window_init when the stream opens. */
struct crl_agent_window {
    uint32_t send; /* bytes this end may still send */
    uint32_t recv; /* bytes the peer may still send this end */
};

void crl_agent_window_init(struct crl_agent_window *w);

/* Does this frame type count against a window (STDIN, STDOUT, STDERR, DATA)? */
bool crl_agent_type_windowed(uint16_t type);

/* A frame of the peer's arrived on this stream: take its bytes off the
 * receive window; -1 (CRL_E_INVALID) if they exceed it (the peer broke the
 * protocol).  Frames that are not windowed cost nothing. */
int crl_agent_window_received(struct crl_agent_window *w, const struct crl_agent_frame *f,
                              struct crl_err *err);

/* This end sent a CREDIT of n bytes: the peer may send n more.  -1
 * (CRL_E_INVALID) if the window would exceed CRL_AGENT_MAX_WINDOW. */
int crl_agent_window_grant(struct crl_agent_window *w, uint32_t n, struct crl_err *err);

/* The peer's CREDIT frame arrived: this end may send its bytes more.  -1
 * (CRL_E_INVALID) if the window would exceed CRL_AGENT_MAX_WINDOW. */
int crl_agent_window_credit(struct crl_agent_window *w, const struct crl_agent_frame *f,
                            struct crl_err *err);

/* This end is about to send a windowed frame of n bytes: -1
 * (CRL_E_INVALID) if n is over the send window (send less: at most
 * w->send), else takes n off it. */
int crl_agent_window_sending(struct crl_agent_window *w, uint32_t n, struct crl_err *err);

#endif

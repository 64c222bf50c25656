#!/usr/bin/python3
"""Write the seed corpus of fuzz_dns (tests/fuzz/corpus/dns/).

Each file is one mode byte (even: a sandbox's query; odd: an upstream's
answer to www.example.com A IN, sent with id 0x5555) and a DNS packet, the
shape real stub resolvers and recursive resolvers send: a query with and
without EDNS, an answer of a CNAME and two A records with compressed names,
an NXDOMAIN with the zone's SOA, an answer with AAAA, authority and
additional records; and two that found bugs (answer_expanding,
query_two_tsig).  The output is deterministic.

    tests/fuzz/make_dns_corpus.py [OUT_DIR]
"""

import struct
import sys
from pathlib import Path

QUERY, ANSWER = b"\x00", b"\x01"
A, NS, CNAME, SOA, AAAA, OPT = 1, 2, 5, 6, 28, 41


def name(dotted):
    out = b""
    for label in dotted.split(".") if dotted else []:
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def header(ident, flags, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", ident, flags, qd, an, ns, ar)


def rr(owner, rtype, ttl, rdata, rclass=1):
    return owner + struct.pack(">HHIH", rtype, rclass, ttl, len(rdata)) + rdata


PTR_Q = b"\xc0\x0c"  # the question's name
QUESTION = name("www.example.com") + struct.pack(">HH", A, 1)
EDNS = rr(b"\x00", OPT, 0, b"", rclass=1232)

SEEDS = {
    "query_a": QUERY + header(0x1234, 0x0100) + QUESTION,
    "query_a_edns": QUERY
    + header(0x2345, 0x0120, ar=1)
    + name("Deb.Debian.ORG")
    + struct.pack(">HH", A, 1)
    + EDNS,
    "query_aaaa_no_rd": QUERY + header(7, 0x0000) + name("example.net") + struct.pack(">HH", AAAA, 1),
    "answer_cname_a": ANSWER
    + header(0x5555, 0x8180, an=3)
    + QUESTION
    + rr(PTR_Q, CNAME, 300, name("cdn.example.net"))
    + rr(b"\xc0\x2d", A, 60, bytes([192, 0, 2, 7]))  # cdn.example.net, the CNAME's target
    + rr(b"\xc0\x2d", A, 60, bytes([198, 51, 100, 9])),
    "answer_nxdomain": ANSWER
    + header(0x5555, 0x8183, ns=1)
    + QUESTION
    + rr(
        b"\xc0\x10",  # example.com
        SOA,
        900,
        name("ns.example.com") + name("hostmaster.example.com") + struct.pack(">IIIII", 1, 7200, 900, 1209600, 300),
    ),
    "answer_mixed": ANSWER
    + header(0x5555, 0x8580, an=3, ns=1, ar=2)
    + QUESTION
    + rr(PTR_Q, A, 3600, bytes([203, 0, 113, 1]))
    + rr(PTR_Q, AAAA, 3600, bytes.fromhex("20010db8000000000000000000000001"))
    + rr(PTR_Q, A, 3600, bytes([10, 0, 0, 1]), rclass=3)
    + rr(b"\xc0\x10", NS, 3600, name("ns.example.com"))
    + rr(name("ns.example.com"), A, 3600, bytes([192, 0, 2, 53]))
    + EDNS,
}

# A CNAME whose rdata, read from each of its first 63 bytes, is a different
# 193-byte name, and 62 CNAMEs pointing at them: 1.2 KiB that would rebuild
# to 12 (refused).
BLOB = (bytes([63] * 63) + b"z") * 3 + bytes(63)
BLOB_AT = 12 + len(QUESTION) + 12
SEEDS["answer_expanding"] = (
    ANSWER
    + header(0x5555, 0x8180, an=63)
    + QUESTION
    + rr(PTR_Q, CNAME, 60, BLOB)
    + b"".join(rr(PTR_Q, CNAME, 60, struct.pack(">H", 0xC000 | (BLOB_AT + i))) for i in range(1, 63))
)


# Two TSIG records among three additional ones: libldns 1.8.3 keeps the
# last TSIG as the packet's and loses the first (refused before it sees
# them).
TSIG = rr(name("key.example"), 250, 0, PTR_Q, rclass=255)
SEEDS["query_two_tsig"] = QUERY + header(0x1234, 0x0100, ar=3) + QUESTION + TSIG + TSIG + EDNS


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "corpus" / "dns")
    out.mkdir(parents=True, exist_ok=True)
    for fname, data in SEEDS.items():
        (out / fname).write_bytes(data)


if __name__ == "__main__":
    main()

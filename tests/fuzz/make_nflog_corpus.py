#!/usr/bin/python3
"""Write the seed corpus of fuzz_nflog (tests/fuzz/corpus/nflog/).

Each file is the start of an IPv4 packet as nfnetlink_log copies it from a
sandbox's dropped packet: a TCP SYN, a UDP datagram after 40 bytes of
options, an ICMP echo, a later fragment, a TCP header cut short, and one
whose total length ends before its transport header.  Deterministic.

    tests/fuzz/make_nflog_corpus.py [OUT_DIR]
"""

import struct
import sys
from pathlib import Path

SRC, DST = bytes([10, 213, 0, 2]), bytes([203, 0, 113, 7])


def ip4(proto, rest, options=b"", frag=0, total=None):
    ihl = 5 + len(options) // 4
    length = ihl * 4 + len(rest) if total is None else total
    hdr = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0, length, 1, frag, 64, proto, 0, SRC, DST)
    return hdr + options + rest


TCP_SYN = struct.pack(">HHIIBBHHH", 50000, 443, 1, 0, 5 << 4, 0x02, 64240, 0, 0)
UDP = struct.pack(">HHHH", 12345, 53, 10, 0) + b"hi"
ICMP_ECHO = struct.pack(">BBHHH", 8, 0, 0, 1, 1) + b"ping"

SEEDS = {
    "tcp_syn": ip4(6, TCP_SYN),
    "udp_options": ip4(17, UDP, options=b"\x01" * 40),
    "icmp_echo": ip4(1, ICMP_ECHO),
    "udp_later_fragment": ip4(17, UDP, frag=0x0010),
    "tcp_cut": ip4(6, TCP_SYN)[:22],
    "tcp_total_short": ip4(6, TCP_SYN, total=22),
}


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "corpus" / "nflog")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in SEEDS.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Extracts Jane Austen's novels (public domain; Project Gutenberg texts) from the Debian package
r-cran-janeaustenr, which stores them as R character vectors (one line each) in an R lazy-load
database (data/Rdata.rdx + data/Rdata.rdb). Standard library only: a minimal reader of R's XDR
serialization, enough for a named list of offsets and plain character vectors.

usage: extract_austen.py R_PACKAGE_DIR OUT_DIR   (writes OUT_DIR/<novel>.txt, lines joined by \\n)
"""
import gzip
import struct
import sys
import zlib
from pathlib import Path


class Unserializer:
    def __init__(self, data):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.b, self.i, self.refs = data, 2, []
        version = self.int()
        self.int(), self.int()
        if version == 3:
            n = self.int()
            self.i += n

    def int(self):
        v = struct.unpack(">i", self.b[self.i:self.i + 4])[0]
        self.i += 4
        return v

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (254, 242):  # NULL, empty environment
            return None
        if kind == 255:  # reference to an earlier symbol
            return self.refs[(flags >> 8) - 1]
        if kind == 1:  # symbol
            v = self.item()
            self.refs.append(v)
            return v
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            v = self.b[self.i:self.i + n].decode("utf-8", "replace")
            self.i += n
            return v
        if kind == 2:  # pairlist (attributes)
            if has_attr:
                self.item()
            tag = self.item() if has_tag else None
            car, cdr = self.item(), self.item()
            out = {tag: car}
            if isinstance(cdr, dict):
                out.update(cdr)
            return out
        if kind in (16, 19, 20):  # character vector, list, expression
            v = [self.item() for _ in range(self.int())]
        elif kind in (10, 13):  # logical, integer
            v = [self.int() for _ in range(self.int())]
        elif kind == 14:  # double
            n = self.int()
            v = list(struct.unpack(">%dd" % n, self.b[self.i:self.i + 8 * n]))
            self.i += 8 * n
        else:
            raise ValueError("unsupported R type %d" % kind)
        return (v, self.item()) if has_attr else v


def main():
    pkg, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    index, _ = Unserializer(gzip.decompress((pkg / "data" / "Rdata.rdx").read_bytes())).item()
    variables, names = index[0]
    rdb = (pkg / "data" / "Rdata.rdb").read_bytes()
    for name, (offset, length) in zip(names["names"], variables):
        blob = rdb[offset:offset + length]
        lines = Unserializer(zlib.decompress(blob[4:])).item()
        if isinstance(lines, tuple):
            lines = lines[0]
        text = "\n".join(x if x is not None else "" for x in lines) + "\n"
        (out / (name + ".txt")).write_text(text, encoding="utf-8")
        print(out / (name + ".txt"))


if __name__ == "__main__":
    main()

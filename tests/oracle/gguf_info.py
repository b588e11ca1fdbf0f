#!/usr/bin/env python3
"""gguf_info.py — a small stdlib-only GGUF v2/v3 header reader for the parity harness.

  gguf_info.py sha256 FILE        sha256 of the whole file
  gguf_info.py weights FILE       "weights sha256": over the tensors sorted by name, the name, ggml
                                  type, dims and data bytes of each — independent of metadata and
                                  tensor order, so two writers of the same weights agree
  gguf_info.py tensors FILE       one line per tensor: name type dims

Written for the tests (independent of worker/gguf/gguf.c, which is under test)."""
import hashlib
import struct
import sys

# element sizes of the scalar metadata types (8 = string, 9 = array handled apart)
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# (block elements, block bytes) of the ggml types the harness writes
_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
          20: (32, 18), 23: (256, 136), 30: (1, 2), 39: (32, 17)}


class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 4
        if self.buf[:4] != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        self.version, = self._u("<I")
        if self.version not in (2, 3):
            raise ValueError("%s: GGUF version %d" % (path, self.version))
        n_tensors, n_kv = self._u("<QQ")
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            t, = self._u("<I")
            self.kv[key] = self._val(t)
        self.tensors = []
        for _ in range(n_tensors):
            name = self._str()
            nd, = self._u("<I")
            dims = list(self._u("<%dQ" % nd))
            t, off = self._u("<IQ")
            self.tensors.append((name, t, dims, off))
        align = self.kv.get("general.alignment", 32)
        self.data_start = (self.pos + align - 1) // align * align

    def _u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        n, = self._u("<Q")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "replace")

    def _val(self, t):
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u("<IQ")
            if et in _SCALAR and et != 8:
                self.pos += _SCALAR[et] * n  # arrays are skipped, not needed here
                return None
            return [self._val(et) for _ in range(n)]
        fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
               11: "<q", 12: "<d"}[t]
        return self._u(fmt)[0]

    def tensor_bytes(self, t):
        name, typ, dims, off = t
        n = 1
        for d in dims:
            n *= d
        blk, size = _BLOCK[typ]
        nb = n // blk * size
        start = self.data_start + off
        return self.buf[start:start + nb]


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def weights_sha256(path):
    r = Reader(path)
    h = hashlib.sha256()
    for t in sorted(r.tensors, key=lambda t: t[0]):
        h.update(("%s %d %s\n" % (t[0], t[1], ",".join(map(str, t[2])))).encode())
        h.update(r.tensor_bytes(t))
    return h.hexdigest()


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("sha256", "weights", "tensors"):
        sys.exit(__doc__)
    cmd, path = sys.argv[1], sys.argv[2]
    if cmd == "sha256":
        print(file_sha256(path))
    elif cmd == "weights":
        print(weights_sha256(path))
    else:
        for name, typ, dims, _ in Reader(path).tensors:
            print(name, typ, ",".join(map(str, dims)))


if __name__ == "__main__":
    main()

"""A small GGUF v2/v3 reader (numpy): metadata, and tensors dequantized to float32 (F32, F16,
BF16, Q4_0, Q4_1, Q8_0: what SmolLM2-135M-Instruct.Q4_1.gguf holds; examples/smollm2/gguf.cpp
is the C++ reader this follows)."""
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34)}  # type: (elements, bytes) a block


class GGUF:
    def __init__(self, path):
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError("%s is not a GGUF file" % path)
        self.pos = 4
        version, n_tensors, n_kv = self._u32(), self._u64(), self._u64()
        if version not in (2, 3):
            raise ValueError("GGUF version %d" % version)
        self.meta = {}
        for _ in range(n_kv):
            key = self._str()
            self.meta[key] = self._value(self._u32())
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            dims = [self._u64() for _ in range(self._u32())]
            ttype, offset = self._u32(), self._u64()
            self.tensors[name] = (dims, ttype, offset)
        align = int(self.meta.get("general.alignment", 32))
        self.data = (self.pos + align - 1) // align * align

    def _read(self, fmt):
        n = struct.calcsize(fmt)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def _u32(self):
        return self._read("<I")

    def _u64(self):
        return self._read("<Q")

    def _str(self):
        n = self._u64()
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _value(self, t):
        if t in _SCALARS:
            return self._read(_SCALARS[t])
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u32(), self._u64()
            if et in _SCALARS:
                fmt = _SCALARS[et]
                a = np.frombuffer(self.buf, dtype=np.dtype(fmt), count=n, offset=self.pos).copy()
                self.pos += n * struct.calcsize(fmt)
                return a
            return [self._value(et) for _ in range(n)]
        raise ValueError("GGUF metadata type %d" % t)

    def tensor(self, name):
        """float32 array, shape in row-major order (GGUF lists the fastest dimension first)."""
        dims, t, off = self.tensors[name]
        n = int(np.prod(dims))
        if t not in _BLOCKS:
            raise ValueError("%s: tensor type %d not supported" % (name, t))
        per, nbytes = _BLOCKS[t]
        raw = np.asarray(self.buf[self.data + off:self.data + off + n // per * nbytes])
        if t == 0:
            x = raw.view("<f4").astype(np.float32)
        elif t == 1:
            x = raw.view("<f2").astype(np.float32)
        elif t == 30:
            x = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            b = raw.reshape(-1, nbytes)
            d = b[:, 0:2].copy().view("<f2").astype(np.float32)
            if t == 8:  # Q8_0: d, 32 int8
                x = d * b[:, 2:].view(np.int8).astype(np.float32)
            else:
                q = b[:, nbytes - 16:]
                codes = np.concatenate([q & 0x0F, q >> 4], axis=1).astype(np.float32)
                if t == 2:  # Q4_0: d, codes - 8
                    x = d * (codes - 8.0)
                else:  # Q4_1: d, m, codes
                    m = b[:, 2:4].copy().view("<f2").astype(np.float32)
                    x = d * codes + m
        return x.reshape(list(reversed(dims)))

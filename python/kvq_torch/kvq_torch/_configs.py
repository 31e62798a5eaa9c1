"""Configuration lists, parsed without torch (setup.py, CI and the package share this file).

An entry is a kvq_add_instances entry (cmake/kvq_instances.cmake): NAME|DTYPE|HEAD_DIM|PAGE|K|V,
formats none, int8, int4, int2 (groups of 32), int4g<G>, int2g<G>; the C++ spellings of
cmake/kvq_configs.cmake (kvq::bf16, kvq::Int4<16>, kvq::NoQuant) are read too. A configuration's
runtime key, the string the ops take, is the entry without its name in canonical spellings:
"bf16|64|64|int4|int2".
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DTYPES = ("bf16", "fp16")
HEAD_DIMS = (64, 128, 256)
PAGES = (16, 32, 64, 128)
MAX_SINKS = 16
DEFAULT_CONFIGS_FILE = Path(__file__).resolve().parent.parent / "configs.txt"


class ConfigError(ValueError):
    """A configuration entry or list that kvq cannot compile."""


def canonical_format(spelling: str) -> str:
    """none, int8, int4, int2, int4g16, ... from any accepted spelling (kvq::Int4<16> too)."""
    s = spelling.strip()
    m = re.fullmatch(r"kvq::Int([24])<\s*(\d+)\s*>", s)
    if m:
        s = "int%sg%s" % (m.group(1), m.group(2))
    elif s == "kvq::NoQuant":
        s = "none"
    elif s == "kvq::Int8":
        s = "int8"
    m = re.fullmatch(r"int([24])g(\d+)", s)
    if m:
        return "int%s" % m.group(1) if int(m.group(2)) == 32 else s
    if s in ("none", "int8", "int4", "int2"):
        return s
    raise ConfigError("unknown format '%s' (none, int8, int4, int2, int4g<G>, int2g<G>)" % spelling)


def format_bits_group(fmt: str) -> tuple[int, int]:
    """(bits, group) of a canonical format: none (16, 0), int8 (8, 0), int4 (4, 32), int2g16 (2, 16)."""
    if fmt == "none":
        return 16, 0
    if fmt == "int8":
        return 8, 0
    m = re.fullmatch(r"int([24])(?:g(\d+))?", fmt)
    if not m:
        raise ConfigError("unknown format '%s'" % fmt)
    return int(m.group(1)), int(m.group(2) or 32)


def cxx_format(fmt: str) -> str:
    """The C++ type kvq_add_instances writes for a format."""
    bits, group = format_bits_group(fmt)
    return {16: "kvq::NoQuant", 8: "kvq::Int8"}.get(bits, "kvq::Int%d<%d>" % (bits, group))


@dataclass(frozen=True)
class Config:
    name: str
    dtype: str
    head_dim: int
    page: int
    k: str
    v: str

    @property
    def key(self) -> str:
        """The runtime key the ops take."""
        return "%s|%d|%d|%s|%s" % (self.dtype, self.head_dim, self.page, self.k, self.v)

    @property
    def entry(self) -> str:
        """The kvq_add_instances entry."""
        return "%s|%s" % (self.name, self.key)

    @property
    def cxx(self) -> str:
        """The kvq::CacheConfig type kvq_add_instances writes for it."""
        return "kvq::CacheConfig<kvq::%s, %d, %d, %s, %s>" % (self.dtype, self.head_dim, self.page, cxx_format(self.k),
                                                              cxx_format(self.v))

    def check(self) -> None:
        """ConfigError unless kvq::CacheConfig accepts it (cache/config.hpp's static_asserts)."""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name):
            raise ConfigError("configuration name '%s' is not a C++ identifier" % self.name)
        if self.dtype not in DTYPES:
            raise ConfigError("%s: dtype '%s' is not bf16 or fp16" % (self.name, self.dtype))
        if self.head_dim not in HEAD_DIMS:
            raise ConfigError("%s: head dim must be 64, 128 or 256" % self.name)
        if self.page not in PAGES:
            raise ConfigError("%s: page size must be 16, 32, 64 or 128" % self.name)
        kb, kg = format_bits_group(self.k)
        vb, vg = format_bits_group(self.v)
        if kb in (2, 4) and self.page % kg:
            raise ConfigError("%s: key group size %d must divide the page size %d" % (self.name, kg, self.page))
        if vb in (2, 4) and self.head_dim % vg:
            raise ConfigError("%s: value group size %d must divide the head dim %d" % (self.name, vg, self.head_dim))


def key_of(dtype: str, head_dim: int, page: int, k: str, v: str) -> str:
    return Config("x", dtype, int(head_dim), int(page), canonical_format(k), canonical_format(v)).key


def parse_entry(entry: str) -> Config:
    fields = [f.strip() for f in entry.strip().split("|")]
    if len(fields) != 6:
        raise ConfigError("'%s' is not NAME|DTYPE|HEAD_DIM|PAGE|K_FORMAT|V_FORMAT" % entry)
    name, dtype, d, p, k, v = fields
    dtype = re.sub(r"^kvq::", "", dtype)
    if not d.isdigit() or not p.isdigit():
        raise ConfigError("%s: head dim '%s' and page '%s' must be numbers" % (name, d, p))
    c = Config(name, dtype, int(d), int(p), canonical_format(k), canonical_format(v))
    c.check()
    return c


def parse_list(text: str) -> list[Config]:
    """Entries separated by newlines or ';' ('#' starts a comment). Names and keys must be unique."""
    out: list[Config] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        for part in line.split(";"):
            if part.strip():
                out.append(parse_entry(part))
    if not out:
        raise ConfigError("the configuration list is empty")
    names, keys = set(), set()
    for c in out:
        if c.name in names:
            raise ConfigError("configuration name '%s' appears twice" % c.name)
        if c.key in keys:
            raise ConfigError("%s is the same configuration as another entry (%s)" % (c.name, c.key))
        names.add(c.name)
        keys.add(c.key)
    return out


def build_configs(environ=None) -> list[Config]:
    """The list a build compiles: KVQ_TORCH_CONFIGS (a file, or entries separated by ';'), else
    configs.txt; then KVQ_TORCH_CONFIG_FILTER, a regular expression searched in the names."""
    env = os.environ if environ is None else environ
    spec = env.get("KVQ_TORCH_CONFIGS", "").strip()
    if not spec:
        text = DEFAULT_CONFIGS_FILE.read_text()
    elif "|" not in spec and Path(spec).is_file():
        text = Path(spec).read_text()
    else:
        text = spec
    configs = parse_list(text)
    pattern = env.get("KVQ_TORCH_CONFIG_FILTER", "").strip()
    if pattern:
        configs = [c for c in configs if re.search(pattern, c.name)]
        if not configs:
            raise ConfigError("KVQ_TORCH_CONFIG_FILTER '%s' keeps no configuration" % pattern)
    return configs


def cmake_config_list(path) -> list[Config]:
    """The entries of set(KVQ_CONFIGS ...) in a CMake file (cmake/kvq_configs.cmake)."""
    text = Path(path).read_text()
    m = re.search(r"set\(KVQ_CONFIGS(.*?)\n\)", text, re.S)
    if not m:
        raise ConfigError("no set(KVQ_CONFIGS ...) in %s" % path)
    return parse_list("\n".join(re.findall(r'"([^"]+)"', m.group(1))))


# ---- the window rule and capacity arithmetic of kvq/cache/window.hpp (host, exact) -------------

def cold_after(length: int, cold: int, residual: int, page: int) -> int:
    """Cold length after appends up to `length` tokens (kvq::cold_after)."""
    excess = length - cold - residual
    return cold + (excess // page) * page if excess >= page else cold


def cold_pages_needed(length: int, cold: int, num_new: int, residual: int, page: int) -> int:
    """Pages an append of num_new tokens turns cold (kvq::cold_pages_needed)."""
    return (cold_after(length + num_new, cold, residual, page) - cold) // page


# ---- rotation seeds (kvq/quant/rotation.hpp) ------------------------------------------------------

_M64 = (1 << 64) - 1


def mix64(z: int) -> int:
    """kvq::mix64 (splitmix64's output function) on a 64-bit unsigned value."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & _M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _M64
    return z ^ (z >> 31)


def layer_rotation_seed(layer: int) -> int:
    """kvq::layer_rotation_seed(layer), the per-layer seed of kvq's examples, as the signed int64
    bit pattern torch ops take (the op reinterprets it as kvq's uint64)."""
    s = mix64(0x6b7671 + layer)
    return s - (1 << 64) if s >= 1 << 63 else s

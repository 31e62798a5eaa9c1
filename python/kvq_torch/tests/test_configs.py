"""Torch-free checks (CI): the package's configuration lists, their agreement with cmake's
generator and configuration list, and the window arithmetic."""
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import sys

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent.parent

spec = importlib.util.spec_from_file_location("kvq_torch_configs", PACKAGE / "kvq_torch" / "_configs.py")
cfg = importlib.util.module_from_spec(spec)
sys.modules["kvq_torch_configs"] = cfg  # dataclasses look their module up
spec.loader.exec_module(cfg)


def test_default_list_is_valid_and_named_after_its_fields():
    configs = cfg.build_configs({})
    assert len(configs) >= 10
    for c in configs:
        c.check()
        k = "k4v2" if (c.k, c.v) == ("int4", "int2") else c.k
        assert c.name == "%s_d%d_p%d_%s" % (c.dtype, c.head_dim, c.page, k)
    keys = {c.key for c in configs}
    for d in (64, 128):
        for k, v in (("none", "none"), ("int8", "int8"), ("int4", "int4"), ("int2", "int2"), ("int4", "int2")):
            assert "bf16|%d|64|%s|%s" % (d, k, v) in keys


def test_environment_overrides(tmp_path):
    one = cfg.build_configs({"KVQ_TORCH_CONFIGS": "a|bf16|64|16|int4g16|int2"})
    assert [c.key for c in one] == ["bf16|64|16|int4g16|int2"]
    f = tmp_path / "list.txt"
    f.write_text("# comment\nx|fp16|128|32|int8|int8\ny|bf16|256|128|int2g64|int2g64\n")
    assert [c.name for c in cfg.build_configs({"KVQ_TORCH_CONFIGS": str(f)})] == ["x", "y"]
    kept = cfg.build_configs({"KVQ_TORCH_CONFIG_FILTER": "d64_p64_(int2|none)"})
    assert sorted(c.name for c in kept) == ["bf16_d64_p64_int2", "bf16_d64_p64_none"]
    with pytest.raises(cfg.ConfigError):
        cfg.build_configs({"KVQ_TORCH_CONFIG_FILTER": "nothing-matches"})


@pytest.mark.parametrize("entry", [
    "a|bf16|64|64|int2",                 # five fields
    "a|bf32|64|64|int2|int2",            # dtype
    "a|bf16|96|64|int2|int2",            # head dim
    "a|bf16|64|48|int2|int2",            # page
    "a|bf16|64|16|int2|int2",            # key group 32 does not divide page 16
    "a|bf16|64|64|int2|int2g128",        # value group does not divide head dim 64
    "a|bf16|64|64|int3|int2",            # format
    "1a|bf16|64|64|int2|int2",           # not an identifier
])
def test_bad_entries_are_refused(entry):
    with pytest.raises(cfg.ConfigError):
        cfg.parse_list(entry)


def test_duplicates_are_refused():
    with pytest.raises(cfg.ConfigError):
        cfg.parse_list("a|bf16|64|64|int2|int2;b|bf16|64|64|int2g32|kvq::Int2<32>")
    with pytest.raises(cfg.ConfigError):
        cfg.parse_list("a|bf16|64|64|int2|int2;a|bf16|64|64|int4|int4")


def test_repository_list_parses_with_the_same_types():
    """cmake/kvq_configs.cmake's entries (C++ spellings) read back to the types they spell."""
    text = (ROOT / "cmake" / "kvq_configs.cmake").read_text()
    entries = re.findall(r'"([^"|]+\|kvq::[^"]+)"', text)
    assert len(entries) >= 20
    for e in entries:
        name, dtype, d, p, k, v = e.split("|")
        c = cfg.parse_entry(e)
        assert c.cxx == "kvq::CacheConfig<%s, %s, %s, %s, %s>" % (dtype, d, p, k, v)
    assert len(cfg.cmake_config_list(ROOT / "cmake" / "kvq_configs.cmake")) == len(entries)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_generator_writes_exactly_the_package_list(tmp_path):
    """setup.py compiles what cmake/kvq_instances.cmake (script mode) writes: one instance file per
    configuration and operation, and a ConfigList of exactly the package's list."""
    configs = cfg.build_configs({})
    subprocess.run(["cmake", "-DKVQ_INSTANCES_DIR=%s" % tmp_path, "-DKVQ_INSTANCES_NAMESPACE=kvq_torch_instances",
                    "-DKVQ_INSTANCES_CONFIGS=%s" % ";".join(c.entry for c in configs),
                    "-P", str(ROOT / "cmake" / "kvq_instances.cmake")], check=True, capture_output=True)
    header = (tmp_path / "include" / "kvq_instances.hpp").read_text()
    aliases = dict(re.findall(r"using (\w+) = (kvq::CacheConfig<[^;]+>);", header))
    assert aliases == {c.name: c.cxx for c in configs}
    listed = re.search(r"using Instances = kvq::ConfigList<([^>]*)>;", header).group(1)
    assert [s.strip() for s in listed.split(",")] == [c.name for c in configs]
    sources = (tmp_path / "sources.txt").read_text().split()
    assert len(sources) == 4 * len(configs) + 1
    for c in configs:
        for op in ("append", "decode", "prefill", "dequantize"):
            text = (tmp_path / ("%s_%s.cu" % (c.name, op))).read_text()
            assert "KVQ_INSTANTIATE_%s(kvq_torch_instances::%s);" % (op.upper(), c.name) in text


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_generator_refuses_a_bad_entry(tmp_path):
    r = subprocess.run(["cmake", "-DKVQ_INSTANCES_DIR=%s" % tmp_path, "-DKVQ_INSTANCES_CONFIGS=a|bf16|64|64|int3|int2",
                        "-P", str(ROOT / "cmake" / "kvq_instances.cmake")], capture_output=True, text=True)
    assert r.returncode != 0 and "unknown format" in r.stderr


def test_window_rule():
    # README: 1000 tokens, R 128, P 64 -> 832 cold.
    assert cfg.cold_after(1000, 0, 128, 64) == 832
    assert cfg.cold_after(191, 0, 128, 64) == 0 and cfg.cold_after(192, 0, 128, 64) == 64
    assert cfg.cold_pages_needed(191, 0, 1, 128, 64) == 1
    assert cfg.cold_after(100, 0, 0, 16) == 96
    for length in range(0, 400, 7):
        c = cfg.cold_after(length, 0, 64, 32)
        assert c % 32 == 0 and 64 <= length - c + 32 * (c == 0) or length - c < 96

#!/usr/bin/env python3
"""Writes the tokenizer fixture that tests/model compares the C++ tokenizer with.

The reference is the Hugging Face `tokenizers` library (pip install tokenizers gguf), configured
as SmolLM2's tokenizer.json is: a BPE model with the GGUF file's vocabulary and merges, the
pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)], the
special tokens (GGUF token types CONTROL and USER_DEFINED) as added tokens, no normalizer.

usage: make_tokenizer_fixture.py MODEL.gguf TEXT_FILE OUT_DIR
  writes OUT_DIR/tokenizer_text.txt (the text: an excerpt of TEXT_FILE plus hand-written edge
  cases) and OUT_DIR/tokenizer_ids.txt (one line per text segment: space-separated token ids).
Segments are separated in tokenizer_text.txt by a line holding only "\\x1e" (record separator).
"""
import sys
from pathlib import Path

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

EDGE_CASES = [
    "Hello world! It's a test: they're here, we've seen, I'm sure, you'll see, he'd go.",
    "Numbers: 1234567 and 3.14159, 2024-12-31, 1,000,000 and 0x1F; 42nd street, 7am.",
    "Spaces:  two,   three,    four\tand a tab\t\tand two tabs.\n\nNew paragraph\n \n  indented line\n",
    "Trailing spaces and newlines   \n\n\n",
    "Unicode: café, naïve, Ångström, Straße, Ελληνικά, русский, 日本語のテキスト, 中文, 한국어.",
    "Symbols: @#$%^&*()_+-=[]{}|;':\",./<>?`~ and em—dashes – and “smart quotes” and ‘single’…",
    "Emoji: 🙂👍🏽 and math ∑∫√ and superscripts x² ³ ½ ⅓ Ⅻ ٣ ४.",
    "CAPS AND 'QUOTES' and 'S 'T 'Re 've 'LL 'd can't won't shan't y'all o'clock.",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text right after a special token<|im_end|><|im_start|>",
    "a<b and <|im_startx|> is not special, nor is <|im_end",
    "    def f(x):\n        return x**2  # code\n",
    "bytes without a token of their own: \x04 and \x13 are dropped",
]


def build(gguf_path):
    r = GGUFReader(gguf_path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def main():
    gguf_path, text_path, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    tok = build(gguf_path)
    text = text_path.read_text(encoding="utf-8")
    # About 3,000 tokens of prose from the middle of the book, in segments of ~40 lines.
    lines = text.splitlines(keepends=True)
    start = len(lines) // 3
    prose = ["".join(lines[i:i + 40]) for i in range(start, start + 280, 40)]
    segments = prose + EDGE_CASES
    ids = [tok.encode(s).ids for s in segments]
    for s, i in zip(segments, ids):
        if "\x04" not in s:
            assert tok.decode(i, skip_special_tokens=False) == s, "round trip failed for %r" % s[:40]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer_text.txt").write_text("\n\x1e\n".join(segments), encoding="utf-8")
    (out / "tokenizer_ids.txt").write_text("".join(" ".join(map(str, i)) + "\n" for i in ids))
    print("%d segments, %d tokens" % (len(segments), sum(map(len, ids))))


if __name__ == "__main__":
    main()

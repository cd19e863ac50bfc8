#!/usr/bin/env python3
"""Reference data for Loom's GPT-2 byte-level BPE tokenizer (exec/data/gpt2_bpe.cc).

Generated with Hugging Face `tokenizers` 0.23.3 (pip install tokenizers==0.23.3) by

    python3 tests/data/make_gpt2_reference.py

from the repository root. It writes two files, both derived from the reference
engine itself so that the C++ side matches it byte for byte:

  tests/data/gpt2_bpe_reference.jsonl   {"text": ..., "ids": [...]} per case: the
      hand-written cases below, paragraphs of data/tinyshakespeare.txt and seeded
      random strings over a tricky alphabet, encoded by HF tokenizers.
  exec/data/gpt2_unicode_classes.inc    the class (\\p{L}, \\p{N}, \\s or other) of
      every code point under GPT-2's pre-tokenizer regex as HF's regex engine
      (Oniguruma, with its own Unicode tables) sees it, found by probing the
      pre-tokenizer with each code point.

The tokenizer is configured as GPT-2's tokenizer.json: BPE from vocab.json and
merges.txt (no dropout, no unk), ByteLevel pre-tokenizer (add_prefix_space=False,
use_regex=True), ByteLevel decoder, "<|endoftext|>" added as a special token
(so a literal "<|endoftext|>" in text encodes as its id, 50256).
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2 = os.path.join(ROOT, "data", "tokenizer", "gpt2")
EOT = "<|endoftext|>"

CASES = [
    # ASCII prose and empty / tiny inputs
    "", " ", "a", "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "GPT-2 is a large transformer-based language model with 1.5 billion parameters.",
    "  leading spaces", "trailing spaces   ", "\n", "\n\n", "   ", "a b  c   d    e",
    # contractions: lowercase only; 'S 'T 'RE ... are not contractions for GPT-2
    "it's", "don't", "you're", "we've", "I'm", "we'll", "he'd", "IT'S", "DON'T", "YOU'RE", "WE'VE",
    "I'M", "WE'LL", "HE'D", "It'S", "can't won't shan't", "'s 't 're 've 'm 'll 'd", "'s'd'll",
    "''s", "x'sy", "!'s", "'", "''", "'''", "' s", "rock 'n' roll", "the '90s", "O'Neil's",
    "'tis 'twas", "'re're", "'ll'", "'dog", "'\u00e9t\u00e9", "\u2019s", "it\u2019s",
    "I said 'Sam' to 'Tom', 'Mary', 'Dave', 'Rex', 'Velma' and 'Lloyd'", "'Sup 'Twas 'Re 'Ve 'Ma 'Ll 'De",
    "'sup 'twas 'rem 'vex 'max 'llama 'dad",
    # digits and numbers
    "0", "123", "1234567890", "3.14159", "1,000,000", "$5.00", "-42", "+1e-10", "10%", "2023-01-24",
    "x1y2z3", "abc123def", " 123", "  123", "12 34  56", "\u0661\u0662\u0663", "\u2460\u2461",
    "\u00bd \u00bc", "\u216b", "\uff11\uff12",
    # punctuation runs
    "!!!", "?!?!", "...", "---", "((()))", "a-b_c.d", "#hashtag @user", "e-mail: a@b.co",
    "https://example.com/path?q=1&r=2#frag", "<html><body>hi</body></html>", "{\"key\": [1, 2]}",
    "C++ && Rust || Go", "~`^*=+|\\/", " !!", "  !!", " .", ":-)", "\u00a1Hola!", "\u00bfQu\u00e9?",
    "\u201cquoted\u201d \u2018single\u2019", "\u2014em\u2013en\u2014", "\u00a7 \u00b6 \u2020",
    # whitespace runs and the \s+(?!\S) rule
    "a  b", "a   b", "a\tb", "a\t\tb", "a \tb", "a\t b", "a\nb", "a\n\nb", "a\n\n\nb", "a \nb",
    "a  \nb", "a\n b", "a\n  b", "a\r\nb", "a\r\n\r\nb", "a\rb", "end \n", "end  \n", "end\n ",
    "line one\nline two\n", "  \n  \n", "\t\t\t", " \t \t ", "a\x0bb", "a\x0cb", "a \x0b b",
    "tab\tseparated\tvalues\n1\t2\t3\n", "    indented code\n        more\n",
    "def f(x):\n    return x + 1\n", "trailing \t", "x \n\n y",
    # non-space control characters (\x1c-\x1f are not \s for GPT-2)
    "a\x1cb", "a\x1db", "a\x1eb", "a\x1fb", " \x1c", "\x00", "a\x00b", "\x07\x08", "\x1b[31mred\x1b[0m",
    "\x7f",
    # unicode spaces
    "a\u00a0b", "a \u00a0b", "a\u00a0 b", "\u00a0\u00a0", "a\u2028b", "a\u2029b", "a\u3000b",
    "\u3000\u3000x", "a\u0085b", "a\u1680b", "a\u2002b", "a\u2009b", "a\u200ab", "a\u202fb",
    "a\u205fb", "a\u200bb", "a\ufeffb", "a\u180eb", "x \u2028 y", "\u00a0 \u00a0 ", "end\u00a0",
    "a\u2003\u2003b",
    # accented Latin, combining marks
    "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "\u00c5ngstr\u00f6m", "stra\u00dfe",
    "\u0141\u00f3d\u017a", "\u0130stanbul", "Z\u0327\u0301", "a\u0300\u0301\u0302\u0303",
    " \u0301", "\u0301", "e\u0308\u0304", "\u1e9e\u00df",
    # CJK, Japanese, Korean
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u3053\u3093\u306b\u3061\u306f", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u4e2d\u6587 English \u6df7\u5408",
    "\U00020000\U0002a6d6", "\u3001\u3002\u300c\u300d", "\uff21\uff22\uff23",
    # emoji, ZWJ sequences, flags, skin tones, variation selectors
    "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f3f3\ufe0f\u200d\U0001f308", "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5", "\u2764\ufe0f",
    "I \u2764\ufe0f NY", "fire\U0001f525emoji", " \U0001f600 \U0001f600", "\u2603\u2604",
    "\U0001f9d1\u200d\U0001f4bb works", "1\ufe0f\u20e3",
    # Arabic, Hebrew, Devanagari, Thai, Cyrillic, Greek
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0633\u0651\u064e\u0644\u0627\u0645\u064f",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0967\u0968\u0969",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1", "\u1f08\u03b8\u1fc6\u03bd\u03b1\u03b9",
    # letters and numbers from Unicode 15/16 additions (HF's tables know them)
    "\u1c89\u1c8a", "\ua7cb\ua7cc\ua7cd", "\U00010d40\U00010d4a", "\U00031350",
    # the special token, literal in text
    EOT, "a" + EOT + "b", "a " + EOT + " b", EOT + EOT, "x\n" + EOT + "\ny", "<|endoftext|", "|endoftext|>",
    "<|endoftext|>>", "<<|endoftext|>", "<|ENDOFTEXT|>", "<| endoftext |>", " " + EOT, EOT + " ",
    "doc one." + EOT + "doc two.", "<|endoftext|><|endoftext|x",
    # mixed
    "Mr. O'Brien's 3rd-quarter report (v2.1) isn't done\u2014yet!\n\n\tSee \u00a71.2 \u2026",
    "\u0645\u0631\u062d\u0628\u0627 hello \u4f60\u597d 123 \U0001f600!!  \n",
    "The year 2024's \u00a3100\u20ac \u00a5 \u20b9 prices   rose\r\n",
]

# Characters the random strings are drawn from: every class of the regex, the
# quote of the contractions, multi-byte spaces and a few rarely seen scripts.
ALPHABET = (list("aAsStTrRevVmMlLdD'  0189!.,-_") + ["\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x00",
            "\u00a0", "\u0085", "\u2028", "\u3000", "\u2009", "\u200b", "\u00e9", "e\u0301", "\u00df",
            "\u4e2d", "\u0939", "\u094d", "\u0627", "\u0661", "\u00bd", "\U0001f600", "\u200d", "\ufe0f",
            "\U0001f468", "\U00010d40", "\u1c89", EOT, "'s", "'ll", "'RE"])


def make_tokenizer():
    tok = Tokenizer(models.BPE.from_file(os.path.join(GPT2, "vocab.json"), os.path.join(GPT2, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])
    return tok


def shakespeare_paragraphs(count):
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        paras = f.read().split("\n\n")
    rng = random.Random(2)
    return [p + "\n\n" for p in rng.sample(paras, count)]


def random_strings(count):
    rng = random.Random(1)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def write_reference(tok, path):
    texts = CASES + shakespeare_paragraphs(80) + random_strings(200)
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t, "ids": tok.encode(t).ids}) + "\n")
    print(f"{path}: {len(texts)} cases", file=sys.stderr)


# Class codes shared with gpt2_bpe.cc.
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


def probe_class(pre, cp):
    """The class of code point `cp` as the pre-tokenizer's regex sees it: it forms
    one pre-token with a letter, a digit, '!' or a tab only if it shares its class."""
    if 0xD800 <= cp <= 0xDFFF:
        return OTHER  # never in a str; Loom treats lone surrogates as invalid bytes anyway
    c = chr(cp)
    found = [k for k, p in ((LETTER, "a"), (NUMBER, "1"), (OTHER, "!"), (SPACE, "\t"))
             if len(pre.pre_tokenize_str(p + c)) == 1]
    assert len(found) == 1, (hex(cp), found)
    return found[0]


def write_classes(path):
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    starts = []
    prev = None
    for cp in range(0x110000):
        k = probe_class(pre, cp)
        if k != prev:
            starts.append((cp << 2) | k)
            prev = k
    with open(path, "w") as f:
        f.write("// Generated by tests/data/make_gpt2_reference.py from Hugging Face tokenizers "
                f"{tokenizers.__version__}: do not edit.\n"
                "// The class of every code point under GPT-2's pre-tokenizer regex as the reference engine\n"
                "// (Oniguruma, with its Unicode tables) sees it. Entry = (first code point << 2) | class,\n"
                "// the range running to the next entry; class 0 other, 1 \\p{L}, 2 \\p{N}, 3 \\s.\n"
                f"// {len(starts)} ranges.\n")
        for i in range(0, len(starts), 8):
            f.write(" ".join(f"0x{v:x}," for v in starts[i:i + 8]) + "\n")
    print(f"{path}: {len(starts)} ranges", file=sys.stderr)


def main():
    write_reference(make_tokenizer(), os.path.join(ROOT, "tests", "data", "gpt2_bpe_reference.jsonl"))
    write_classes(os.path.join(ROOT, "exec", "data", "gpt2_unicode_classes.inc"))


if __name__ == "__main__":
    main()

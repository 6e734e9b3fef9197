"""Rebuild the document-length files in data/ from corpora that installed packages ship.

    python data/build_lengths.py [NAME ...]     # default: every name below

Needs (not the workbench's own dependencies; a separate venv is fine):
    pip install mistral-common==1.13.1 chatterbot-corpus==1.3.3 pyyaml
and runs on CPython 3.11.7 for `code` and `docs` (their corpus is this interpreter's own standard library).

Every length is the token count of one document under Mistral's Tekken tokenizer (`tekken_240911.json`, shipped
inside the mistral-common wheel), special tokens included: a chat conversation is encoded with mistral-common's
fine-tuning chat template (<s>[INST]user[/INST]assistant</s>...), a code file or a documentation page as
<s> text </s>. Each file is a JSON list of positive integers, in corpus order (files sorted by path).
"""
from __future__ import annotations

import json
import os
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_DIRS = {"test", "tests", "idle_test"}
"""Directory names whose files are the standard library's test suite, left out of `code` (library code only)."""


def tekken():
    """mistral-common's Tekken tokenizer in fine-tuning mode (a conversation may end with the assistant)."""
    import mistral_common
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    path = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")
    return MistralTokenizer.from_file(path, mode=ValidationMode.finetuning)


def text_tokens(tok, text: str) -> int:
    return len(tok.instruct_tokenizer.tokenizer.encode(text, bos=True, eos=True))


def chat_lengths(tok) -> list[int]:
    """chatterbot-corpus: every conversation of every language, turns alternating user / assistant. A trailing user
    turn with no answer is dropped; a conversation left with no (user, assistant) pair is skipped."""
    import glob

    import chatterbot_corpus
    import yaml
    from mistral_common.protocol.instruct.messages import AssistantMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    root = os.path.join(os.path.dirname(chatterbot_corpus.__file__), "data")
    out = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.yml"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            convs = (yaml.safe_load(f) or {}).get("conversations") or []
        for conv in convs:
            turns = [str(t) for t in conv if t is not None and str(t).strip()]
            turns = turns[:len(turns) - len(turns) % 2]
            if not turns:
                continue
            msgs = [UserMessage(content=t) if i % 2 == 0 else AssistantMessage(content=t) for i, t in enumerate(turns)]
            out.append(len(tok.encode_chat_completion(ChatCompletionRequest(messages=msgs)).tokens))
    return out


def code_lengths(tok) -> list[int]:
    """CPython's standard library: every .py file outside site-packages and the test directories."""
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in TEST_DIRS and x != "site-packages" and x != "__pycache__")
        paths += [os.path.join(d, f) for f in files if f.endswith(".py")]
    out = []
    for p in sorted(paths):
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if text.strip():
            out.append(text_tokens(tok, text))
    return out


def docs_lengths(tok) -> list[int]:
    """pydoc_data.topics: the Python Language Reference / Library sections that `help()` shows, one page each."""
    from pydoc_data.topics import topics

    return [text_tokens(tok, topics[k]) for k in sorted(topics) if topics[k].strip()]


BUILDERS = {"chat": chat_lengths, "code": code_lengths, "docs": docs_lengths}


def main(names: list[str]) -> None:
    tok = tekken()
    for name in names or list(BUILDERS):
        lengths = BUILDERS[name](tok)
        with open(os.path.join(HERE, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(lengths, f, separators=(",", ":"))
            f.write("\n")
        s = sorted(lengths)
        q = {p: s[min(len(s) - 1, int(p / 100 * len(s)))] for p in (10, 50, 90, 99)}
        print(f"{name}: {len(s)} documents, {sum(s)} tokens, min {s[0]}, p10 {q[10]}, median {q[50]}, p90 {q[90]}, "
              f"p99 {q[99]}, max {s[-1]}, mean {sum(s) / len(s):.1f}")
    print(f"python {sys.version.split()[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Speculative decoding on a GPU (issue 41): greedy answers with drafts against without, through
`hearth serve --device cuda --deterministic` (bit for bit there), and the same without
--deterministic (reported, not required to match). Drafts by prompt lookup, or with --draft
FILE by a draft model, or with --mtp by the model's own MTP head (FILE may be the model itself: every draft is then the model's own
continuation; a random-weight model's output rarely repeats, so prompt lookup may draft
nothing, which the summary says). Standard library only (runs on the device machine):
  python3 scripts/spec_device_check.py --hearth build-cuda/hearth --model MODEL.gguf [--draft FILE]
Prints one line per prompt and a summary; exits 1 when a deterministic pair differs or nothing
was drafted.
"""
import argparse
import json
import pathlib
import sys
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from serve_util import Server  # noqa: E402

PROMPTS = [
    "Repeat exactly: alpha beta gamma delta alpha beta gamma delta alpha beta gamma delta alpha beta",
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\ndef h(x):\n    return x + 1\n\ndef",
    "one two three four five one two three four five one two three four five one two",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
]


def complete(server, prompt, n):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        j = json.loads(r.read())
    return j["choices"][0]["text"], j["timings"]


def answers(hearth, model, device, extra, n):
    s = Server(hearth, model, "--device", device, "--max-seqs", "4", "--kv-cache-bytes", "4G", *extra, start_timeout=300)
    try:
        return [complete(s, p, n) for p in PROMPTS]
    finally:
        s.stop(timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--draft", help="a draft model (--spec draft) instead of prompt lookup")
    ap.add_argument("--mtp", action="store_true", help="the model's own MTP head (--spec mtp) instead")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    spec = (["--spec", "draft", "--draft-model", a.draft] if a.draft else
            ["--spec", "mtp"] if a.mtp else ["--spec", "ngram"]) + \
        ["--spec-max", "4", "--tune", "spec.adaptive=0"]
    bad = 0
    for label, det in (("--deterministic", ["--deterministic"]), ("default", [])):
        off = answers(a.hearth, a.model, a.device, det, a.tokens)
        on = answers(a.hearth, a.model, a.device, det + spec, a.tokens)
        same = drafted = 0
        for (t0, _), (t1, tm) in zip(off, on):
            same += t0 == t1
            drafted += tm.get("drafted_n") or 0
            print(f"{label}: {'same' if t0 == t1 else 'DIFFERENT'}; drafted {tm.get('drafted_n')} accepted "
                  f"{tm.get('accepted_n')}; {tm.get('predicted_per_second', 0):.1f} tok/s with drafts", flush=True)
        print(f"{label}: {same} of {len(PROMPTS)} answers identical with drafts, {drafted} tokens drafted", flush=True)
        if det and (same != len(PROMPTS) or drafted == 0):
            bad = 1
    print("spec_device_check:", "PASSED" if bad == 0 else "FAILED")
    sys.exit(bad)


if __name__ == "__main__":
    main()

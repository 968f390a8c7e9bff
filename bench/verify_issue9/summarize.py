"""Condense a ``pytest --tb=native`` log: per failed test, the frames in the
project's files (the test's failing line) and the final exception line."""

from __future__ import annotations

import re
import sys

_FRAME = re.compile(r'\s*File "(?P<path>[^"]*/(?:tests|broker|osqueue_spark)/[^"]*)"(?P<rest>.*)')


def main(log: str) -> None:
    with open(log) as f:
        text = f.read()
    if "= FAILURES =" not in text:  # -rA also prints sections for passed tests
        return
    text = text.split("= FAILURES =", 1)[1].split("short test summary info", 1)[0]
    sections = re.split(r"\n_+ (test.*?) _+\n", text)
    for name, body in zip(sections[1::2], sections[2::2], strict=False):
        lines = body.split("\n- Captured")[0].split("\n=====")[0].splitlines()
        frames = []
        for i, line in enumerate(lines):
            match = _FRAME.match(line)
            if match:
                short = "/".join(match["path"].rsplit("/", 3)[-3:])
                code = lines[i + 1].strip() if i + 1 < len(lines) else ""
                frames.append(f"{short}{match['rest']}: {code}")
        last = [line for line in lines if line and not line.startswith((" ", "Traceback"))]
        print(f"## {name}")
        for frame in frames[-4:]:
            print("   ", frame[:230])
        print("   =>", (last[-1] if last else "?")[:300])


if __name__ == "__main__":
    main(sys.argv[1])

"""hack/kind-demo.sh prints its step headers and its last line (the verdict) in bold on a terminal only:
written to a file or a pipe they are plain text, so ``grep '^verdict=PASS'`` finds a passing run.

The script's own lines are run (the colour setting, ``step`` and the verdict's ``printf``), taken out
of its text, with stdout a pipe and then a pseudo-terminal.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "kind-demo.sh"
ESC = "\x1b"


def _snippet() -> str:
    """The colour setting, step() and the verdict printf of the script, with the values they print."""
    text = SCRIPT.read_text()
    colour = next(line for line in text.splitlines() if line.startswith("if [[ -t 1 ]]"))
    step = re.search(r"^step\(\) \{\n.*?^\}\n", text, re.S | re.M)
    verdict = re.search(r"^printf '\\n%s%s %s%s\\n' .*?\n(?:  .*\n)*", text, re.M)
    assert step and verdict, "the script's step() or its verdict printf was not found"
    return "\n".join(
        [
            "set -euo pipefail",
            colour,
            "step_no=0",
            step.group(0),
            'step "kind cluster demo"',
            "verdict='verdict=PASS acknowledged=40000 lost=0' audit_status=0 times='status_updated_s=1.2'",
            verdict.group(0),
        ]
    )


def test_no_escape_codes_outside_the_terminal_only_setting() -> None:
    for number, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if "\\033" in line or ESC in line:
            assert line.startswith("if [[ -t 1 ]]"), f"kind-demo.sh:{number}: colour not gated: {line}"


def test_to_a_pipe_the_verdict_line_is_plain() -> None:
    out = subprocess.run(["bash", "-c", _snippet()], capture_output=True, text=True, check=True).stdout
    assert ESC not in out, repr(out)
    lines = out.splitlines()
    assert any(re.fullmatch(r"==> 1\. kind cluster demo \[at \d+ s\]", line) for line in lines), lines
    assert lines[-1] == "verdict=PASS acknowledged=40000 lost=0 status_updated_s=1.2", lines
    assert [line for line in lines if re.match(r"^verdict=PASS", line)] == [lines[-1]]


def test_on_a_terminal_it_is_bold() -> None:
    leader, follower = pty.openpty()
    try:
        subprocess.run(["bash", "-c", _snippet()], stdout=follower, check=True, timeout=30)
        os.close(follower)
        follower = -1
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    text = out.decode()
    assert f"{ESC}[1mverdict=PASS" in text and f"{ESC}[1m==> 1. kind cluster demo" in text, repr(text)

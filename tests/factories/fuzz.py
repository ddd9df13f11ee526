"""What the fuzz tests of input lines share (tests/packer/adapters/test_fuzz_list_lines.py,
tests/packer/importers/test_fuzz_muvap_lhotse.py): their hypothesis settings, any JSON value a little nested, a
value as one input line, and the one outcome a build of a fuzzed input may have: a clean pack, or exit 1 naming the
bad lines by number, never a traceback.

Every example is a whole build, so ``max_examples`` stays small and the draws are derandomised (the same examples
on every run and machine: a failure reproduces).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from speechpack.loader import open_pack


def fuzz_settings(max_examples: int) -> settings:
    """``max_examples`` derandomised examples without a deadline; function-scoped fixtures are fine (each example
    writes its own files)."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def any_json(max_text: int, max_key: int, max_leaves: int):
    """Any JSON value, nested a little: strings up to ``max_text`` characters, keys up to ``max_key``."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=max_text),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=max_key), children,
                                                                            max_size=3),
        max_leaves=max_leaves,
    )


def json_line(obj) -> bytes:
    """A JSON value as one line (``\\u`` escapes keep surrogates and newlines inside the line)."""
    return json.dumps(obj).encode("ascii")


def check_build_outcome(result, out: Path, fuzzed: bytes) -> None:
    """``result`` (click's, of a build into ``out`` whose input held ``fuzzed`` after a good first line) is a
    clean pack or exit 1 naming lines from 2 on (fuzzed bytes may hold a newline), never a traceback."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback for line {fuzzed!r}:\n{result.output}") from result.exception
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        assert (out / "dataset.json").is_file()
        assert len(open_pack(str(out))) >= 1
    else:
        assert result.exit_code == 1, result.output
        assert not (out / "dataset.json").exists()
        numbers = [int(n) for n in re.findall(r"^  line (\d+):", result.output, flags=re.M)]
        assert numbers and all(n >= 2 for n in numbers), result.output

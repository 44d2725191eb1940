"""Reading a `vllm serve` command line: the value given to a flag."""

from __future__ import annotations


def value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]

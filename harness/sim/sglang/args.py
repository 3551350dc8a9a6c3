"""`launch_server` command line of SGLang 0.5.15.post1: the argparse parser, built from flags_table.

Parsing mirrors ``prepare_server_args``: ``argparse.ArgumentParser(prog="sglang serve")`` with every flag,
alias and choice list of the real parser, so unknown flags, bad choices and ambiguous prefixes fail with
argparse's exit code 2 and message. What ``ServerArgs.__post_init__`` does next is in resolve.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from decimal import Decimal
from typing import Any

from harness.sim.sglang import flags_table

# --- argparse types with SGLang's names (argparse prints the function name in "invalid X value") ------------


def human_readable_int(value: str) -> int:
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. Use an integer IEC value "
                    f"such as '{int(Decimal(number))}{suffix}', or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
            "(1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


def nullable_str(val: str) -> str | None:
    return None if not val or val == "None" else val


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from None


def loads(value: str) -> Any:
    return json.loads(value)


def parse_cuda_graph_config_arg(raw: str) -> dict[str, dict[str, Any]]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(
            f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}"
        )
    return parsed


_TYPES = {
    "str": str,
    "int": int,
    "float": float,
    "human_readable_int": human_readable_int,
    "nullable_str": nullable_str,
    "json_list_type": json_list_type,
    "loads": loads,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


# --- SGLang's deprecation actions (argparse_actions.py); they warn through an unconfigured logger, which
# --- Python's lastResort handler prints to stderr as the bare message. --------------------------------------


def _warn_deprecated(message: str) -> None:
    print(f"\033[1;33m{message}\033[0m", file=sys.stderr, flush=True)


class _DeprecatedAlias(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, new_flag: str | None = None, **kw: Any):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kw)

    def _note(self, option_string: str | None) -> None:
        repl = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.{repl}")

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        self._note(option_string)
        setattr(namespace, self.dest, values)


class _DeprecatedConst(_DeprecatedAlias):
    def __init__(self, option_strings: list[str], dest: str, const_value: Any = None, **kw: Any):
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        self._note(option_string)
        setattr(namespace, self.dest, self.const_value)


class _DeprecatedNoop(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, **kw: Any):
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        _warn_deprecated(
            f"The command line argument '{option_string}' is deprecated and will be removed in "
            "future versions."
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang serve")
    for opts, dest, action, typ, nargs, choices, default, const, new_flag, required in flags_table.FLAGS:
        kw: dict[str, Any] = {"dest": dest}
        if default != flags_table.SUPPRESS:
            kw["default"] = default
        else:
            kw["default"] = argparse.SUPPRESS
        if action == "store_true":
            parser.add_argument(*opts, action="store_true", **kw)
            continue
        if action == "bool_optional":
            parser.add_argument(opts[0], action=argparse.BooleanOptionalAction, **kw)
            continue
        if action == "deprecated":
            parser.add_argument(*opts, action=_DeprecatedNoop, dest=dest)
            continue
        if action == "deprecated_true":
            parser.add_argument(
                *opts, action=_DeprecatedConst, const_value=True, new_flag=new_flag, **dict(kw, default=False)
            )
            continue
        if action == "deprecated_const":
            parser.add_argument(*opts, action=_DeprecatedConst, const_value=const, new_flag=new_flag, **kw)
            continue
        if typ is not None:
            kw["type"] = _TYPES[typ]
        if nargs is not None:
            kw["nargs"] = nargs
        if choices is not None:
            kw["choices"] = list(choices)
        if const is not None:
            kw["const"] = const
        if required:
            kw["required"] = True
        if action == "deprecated_alias":
            parser.add_argument(*opts, action=_DeprecatedAlias, new_flag=new_flag, **kw)
        else:  # store and lora_paths (a list of paths either way for the stand-in)
            parser.add_argument(*opts, **kw)
    return parser


def _merge_config_file(argv: list[str]) -> list[str]:
    """``--config FILE``: YAML keys become flags placed before the command line (which wins)."""
    i = argv.index("--config")
    if i + 1 >= len(argv):
        return argv
    import yaml

    with open(argv[i + 1]) as f:
        data = yaml.safe_load(f) or {}
    extra: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            extra.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            extra += [flag, *map(str, value)]
        else:
            extra += [flag, str(value)]
    return extra + argv[:i] + argv[i + 2 :]


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """Parse like SGLang; argparse errors print usage and exit 2."""
    if "--config" in argv:
        argv = _merge_config_file(argv)
    return build_parser().parse_args(argv)

"""`inference-server checkpoint seal|verify|show DIR`: make and inspect a servable checkpoint folder.

`seal` is the only supported way to write `evalfleet-checkpoint.json`: it hashes every file of
the folder, builds the named backend from the settings without loading it (so a setting the
backend refuses is caught now, not when a server starts), and writes the manifest atomically.
`verify` re-hashes the folder as the server does before it opens its port. `show` prints the
files, the backend, its settings and the identity digest that `GetIdentity` will report.
Every refusal is one line on stderr naming the file or the field, exit 2, and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from evalfleet.policy_api.identity import as_dict, canonical_json
from inference_server.backends import resolve
from inference_server.backends.contract import BackendError, RuntimeOptions
from inference_server.checkpoint import (
    MANIFEST_NAME,
    Checkpoint,
    CheckpointError,
    check_index_covered,
    hash_folder,
    load,
    write_manifest,
)
from inference_server.cli.options import EXIT_BAD_INPUT, add_runtime_arguments, one_line, runtime_options
from inference_server.identity import Described, describe


class SettingsError(ValueError):
    """A `--set` or `--settings-file` value that cannot become backend settings; names which."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except (CheckpointError, BackendError, SettingsError, OSError) as exc:
        print(f"inference-server checkpoint {args.command}: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inference-server checkpoint", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    seal_parser = commands.add_parser("seal", help="hash every file of DIR and write its manifest")
    seal_parser.add_argument("dir", type=Path, metavar="DIR")
    seal_parser.add_argument("--backend", required=True, help="a built-in backend name or module:factory")
    seal_parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend setting; VALUE is JSON when it parses, else a string; a dotted KEY nests (a.b=1)",
    )
    seal_parser.add_argument("--settings-file", type=Path, help="a JSON or YAML object of settings, under --set")
    again = seal_parser.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help=f"replace an existing {MANIFEST_NAME}")
    again.add_argument(
        "--reuse",
        action="store_true",
        help="a folder already sealed with this backend and these settings is verified, not sealed again "
        "(sealed otherwise: refused); how `scheduler run` seals a spec's checkpoint",
    )
    seal_parser.set_defaults(func=run_seal)

    for name, func, help_text in (
        ("verify", run_verify, "re-hash every file of DIR against its manifest"),
        ("show", run_show, "print DIR's files, backend, settings and identity digest"),
    ):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("dir", type=Path, metavar="DIR")
        sub.add_argument("--epoch", help="the --epoch the server is started with (default: DIR's name)")
        add_runtime_arguments(sub)
        sub.set_defaults(func=func)
    commands.choices["show"].add_argument("--json", action="store_true", help="print one JSON document")
    return parser


# -- seal ----------------------------------------------------------------------------------------


def run_seal(args: argparse.Namespace) -> int:
    root: Path = args.dir
    if not root.is_dir():
        raise CheckpointError(f"{root} is not a folder", path=root)
    settings = read_settings(args.settings_file, args.set)
    if (root / MANIFEST_NAME).exists() and args.reuse:
        return reuse_sealed(root, args.backend, settings)
    if (root / MANIFEST_NAME).exists() and not args.force:
        raise CheckpointError(f"{root / MANIFEST_NAME} already exists (add --force to seal again)")
    resolve(args.backend)
    sha256 = hash_folder(root)
    checkpoint = Checkpoint(name=folder_name(root), root=root, backend=args.backend, settings=settings, sha256=sha256)
    check_index_covered(root, sha256)
    described = describe(checkpoint, args.backend, RuntimeOptions())
    write_manifest(root, args.backend, settings, sha256)
    print(f"sealed {root}: {len(sha256)} files, backend {args.backend}, identity {described.digest}")
    return 0


def reuse_sealed(root: Path, backend: str, settings: dict[str, Any]) -> int:
    """Verifies a folder sealed as asked; one that is sealed with another backend or other
    settings is refused, so that a spec never silently serves what it does not say."""
    checkpoint = load(root, name=folder_name(root))
    if checkpoint.backend != backend:
        raise CheckpointError(
            f"{root} is sealed with backend {checkpoint.backend}, not {backend} (--force seals again)"
        )
    if canonical_json(checkpoint.settings) != canonical_json(settings):
        raise CheckpointError(
            f"{root} is sealed with other settings: {canonical_json(checkpoint.settings)} (--force seals again)"
        )
    described = describe(checkpoint, backend, RuntimeOptions())
    print(
        f"already sealed {root}: {len(checkpoint.sha256)} files match, backend {backend}, identity {described.digest}"
    )
    return 0


def read_settings(settings_file: Path | None, assignments: Sequence[str]) -> dict[str, Any]:
    """The settings file's object (or {}) with every `--set KEY=VALUE` applied over it."""
    settings = read_settings_file(settings_file) if settings_file else {}
    for text in assignments:
        key, sep, raw = text.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise SettingsError(f"--set {text!r}: expected KEY=VALUE with a non-empty KEY (dots nest)")
        node = settings
        for depth, part in enumerate(parts[:-1], start=1):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SettingsError(f"--set {text!r}: {'.'.join(parts[:depth])} is already {child!r}, not an object")
            node = child
        node[parts[-1]] = parse_value(raw)
    return settings


def parse_value(raw: str) -> Any:
    """JSON when it parses (numbers, booleans, lists, objects, null), else the string itself."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def read_settings_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"--settings-file {path}: cannot read it: {exc}") from exc
    try:
        value = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SettingsError(
            f"--settings-file {path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"
        ) from exc
    if not isinstance(value, dict):
        raise SettingsError(f"--settings-file {path}: must hold an object of settings, not {type(value).__name__}")
    try:
        canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"--settings-file {path}: a value is not JSON ({exc})") from exc
    return value


def folder_name(root: Path) -> str:
    """The name a server gives the folder when started with `--epoch` set to it."""
    return root.resolve().name


# -- verify and show -----------------------------------------------------------------------------


def describe_folder(args: argparse.Namespace) -> Described:
    root: Path = args.dir
    checkpoint = load(root, name=args.epoch or folder_name(root))
    return describe(checkpoint, args.backend or checkpoint.backend, runtime_options(args))


def run_verify(args: argparse.Namespace) -> int:
    described = describe_folder(args)
    count = len(described.checkpoint.sha256)
    print(f"OK {args.dir}: {count} files match {MANIFEST_NAME}; identity {described.digest}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    described = describe_folder(args)
    checkpoint = described.checkpoint
    files = [(name, (checkpoint.root / name).stat().st_size, digest) for name, digest in checkpoint.sha256.items()]
    files.sort()
    if args.json:
        document = {
            "folder": str(checkpoint.root),
            "epoch": checkpoint.name,
            "backend": described.record.backend,
            "settings": checkpoint.settings,
            "files": [{"name": name, "size": size, "sha256": digest} for name, size, digest in files],
            "digest": described.digest,
            "identity": as_dict(described.record),
        }
        print(json.dumps(document, indent=2, sort_keys=True))
        return 0
    print(f"folder    {checkpoint.root}")
    print(f"epoch     {checkpoint.name}")
    print(f"backend   {described.record.backend}")
    print(f"settings  {canonical_json(checkpoint.settings)}")
    print(f"identity  {described.digest}")
    print(f"files     {len(files)}, {sum(size for _, size, _ in files)} bytes")
    width = max((len(str(size)) for _, size, _ in files), default=1)
    for name, size, digest in files:
        print(f"  {size:>{width}}  {digest}  {name}")
    return 0

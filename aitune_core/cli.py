"""The ``aitune`` command line (also ``python -m aitune_core.cli``).

Each subcommand is registered by a small ``add_<name>_command(subparsers)`` function
listed in :data:`COMMANDS`, through :func:`add_command`: its handler takes the parsed
arguments and returns the exit status, and the handler's docstring is what the user
reads as the command's description in ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from aitune_core._version import __version__
from aitune_core.checkpoint.inspect import describe_checkpoint
from aitune_core.demo.models import DEMO_MODELS
from aitune_core.deploy.export import export, target_class
from aitune_core.deploy.options import options_from_text
from aitune_core.deploy.plan import RANGE_POLICIES
from aitune_core.deploy.target import DeployError
from aitune_core.errors import CheckpointError
from aitune_core.inspection import inspect as inspect_workload
from aitune_core.inspection.workload import WorkloadError, load_workload
from aitune_core.names import default_device
from aitune_core.plugins.api import PLUGIN_API_VERSION
from aitune_core.plugins.loader import strict_from_env
from aitune_core.plugins.records import PluginStatus

Subparsers = Any  # argparse's _SubParsersAction, which is private
Handler = Callable[[argparse.Namespace], int]


def add_command(subparsers: Subparsers, name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help, description=inspect.getdoc(handler))
    parser.set_defaults(handler=handler)
    return parser


# --------------------------------------------------------------------------- aitune plugins
def add_plugins_command(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "plugins", run_plugins, "list the installed aitune plugins and their status")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--candidates",
        action="store_true",
        help="also list the default candidates the plugins offer for --device, with why unavailable ones are",
    )
    parser.add_argument("--device", default=None, help="device for --candidates (default: cuda if available, else cpu)")


def run_plugins(args: argparse.Namespace) -> int:
    """List every plugin found in the 'aitune.plugins' entry-point group: its distribution, version,
    status (loaded, failed, unavailable on this machine, or disabled) with the reason, and the
    backends and deploy targets it registers. Broken plugins are listed, never fatal; with AITUNE_STRICT_PLUGINS=1
    the exit status is 1 when one failed. With --candidates, also the default candidate backends
    the plugins offer for a device, and why those that cannot run there cannot.
    """
    from aitune_core.plugins.registry import PluginRegistry  # pluggy and every plugin: this command alone loads them

    # A listing of its own, never strict: the point is to show what is broken.
    registry = PluginRegistry.load(strict=False)
    records = registry.records()
    device = _candidate_device(args.device)
    candidates = _candidate_rows(registry, device) if args.candidates else None
    if args.json:
        payload: dict[str, Any] = {
            "aitune_core": __version__,
            "plugin_api": PLUGIN_API_VERSION,
            "plugins": [record.to_dict() for record in records],
        }
        if candidates is not None:
            payload["device"] = device
            payload["candidates"] = candidates
        print(json.dumps(payload, indent=2))
    else:
        from tabulate import tabulate

        rows = [
            [r.name, r.distribution, r.version, r.status.value, r.reason, ", ".join(r.backends), ", ".join(r.targets)]
            for r in records
        ]
        headers = ["Name", "Distribution", "Version", "Status", "Reason", "Backends", "Targets"]
        widths = [None, None, None, None, 60, 40, 20]
        print(tabulate(rows, headers=headers, tablefmt="simple", maxcolwidths=widths))
        if candidates is not None:
            print(f"\nDefault candidates for {device}, in the order strategies try them:")
            rows = [
                [c["backend"], c["plugin"], c["priority"], "yes" if c["available"] else "no", c["reason"]]
                for c in candidates
            ]
            headers = ["Backend", "Plugin", "Priority", "Available", "Reason"]
            print(tabulate(rows, headers=headers, tablefmt="simple", maxcolwidths=[50, None, None, None, 70]))
    failed = any(record.status is PluginStatus.FAILED for record in records)
    return 1 if failed and strict_from_env() else 0


def _candidate_device(device: str | None) -> str:
    return str(default_device() if device is None else device)


def _candidate_rows(registry: Any, device: str) -> list[dict[str, Any]]:
    """Every default candidate for ``device``, with its availability, as plain data."""
    return [
        {
            "backend": candidate.backend.describe(),
            "name": candidate.name,
            "plugin": candidate.plugin,
            "priority": candidate.priority,
            "available": candidate.available,
            "reason": candidate.availability.reason if candidate.availability is not None else "",
        }
        for candidate in registry.default_candidates(device)
    ]


# --------------------------------------------------------------------------- aitune demo
def add_demo_command(subparsers: Subparsers) -> None:
    summary = "tune a bundled model with every available backend and show the speedup"
    parser = add_command(subparsers, "demo", run_demo_command, summary)
    parser.add_argument("--model", choices=sorted(DEMO_MODELS), default="cnn", help="which bundled model")
    parser.add_argument("--batch-sizes", default="1,2,4,8", help="comma-separated batch sizes (default 1,2,4,8)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--save", metavar="PATH", default=None, help="also save the tuned model to a checkpoint")


def run_demo_command(args: argparse.Namespace) -> int:
    """Tune a model that ships with aitune (nothing is downloaded) with MaxThroughputStrategy over the
    default candidates of every installed plugin, on CUDA when there is a GPU and on the CPU otherwise,
    then time the tuned model against the original.
    """
    from aitune_core.demo.run import run_demo  # tuning, checkpoints and the strategies: for `aitune demo` only

    try:
        sizes = [int(part) for part in args.batch_sizes.split(",") if part.strip()]
    except ValueError:
        print(
            f"aitune demo: --batch-sizes must be comma-separated whole numbers, got {args.batch_sizes!r}",
            file=sys.stderr,
        )
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    run_demo(args.model, sizes, args.device, save_to=args.save)
    return 0


# --------------------------------------------------------------------------- aitune inspect
def add_inspect_command(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "inspect", run_inspect, "show what a checkpoint holds")
    parser.add_argument("checkpoint", help="a checkpoint folder or archive written by aitune_core.save")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip checking the files' sha256 (faster on huge ones)"
    )


def run_inspect(args: argparse.Namespace) -> int:
    """Print a checkpoint's modules, graphs with their shape tables, backends, plugins and sizes, and what
    loading it would run (native code, recompiles). Every file's sha256 is checked first; a malformed or
    altered checkpoint is reported in one line with exit status 1.
    """
    try:
        print(describe_checkpoint(args.checkpoint, verify_hashes=not args.no_verify))
    except CheckpointError as error:
        print(f"aitune inspect: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except Exception as error:  # a malformed manifest is reported, never a traceback
        print(f"aitune inspect: {args.checkpoint} is not a readable aitune checkpoint: {error}", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- aitune export
def add_export_command(subparsers: Subparsers) -> None:
    summary = "write a checkpoint as a server's model repository (Triton, or a plugin's target)"
    parser = add_command(subparsers, "export", run_export, summary)
    parser.add_argument("checkpoint", help="a checkpoint folder or archive written by aitune_core.save")
    parser.add_argument("path", help="the repository folder to write the models into")
    parser.add_argument("--to", required=True, metavar="TARGET", help="the deploy target, e.g. triton")
    parser.add_argument(
        "--ranges",
        choices=RANGE_POLICIES,
        default="widest",
        help="a graph whose batch ranges went to several backends: one model by the widest route, or one each",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace models of the same names in PATH")
    parser.add_argument(
        "-o", "--option", action="append", default=[], metavar="KEY=VALUE", help="a target option, e.g. instances=2"
    )


def run_export(args: argparse.Namespace) -> int:
    """Write each tuned graph of a checkpoint as a model of the target's repository: its standalone artifact
    (ONNX model, OpenVINO IR, AOT Inductor package, TensorRT plan) and the server's configuration, with the
    batch sizes where that artifact won. A graph with no standalone artifact (served eagerly or by a JIT
    compiler) is refused, with its fix, and nothing is written. Prints what each model serves.
    """
    try:
        options = options_from_text(target_class(args.to).options_class, args.option)
        summary = export(
            args.checkpoint, args.to, args.path, ranges=args.ranges, overwrite=args.overwrite, options=options
        )
    except (DeployError, CheckpointError, ValueError, TypeError) as error:
        print(f"aitune export: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print(summary)
    return 0


# --------------------------------------------------------------------------- aitune serve
SERVE_INSTALL = "pip install 'aitune-ray[serve]'"


def add_serve_command(subparsers: Subparsers) -> None:
    summary = "serve a checkpoint over HTTP with Ray Serve on this machine (needs aitune-ray)"
    parser = add_command(subparsers, "serve", run_serve, summary)
    parser.add_argument("checkpoint", help="a checkpoint folder or archive written by aitune_core.save")
    parser.add_argument(
        "--factory", required=True, metavar="MODULE:FUNCTION", help="builds the tuned model, e.g. mypkg.models:build"
    )
    parser.add_argument("--port", type=int, default=8000, help="the HTTP port on 127.0.0.1 (default 8000)")
    parser.add_argument("--replicas", type=int, default=1, help="how many replicas serve it (default 1)")
    parser.add_argument("--max-wait-ms", type=float, default=None, help="how long a batch waits to fill (default 5 ms)")
    parser.add_argument("--max-batch", type=int, default=None, help="rows per call (default: the largest tuned batch)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per replica (default: as tuned)")
    parser.add_argument("--eager", action="store_true", help="serve the model's own forward with the same weights")
    parser.add_argument(
        "--trust-native-code", action="store_true", help="load checkpoints holding machine code (AOT packages)"
    )


def run_serve(args: argparse.Namespace) -> int:
    """Serve a checkpoint over HTTP on 127.0.0.1 with Ray Serve, until Ctrl-C. A Ray of its own is started on
    this machine (never another host's); each replica builds the model with the factory (a function taking no
    arguments) and loads the checkpoint. Requests are batched up to the largest batch size tuning built for,
    and replicas ask Ray for the threads and GPU the tuned routes ran with. POST {"inputs": [x, ...]}, each
    input a tensor as nested lists with the batch axis first; the answer is {"outputs": ...}. Provided by the
    aitune-ray distribution with its serve extra.
    """
    try:
        command = importlib.import_module("aitune_ray.serving.command")  # a plugin's: loaded by this command only
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "aitune_ray":
            raise
        print(
            f"aitune serve: needs the aitune-ray distribution, which is not installed: {SERVE_INSTALL}", file=sys.stderr
        )
        return 1
    code: int = command.serve_command(
        checkpoint=args.checkpoint,
        factory=args.factory,
        port=args.port,
        replicas=args.replicas,
        max_wait_ms=args.max_wait_ms,
        max_batch=args.max_batch,
        threads=args.threads,
        eager=args.eager,
        trust_native_code=args.trust_native_code,
    )
    return code


# --------------------------------------------------------------------------- aitune new-plugin
def add_new_plugin_command(subparsers: Subparsers) -> None:
    summary = "write a new backend plugin project that already passes the conformance suite"
    parser = add_command(subparsers, "new-plugin", run_new_plugin, summary)
    parser.add_argument("name", metavar="NAME", help="distribution name, e.g. aitune-mycompiler")
    parser.add_argument("--path", default=".", help="the folder to write NAME/ into (default: the current folder)")
    parser.add_argument(
        "--class-name",
        metavar="PREFIX",
        help="the class names' prefix, e.g. OpenVINO for OpenVINOBackend (default: the backend name in CamelCase)",
    )


def run_new_plugin(args: argparse.Namespace) -> int:
    """Write a plugin project into PATH/NAME: pyproject.toml with the 'aitune.plugins' entry point, a backend
    that runs a copy of the module (with TODO markers where the compiler goes), the plugin module, a
    conformance test, a README and a noxfile that tests it against a chosen aitune-core. NAME is the
    distribution name and the folder (lowercase letters, digits and dashes); the package is NAME with
    dashes as underscores, and the backend is named after the package, without a leading 'aitune_'. The
    classes are the backend name in CamelCase plus Backend and Config, or PREFIX plus those with --class-name.
    """
    from aitune_core.authoring import new_plugin  # a tool, loaded by its command only

    try:
        names, target, _ = new_plugin.write_plugin(args.name, args.path, args.class_name)
    except new_plugin.NewPluginError as error:
        print(f"aitune new-plugin: {error}", file=sys.stderr)
        return 2
    print(new_plugin.next_steps(names, target))
    return 0


# --------------------------------------------------------------------------- aitune plugins check
def add_plugins_check_command(subparsers: Subparsers) -> None:
    """``aitune plugins check``: a subcommand of ``aitune plugins``, which keeps working without one.

    Registered after :func:`add_plugins_command`, whose parser it extends, so that command stays as it was.
    """
    plugins = subparsers.choices["plugins"]
    listing = plugins.format_usage().removeprefix("usage: ").strip()
    commands = plugins.add_subparsers(title="subcommands", metavar="SUBCOMMAND", required=False)
    summary = "run the conformance suite against an installed plugin's backends"
    parser = add_command(commands, "check", run_plugins_check, summary)
    parser.add_argument("name", metavar="NAME", help="a distribution (aitune-inductor), plugin or backend name")
    parser.add_argument("--device", default="cpu", help="device to check on (default: cpu)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's output as it runs")
    # The generated usage would show the subcommand as required; listing needs none.
    plugins.usage = f"{listing}\n       {parser.format_usage().removeprefix('usage: ').strip()}"


def run_plugins_check(args: argparse.Namespace) -> int:
    """Run aitune's conformance suite (aitune_core.testing.BackendConformance) against each backend of an
    installed plugin, with its default config, on a small MLP, at the tolerances tuning validates float32
    with, in a pytest child process that loads only that plugin. Prints a summary; the exit status is 0
    only when every backend passed.
    """
    from aitune_core.authoring.plugin_check import check  # a tool (pytest in a child), loaded by its command only

    return check(args.name, device=args.device, verbose=args.verbose)


# --------------------------------------------------------------------------- aitune cache
def add_cache_command(subparsers: Subparsers) -> None:
    summary = "list, prune or clear the cache: built candidates, build folders, exports and the rest"
    parser = add_command(subparsers, "cache", run_cache, summary)
    parser.add_argument("action", choices=["list", "prune", "clear"], nargs="?", default="list", help="default: list")
    parser.add_argument("--max-mb", type=int, default=None, help="prune to this many MiB instead of the configured cap")


def run_cache(args: argparse.Namespace) -> int:
    """The cache folder (config.cache_dir, AITUNE_CACHE_DIR) holds the artifact store, which keeps every
    candidate that was built and validated so that tuning the same weights again loads it instead of
    building it, the build folders of running tunes and tuned models, ONNX exports, loaded checkpoints and
    the JIT's checkpoints. All of it counts against one cap (config.cache_max_mb, AITUNE_CACHE_MAX_MB).
    'list' shows each part's size and each stored entry with its backend, what it was built for, its size
    and its age; 'prune' removes what processes that are gone left behind, unusable entries, and then what
    was used longest ago until the cache fits its cap (or --max-mb); 'clear' removes everything no running
    process uses.
    """
    from tabulate import tabulate

    from aitune_core.store import eviction, listing  # the cache's files: for this command only
    from aitune_core.store.store import ArtifactStore  # as above: loaded by this command only
    from aitune_core.store.usage import scan  # as above: loaded by this command only

    root = eviction.cache_root()
    store = ArtifactStore.of_config()
    if args.max_mb is not None and args.max_mb < 0:
        print("aitune cache: --max-mb must be at least 0", file=sys.stderr)
        return 2
    cap = eviction.cap_bytes() if args.max_mb is None else args.max_mb * 2**20
    if args.action in ("prune", "clear"):
        if args.action == "clear":
            tidied = eviction.clear(root)
        else:
            pruned = store.prune(None if args.max_mb is None else cap)
            if pruned:
                print(f"removed {len(pruned)} store entries ({listing.megabytes(sum(e.size for e in pruned))})")
            tidied = eviction.tidy(root, cap, cap_name="--max-mb" if args.max_mb is not None else "config.cache_max_mb")
        print(listing.removed_text(tidied))
        kept = listing.in_use_text(tidied.usage.of("in use"))
        if kept:
            print(kept)
    usage = scan(root)
    entries = store.entries()
    if args.action == "list":
        print(tabulate(listing.part_rows(usage), headers=listing.PART_HEADERS, tablefmt="simple"))
        if entries:
            print()
            print(
                tabulate(listing.rows(entries), headers=listing.HEADERS, tablefmt="simple", maxcolwidths=[None, 60, 50])
            )
    print(listing.summary(usage, cap, store, entries))
    return 0


# --------------------------------------------------------------------------- entry point
# --------------------------------------------------------------------------- aitune inspect-model
def add_inspect_model_command(subparsers: Subparsers) -> None:
    summary = "time every submodule of a workload and suggest what to wrap"
    parser = add_command(subparsers, "inspect-model", run_inspect_model, summary)
    parser.add_argument("workload", metavar="SCRIPT:FUNCTION", help="e.g. model.py:workload or mypkg.bench:workload")
    parser.add_argument("--max-depth", type=int, default=3, help="deepest submodule level timed (default 3)")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated batch sizes, as tune takes them")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run_inspect_model(args: argparse.Namespace) -> int:
    """Run a workload and time every submodule down to --max-depth: calls, total time, share of the
    workload, parameters and the graphs each would be tuned as, with the modules worth wrapping.
    FUNCTION takes no arguments and returns (model_or_function, dataset), or a dict of
    aitune_core.inspect's arguments.
    """
    try:
        arguments = load_workload(args.workload)
        if args.batch_sizes:
            arguments["batch_sizes"] = [int(size) for size in args.batch_sizes.split(",")]
        report = inspect_workload(max_depth=args.max_depth, **arguments)
    except (WorkloadError, ValueError, TypeError) as error:
        print(f"aitune inspect-model: {error}", file=sys.stderr)
        return 1
    print(report.to_json() if args.json else report.table())
    return 0


COMMANDS: list[Callable[[Subparsers], None]] = [
    add_demo_command,
    add_plugins_command,
    add_plugins_check_command,
    add_inspect_command,
    add_inspect_model_command,
    add_export_command,
    add_serve_command,
    add_new_plugin_command,
    add_cache_command,
]
"""Subcommand registrars, in the order ``aitune --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aitune", description="Tune PyTorch inference.")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return handler(args)


if __name__ == "__main__":
    raise SystemExit(main())

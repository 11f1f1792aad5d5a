"""The ``liptable`` command line: ``report``, ``envelope``, ``generate``, ``prove-bounds``,
``bench``, ``certify``."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import signal
import sys
from pathlib import Path

import numpy as np

from derive.catalog import KEYS, SECTIONS, envelope_keys, strict_keys


def _positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _writable_folder(path: Path) -> str | None:
    """Why the report cannot be written under ``path``, or None if it can."""
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                return f"{folder} exists and is not a folder"
            if not os.access(folder, os.W_OK | os.X_OK):
                return f"{folder} is not writable"
            return None
    return None


def _report(args: argparse.Namespace) -> int:
    from derive.report import document as report

    problem = _writable_folder(Path(args.out))
    if problem is not None:  # before minutes of work, not after
        print(f"liptable report: --out: {problem}", file=sys.stderr)
        return 2
    written = report.write(Path(args.out), args.modules, args.workers)
    for path in written:
        print(path)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from derive.codegen import generate

    if args.check:
        stale = [p for p, text in generate.generated_files().items() if p.read_text() != text]
        for path in stale:
            print(f"stale: {path}")
        return 1 if stale else 0
    for path in generate.write_all():
        print(path)
    return 0


def _prove_bounds(args: argparse.Namespace) -> int:
    from derive.codegen import generate, static
    from derive.definitions.activations import ELEMENTWISE
    from proofs import static_bounds

    if any(p.read_text() != text for p, text in generate.generated_files().items()):
        print("liptable prove-bounds: generated files are stale; run `liptable generate`")
        return 2
    keys = [m.key for m in ELEMENTWISE if generate.bounded(m)]
    unknown = sorted(set(args.modules) - set(keys))
    if unknown:
        print(f"liptable prove-bounds: no bounded form for {', '.join(unknown)}", file=sys.stderr)
        return 2
    chosen = [k for k in keys if not args.modules or k in args.modules]
    records = {(r.module, r.quantity): r for r in static.load()}
    for key in chosen:
        for quantity in ("forward", "derivative"):
            record = static_bounds.prove(key, quantity)
            records[key, quantity] = record
            static.save(list(records.values()))
            used = "used" if static.usable(record) else "not used"
            print(
                f"{key}.{quantity}: e <= 2^{math.log2(record.relative):.0f} |v| + 2^-200 "
                f"for |x| <= {record.limit:.9g} ({used}); largest ratio "
                f"{record.largest_ratio:.3g}; {record.inputs:,} inputs, {record.seconds} s"
            )
    for path in generate.write_all():
        print(path)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from derive import bench

    unknown = sorted(set(args.modules) - set(KEYS))
    if unknown:
        print(
            f"liptable bench: no module {', '.join(unknown)} (choose from {', '.join(KEYS)})",
            file=sys.stderr,
        )
        return 2
    bench.main(
        args.against,
        tuple(args.dtype),
        args.passes,
        first_use=not args.no_first_use,
        modules=tuple(args.modules),
    )
    return 0


def _accuracy(args: argparse.Namespace) -> int:
    from derive import accuracy

    try:
        import torch  # noqa: F401 - the optional extra, checked before measuring
    except ImportError:
        print(
            "liptable accuracy: needs PyTorch: .venv/bin/pip install -e '.[torch]'",
            file=sys.stderr,
        )
        return 2
    result = accuracy.write(Path(args.out), args.modules)
    print(f"{len(result['records'])} outputs measured; {args.out}")
    return 0


def _certify(args: argparse.Namespace) -> int:
    import json

    from derive.certify import certify

    partial = args.limit is not None or args.shard is not None
    name = f"{args.module}.{args.quantity}.{args.dtype}{'.slice' if partial else ''}.json"
    out = Path(args.out) if args.out else Path("report") / "certificates" / name
    try:
        result = certify(
            args.module,
            args.quantity,
            args.dtype,
            limit=args.limit,
            shard=args.shard,
            scheduler=args.scheduler,
            workers=args.workers,
            state=Path(args.state) if args.state else None,
        )
    except (KeyError, ValueError) as error:
        print(f"liptable certify: {error}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.as_dict(), indent=1) + "\n")
    for line in result.lines():
        print(line)
    print(out)
    return 0 if not (result.not_correctly_rounded or result.zero_sign_mismatches) else 1


def _block(args: argparse.Namespace) -> int:
    from derive.envelope.block import BlockConfig, block_envelope, kernel_check

    if args.module is not None:
        print("liptable envelope: give a MODULE or --block, not both", file=sys.stderr)
        return 2
    ignored = ("out_dim", "nu_max", "tau_max", "channels", "stride", "scaling")
    given = [f"--{n.replace('_', '-')}" for n in ignored if getattr(args, n, None) is not None]
    if given:
        print(f"liptable envelope: {', '.join(given)}: not options of --block", file=sys.stderr)
        return 2
    config = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(BlockConfig)
        if f.name != "weights" and getattr(args, f.name, None) is not None
    }
    try:
        result = block_envelope(args.block, args.dtype, weights=args.weights, **config)
    except (ValueError, OSError) as error:
        print(f"liptable envelope: {error}", file=sys.stderr)
        return 2
    _print(result, args.json)
    if args.check and not args.json:
        safe = result.safe
        sizes = [] if safe is None else [s for s in (safe, result.format.next_up(safe)) if s]
        try:
            runs = [kernel_check(result, size) for size in sizes]
        except ValueError as error:
            print(f"liptable envelope: --check: {error}", file=sys.stderr)
            return 2
        for run in runs:
            print(
                f"kernels ({result.format.name}, mixed mode) at the witness, output gradient "
                f"{run['size']:.8g} x its sign pattern: max|dx| = {run['max_abs_dx']:.8g} at "
                f"the block input, every gradient finite: {run['finite']}."
            )
    return 0


def _print(result, as_json: bool) -> None:
    """An envelope (of a module or a block) as its lines, or as JSON."""
    import json

    if as_json:
        print(json.dumps(result.as_dict(), indent=1))
    else:
        for line in result.lines():
            print(line)


def _envelope(args: argparse.Namespace) -> int:
    from derive.envelope.modules import Config, envelope, kernel_dx

    if args.block is not None:
        return _block(args)
    if args.module is None:
        print("liptable envelope: give a MODULE or --block SPEC", file=sys.stderr)
        return 2
    if args.weight_norm is not None:
        print("liptable envelope: --weight-norm: an option of --block", file=sys.stderr)
        return 2

    config = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(Config)
        if getattr(args, f.name, None) is not None
    }
    try:
        result = envelope(args.module, args.dtype, **config)
    except ValueError as error:
        print(f"liptable envelope: {error}", file=sys.stderr)
        return 2
    _print(result, args.json)
    if args.json:
        return 0
    if args.scaling:
        from derive.envelope.scaling import Recipe, lines

        try:
            recipe = Recipe(args.scaling, args.history, args.margin)
        except ValueError as error:
            print(f"liptable envelope: {error}", file=sys.stderr)
            return 2
        for line in lines(result.format, recipe):
            print(line)
    if args.dtype in ("float16", "bfloat16"):
        from derive.envelope.strict import strict_thresholds

        if args.module in strict_keys():
            print(
                f"strict {args.dtype} arithmetic (strict_fp16=True), predicted from the "
                "kernels' order:"
            )
            for t in strict_thresholds(args.module, result.config.dim, args.eps, args.dtype):
                print(f"  {t.quantity}: {t.parameter} = {t.threshold:.8g}: {t.statement}")
    w = result.witness
    if args.check and w is not None:
        try:
            inside, outside = kernel_dx(result, w.inside), kernel_dx(result, w.outside)
        except ValueError as error:  # e.g. a witness too large to build
            print(f"liptable envelope: --check: {error}", file=sys.stderr)
            return 2
        how = "float64 kernel, dx rounded once" if result.format.name.startswith("float8") else ""
        print(
            f"kernel ({result.format.name}, mixed mode{'; ' + how if how else ''}) at the "
            f"witness: dx{list(w.point.index)} = "
            f"{float(inside[w.point.index]):.8g} at size {float(w.inside):.8g} (all finite: "
            f"{bool(np.isfinite(inside).all())}), {float(outside[w.point.index]):.8g} at size "
            f"{float(w.outside):.8g}."
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="liptable",
        description="Derive, prove and test the Jacobians and Lipschitz constants of "
        "deep-learning modules.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="write report/index.md and report/claims.json")
    report.add_argument("--out", default="report", help="output folder (default: report/)")
    report.add_argument(
        "--modules",
        nargs="+",
        choices=SECTIONS,
        metavar="MODULE",
        help=f"only these modules (default: all): {', '.join(SECTIONS)}",
    )
    report.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="processes that check the claims and write the sections (default: one per "
        "core; 1: all in this process)",
    )
    report.set_defaults(run=_report)
    env = commands.add_parser(
        "envelope",
        help="FP16 envelope: largest output, gradient gains, safe upstream gradient, witness",
        description="For one module and configuration: the largest forward output (or the input "
        "size at which it overflows), the gain from upstream gradient to input gradient in the "
        "2-norm and the max-norm, the largest upstream gradient that never overflows the "
        "backward pass, and a witness just past it on which the exact result overflows.",
    )
    env.add_argument(
        "module",
        nargs="?",
        choices=envelope_keys(),
        metavar="MODULE",
        help=", ".join(envelope_keys()) + " (or --block)",
    )
    env.add_argument(
        "--block",
        metavar="SPEC",
        help="a whole block instead of one module, stage by stage: a preset "
        "(pre-ln or pre-ln-transformer, post-ln or post-ln-transformer, pre-ln-mlp, "
        "post-ln-mlp, resnet-basic) or "
        "stages such as 'res(ln=layernorm, fc1=linear:3072, act=gelu, fc2=linear:768)'",
    )
    env.add_argument("--hidden", type=int, help="--block: the presets' hidden width (4 D)")
    env.add_argument(
        "--batch",
        type=int,
        help="--block: BatchNorm's values per feature, N H W for a BatchNorm2d (32)",
    )
    env.add_argument("--head", type=int, help="--block: the attention's head width d (D)")
    env.add_argument("--input-max", type=float, help="--block: the bound on the input's max|x| (1)")
    env.add_argument(
        "--weights",
        metavar="FILE",
        help="--block: a .npz or .safetensors file of <stage>.weight / <stage>.bias arrays "
        "(an attention's: <stage>.wq, .wk, .wv)",
    )
    env.add_argument(
        "--dim", type=int, help="D: the normalized/reduced axis (BatchNorm: values per feature)"
    )
    env.add_argument("--eps", type=float, help="eps, PyTorch convention (added to the variance)")
    env.add_argument("--gamma-max", type=float, help="bound on |gamma_i| (default 1)")
    env.add_argument("--beta-max", type=float, help="bound on |beta_i| (default 0)")
    env.add_argument("--out-dim", type=int, help="O: output size of Linear/WeightNorm/Conv2d")
    env.add_argument("--weight-max", type=float, help="bound on |W_ij| (default 1)")
    env.add_argument(
        "--weight-norm",
        type=float,
        help="--block: bound on every Linear's and attention's weight 2-norm ||W||_2 (none)",
    )
    env.add_argument("--bias-max", type=float, help="bound on |b_i| (default 0)")
    env.add_argument("--nu-max", type=float, help="bound on the residual weight |nu_i| (default 1)")
    env.add_argument("--tau-max", type=float, help="bound on SCS attention's |tau| (default 1)")
    env.add_argument("--tokens", type=int, help="N: tokens of an attention")
    env.add_argument("--channels", type=int, help="input channels of Conv2d")
    env.add_argument("--kernel", type=int, help="kernel size of Conv2d")
    env.add_argument("--stride", type=int, help="stride of Conv2d")
    env.add_argument(
        "--dtype",
        default="float16",
        choices=("float16", "bfloat16", "float32", "float8_e5m2", "float8_e4m3fn"),
        help="the format (FP8: E5M2 with inf, max 57344; E4M3 without, max 448)",
    )
    env.add_argument(
        "--scaling",
        choices=("current", "delayed"),
        help="also: the largest per-step amax growth a per-tensor scaling recipe survives",
    )
    env.add_argument("--history", type=int, default=16, help="delayed scaling's amax history")
    env.add_argument("--margin", type=int, default=0, help="the scale is divided by 2^margin")
    env.add_argument("--json", action="store_true", help="print the envelope as JSON")
    env.add_argument(
        "--check", action="store_true", help="also run the kernel on the witness (compiles it)"
    )
    env.set_defaults(run=_envelope)
    generate = commands.add_parser("generate", help="regenerate kernels/_generated/")
    generate.add_argument("--check", action="store_true", help="only report stale files")
    generate.set_defaults(run=_generate)
    prove = commands.add_parser(
        "prove-bounds",
        help="prove the fast loops' static error bounds on every float32, then regenerate",
        description="For each bounded elementwise form, find and prove (by enumerating every "
        "finite float32) a bound e <= 2^-k |v| + 2^-200 on its running error bound; the fast "
        "loops decide with it where it is tight enough. Writes "
        "derive/codegen/static_bounds.json and regenerates kernels/_generated/.",
    )
    prove.add_argument("modules", nargs="*", help="modules (default: every bounded one)")
    prove.set_defaults(run=_prove_bounds)
    bench = commands.add_parser(
        "bench",
        help="time every kernel's forward + VJP against NumPy or PyTorch",
        description="Forward + VJP of every catalog module against the same computation in "
        "NumPy or PyTorch (forward + backward()), interleaved and warm; the median of the "
        "passes, the ratio, and for memory-bound modules the share of the measured DRAM "
        "bandwidth.",
    )
    bench.add_argument(
        "modules",
        nargs="*",
        metavar="MODULE",
        help=f"only these modules (default: all): {', '.join(KEYS)}",
    )
    bench.add_argument(
        "--against",
        choices=("numpy", "torch"),
        default="numpy",
        help="the alternative to time against (torch: the optional 'bench' extra)",
    )
    bench.add_argument(
        "--dtype",
        nargs="+",
        choices=("float32", "float64", "float16"),
        default=["float32"],
        help="dtypes to time (default: float32)",
    )
    bench.add_argument(
        "--passes", type=_positive_int, default=7, help="interleaved passes (default: 7)"
    )
    bench.add_argument(
        "--no-first-use", action="store_true", help="skip the first-use compile timing"
    )
    bench.set_defaults(run=_bench)
    accuracy = commands.add_parser(
        "accuracy",
        help="measure PyTorch's own implementations against the correctly rounded results",
        description="Run PyTorch's CPU functions for the catalog modules in float32, float16 "
        "and bfloat16 on hard and random inputs, forward and autograd gradients, and write "
        "their errors in ULPs (needs the optional extra: pip install -e '.[torch]').",
    )
    accuracy.add_argument("--against", choices=("torch",), default="torch")
    accuracy.add_argument("--modules", nargs="+", help="a subset (default: every module)")
    accuracy.add_argument("--out", default="report/accuracy/torch.json")
    accuracy.set_defaults(run=_accuracy)
    certify = commands.add_parser(
        "certify",
        help="check an elementwise kernel at every input of a format, sharded on Dask",
        description="Compare the kernel's forward, derivative or VJP with the correctly "
        "rounded reference at every finite input of the format (float16: 63,488; bfloat16: "
        "65,280; float32: "
        "4,278,190,080; the VJP g * f'(x): every pair (x, g), 4,030,726,144 for float16 and "
        "4,261,478,400 for bfloat16), in "
        "resumable shards on a Dask LocalCluster (or --scheduler), and write a JSON "
        "certificate.",
    )
    certify.add_argument("module", help="sigmoid, relu, swish, gelu_none, gelu_tanh, gelu_sigmoid")
    certify.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    certify.add_argument(
        "--quantity",
        choices=("forward", "derivative", "vjp"),
        default="forward",
        help="vjp: float16 and bfloat16, every pair (x, g)",
    )
    slice_ = certify.add_mutually_exclusive_group()
    slice_.add_argument(
        "--limit", type=_positive_int, help="check about this many inputs, spread over the format"
    )
    slice_.add_argument("--shard", type=int, help="check only this shard (0-based)")
    certify.add_argument("--scheduler", help="a Dask scheduler address (default: a LocalCluster)")
    certify.add_argument(
        "--workers", type=_positive_int, help="LocalCluster workers (default: one per core)"
    )
    certify.add_argument(
        "--out",
        help="certificate path (default: report/certificates/MODULE.QUANTITY.DTYPE.json, "
        "with .slice before .json for a partial run)",
    )
    certify.add_argument(
        "--state", help="folder of finished shards (default: ~/.cache/liptable/certify)"
    )
    certify.set_defaults(run=_certify)
    args = parser.parse_args(argv)
    return args.run(args)


def entry() -> None:
    """The ``liptable`` console script: ``main`` with the default SIGPIPE action, so that
    ``liptable envelope ... | head`` ends quietly."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()

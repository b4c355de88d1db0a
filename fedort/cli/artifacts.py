"""`fedort artifacts build|show`: turn an ONNX model into ORT training artifacts, and describe them.

The build writes the four ORT files plus `manifest.json` (whose hash is the model id the
coordinator and the edge clients agree on); `show` prints that manifest in a few lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedort.common.errors import ConfigError

_BUILD_EPILOG = """\
examples:
  fedort artifacts build --builtin mlp --out artifacts/
  fedort artifacts build --model net.onnx --out artifacts/ --loss mse --optimizer sgd \\
      --frozen encoder.weight encoder.bias --output logits
  fedort artifacts build --torch net.py:make --out artifacts/     # pip install 'fedort[torch]'

--torch FILE.py:FACTORY imports FILE.py and calls FACTORY(), which returns (module, example_inputs):
a torch.nn.Module and one batch it accepts. It is exported with torch.onnx.export (opset 17), its
parameters keep their PyTorch names, and those with requires_grad are trained unless --trainable
or --frozen says otherwise.

The model must use ONNX opset <= 21 and IR version <= 10 (what ONNX Runtime 1.19 loads).
Built-in losses take the model's first output and a labels input, which the training and
eval models gain as their last input.
"""


def register(subparsers) -> None:
    from fedort.ort.artifacts import LOSSES, OPTIMIZERS
    from fedort.ort.models import BUILTIN_MODELS

    art = subparsers.add_parser(
        "artifacts",
        help="build or inspect ONNX Runtime training artifacts",
        description="Build or inspect ONNX Runtime training artifacts.",
    )
    sub = art.add_subparsers(dest="artifacts_command", metavar="SUBCOMMAND")

    build = sub.add_parser(
        "build",
        help="generate training/eval/optimizer models, checkpoint and manifest from an ONNX model",
        description=(
            "Generate ORT training artifacts (training_model.onnx, eval_model.onnx, "
            "optimizer_model.onnx, checkpoint) and manifest.json in --out. Every float "
            "initializer is trained unless --trainable or --frozen says otherwise; the "
            "trainable ones, in the training model's order, make the parameter vector "
            "that travels in federated rounds."
        ),
        epilog=_BUILD_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = build.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--builtin",
        choices=sorted(BUILTIN_MODELS),
        help="a built-in model, all x: float32[batch, F] -> logits[batch, 10]: mlp and cnn for the "
        "digits data (F = 64), logreg for Synthetic(alpha, beta) (F = 60)",
    )
    source.add_argument("--model", metavar="FILE.onnx", help="your own ONNX model")
    source.add_argument(
        "--torch",
        metavar="FILE.py:FACTORY",
        help="a PyTorch module: FACTORY() in FILE.py returns (module, example_inputs); "
        "needs pip install 'fedort[torch]'",
    )
    build.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder (created if missing; an existing non-empty one is refused unless --force)",
    )
    build.add_argument(
        "--force",
        "--overwrite",
        action="store_true",
        dest="force",
        help="replace the artifacts in an existing non-empty --out",
    )
    build.add_argument(
        "--loss",
        default="cross-entropy",
        choices=sorted(LOSSES),
        help="loss appended to the model's first output (default: cross-entropy)",
    )
    build.add_argument(
        "--optimizer",
        default="adamw",
        choices=sorted(OPTIMIZERS),
        help="optimizer the optimizer model implements (default: adamw)",
    )
    build.add_argument(
        "--trainable",
        nargs="+",
        metavar="NAME",
        help="train only these initializers (default: every float initializer not --frozen)",
    )
    build.add_argument(
        "--frozen",
        nargs="+",
        metavar="NAME",
        help="keep these initializers fixed (ORT fixes trainability at build time)",
    )
    build.add_argument(
        "--output",
        nargs="+",
        metavar="NAME",
        dest="outputs",
        help="graph outputs the exported inference model keeps (default: all model outputs)",
    )
    build.add_argument(
        "--seed", type=int, default=0, help="weight-initialisation seed of a --builtin model (default: 0)"
    )
    build.set_defaults(func=_build)

    show = sub.add_parser(
        "show",
        help="print the manifest summary of an artifacts folder",
        description="Print the model id, parameter count, inputs, outputs and files "
        "of an artifacts folder, after checking every file's sha256.",
    )
    show.add_argument("dir", metavar="DIR", help="artifacts folder (holds manifest.json)")
    show.set_defaults(func=_show)
    art.set_defaults(func=lambda args: (art.print_help(), 2)[1])


def _build(args: argparse.Namespace) -> int:
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import builtin_model

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise ConfigError(
            f"--out {out} exists and is not empty ({len(list(out.iterdir()))} entries); pass --force to "
            "replace the artifacts there, or choose a new folder"
        )
    if args.seed != 0 and not args.builtin:
        raise ConfigError(
            "--seed only applies to --builtin models (an ONNX file or a PyTorch module brings its own weights)"
        )
    if args.torch:
        from fedort.ort.from_torch import artifacts_from_torch, load_factory

        module, example_inputs = load_factory(args.torch)
        manifest = artifacts_from_torch(
            module,
            example_inputs,
            args.out,
            loss=args.loss,
            optimizer=args.optimizer,
            trainable=args.trainable,
            frozen=args.frozen,
            output_names=args.outputs,
        )
    else:
        model = builtin_model(args.builtin, seed=args.seed) if args.builtin else args.model
        manifest = build_artifacts(
            model,
            args.out,
            loss=args.loss,
            optimizer=args.optimizer,
            trainable=args.trainable,
            frozen=args.frozen,
            inference_outputs=args.outputs,
        )
    print(f"wrote artifacts to {Path(args.out)}")
    print(summary(manifest))
    return 0


def _show(args: argparse.Namespace) -> int:
    from fedort.ort.artifacts import verify_artifacts

    print(summary(verify_artifacts(args.dir)))
    return 0


def summary(manifest) -> str:
    """A few human-readable lines about a `Manifest`."""
    from fedort.common.client_data import describe_spec

    lines = [
        f"model id:       {manifest.model_id}",
        f"parameters:     {manifest.parameter_count} trainable ({manifest.dtype})",
        f"trainable:      {', '.join(manifest.trainable)}",
        f"frozen:         {', '.join(manifest.frozen) or '-'}",
        f"loss:           {manifest.loss}    optimizer: {manifest.optimizer}    opset: {manifest.opset}",
        "inputs:         " + ", ".join(f"{s.name}: {describe_spec(s)}" for s in manifest.inputs),
        f"classes:        {manifest.num_classes if manifest.num_classes is not None else '-'}",
        f"eval outputs:   {', '.join(manifest.eval_outputs)}",
        f"export keeps:   {', '.join(manifest.inference_outputs)}",
        "files:",
    ]
    lines += [
        f"  {name:<22} {entry.size:>10,} B  sha256 {entry.sha256[:16]}…"
        for name, entry in sorted(manifest.files.items())
    ]
    return "\n".join(lines)
